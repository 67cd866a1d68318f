-- The archive: one row per dead letter as delivered, body kept apart so that list
-- queries never read message bytes.
CREATE TABLE messages (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    -- sha-256 of exactly what the broker delivered (queue, routing, properties, headers, body).
    -- Not unique: separate deliveries of identical content are separate messages.
    fingerprint          BLOB    NOT NULL,
    queue                TEXT    NOT NULL,
    archived_at          INTEGER NOT NULL, -- Unix milliseconds
    exchange             TEXT    NOT NULL, -- as delivered into the DLQ
    routing_key          TEXT    NOT NULL,
    redelivered          INTEGER NOT NULL,
    message_id           TEXT,
    correlation_id       TEXT,
    content_type         TEXT,
    content_encoding     TEXT,
    body_size            INTEGER NOT NULL,
    properties           TEXT    NOT NULL, -- typed JSON, every basic property but headers
    headers              TEXT,             -- typed JSON table; NULL when the message had none
    deaths               TEXT    NOT NULL, -- decoded x-death, broker order
    death_problems       TEXT,             -- JSON array of what could not be decoded
    first_death_queue    TEXT,
    first_death_reason   TEXT,
    first_death_exchange TEXT,
    replay_exchange      TEXT,
    replay_routing_key   TEXT,
    status               TEXT    NOT NULL DEFAULT 'archived'
);

CREATE INDEX messages_fingerprint ON messages (fingerprint);
CREATE INDEX messages_queue ON messages (queue, id);
CREATE INDEX messages_first_death_reason ON messages (first_death_reason, id);
CREATE INDEX messages_status ON messages (status, id);
CREATE INDEX messages_archived_at ON messages (archived_at);

CREATE TABLE message_bodies (
    message_id INTEGER PRIMARY KEY REFERENCES messages (id),
    body       BLOB NOT NULL
);

-- Kept in the same transaction as each insert, so totals never need a table scan.
CREATE TABLE queue_reason_counts (
    queue     TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    messages  INTEGER NOT NULL,
    oldest_at INTEGER NOT NULL,
    newest_at INTEGER NOT NULL,
    PRIMARY KEY (queue, reason)
) WITHOUT ROWID;

-- Rows committed whose ack the broker has not yet been seen to process. A redelivered
-- message matches one of these (it was archived, the ack was lost in a crash or a dropped
-- connection); a redelivered message that matches none was never archived and is stored.
CREATE TABLE pending_acks (
    id          INTEGER PRIMARY KEY,
    queue       TEXT    NOT NULL,
    fingerprint BLOB    NOT NULL,
    archive_id  INTEGER NOT NULL
);
CREATE INDEX pending_acks_fingerprint ON pending_acks (queue, fingerprint);
CREATE INDEX pending_acks_archive_id ON pending_acks (archive_id);

-- The PostgreSQL archive: the same tables as the SQLite archive's migrations 0001-0006, in
-- one file. Times are Unix milliseconds (BIGINT) and JSON is kept as text, as on SQLite, so
-- both backends decode rows the same way. Several Lazarus instances share one database.

-- One row per dead letter as delivered; the body is kept apart so that lists never read it.
CREATE TABLE messages (
    id                   BIGSERIAL PRIMARY KEY,
    -- sha-256 of exactly what the broker delivered. Not unique: separate deliveries of
    -- identical content are separate messages.
    fingerprint          BYTEA   NOT NULL,
    queue                TEXT    NOT NULL,
    archived_at          BIGINT  NOT NULL,
    exchange             TEXT    NOT NULL, -- as delivered into the DLQ
    routing_key          TEXT    NOT NULL,
    redelivered          BOOLEAN NOT NULL,
    message_id           TEXT,
    correlation_id       TEXT,
    content_type         TEXT,
    content_encoding     TEXT,
    body_size            BIGINT  NOT NULL,
    properties           TEXT    NOT NULL, -- typed JSON, every basic property but headers
    headers              TEXT,             -- typed JSON table; NULL when the message had none
    deaths               TEXT    NOT NULL, -- decoded x-death, broker order
    death_problems       TEXT,             -- JSON array of what could not be decoded
    first_death_queue    TEXT,
    first_death_reason   TEXT,
    first_death_exchange TEXT,
    replay_exchange      TEXT,
    replay_routing_key   TEXT,
    error                TEXT,             -- the failing consumer's own description, if any
    replay_of            BIGINT,           -- the record this is a replayed copy of
    status_note          TEXT,             -- why it was dismissed
    -- Body text, ids and header values as tokens with positions, built by Lazarus with the
    -- SQLite archive's FTS5 tokenizer rules, so a search finds the same messages on both.
    search               TSVECTOR NOT NULL
);

-- No index on fingerprint: nothing looks messages up by it (redeliveries are matched in
-- pending_acks), and each index costs every insert.
CREATE INDEX messages_queue ON messages (queue, id);
CREATE INDEX messages_first_death_reason ON messages (first_death_reason, id);
CREATE INDEX messages_archived_at ON messages (archived_at);
-- The failure-group filter compares these very expressions, so a group's link is an index range.
CREATE INDEX messages_group ON messages (coalesce(first_death_queue, queue), first_death_reason, coalesce(error, ''), id);
-- One per other list filter, in the list's order (newest first): without them a filter on a
-- rare exchange, routing key, first-death queue or error reads the whole table.
CREATE INDEX messages_exchange ON messages (first_death_exchange, id);
CREATE INDEX messages_routing_key ON messages (replay_routing_key, id);
CREATE INDEX messages_first_death_queue ON messages (coalesce(first_death_queue, queue), id);
CREATE INDEX messages_error ON messages (coalesce(error, ''), id);
-- Only rows that have a value: every query on these compares them with =, and many messages
-- have none (replay_of is set on replayed copies only), so inserts skip these indexes.
CREATE INDEX messages_message_id ON messages (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX messages_content_type ON messages (content_type, id);
CREATE INDEX messages_correlation_id ON messages (correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX messages_replay_of ON messages (replay_of) WHERE replay_of IS NOT NULL;
CREATE INDEX messages_search ON messages USING GIN (search);

-- Each message's status (archived, replayed, replay_failed, dismissed), apart from its wide
-- row: every replay changes it, and updating the row would write a new version of it and of
-- every one of its indexes (BENCHMARKS.md, "Replay on PostgreSQL"). Queries read it for the
-- rows they return, and filter on it with `id IN (SELECT id FROM message_status WHERE …)`.
CREATE TABLE message_status (
    id     BIGINT PRIMARY KEY,
    status TEXT   NOT NULL DEFAULT 'archived'
);
CREATE INDEX message_status_status ON message_status (status, id);

-- This and message_status are written in the same statement as their message and removed
-- before it, so no foreign key: checking one would cost a lookup and a row lock per message
-- at ingest.
CREATE TABLE message_bodies (
    message_id BIGINT PRIMARY KEY,
    body       BYTEA  NOT NULL
);

-- Kept in the same transaction as each insert, so totals never need a table scan.
CREATE TABLE queue_reason_counts (
    queue     TEXT   NOT NULL,
    reason    TEXT   NOT NULL,
    messages  BIGINT NOT NULL,
    oldest_at BIGINT NOT NULL,
    newest_at BIGINT NOT NULL,
    PRIMARY KEY (queue, reason)
);

-- Rows committed whose ack the broker has not yet been seen to process, by any instance. A
-- redelivered message that matches one of these was archived already.
-- Every batch adds a row per message and its ack removes them, so this is kept lean: keyed
-- by the archived row (one pending ack each), found by fingerprint (nearly unique by itself).
CREATE TABLE pending_acks (
    archive_id  BIGINT PRIMARY KEY,
    queue       TEXT   NOT NULL,
    fingerprint BYTEA  NOT NULL
);
CREATE INDEX pending_acks_fingerprint ON pending_acks (fingerprint);

-- Failures per DLQ and hour (the sparkline) and failure groups, kept in the ingest transaction.
CREATE TABLE hourly_counts (
    queue    TEXT   NOT NULL,
    hour     BIGINT NOT NULL, -- Unix time / 3600
    messages BIGINT NOT NULL,
    PRIMARY KEY (queue, hour)
);

CREATE TABLE failure_groups (
    queue      TEXT   NOT NULL,
    reason     TEXT   NOT NULL,
    error      TEXT   NOT NULL,
    messages   BIGINT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_seen  BIGINT NOT NULL,
    PRIMARY KEY (queue, reason, error)
);

-- Business fields extracted at ingest.
CREATE TABLE message_fields (
    name       TEXT   NOT NULL,
    value      TEXT   NOT NULL,
    message_id BIGINT NOT NULL,
    PRIMARY KEY (name, value, message_id)
);
CREATE INDEX message_fields_message ON message_fields (message_id);

-- Every replay of a single message. request_key makes a retried request find its first replay.
CREATE TABLE replays (
    id                 BIGSERIAL PRIMARY KEY,
    message_id         BIGINT NOT NULL REFERENCES messages (id),
    request_key        TEXT   NOT NULL UNIQUE,
    actor              TEXT   NOT NULL,
    requested_at       BIGINT NOT NULL,
    target_exchange    TEXT   NOT NULL,
    target_routing_key TEXT   NOT NULL,
    outcome            TEXT   NOT NULL, -- publishing, published, unroutable, nacked, failed
    detail             TEXT,
    finished_at        BIGINT,
    edited_body        BYTEA,
    edited_headers     TEXT
);
CREATE INDEX replays_message ON replays (message_id, id);

-- Bulk replays, their selection frozen into items; each item ends with exactly one outcome.
-- One instance runs a job at a time: it holds the lease (lease_owner, lease_until), taken
-- with SELECT ... FOR UPDATE SKIP LOCKED and renewed while it runs.
CREATE TABLE replay_jobs (
    id                 BIGSERIAL PRIMARY KEY,
    request_key        TEXT    NOT NULL UNIQUE,
    actor              TEXT    NOT NULL,
    created_at         BIGINT  NOT NULL,
    selection          TEXT    NOT NULL,
    target_exchange    TEXT,
    target_routing_key TEXT,
    rate_per_sec       BIGINT,
    include_replayed   BOOLEAN NOT NULL DEFAULT FALSE,
    canary_count       BIGINT  NOT NULL DEFAULT 0,
    canary_wait_ms     BIGINT  NOT NULL DEFAULT 0,
    canary_max_deaths  BIGINT  NOT NULL DEFAULT 0,
    canary_done        BOOLEAN NOT NULL DEFAULT FALSE,
    plan               TEXT    NOT NULL,
    state              TEXT    NOT NULL, -- planned, queued, running, paused, cancelled, completed
    detail             TEXT,
    lease_owner        TEXT,
    lease_until        BIGINT,
    started_at         BIGINT,
    finished_at        BIGINT,
    published          BIGINT  NOT NULL DEFAULT 0,
    unroutable         BIGINT  NOT NULL DEFAULT 0,
    nacked             BIGINT  NOT NULL DEFAULT 0,
    failed             BIGINT  NOT NULL DEFAULT 0,
    skipped            BIGINT  NOT NULL DEFAULT 0,
    cancelled          BIGINT  NOT NULL DEFAULT 0,
    total              BIGINT  NOT NULL DEFAULT 0,
    -- Every item below this message id is done or in flight: where a step looks for more.
    todo_from          BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX replay_jobs_state ON replay_jobs (state, id);

CREATE TABLE replay_job_items (
    job_id             BIGINT NOT NULL REFERENCES replay_jobs (id),
    message_id         BIGINT NOT NULL REFERENCES messages (id),
    target_exchange    TEXT,
    target_routing_key TEXT,
    outcome            TEXT,
    detail             TEXT,
    attempts           BIGINT NOT NULL DEFAULT 0,
    finished_at        BIGINT,
    PRIMARY KEY (job_id, message_id)
);
CREATE INDEX replay_job_items_message ON replay_job_items (message_id);
CREATE INDEX replay_job_items_todo ON replay_job_items (job_id, message_id)
    WHERE outcome IS NULL OR outcome = 'sending';

-- Every replay, job action, edit, dismissal and account change: who, when, what, from where.
CREATE TABLE audit_log (
    id         BIGSERIAL PRIMARY KEY,
    at         BIGINT NOT NULL,
    actor      TEXT   NOT NULL,
    action     TEXT   NOT NULL,
    job_id     BIGINT,
    message_id BIGINT,
    summary    TEXT   NOT NULL,
    source     TEXT
);
CREATE INDEX audit_log_job ON audit_log (job_id);

-- The audit log is append-only: the database refuses to change or remove an entry.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

CREATE TABLE users (
    name          TEXT   PRIMARY KEY,
    password_hash TEXT,
    role          TEXT   NOT NULL, -- viewer, operator, admin
    created_at    BIGINT NOT NULL
);

CREATE TABLE sessions (
    token_hash TEXT   PRIMARY KEY,
    user_name  TEXT   NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    last_seen  BIGINT NOT NULL
);

CREATE TABLE api_tokens (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT   NOT NULL,
    token_hash TEXT   NOT NULL UNIQUE,
    role       TEXT   NOT NULL,
    created_by TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

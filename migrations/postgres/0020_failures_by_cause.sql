-- Failures by cause (issue 33; as SQLite's migration 0027): a failure group is one bug in one
-- place — its DLQ, the queue it failed in, the reason, and its cause: the exception type and the
-- message's template (src/cause/) — with its counts kept per message type. Each group has an
-- id (the list's `group` filter), one raw error as its example, and counts its settling
-- (replayed, still open) messages beside its open ones.
SET LOCAL statement_timeout = 0;

-- What ingest derives from each message's error (src/archive/failure.rs). Null cause: archived
-- by an earlier version and not regrouped yet; it counts under its error until then.
ALTER TABLE messages ADD COLUMN error_type TEXT, ADD COLUMN cause TEXT,
    ADD COLUMN message_type TEXT;

-- A group's messages by the key the list's `group` filter writes (src/archive/sql/filter.rs).
DROP INDEX messages_group;
CREATE INDEX messages_group ON messages
    (coalesce(first_death_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id);
-- Beside each status (0009), its group's cause where its error was: the same until regrouped.
ALTER TABLE message_status RENAME COLUMN group_error TO group_cause;

CREATE TABLE failure_groups_by_cause (
    id                BIGSERIAL PRIMARY KEY,
    dlq               TEXT   NOT NULL,
    queue             TEXT   NOT NULL, -- the first-death queue (the DLQ for messages without history)
    reason            TEXT   NOT NULL, -- 'none' without history
    cause             TEXT   NOT NULL, -- the cause's signature ('' when no error was given)
    message_type      TEXT   NOT NULL, -- '' when none
    error_type        TEXT,
    example           TEXT,            -- one error as written
    messages          BIGINT NOT NULL,
    open_messages     BIGINT NOT NULL,
    settling_messages BIGINT NOT NULL,
    first_seen        BIGINT NOT NULL,
    last_seen         BIGINT NOT NULL,
    UNIQUE (dlq, queue, reason, cause, message_type)
);
INSERT INTO failure_groups_by_cause (dlq, queue, reason, cause, message_type, example, messages,
    open_messages, settling_messages, first_seen, last_seen)
SELECT m.queue, coalesce(m.first_death_queue, m.queue), coalesce(m.first_death_reason, 'none'),
    coalesce(m.error, ''), '', max(m.error), count(*),
    count(*) FILTER (WHERE s.status IN ('archived', 'replayed', 'replay_failed')),
    count(*) FILTER (WHERE s.status = 'replayed'), min(m.archived_at), max(m.archived_at)
FROM messages m JOIN message_status s ON s.id = m.id GROUP BY 1, 2, 3, 4 ORDER BY min(m.id);
DROP TABLE failure_groups;
ALTER TABLE failure_groups_by_cause RENAME TO failure_groups;
ALTER SEQUENCE failure_groups_by_cause_id_seq RENAME TO failure_groups_id_seq;
ALTER INDEX failure_groups_by_cause_pkey RENAME TO failure_groups_pkey;
-- The webhooks look for failure groups first seen lately, every few seconds.
CREATE INDEX failure_groups_first_seen ON failure_groups (first_seen);

-- The regroup: `lazarus serve` walks the messages archived before this migration in the
-- background, a batch at a time (src/archive/sql/regroup.rs). Gone once done.
CREATE TABLE regroup (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    next_id BIGINT NOT NULL,
    last_id BIGINT NOT NULL
);
INSERT INTO regroup (id, next_id, last_id) SELECT 1, 1, coalesce(max(id), 0) FROM messages;

-- Failures by cause (issue 33): a failure group is one bug in one place — its DLQ, the queue
-- it failed in, the reason, and its cause: the exception type and the message's template
-- (src/cause/), so that errors naming their own ids are one group, not one each — with its
-- counts kept per message type (the AMQP `type` property), so the overview can also group by
-- that. Each group has an id (the list's `group` filter), one raw error as its example, and
-- counts its settling (replayed, still open) messages beside its open ones.

-- What ingest derives from each message's error (src/archive/failure.rs). Null cause: archived
-- by an earlier version and not regrouped yet; it counts under its error until then.
ALTER TABLE messages ADD COLUMN error_type TEXT;
ALTER TABLE messages ADD COLUMN cause TEXT;
ALTER TABLE messages ADD COLUMN message_type TEXT;

-- A group's messages (and its open ones, newest first: the overview's link), by the key the
-- list's `group` filter writes (src/archive/sql/filter.rs), which is how SQLite knows it may
-- use them.
DROP INDEX messages_group;
DROP INDEX messages_group_open;
CREATE INDEX messages_group ON messages
    (coalesce(first_death_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id);
CREATE INDEX messages_group_open ON messages
    (coalesce(first_death_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id)
    WHERE status IN ('archived', 'replayed', 'replay_failed');

-- The groups as the messages count them now: until the regroup below has passed, each under
-- its error as written, as before.
CREATE TABLE failure_groups_by_cause (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    dlq               TEXT    NOT NULL,
    queue             TEXT    NOT NULL, -- the first-death queue (the DLQ for messages without history)
    reason            TEXT    NOT NULL, -- 'none' without history
    cause             TEXT    NOT NULL, -- the cause's signature ('' when no error was given)
    message_type      TEXT    NOT NULL, -- '' when none
    error_type        TEXT,
    example           TEXT,             -- one error as written
    messages          INTEGER NOT NULL,
    open_messages     INTEGER NOT NULL,
    settling_messages INTEGER NOT NULL,
    first_seen        INTEGER NOT NULL,
    last_seen         INTEGER NOT NULL,
    UNIQUE (dlq, queue, reason, cause, message_type)
);
INSERT INTO failure_groups_by_cause (dlq, queue, reason, cause, message_type, example, messages,
    open_messages, settling_messages, first_seen, last_seen)
SELECT queue, coalesce(first_death_queue, queue), coalesce(first_death_reason, 'none'),
    coalesce(error, ''), '', max(error), count(*),
    sum(status IN ('archived', 'replayed', 'replay_failed')), sum(status = 'replayed'),
    min(archived_at), max(archived_at)
FROM messages GROUP BY 1, 2, 3, 4 ORDER BY min(id);
DROP TABLE failure_groups;
ALTER TABLE failure_groups_by_cause RENAME TO failure_groups;
-- The webhooks look for failure groups first seen lately, every few seconds.
CREATE INDEX failure_groups_first_seen ON failure_groups (first_seen);

-- The regroup: `lazarus serve` walks the messages archived before this migration in the
-- background, a batch at a time, deriving each one's cause from its stored headers and moving
-- it to its cause group in the same transaction (src/archive/sql/regroup.rs). Gone once done.
CREATE TABLE regroup (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    next_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL
);
INSERT INTO regroup (id, next_id, last_id) SELECT 1, 1, coalesce(max(id), 0) FROM messages;

-- Retention (issue 18): background passes delete what a policy no longer keeps
-- (src/retention/). They need, per DLQ, the body bytes kept (a size cap), when a message was
-- resolved (resolved messages may be kept for less time), and a record of each pass, so that
-- every deletion is counted in the transaction that makes it and audited once per pass.

-- Body bytes per DLQ and reason, kept by ingest and purges as `messages` is.
ALTER TABLE queue_reason_counts ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE queue_reason_counts SET bytes = coalesce((SELECT sum(body_size) FROM messages m
    WHERE m.queue = queue_reason_counts.queue
      AND coalesce(m.first_death_reason, 'none') = queue_reason_counts.reason), 0);

-- When the status last changed (src/archive/sql/lifecycle.rs); earlier resolutions are dated
-- by their replay, or failing that by their archiving.
ALTER TABLE messages ADD COLUMN status_at INTEGER;
UPDATE messages SET status_at = coalesce(replayed_at, archived_at)
WHERE status IN ('dismissed', 'settled', 'died_again');
-- A DLQ's resolved messages in id order (the retention scan writes the condition as here).
CREATE INDEX messages_resolved ON messages (queue, id)
    WHERE status IN ('dismissed', 'settled', 'died_again');

CREATE TABLE retention_runs (
    id          INTEGER PRIMARY KEY,
    owner       TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    -- Renewed by every batch: a run not heard of for a while was interrupted.
    alive_at    INTEGER NOT NULL,
    finished_at INTEGER,
    -- When the pass that finished it means to run again.
    next_at     INTEGER,
    deleted     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX retention_runs_unfinished ON retention_runs (id) WHERE finished_at IS NULL;

-- What a run deleted, by DLQ and rule, written with each batch.
CREATE TABLE retention_run_counts (
    run_id   INTEGER NOT NULL,
    queue    TEXT    NOT NULL,
    rule     TEXT    NOT NULL,
    messages INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    PRIMARY KEY (run_id, queue, rule)
);

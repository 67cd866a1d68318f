-- Failures per DLQ and minute over the last hour, kept in the ingest transaction: the
-- overview's "dying now" rate (the hourly counts are too coarse to say what happens now).
-- As SQLite's migration 0018.
CREATE TABLE minute_counts (
    queue    TEXT   NOT NULL,
    minute   BIGINT NOT NULL, -- Unix time / 60
    messages BIGINT NOT NULL,
    PRIMARY KEY (queue, minute)
);

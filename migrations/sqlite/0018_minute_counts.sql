-- Failures per DLQ and minute over the last hour, kept in the ingest transaction: the
-- overview's "dying now" rate (the hourly counts are too coarse to say what happens now).
CREATE TABLE minute_counts (
    queue    TEXT    NOT NULL,
    minute   INTEGER NOT NULL, -- Unix time / 60
    messages INTEGER NOT NULL,
    PRIMARY KEY (queue, minute)
);

-- What the webhooks were last told, one row per thing they watch (a failure group, a DLQ's
-- threshold, a replay job): the instance whose write changes a row is the one that tells, so
-- instances sharing an archive tell each change once.
CREATE TABLE notifications (
    key        TEXT   PRIMARY KEY,
    state      TEXT   NOT NULL,
    changed_at BIGINT NOT NULL -- Unix milliseconds
);

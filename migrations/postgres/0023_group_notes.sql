-- Issue 35, the overview mid-incident.
-- A failure group's note and status, one row per cause group (its id: the smallest id of its
-- rows in failure_groups), replaced by each change; every change is in the audit log too.
CREATE TABLE group_notes (
    group_id      BIGINT PRIMARY KEY,
    status        TEXT    NOT NULL, -- 'none', 'investigating', 'waiting_for_fix' or 'snoozed'
    note          TEXT    NOT NULL, -- '' when none
    snoozed_until BIGINT,           -- Unix milliseconds; set only when snoozed
    noted_by      TEXT    NOT NULL,
    noted_at      BIGINT  NOT NULL  -- Unix milliseconds
);

-- Failures per failure group (its `failure_groups` key) and minute over the last hours, kept
-- in the ingest transaction: each group's own trend and its rate now against an hour ago.
CREATE TABLE group_minutes (
    dlq          TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    cause        TEXT    NOT NULL,
    message_type TEXT    NOT NULL,
    minute       BIGINT  NOT NULL, -- Unix time / 60
    messages     BIGINT  NOT NULL,
    PRIMARY KEY (dlq, queue, reason, cause, message_type, minute)
);
-- Pruning by age.
CREATE INDEX group_minutes_minute ON group_minutes (minute);

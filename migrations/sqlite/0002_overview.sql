-- What the overview shows without scanning messages: failures per DLQ and hour (the
-- sparkline) and failure groups, both kept in the ingest transaction.
ALTER TABLE messages ADD COLUMN error TEXT; -- the failing consumer's own description, if it left one

-- The failure-group filter compares these very expressions, so a group's link is an index range.
CREATE INDEX messages_group ON messages (coalesce(first_death_queue, queue), first_death_reason, coalesce(error, ''), id);
CREATE INDEX messages_message_id ON messages (message_id);

CREATE TABLE hourly_counts (
    queue    TEXT    NOT NULL,
    hour     INTEGER NOT NULL, -- Unix time / 3600
    messages INTEGER NOT NULL,
    PRIMARY KEY (queue, hour)
) WITHOUT ROWID;

-- Keyed on the first-death queue (the DLQ for messages without history), the first-death
-- reason ('none' without history) and the error description ('' when none was given).
CREATE TABLE failure_groups (
    queue      TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    error      TEXT    NOT NULL,
    messages   INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (queue, reason, error)
) WITHOUT ROWID;

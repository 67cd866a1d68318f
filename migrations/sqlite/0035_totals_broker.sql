-- Issue 36, the fleet: the broker as a metrics label of its own.
-- Each archive total says which broker its DLQ is of ('default': `--amqp-url`'s), so that
-- `lazarus_archived_messages` carries `broker` and the DLQ's key on that broker apart. The
-- key (queue) already holds the broker as its `broker:` prefix; a total only ever counts
-- messages of one key, so the broker of any of them is the total's.
ALTER TABLE queue_reason_counts ADD COLUMN broker TEXT NOT NULL DEFAULT 'default';
UPDATE queue_reason_counts SET broker = coalesce((SELECT m.broker FROM messages m
    WHERE m.queue = queue_reason_counts.queue AND m.broker <> 'default' LIMIT 1), 'default');

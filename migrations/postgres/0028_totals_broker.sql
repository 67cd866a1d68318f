-- Issue 36, the fleet: the broker as a metrics label of its own.
-- Each archive total says which broker its DLQ is of ('default': `--amqp-url`'s), so that
-- `lazarus_archived_messages` carries `broker` and the DLQ's key on that broker apart. The
-- key (queue) already holds the broker as its `broker:` prefix; a total only ever counts
-- messages of one key, so the broker of any of them is the total's.
ALTER TABLE queue_reason_counts ADD COLUMN broker TEXT NOT NULL DEFAULT 'default';
-- Only messages of other brokers are looked at (the partial index messages_broker).
UPDATE queue_reason_counts c SET broker = m.broker
FROM (SELECT DISTINCT queue, broker FROM messages WHERE broker <> 'default') m
WHERE m.queue = c.queue;

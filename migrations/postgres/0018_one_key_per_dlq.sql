-- One key per DLQ (issue 32; as SQLite's migration 0024): the queue column holds a DLQ's key, which was the bare name in
-- the AMQP URL's vhost and vhost/name in another, so a home queue named 'a/b' and the queue
-- 'b' of vhost 'a' shared the key 'a/b' (their messages, totals, groups and stream offset
-- mixed, and --discover archived whichever it saw first). A home name holding '/' is now
-- keyed '/name', as --queue writes it. Messages say their vhost, so theirs are rewritten
-- exactly; totals, counts, groups and offsets do not, and a key of theirs holding '/' is taken
-- as the home queue's when its messages are (an archive that held both queues, only possible
-- through two instances or an import, keeps their merged totals under the home key).
-- Fingerprints hash the key: a home queue with '/' redelivering, after the upgrade, a message
-- archived before it archives it a second time.
SET LOCAL statement_timeout = 0;
UPDATE messages SET queue = '/' || queue WHERE vhost = '' AND queue LIKE '%/%';
UPDATE messages SET first_death_queue = '/' || first_death_queue
WHERE vhost = '' AND first_death_queue LIKE '%/%';

UPDATE queue_reason_counts SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m WHERE m.queue = '/' || queue_reason_counts.queue);
UPDATE hourly_counts SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m WHERE m.queue = '/' || hourly_counts.queue);
UPDATE minute_counts SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m WHERE m.queue = '/' || minute_counts.queue);
UPDATE stream_offsets SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m WHERE m.queue = '/' || stream_offsets.queue);
UPDATE retention_run_counts SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m WHERE m.queue = '/' || retention_run_counts.queue);
UPDATE failure_groups SET queue = '/' || queue WHERE queue LIKE '%/%'
    AND EXISTS (SELECT 1 FROM messages m
                WHERE coalesce(m.first_death_queue, m.queue) = '/' || failure_groups.queue);
-- Each message's failure group beside its status (0009).
UPDATE message_status s SET group_queue = coalesce(m.first_death_queue, m.queue)
FROM messages m WHERE m.id = s.id AND m.vhost = '' AND s.group_queue LIKE '%/%';

-- Framework error queues (issue 33; as SQLite's migration 0029): a message that follows a
-- framework's convention (src/conventions/) keeps which one, the queue it failed in, the
-- header(s) that gave its replay target (the target itself goes into replay_exchange /
-- replay_routing_key when no death history gives one) and what the convention's headers got
-- wrong (a JSON array of sentences).
SET LOCAL statement_timeout = 0;

ALTER TABLE messages ADD COLUMN convention TEXT, ADD COLUMN failed_queue TEXT,
    ADD COLUMN replay_target_from TEXT, ADD COLUMN convention_problems TEXT;

-- A message without death history now counts under the queue it failed in, where its
-- framework says it (src/archive/sql/filter.rs writes this key).
DROP INDEX messages_group;
CREATE INDEX messages_group ON messages
    (coalesce(first_death_queue, failed_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id);

-- Every message archived so far is read again by the regroup (src/archive/sql/regroup.rs).
INSERT INTO regroup (id, next_id, last_id) SELECT 1, 1, coalesce(max(id), 0) FROM messages
    ON CONFLICT (id) DO UPDATE SET next_id = 1, last_id = excluded.last_id;

-- Framework error queues (issue 33): a message that follows a framework's convention (Spring
-- AMQP, MassTransit, NServiceBus, Dramatiq, Symfony Messenger, Watermill; src/conventions/)
-- keeps which one, the queue it failed in, the header(s) that gave its replay target (the
-- target itself goes into replay_exchange / replay_routing_key when no death history gives
-- one) and what the convention's headers got wrong (a JSON array of sentences).
ALTER TABLE messages ADD COLUMN convention TEXT;
ALTER TABLE messages ADD COLUMN failed_queue TEXT;
ALTER TABLE messages ADD COLUMN replay_target_from TEXT;
ALTER TABLE messages ADD COLUMN convention_problems TEXT;

-- A message without death history now counts under the queue it failed in, where its
-- framework says it: the group's key as the list's `group` filter writes it
-- (src/archive/sql/filter.rs).
DROP INDEX messages_group;
DROP INDEX messages_group_open;
CREATE INDEX messages_group ON messages
    (coalesce(first_death_queue, failed_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id);
CREATE INDEX messages_group_open ON messages
    (coalesce(first_death_queue, failed_queue, queue), coalesce(first_death_reason, 'none'), coalesce(cause, error, ''), id)
    WHERE status IN ('archived', 'replayed', 'replay_failed');

-- Every message archived so far is read again by the regroup (src/archive/sql/regroup.rs),
-- so that framework messages get their convention, failing queue and target; the counts
-- move in the same transactions, exact throughout.
INSERT OR REPLACE INTO regroup (id, next_id, last_id) SELECT 1, 1, coalesce(max(id), 0) FROM messages;

-- One index per list filter that had none, in the list's order (newest first): a filter on a
-- rare exchange, routing key, first-death queue or error used to read the whole table by id
-- (0.6 s to 9 s at 1,000,000 messages, cargo bench --bench pages).
CREATE INDEX messages_exchange ON messages (first_death_exchange, id);
CREATE INDEX messages_routing_key ON messages (replay_routing_key, id);
CREATE INDEX messages_first_death_queue ON messages (coalesce(first_death_queue, queue), id);
CREATE INDEX messages_error ON messages (coalesce(error, ''), id);

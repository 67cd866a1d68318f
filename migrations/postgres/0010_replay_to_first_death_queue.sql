-- A replay job may publish each message to the queue it first died in only (the default
-- exchange, the queue's name as key), instead of its original exchange and key: those reach
-- every queue bound to the key, including queues that took the message the first time.
-- As SQLite's migration 0017.
ALTER TABLE replay_jobs ADD COLUMN to_first_death_queue BOOLEAN NOT NULL DEFAULT FALSE;

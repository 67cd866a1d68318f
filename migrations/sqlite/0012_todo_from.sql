-- Where a job's next step starts looking for items still to do (see sql/lease.rs,
-- next_items): below it every item is done or in flight. PostgreSQL has had it from the
-- start; SQLite's jobs now run the same steps.
ALTER TABLE replay_jobs ADD COLUMN todo_from INTEGER NOT NULL DEFAULT 0;

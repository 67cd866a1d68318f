-- Planning a job inserts one item per message in one statement; the two foreign keys on
-- replay_job_items ran a trigger per row (a `FOR KEY SHARE` look-up of the message, and of the
-- job created in the same transaction): 314 of 611 ms for 50,000 items. The statement locks
-- the messages it freezes itself (`FOR KEY SHARE OF messages`, in id order, as purges lock
-- them), it is the only writer of items, and a purge deletes the items of what it purges, so
-- the checks added nothing but time. SQLite keeps its (in-process, cheap) checks.
ALTER TABLE replay_job_items DROP CONSTRAINT replay_job_items_job_id_fkey;
ALTER TABLE replay_job_items DROP CONSTRAINT replay_job_items_message_id_fkey;

-- The instance name of the runner holding a job's lease (--instance-name), when it held that
-- name (no other live process did) as it claimed the job: a restart under the same name takes
-- the job back at once instead of waiting for the lease to run out. NULL for runners without
-- a name of their own (`lazarus replay`, or a second process that found its name taken).
ALTER TABLE replay_jobs ADD COLUMN lease_instance TEXT;

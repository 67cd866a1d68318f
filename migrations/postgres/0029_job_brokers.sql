-- Issue 36, the fleet: several instances on one archive, not all with every `--broker`.
-- A job is claimed only by a runner that can publish to every broker its messages go back
-- to (the default, `--amqp-url`'s, every runner can): an instance without `--broker NAME`
-- leaves a job of NAME's messages to one with it, instead of claiming and pausing it.

-- The brokers other than the default a job's plan publishes to (written with its plan, and
-- again when it is resumed).
CREATE TABLE replay_job_brokers (
    job_id BIGINT NOT NULL REFERENCES replay_jobs (id),
    broker TEXT   NOT NULL,
    PRIMARY KEY (job_id, broker)
);

-- The job runners that said lately that they run (`live_until`, Unix ms; renewed while they
-- look for jobs, and counted as live while they hold a job's lease), each with the brokers
-- other than the default it can publish to: a claim reads its own; a job page tells from all
-- of them whether any running instance can serve a waiting job.
CREATE TABLE replay_runners (
    owner      TEXT   NOT NULL,
    broker     TEXT   NOT NULL,
    live_until BIGINT NOT NULL,
    PRIMARY KEY (owner, broker)
);

-- Unfinished jobs of an earlier version: the brokers their plans name.
INSERT INTO replay_job_brokers (job_id, broker)
SELECT DISTINCT j.id, t ->> 'broker'
FROM replay_jobs j, jsonb_array_elements(coalesce(j.plan::jsonb -> 'targets', '[]'::jsonb)) t
WHERE j.state IN ('planned', 'queued', 'running', 'paused')
  AND t ->> 'broker' IS NOT NULL AND t ->> 'broker' <> 'default';

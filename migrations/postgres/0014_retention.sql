-- Retention (issue 18): background passes delete what a policy no longer keeps
-- (src/retention/). As SQLite's migration 0020: body bytes per DLQ, when a status last
-- changed, and a record of each pass.

ALTER TABLE queue_reason_counts ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
SET LOCAL statement_timeout = 0;
UPDATE queue_reason_counts c SET bytes = d.b FROM
    (SELECT queue AS q, coalesce(first_death_reason, 'none') AS r, sum(body_size) AS b
     FROM messages GROUP BY 1, 2) AS d
WHERE c.queue = d.q AND c.reason = d.r;

ALTER TABLE message_status ADD COLUMN status_at BIGINT;
UPDATE message_status s SET status_at = coalesce(s.replayed_at, m.archived_at)
FROM messages m WHERE m.id = s.id AND s.status IN ('dismissed', 'settled', 'died_again');
CREATE INDEX message_status_resolved ON message_status (status_at, id)
    WHERE status IN ('dismissed', 'settled', 'died_again');

CREATE TABLE retention_runs (
    id          BIGSERIAL PRIMARY KEY,
    owner       TEXT    NOT NULL,
    started_at  BIGINT  NOT NULL,
    alive_at    BIGINT  NOT NULL,
    finished_at BIGINT,
    next_at     BIGINT,
    deleted     BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX retention_runs_unfinished ON retention_runs (id) WHERE finished_at IS NULL;

CREATE TABLE retention_run_counts (
    run_id   BIGINT NOT NULL,
    queue    TEXT   NOT NULL,
    rule     TEXT   NOT NULL,
    messages BIGINT NOT NULL,
    bytes    BIGINT NOT NULL,
    PRIMARY KEY (run_id, queue, rule)
);

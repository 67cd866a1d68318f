-- Open and resolved (issue 15): a message is open until it is dismissed, or replayed and its
-- copy did not come back within the settle time (status `settled`); a replayed message whose
-- copy died again is `died_again`, the copy being the open record. The overview and the
-- failure groups count open messages, kept in the same transactions that change a status
-- (src/archive/sql/lifecycle.rs).

-- When a message was last published by a replay: it settles once the settle time has passed.
ALTER TABLE messages ADD COLUMN replayed_at INTEGER;
CREATE INDEX messages_settling ON messages (replayed_at) WHERE status = 'replayed';

-- A failure group's open messages, newest first (the overview's group links), however many
-- of the group are resolved: only open messages are in it. The list writes the condition
-- exactly as here (src/archive/sql/filter.rs), which is how SQLite knows it may use it.
CREATE INDEX messages_group_open ON messages
    (coalesce(first_death_queue, queue), first_death_reason, coalesce(error, ''), id)
    WHERE status IN ('archived', 'replayed', 'replay_failed');

ALTER TABLE queue_reason_counts ADD COLUMN open_messages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE failure_groups ADD COLUMN open_messages INTEGER NOT NULL DEFAULT 0;

-- What was replayed before: died again if a copy of it is archived, settled otherwise.
UPDATE messages SET status = 'died_again'
WHERE status = 'replayed' AND id IN (SELECT replay_of FROM messages WHERE replay_of IS NOT NULL);
UPDATE messages SET status = 'settled' WHERE status = 'replayed';

UPDATE queue_reason_counts SET open_messages = d.n FROM
    (SELECT queue AS q, coalesce(first_death_reason, 'none') AS r, count(*) AS n FROM messages
     WHERE status IN ('archived', 'replay_failed') GROUP BY 1, 2) AS d
WHERE queue_reason_counts.queue = d.q AND queue_reason_counts.reason = d.r;
UPDATE failure_groups SET open_messages = d.n FROM
    (SELECT coalesce(first_death_queue, queue) AS q, coalesce(first_death_reason, 'none') AS r,
     coalesce(error, '') AS e, count(*) AS n FROM messages
     WHERE status IN ('archived', 'replay_failed') GROUP BY 1, 2, 3) AS d
WHERE failure_groups.queue = d.q AND failure_groups.reason = d.r AND failure_groups.error = d.e;

-- The webhooks look for failure groups first seen lately, every few seconds.
CREATE INDEX failure_groups_first_seen ON failure_groups (first_seen);

-- Issue 36, rights per vhost and queue.
-- A user's or token's role held only on the DLQs some patterns name: `ROLE:PATTERN` lines
-- (`viewer:tenant-a/*`); NULL: the role on every DLQ, as before.
ALTER TABLE users ADD COLUMN grants TEXT;
ALTER TABLE api_tokens ADD COLUMN grants TEXT;

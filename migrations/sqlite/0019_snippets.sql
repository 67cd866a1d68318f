-- The start of each body as text (whitespace folded, 160 characters), cut at ingest from the
-- text the index is built from (so masked where `--mask` was in force): what the message
-- list shows under each row. Messages archived before have none.
ALTER TABLE messages ADD COLUMN snippet TEXT;

-- Issue 37, a drain that does not slow as the archive grows: the fingerprint index was keyed
-- on 32 random bytes, so each message stored dirtied a page of it somewhere in the file (at a
-- million messages, one page per message written to the WAL and again at the checkpoint). A
-- message's content carries a time (its newest death's, else its `timestamp` property;
-- src/archive/record.rs, `fingerprint_time`), the same for every delivery of it. The index
-- copies are looked up by is ordered by that time and then by id, so each new entry lands at
-- its right edge (a burst's messages share a second: by fingerprint within it, a batch would
-- still dirty a page per message of that second's range); the fingerprint is in it too, so a
-- look-up reads a second's entries without their rows (src/archive/sqlite/ingest.rs,
-- `archived_rows`). Rows archived before this, and messages without a time, are found by
-- the fingerprint alone, as before.
ALTER TABLE messages ADD COLUMN fingerprint_time INTEGER;
DROP INDEX messages_fingerprint;
CREATE INDEX messages_fingerprint ON messages (fingerprint) WHERE fingerprint_time IS NULL;
CREATE INDEX messages_fingerprint_dated ON messages (fingerprint_time, id, fingerprint)
    WHERE fingerprint_time IS NOT NULL;

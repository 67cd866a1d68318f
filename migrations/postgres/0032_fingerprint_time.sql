-- Issue 37, a drain that does not slow as the archive grows: the fingerprint's hash index put
-- each message's entry in a random bucket, a page of the index somewhere for each message
-- stored. A message's content carries a time (its newest death's, else its `timestamp`
-- property; src/archive/record.rs, `fingerprint_time`), the same for every delivery of it: a
-- possible copy is looked up by both, through a B-tree in time order, so new entries land
-- among the newest (a burst's messages that share a second, within that second's range).
-- Unlike SQLite's (0038), the id is not between the two: PostgreSQL looks each (time,
-- fingerprint) pair up exactly (src/archive/postgres/ingest.rs, `archived_rows`). Rows
-- archived before this, and messages without a time, are found by the fingerprint alone, as
-- before.
ALTER TABLE messages ADD COLUMN fingerprint_time BIGINT;
DROP INDEX messages_fingerprint;
CREATE INDEX messages_fingerprint ON messages USING hash (fingerprint) WHERE fingerprint_time IS NULL;
CREATE INDEX messages_fingerprint_dated ON messages (fingerprint_time, fingerprint)
    WHERE fingerprint_time IS NOT NULL;

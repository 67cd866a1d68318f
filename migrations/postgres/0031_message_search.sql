-- Issue 37, append then index on PostgreSQL: a message's search document (`tsvector`) moves
-- out of its row into a table of its own, written by the indexer after the batch is acked.
-- In the row, writing it later would be an UPDATE: a new version of the wide row and of every
-- one of its indexes. Here it is one insert. No foreign key, as for message_bodies (0001): it
-- is removed with its message.
CREATE TABLE message_search (
    id     BIGINT   PRIMARY KEY,
    search TSVECTOR NOT NULL
);
INSERT INTO message_search (id, search) SELECT id, search FROM messages;
CREATE INDEX message_search_search ON message_search USING GIN (search);
-- As the column had (0008): a rare word's share is estimated from the most common words.
ALTER TABLE message_search ALTER COLUMN search SET STATISTICS 1000;
ALTER TABLE messages DROP COLUMN search;
ANALYZE message_search;

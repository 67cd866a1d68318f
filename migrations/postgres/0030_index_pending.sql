-- Issue 37, append then index: messages whose search entries the indexer has not written yet.
-- PostgreSQL's ingest still writes them in the batch's own statement, so nothing waits here
-- yet; the table is read by the code both backends share (the lag pages show, reindexing).
CREATE TABLE index_pending (id bigint PRIMARY KEY);

-- Issue 37, append then index: a DLQ consumer's batch is committed (and acked) with its
-- messages, bodies, totals and groups, but without its search entries (the full-text index,
-- the search words, business fields and their keys); each message's id waits here until the
-- indexer writes them, in a transaction that also deletes the id — so a crash at any point
-- loses nothing and indexes nothing twice. Its row count is the lag pages show
-- ("indexing: N behind").
CREATE TABLE index_pending (id INTEGER PRIMARY KEY);

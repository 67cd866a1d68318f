-- Search finds any part of Chinese, Japanese and Korean text: CJK runs are indexed as their
-- overlapping bigrams (src/cjk.rs). Messages archived before are reindexed in the background
-- by `lazarus serve`, from next_id up to last_id (src/archive/sql/reindex.rs); the row goes
-- when that is done. Messages archived from now on are indexed the new way at ingest.
CREATE TABLE search_reindex (
    version INTEGER PRIMARY KEY,
    next_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL
);
INSERT INTO search_reindex (version, next_id, last_id)
SELECT 1, 1, coalesce(max(id), 0) FROM messages;

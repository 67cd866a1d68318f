-- A rare word's share of the search column is estimated from its most common words: with the
-- default 100-bucket statistics, at 10,000,000 messages a word in 1,000 of them was taken for
-- one in 15,000, and the planner walked the id index backwards through 510,000 rows (850 ms)
-- instead of asking the GIN index (3 ms). Ten times the statistics bring the estimate to
-- 4,700 and the plan to the index; common words keep the backward walk (benches/pages.rs).
-- (ANALYZE reads a sample of 300,000 rows: 8 s at 10,000,000 messages; the archive's 30 s
-- statement limit is lifted for it.)
SET LOCAL statement_timeout = 0;
ALTER TABLE messages ALTER COLUMN search SET STATISTICS 1000;
ANALYZE messages (search);

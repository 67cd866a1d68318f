-- The words the search index holds, so that a list search for `prefix*` can ask FTS5 for the
-- words it stands for instead of the prefix (src/archive/sqlite/terms.rs): filled here from
-- the index itself, then kept by ingest and the reindex in the same transactions.
CREATE TABLE search_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE VIRTUAL TABLE temp.search_terms_fill USING fts5vocab(main, messages_fts, row);
INSERT INTO search_terms (term) SELECT term FROM temp.search_terms_fill;
DROP TABLE temp.search_terms_fill;

-- Bodies compressed with bzip2, lzma/xz, zstd or brotli (kombu's compression header, or a
-- br/zstd content-encoding) and protobuf bodies are read now: messages archived before are
-- reindexed in the background by `lazarus serve` (version 2 of src/archive/sql/reindex.rs).
INSERT INTO search_reindex (version, next_id, last_id)
SELECT 2, 1, coalesce(max(id), 0) FROM messages;

-- A redelivered message is now looked up in the archive itself, by fingerprint and queue, not
-- among rows whose ack was not yet confirmed: a broker that crashes forgets acks it had
-- confirmed, and messages acked minutes before come back redelivered. So messages gets the
-- fingerprint index 0001 left out, and pending_acks goes.
-- A hash index: only equality is asked of it, and it keeps a 4-byte hash code per row where a
-- B-tree would keep the 32-byte fingerprint (see BENCHMARKS.md for what it costs ingest).
CREATE INDEX messages_fingerprint ON messages USING hash (fingerprint);
DROP TABLE pending_acks;

-- A redelivered message is now looked up in the archive itself, by fingerprint and queue
-- (the messages_fingerprint index of 0001), not among rows whose ack was not yet confirmed:
-- a broker that crashes forgets acks it had confirmed, and messages acked minutes before come
-- back redelivered. Nothing reads pending_acks any more, so nothing writes it.
DROP TABLE pending_acks;

-- One instance archives several clusters (`--broker NAME=AMQP_URL`). Each message says which
-- broker it came from; 'default' is `--amqp-url`'s, the only one before. The queue column of
-- a message of another broker reads broker:key (its key there), and so do its first-death
-- queue, totals and failure groups: two clusters' same-named DLQs stay apart.
ALTER TABLE messages ADD COLUMN broker TEXT NOT NULL DEFAULT 'default';
-- Only messages of other brokers are indexed: the default broker costs ingest nothing.
CREATE INDEX messages_broker ON messages (broker, id) WHERE broker <> 'default';

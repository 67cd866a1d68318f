-- One instance archives DLQs of several vhosts (`--queue vhost/name`). Each message says
-- which vhost it came from; '' is the AMQP URL's own vhost, the only one before. The queue
-- column of a message from another vhost reads vhost/name (the vhost percent-encoded), and
-- so do its first-death queue, totals and failure groups: two vhosts' same-named DLQs stay apart.
ALTER TABLE messages ADD COLUMN vhost TEXT NOT NULL DEFAULT '';
-- Only messages of other vhosts are indexed: the home vhost costs ingest nothing.
CREATE INDEX messages_vhost ON messages (vhost, id) WHERE vhost <> '';

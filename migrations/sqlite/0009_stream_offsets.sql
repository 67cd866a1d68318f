-- Where to resume reading each stream DLQ: the offset after the last one archived. Written in
-- the transaction of the batch that archived it, so a restart reads on from exactly there
-- (a stream keeps its messages when they are acked: nothing else says what was read).
CREATE TABLE stream_offsets (
    queue       TEXT    PRIMARY KEY,
    next_offset INTEGER NOT NULL
) WITHOUT ROWID;

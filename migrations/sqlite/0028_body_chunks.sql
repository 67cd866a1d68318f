-- Bodies over 1 MiB in pieces (issue 32): the first MiB stays in message_bodies, as every
-- body was stored before, and the rest is here, a row of at most 1 MiB per byte offset `at`,
-- written in the transaction of its message. No statement then binds, and no read loads,
-- more than a MiB of one body: a 128 MiB body stored whole took SQLite's bind and record
-- copies of it, three times its size. Nothing is moved: a body archived before, whatever its
-- size, is a first piece with no others, and is read as it always was.
CREATE TABLE message_body_chunks (
    message_id INTEGER NOT NULL REFERENCES message_bodies (message_id),
    at         INTEGER NOT NULL,
    data       BLOB    NOT NULL,
    PRIMARY KEY (message_id, at)
);

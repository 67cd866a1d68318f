-- Bodies over 1 MiB in pieces (issue 32; as SQLite's migration 0026): the first MiB stays in
-- message_bodies, as every body was stored before, and the rest is here, a row of at most
-- 1 MiB per byte offset `at`, written in the transaction of its message, each by a statement
-- of its own. A 128 MiB body bound whole, in the batch's one statement, grew the driver's
-- array buffer by doubling past the manifest's memory limit. Nothing is moved: a body
-- archived before, whatever its size, is a first piece with no others, read as it always
-- was. No foreign key, as for message_bodies (0001): both are removed with their message.
CREATE TABLE message_body_chunks (
    message_id BIGINT NOT NULL,
    at         BIGINT NOT NULL,
    data       BYTEA  NOT NULL,
    PRIMARY KEY (message_id, at)
);

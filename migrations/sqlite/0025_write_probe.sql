-- One row the write probe commits before any delivery is taken from a DLQ: a commit proves
-- the file takes writes (a full disk, a failing fsync), where a rolled-back batch does not.
CREATE TABLE write_probe (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at INTEGER NOT NULL
);

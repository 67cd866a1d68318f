-- Every replay of a single message: who asked, where it went, how it ended. request_key
-- makes a retried or double-clicked request find its first replay instead of publishing again.
CREATE TABLE replays (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id         INTEGER NOT NULL REFERENCES messages (id),
    request_key        TEXT    NOT NULL UNIQUE,
    actor              TEXT    NOT NULL,
    requested_at       INTEGER NOT NULL, -- Unix milliseconds
    target_exchange    TEXT    NOT NULL,
    target_routing_key TEXT    NOT NULL,
    outcome            TEXT    NOT NULL, -- publishing, published, unroutable, nacked, failed
    detail             TEXT,
    finished_at        INTEGER
);
CREATE INDEX replays_message ON replays (message_id, id);

-- A replayed copy that dies again is archived as a new record pointing back to its original.
ALTER TABLE messages ADD COLUMN replay_of INTEGER;
CREATE INDEX messages_replay_of ON messages (replay_of);

-- Full-text search over body text, ids and header values (contentless: the text is derived
-- and the archive keeps the originals), and business fields extracted at ingest.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    body, ids, headers,
    content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE message_fields (
    name       TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (name, value, message_id)
) WITHOUT ROWID;
CREATE INDEX message_fields_message ON message_fields (message_id);

CREATE INDEX messages_content_type ON messages (content_type, id);
CREATE INDEX messages_correlation_id ON messages (correlation_id);

-- `field:value` finds a business field's words as the rest of search finds words (case and
-- accents folded, a word anywhere in the value, a phrase, `prefix*`): each value is stored
-- as its keys, its folded words from each word to the end (src/field_match.rs), so that a
-- search is one range of this index. Messages archived before get theirs in the background
-- (version 3 of src/archive/sql/reindex.rs); meanwhile their exact values are still found.
CREATE TABLE message_field_keys (
    name       TEXT    NOT NULL,
    folded     TEXT    NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (name, folded, message_id)
) WITHOUT ROWID;
CREATE INDEX message_field_keys_message ON message_field_keys (message_id);

INSERT INTO search_reindex (version, next_id, last_id)
SELECT 3, 1, coalesce(max(message_id), 0) FROM message_fields;

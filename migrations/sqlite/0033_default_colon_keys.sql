-- A DLQ of the default broker whose key is `NAME:…` would share its keys with a `--broker
-- NAME`: start-up refuses such an archive. These few rows (few queue names hold ':') are
-- found through this index instead of a scan; its condition is the query's, word for word.
CREATE INDEX messages_default_colon ON messages (queue) WHERE broker = 'default' AND queue LIKE '%:%';

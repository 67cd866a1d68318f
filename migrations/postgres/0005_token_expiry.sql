-- API tokens expire, and belong to the user who made them: removing that user revokes them.
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN owner TEXT;

-- Tokens made before they could expire get 90 days from today, not from when they were
-- made: none stops working the moment this version starts.
UPDATE api_tokens SET expires_at = (extract(epoch FROM now()) * 1000)::bigint + 7776000000
WHERE expires_at IS NULL;
UPDATE api_tokens SET owner = created_by WHERE created_by IN (SELECT name FROM users);

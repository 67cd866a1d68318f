-- People who may sign in (built-in users), or whose role is set for the trusted proxy
-- (password_hash NULL). Passwords are argon2id PHC strings, never the password.
CREATE TABLE users (
    name          TEXT    PRIMARY KEY,
    password_hash TEXT,
    role          TEXT    NOT NULL, -- viewer, operator, admin
    created_at    INTEGER NOT NULL
);

-- Signed-in browsers: the cookie's SHA-256, never the cookie.
CREATE TABLE sessions (
    token_hash TEXT    PRIMARY KEY,
    user_name  TEXT    NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);

-- Bearer tokens for automation: the token's SHA-256, never the token.
CREATE TABLE api_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    token_hash TEXT    NOT NULL UNIQUE,
    role       TEXT    NOT NULL,
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

-- Where an audited action came from (the client's address).
ALTER TABLE audit_log ADD COLUMN source TEXT;

-- The audit log is append-only: the application never changes or removes an entry, and the
-- database refuses to.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;

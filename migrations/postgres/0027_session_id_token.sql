-- Issue 36, signing out at the OpenID provider too (RP-Initiated Logout).
-- The ID token a session was signed in with (`--auth oidc`), kept on the server to send as
-- `id_token_hint` when the session signs out; never in a cookie. NULL: a password sign-in,
-- or a session older than this column.
ALTER TABLE sessions ADD COLUMN id_token TEXT;

//! Users, sessions and API tokens, the same on both backends; every change is audited in its
//! transaction.

use async_trait::async_trait;

use super::columns::{SESSION_QUERY, TOKEN_COLUMNS, USER_COLUMNS};
use super::rows::{session_times, token_from_row, user_from_row};
use super::{args, audit, millis, now, SqlArchive};
use crate::archive::accounts::{
    session_use, stored_grants, AccountChange, Grant, Grants, SessionUse,
};
use crate::archive::{Accounts, Actor, ArchiveError, Role, TokenRecord, TokenSpec, UserRecord};

#[async_trait]
impl<T: SqlArchive> Accounts for T {
    async fn put_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        grants: &[Grant],
        by: &Actor,
    ) -> Result<(), ArchiveError> {
        let stored = stored_grants(grants);
        let mut tx = self.db().begin().await?;
        tx.conn()
            .execute(
                "INSERT INTO users (name, password_hash, role, grants, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (name) DO UPDATE SET role = excluded.role, grants = excluded.grants, \
                 password_hash = coalesce(excluded.password_hash, users.password_hash)",
                args![name, password_hash, role.as_str(), stored.as_deref(), now()],
            )
            .await?;
        let grants = Grants::of(role, grants);
        let (action, summary) = AccountChange::UserPut { name, grants }.entry();
        audit(tx.conn(), by, action, None, None, &summary).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn set_password(
        &self,
        name: &str,
        password_hash: &str,
        by: &Actor,
    ) -> Result<bool, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let changed = tx
            .conn()
            .execute(
                "UPDATE users SET password_hash = $1 WHERE name = $2",
                args![password_hash, name],
            )
            .await?;
        if changed == 1 {
            // A new password ends every session of the old one.
            tx.conn()
                .execute("DELETE FROM sessions WHERE user_name = $1", args![name])
                .await?;
            let (action, summary) = AccountChange::Password { name }.entry();
            audit(tx.conn(), by, action, None, None, &summary).await?;
        }
        tx.commit().await?;
        Ok(changed == 1)
    }

    async fn remove_user(&self, name: &str, by: &Actor) -> Result<bool, ArchiveError> {
        let mut tx = self.db().begin().await?;
        tx.conn()
            .execute("DELETE FROM sessions WHERE user_name = $1", args![name])
            .await?;
        let removed = tx
            .conn()
            .execute("DELETE FROM users WHERE name = $1", args![name])
            .await?;
        if removed == 1 {
            // Their tokens go with them: automation they set up must not outlive their access.
            let tokens = tx
                .conn()
                .execute(
                    "UPDATE api_tokens SET revoked_at = $1 WHERE owner = $2 AND revoked_at IS NULL",
                    args![now(), name],
                )
                .await?;
            let (action, summary) = AccountChange::UserRemove { name, tokens }.entry();
            audit(tx.conn(), by, action, None, None, &summary).await?;
        }
        tx.commit().await?;
        Ok(removed == 1)
    }

    async fn user(&self, name: &str) -> Result<Option<UserRecord>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                &format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"),
                args![name],
            )
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn users(&self) -> Result<Vec<UserRecord>, ArchiveError> {
        let db = self.db();
        let order = db.dialect().byte_order("name");
        let rows = db
            .fetch_all(
                &format!("SELECT {USER_COLUMNS} FROM users ORDER BY {order}"),
                args![],
            )
            .await?;
        rows.iter().map(user_from_row).collect()
    }

    async fn create_session(
        &self,
        token_hash: &str,
        user: &str,
        id_token: Option<&str>,
    ) -> Result<(), ArchiveError> {
        self.db()
            .execute(
                "INSERT INTO sessions (token_hash, user_name, created_at, last_seen, id_token) \
                 VALUES ($1, $2, $3, $3, $4)",
                args![token_hash, user, now(), id_token],
            )
            .await?;
        Ok(())
    }

    async fn session_user(
        &self,
        token_hash: &str,
        idle_ms: u64,
        max_ms: u64,
    ) -> Result<Option<UserRecord>, ArchiveError> {
        let db = self.db();
        let row = db
            .fetch_optional(&format!("{SESSION_QUERY}$1"), args![token_hash])
            .await?;
        let Some(row) = row else { return Ok(None) };
        let now = now();
        match session_use(session_times(&row)?, idle_ms, max_ms, now) {
            SessionUse::Ended => {
                self.end_session(token_hash).await?;
                return Ok(None);
            }
            SessionUse::Touch => {
                // Another instance may have touched it meanwhile: `last_seen` never goes back.
                db.execute(
                    "UPDATE sessions SET last_seen = $1 WHERE token_hash = $2 AND last_seen < $1",
                    args![now, token_hash],
                )
                .await?;
            }
            SessionUse::Fresh => {}
        }
        Ok(Some(user_from_row(&row)?))
    }

    async fn end_session(&self, token_hash: &str) -> Result<Option<String>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                "DELETE FROM sessions WHERE token_hash = $1 RETURNING id_token",
                args![token_hash],
            )
            .await?;
        Ok(match row {
            Some(row) => super::ArchiveRow::column(&row, "id_token")?,
            None => None,
        })
    }

    async fn create_token(&self, token: &TokenSpec<'_>, by: &Actor) -> Result<i64, ArchiveError> {
        let stored = stored_grants(token.grants);
        let mut tx = self.db().begin().await?;
        let row = tx
            .conn()
            .fetch_one(
                "INSERT INTO api_tokens \
                 (name, token_hash, role, grants, created_by, created_at, owner, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                args![
                    token.name,
                    token.token_hash,
                    token.role.as_str(),
                    stored.as_deref(),
                    &by.name,
                    now(),
                    token.owner,
                    millis(token.expires_at),
                ],
            )
            .await?;
        let id: i64 = super::ArchiveRow::column(&row, "id")?;
        let (action, summary) = AccountChange::TokenCreate {
            id,
            name: token.name,
            grants: Grants::of(token.role, token.grants),
            expires_at: token.expires_at,
        }
        .entry();
        audit(tx.conn(), by, action, None, None, &summary).await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn token(&self, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL"
                ),
                args![token_hash],
            )
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn revoke_token(&self, id: i64, by: &Actor) -> Result<bool, ArchiveError> {
        let mut tx = self.db().begin().await?;
        // On PostgreSQL the row lock makes a second revocation wait and then find it revoked.
        let revoked = tx
            .conn()
            .execute(
                "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                args![now(), id],
            )
            .await?;
        if revoked == 1 {
            let (action, summary) = AccountChange::TokenRevoke { id }.entry();
            audit(tx.conn(), by, action, None, None, &summary).await?;
        }
        tx.commit().await?;
        Ok(revoked == 1)
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY id"),
                args![],
            )
            .await?;
        rows.iter().map(token_from_row).collect()
    }
}

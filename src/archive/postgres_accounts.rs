//! Users, sessions and API tokens on PostgreSQL; every change is audited in its transaction.
//! Rows are read, and audit lines written, as on SQLite ([`super::sqlite_accounts`]).

use sqlx::PgPool;

use super::postgres_audit::audit;
use super::sqlite_accounts::{
    now, session_times, session_use, token_from_row, user_from_row, AccountChange, SessionUse,
    SESSION_QUERY, TOKEN_COLUMNS, USER_COLUMNS,
};
use super::{Actor, ArchiveError, Role, TokenRecord, TokenSpec, UserRecord};

pub async fn put_user(
    pool: &PgPool,
    name: &str,
    password_hash: Option<&str>,
    role: Role,
    by: &Actor,
) -> Result<(), ArchiveError> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO users (name, password_hash, role, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (name) DO UPDATE SET role = excluded.role, \
         password_hash = coalesce(excluded.password_hash, users.password_hash)",
    )
    .bind(name)
    .bind(password_hash)
    .bind(role.as_str())
    .bind(now())
    .execute(&mut *tx)
    .await?;
    let (action, summary) = AccountChange::UserPut { name, role }.entry();
    audit(&mut tx, by, action, None, None, &summary).await?;
    tx.commit().await?;
    Ok(())
}

pub async fn set_password(
    pool: &PgPool,
    name: &str,
    password_hash: &str,
    by: &Actor,
) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin().await?;
    let changed = sqlx::query("UPDATE users SET password_hash = $1 WHERE name = $2")
        .bind(password_hash)
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if changed == 1 {
        // A new password ends every session of the old one.
        sqlx::query("DELETE FROM sessions WHERE user_name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let (action, summary) = AccountChange::Password { name }.entry();
        audit(&mut tx, by, action, None, None, &summary).await?;
    }
    tx.commit().await?;
    Ok(changed == 1)
}

pub async fn remove_user(pool: &PgPool, name: &str, by: &Actor) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM sessions WHERE user_name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    let removed = sqlx::query("DELETE FROM users WHERE name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if removed == 1 {
        let tokens = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $1 WHERE owner = $2 AND revoked_at IS NULL",
        )
        .bind(now())
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let (action, summary) = AccountChange::UserRemove { name, tokens }.entry();
        audit(&mut tx, by, action, None, None, &summary).await?;
    }
    tx.commit().await?;
    Ok(removed == 1)
}

pub async fn user(pool: &PgPool, name: &str) -> Result<Option<UserRecord>, ArchiveError> {
    let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"))
        .bind(name)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(user_from_row).transpose()
}

pub async fn users(pool: &PgPool) -> Result<Vec<UserRecord>, ArchiveError> {
    // Byte order, as SQLite sorts text.
    let rows = sqlx::query(&format!(
        "SELECT {USER_COLUMNS} FROM users ORDER BY name COLLATE \"C\""
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(user_from_row).collect()
}

pub async fn create_session(
    pool: &PgPool,
    token_hash: &str,
    user: &str,
) -> Result<(), ArchiveError> {
    sqlx::query(
        "INSERT INTO sessions (token_hash, user_name, created_at, last_seen) VALUES ($1, $2, $3, $3)",
    )
    .bind(token_hash)
    .bind(user)
    .bind(now())
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn session_user(
    pool: &PgPool,
    token_hash: &str,
    idle_ms: u64,
    max_ms: u64,
) -> Result<Option<UserRecord>, ArchiveError> {
    let row = sqlx::query(&format!("{SESSION_QUERY}$1"))
        .bind(token_hash)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let now = now();
    match session_use(session_times(&row)?, idle_ms, max_ms, now) {
        SessionUse::Ended => {
            end_session(pool, token_hash).await?;
            return Ok(None);
        }
        SessionUse::Touch => {
            // Another instance may have touched it meanwhile: `last_seen` never goes back.
            sqlx::query(
                "UPDATE sessions SET last_seen = $1 WHERE token_hash = $2 AND last_seen < $1",
            )
            .bind(now)
            .bind(token_hash)
            .execute(pool)
            .await?;
        }
        SessionUse::Fresh => {}
    }
    Ok(Some(user_from_row(&row)?))
}

pub async fn end_session(pool: &PgPool, token_hash: &str) -> Result<(), ArchiveError> {
    sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
        .bind(token_hash)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn create_token(
    pool: &PgPool,
    token: &TokenSpec<'_>,
    by: &Actor,
) -> Result<i64, ArchiveError> {
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO api_tokens (name, token_hash, role, created_by, created_at, owner, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(token.name)
    .bind(token.token_hash)
    .bind(token.role.as_str())
    .bind(&by.name)
    .bind(now())
    .bind(token.owner)
    .bind(super::sqlite::millis(token.expires_at))
    .fetch_one(&mut *tx)
    .await?;
    let (action, summary) = AccountChange::TokenCreate {
        id,
        name: token.name,
        role: token.role,
        expires_at: token.expires_at,
    }
    .entry();
    audit(&mut tx, by, action, None, None, &summary).await?;
    tx.commit().await?;
    Ok(id)
}

pub async fn token(pool: &PgPool, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL"
    ))
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(token_from_row).transpose()
}

pub async fn revoke_token(pool: &PgPool, id: i64, by: &Actor) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin().await?;
    // The row lock makes a second revocation wait and then find it revoked.
    let revoked =
        sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now())
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    if revoked == 1 {
        let (action, summary) = AccountChange::TokenRevoke { id }.entry();
        audit(&mut tx, by, action, None, None, &summary).await?;
    }
    tx.commit().await?;
    Ok(revoked == 1)
}

pub async fn tokens(pool: &PgPool) -> Result<Vec<TokenRecord>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY id"
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(token_from_row).collect()
}

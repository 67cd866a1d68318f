//! Users, sessions and API tokens on SQLite; every change is audited in its transaction.
//! The row readers, audit lines and session rule here serve the PostgreSQL port too.

use sqlx::SqlitePool;
use time::OffsetDateTime;

use super::rows::ArchiveRow;
use super::sqlite::{from_millis, millis};
use super::sqlite_audit::audit;
use super::{Actor, ArchiveError, Role, TokenRecord, TokenSpec, UserRecord};

pub(super) fn now() -> i64 {
    millis(OffsetDateTime::now_utc())
}

/// A session's `last_seen` is written at most this often (not on every request)…
const TOUCH_EVERY_MS: i64 = 60_000;

/// …and at least four times per idle limit, so that a session in use never looks idle.
fn touch_every(idle_ms: u64) -> i64 {
    TOUCH_EVERY_MS.min(idle_ms as i64 / 4)
}

/// A session's times, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SessionTimes {
    pub created_at: i64,
    pub last_seen: i64,
}

/// What a session needs when it is used at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionUse {
    /// Unused for longer than the idle limit, or older than the absolute one: it is ended.
    Ended,
    /// Its `last_seen` is old enough to be written again.
    Touch,
    Fresh,
}

pub(super) fn session_use(times: SessionTimes, idle_ms: u64, max_ms: u64, now: i64) -> SessionUse {
    if now - times.last_seen > idle_ms as i64 || now - times.created_at > max_ms as i64 {
        SessionUse::Ended
    } else if now - times.last_seen > touch_every(idle_ms) {
        SessionUse::Touch
    } else {
        SessionUse::Fresh
    }
}

/// The times of a session row (`session_created_at`, `last_seen`), from either backend.
pub(super) fn session_times<R: ArchiveRow>(row: &R) -> Result<SessionTimes, ArchiveError> {
    Ok(SessionTimes {
        created_at: row.column("session_created_at")?,
        last_seen: row.column("last_seen")?,
    })
}

/// What a session lookup selects, both backends.
pub(super) const SESSION_QUERY: &str = "SELECT u.name, u.password_hash, u.role, u.created_at, \
    s.created_at AS session_created_at, s.last_seen FROM sessions s \
    JOIN users u ON u.name = s.user_name WHERE s.token_hash = ";

/// An account change, as the audit log records it.
pub(super) enum AccountChange<'a> {
    UserPut {
        name: &'a str,
        role: Role,
    },
    Password {
        name: &'a str,
    },
    UserRemove {
        name: &'a str,
        tokens: u64,
    },
    TokenCreate {
        id: i64,
        name: &'a str,
        role: Role,
        expires_at: OffsetDateTime,
    },
    TokenRevoke {
        id: i64,
    },
}

impl AccountChange<'_> {
    /// The audit action and line.
    pub(super) fn entry(&self) -> (&'static str, String) {
        match *self {
            AccountChange::UserPut { name, role } => {
                ("user_put", format!("user {name} is {}", role.as_str()))
            }
            AccountChange::Password { name } => (
                "user_password",
                format!("password of {name} changed; their sessions ended"),
            ),
            AccountChange::UserRemove { name, tokens } => (
                "user_remove",
                format!("user {name} removed; their sessions ended, {tokens} API tokens of theirs revoked"),
            ),
            AccountChange::TokenCreate {
                id,
                name,
                role,
                expires_at,
            } => (
                "token_create",
                format!(
                    "API token {id} ({name}) created as {}, expires {}",
                    role.as_str(),
                    expires_at
                        .format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default()
                ),
            ),
            AccountChange::TokenRevoke { id } => {
                ("token_revoke", format!("API token {id} revoked"))
            }
        }
    }
}

fn role_of<R: ArchiveRow>(row: &R) -> Result<Role, ArchiveError> {
    let role: String = row.column("role")?;
    Role::parse(&role).ok_or_else(|| ArchiveError::Corrupt {
        id: 0,
        reason: format!("unknown role {role:?}"),
    })
}

/// What [`user_from_row`] reads.
pub(super) const USER_COLUMNS: &str = "name, password_hash, role, created_at";

/// A user, from a row of either backend.
pub(super) fn user_from_row<R: ArchiveRow>(row: &R) -> Result<UserRecord, ArchiveError> {
    Ok(UserRecord {
        name: row.column("name")?,
        password_hash: row.column("password_hash")?,
        role: role_of(row)?,
        created_at: from_millis(row.column("created_at")?),
    })
}

pub async fn put_user(
    pool: &SqlitePool,
    name: &str,
    password_hash: Option<&str>,
    role: Role,
    by: &Actor,
) -> Result<(), ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(
        "INSERT INTO users (name, password_hash, role, created_at) VALUES (?, ?, ?, ?) \
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
    pool: &SqlitePool,
    name: &str,
    password_hash: &str,
    by: &Actor,
) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let changed = sqlx::query("UPDATE users SET password_hash = ? WHERE name = ?")
        .bind(password_hash)
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if changed == 1 {
        // A new password ends every session of the old one.
        sqlx::query("DELETE FROM sessions WHERE user_name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let (action, summary) = AccountChange::Password { name }.entry();
        audit(&mut tx, by, action, None, None, &summary).await?;
    }
    tx.commit().await?;
    Ok(changed == 1)
}

pub async fn remove_user(pool: &SqlitePool, name: &str, by: &Actor) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("DELETE FROM sessions WHERE user_name = ?")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    let removed = sqlx::query("DELETE FROM users WHERE name = ?")
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if removed == 1 {
        // Their tokens go with them: automation they set up must not outlive their access.
        let tokens = sqlx::query(
            "UPDATE api_tokens SET revoked_at = ? WHERE owner = ? AND revoked_at IS NULL",
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

pub async fn user(pool: &SqlitePool, name: &str) -> Result<Option<UserRecord>, ArchiveError> {
    let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = ?"))
        .bind(name)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(user_from_row).transpose()
}

pub async fn users(pool: &SqlitePool) -> Result<Vec<UserRecord>, ArchiveError> {
    let rows = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY name"))
        .fetch_all(pool)
        .await?;
    rows.iter().map(user_from_row).collect()
}

pub async fn create_session(
    pool: &SqlitePool,
    token_hash: &str,
    user: &str,
) -> Result<(), ArchiveError> {
    sqlx::query(
        "INSERT INTO sessions (token_hash, user_name, created_at, last_seen) VALUES (?, ?, ?, ?)",
    )
    .bind(token_hash)
    .bind(user)
    .bind(now())
    .bind(now())
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn session_user(
    pool: &SqlitePool,
    token_hash: &str,
    idle_ms: u64,
    max_ms: u64,
) -> Result<Option<UserRecord>, ArchiveError> {
    let row = sqlx::query(&format!("{SESSION_QUERY}?"))
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
            sqlx::query("UPDATE sessions SET last_seen = ? WHERE token_hash = ?")
                .bind(now)
                .bind(token_hash)
                .execute(pool)
                .await?;
        }
        SessionUse::Fresh => {}
    }
    Ok(Some(user_from_row(&row)?))
}

pub async fn end_session(pool: &SqlitePool, token_hash: &str) -> Result<(), ArchiveError> {
    sqlx::query("DELETE FROM sessions WHERE token_hash = ?")
        .bind(token_hash)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn create_token(
    pool: &SqlitePool,
    token: &TokenSpec<'_>,
    by: &Actor,
) -> Result<i64, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO api_tokens (name, token_hash, role, created_by, created_at, owner, expires_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(token.name)
    .bind(token.token_hash)
    .bind(token.role.as_str())
    .bind(&by.name)
    .bind(now())
    .bind(token.owner)
    .bind(millis(token.expires_at))
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

/// An API token, from a row of either backend.
pub(super) fn token_from_row<R: ArchiveRow>(row: &R) -> Result<TokenRecord, ArchiveError> {
    Ok(TokenRecord {
        id: row.column("id")?,
        name: row.column("name")?,
        role: role_of(row)?,
        created_by: row.column("created_by")?,
        created_at: from_millis(row.column("created_at")?),
        expires_at: row.column::<Option<i64>>("expires_at")?.map(from_millis),
        owner: row.column("owner")?,
        revoked: row.column::<Option<i64>>("revoked_at")?.is_some(),
    })
}

/// What [`token_from_row`] reads.
pub(super) const TOKEN_COLUMNS: &str =
    "id, name, role, created_by, created_at, revoked_at, expires_at, owner";

pub async fn token(
    pool: &SqlitePool,
    token_hash: &str,
) -> Result<Option<TokenRecord>, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = ? AND revoked_at IS NULL"
    ))
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(token_from_row).transpose()
}

pub async fn revoke_token(pool: &SqlitePool, id: i64, by: &Actor) -> Result<bool, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let revoked =
        sqlx::query("UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
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

pub async fn tokens(pool: &SqlitePool) -> Result<Vec<TokenRecord>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY id"
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(token_from_row).collect()
}

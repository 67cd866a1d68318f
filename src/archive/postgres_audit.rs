//! The audit log on PostgreSQL: appended inside the transaction of what it records, read
//! newest first in pages of bounded size, or oldest first and whole for the export. (The
//! database refuses updates and deletes, by trigger.)

use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;

use super::sqlite::millis;
use super::sqlite_audit::{
    capped, entry_from_row, page_columns, page_entry_from_row, MAX_ACTOR_CHARS, MAX_SUMMARY_CHARS,
    WHOLE_COLUMNS,
};
use super::{Actor, ArchiveError, AuditEntry};

/// Appends one line to the audit log, inside the transaction of what it records.
pub async fn audit(
    tx: &mut Transaction<'_, Postgres>,
    actor: &Actor,
    action: &str,
    job_id: Option<i64>,
    message_id: Option<i64>,
    summary: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action, job_id, message_id, summary, source) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(millis(OffsetDateTime::now_utc()))
    .bind(capped(&actor.name, MAX_ACTOR_CHARS))
    .bind(action)
    .bind(job_id)
    .bind(message_id)
    .bind(capped(summary, MAX_SUMMARY_CHARS))
    .bind(&actor.source)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub async fn audit_log(
    pool: &PgPool,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {} FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2",
        page_columns()
    ))
    .bind(before.unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(page_entry_from_row).collect()
}

pub async fn audit_export(
    pool: &PgPool,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {WHOLE_COLUMNS} FROM audit_log WHERE id > $1 ORDER BY id LIMIT $2"
    ))
    .bind(after.unwrap_or(i64::MIN))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(entry_from_row).collect()
}

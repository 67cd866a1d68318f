//! The audit log on SQLite: appended inside the transaction of what it records, read
//! newest first. (The database refuses updates and deletes, by trigger.)

use sqlx::{Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;

use super::rows::ArchiveRow;
use super::sqlite::{from_millis, millis};
use super::{Actor, ArchiveError, AuditEntry};

/// Appends one line to the audit log, inside the transaction of what it records.
pub async fn audit(
    tx: &mut Transaction<'_, Sqlite>,
    actor: &Actor,
    action: &str,
    job_id: Option<i64>,
    message_id: Option<i64>,
    summary: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action, job_id, message_id, summary, source) VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(millis(OffsetDateTime::now_utc()))
    .bind(&actor.name)
    .bind(action)
    .bind(job_id)
    .bind(message_id)
    .bind(summary)
    .bind(&actor.source)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub async fn audit_log(
    pool: &SqlitePool,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(
        "SELECT id, at, actor, action, job_id, message_id, summary, source FROM audit_log \
         WHERE id < ? ORDER BY id DESC LIMIT ?",
    )
    .bind(before.unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(entry_from_row).collect()
}

/// One audit entry, from a row of either backend (the columns are the same).
pub fn entry_from_row<R: ArchiveRow>(row: &R) -> Result<AuditEntry, ArchiveError> {
    Ok(AuditEntry {
        id: row.column("id")?,
        at: from_millis(row.column("at")?),
        actor: row.column("actor")?,
        action: row.column("action")?,
        job_id: row.column::<Option<i64>>("job_id")?.map(|i| i.to_string()),
        message_id: row
            .column::<Option<i64>>("message_id")?
            .map(|i| i.to_string()),
        summary: row.column("summary")?,
        source: row.column("source")?,
    })
}

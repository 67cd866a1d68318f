//! The audit log on PostgreSQL: appended inside the transaction of what it records, read
//! newest first. (The database refuses updates and deletes, by trigger.)

use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;

use super::sqlite::millis;
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
    pool: &PgPool,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(
        "SELECT id, at, actor, action, job_id, message_id, summary, source FROM audit_log \
         WHERE id < $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(before.unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(super::sqlite_audit::entry_from_row)
        .collect()
}

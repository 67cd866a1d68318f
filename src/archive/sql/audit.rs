//! The audit log, the same on both backends: appended inside the transaction of what it
//! records, read newest first in pages of bounded size (long texts cut), or oldest first and
//! whole for the export. (The database refuses updates and deletes, by trigger.)

use async_trait::async_trait;

use super::columns::{page_columns, WHOLE_COLUMNS};
use super::rows::{entry_from_row, page_entry_from_row};
use super::{args, now, Conn, SqlArchive};
use crate::archive::audit_text::{capped, MAX_ACTOR_CHARS, MAX_SUMMARY_CHARS};
use crate::archive::{Actor, ArchiveError, AuditEntry, AuditLog};

/// Appends one line to the audit log, inside the transaction of what it records.
pub async fn audit<'c>(
    conn: impl Into<Conn<'c>>,
    actor: &Actor,
    action: &str,
    job_id: Option<i64>,
    message_id: Option<i64>,
    summary: &str,
) -> Result<(), sqlx::Error> {
    conn.into()
        .execute(
            "INSERT INTO audit_log (at, actor, action, job_id, message_id, summary, source) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![
                now(),
                &*capped(&actor.name, MAX_ACTOR_CHARS),
                action,
                job_id,
                message_id,
                &*capped(summary, MAX_SUMMARY_CHARS),
                actor.source.as_deref(),
            ],
        )
        .await?;
    Ok(())
}

#[async_trait]
impl<T: SqlArchive> AuditLog for T {
    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!(
                    "SELECT {} FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2",
                    page_columns()
                ),
                args![before.unwrap_or(i64::MAX), i64::from(limit)],
            )
            .await?;
        rows.iter().map(page_entry_from_row).collect()
    }

    async fn audit_export(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!(
                    "SELECT {WHOLE_COLUMNS} FROM audit_log WHERE id > $1 ORDER BY id LIMIT $2"
                ),
                args![after.unwrap_or(i64::MIN), i64::from(limit)],
            )
            .await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn record(&self, actor: &Actor, action: &str, summary: &str) -> Result<(), ArchiveError> {
        let mut tx = self.db().begin().await?;
        audit(tx.conn(), actor, action, None, None, summary).await?;
        tx.commit().await?;
        Ok(())
    }
}

//! The audit log on SQLite: appended inside the transaction of what it records, read
//! newest first in pages of bounded size (long texts cut), or oldest first and whole for
//! the export. (The database refuses updates and deletes, by trigger.)

use sqlx::{Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;

use super::rows::ArchiveRow;
use super::sqlite::{from_millis, millis};
use super::{Actor, ArchiveError, AuditEntry};

/// The most of an actor and of a summary an entry keeps (the web caps names and fields well
/// below this; this bounds what any path can append)…
pub const MAX_ACTOR_CHARS: usize = 512;
pub const MAX_SUMMARY_CHARS: usize = 16 * 1024;
/// …and what a page shows of them.
pub const PAGE_ACTOR_CHARS: usize = 200;
pub const PAGE_SUMMARY_CHARS: usize = 2000;

/// At most `max` characters of `text`, marked when cut.
pub fn capped(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]).into(),
        None => text.into(),
    }
}

/// The columns of a page of entries: long texts cut by the database, not after reading.
pub fn page_columns() -> String {
    format!(
        "id, at, action, job_id, message_id, source, \
         substr(actor, 1, {PAGE_ACTOR_CHARS}) AS actor, CAST(length(actor) AS BIGINT) AS actor_len, \
         substr(summary, 1, {PAGE_SUMMARY_CHARS}) AS summary, CAST(length(summary) AS BIGINT) AS summary_len"
    )
}

/// The columns of whole entries.
pub const WHOLE_COLUMNS: &str = "id, at, actor, action, job_id, message_id, summary, source";

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
    pool: &SqlitePool,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {} FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?",
        page_columns()
    ))
    .bind(before.unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(page_entry_from_row).collect()
}

pub async fn audit_export(
    pool: &SqlitePool,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditEntry>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {WHOLE_COLUMNS} FROM audit_log WHERE id > ? ORDER BY id LIMIT ?"
    ))
    .bind(after.unwrap_or(i64::MIN))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(entry_from_row).collect()
}

/// An entry of a page, from a row of either backend: marked when a text was cut.
pub fn page_entry_from_row<R: ArchiveRow>(row: &R) -> Result<AuditEntry, ArchiveError> {
    let mut entry = entry_from_row(row)?;
    let actor_len: i64 = row.column("actor_len")?;
    let summary_len: i64 = row.column("summary_len")?;
    if actor_len > PAGE_ACTOR_CHARS as i64 {
        entry.actor.push('…');
        entry.truncated = true;
    }
    if summary_len > PAGE_SUMMARY_CHARS as i64 {
        entry.summary.push('…');
        entry.truncated = true;
    }
    Ok(entry)
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
        truncated: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_a_character() {
        assert_eq!(capped("abc", 3), "abc");
        assert_eq!(capped("abcd", 3), "abc…");
        assert_eq!(capped("ééé", 2), "éé…");
    }
}

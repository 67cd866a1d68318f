//! The indexer's batch, one algorithm for both backends: the search entries of messages a DLQ
//! consumer appended without them ([`crate::archive::Ingest::append_numbered`]) derived from
//! what is stored, as ingest derives them; then, in one transaction, the batch's ids taken
//! out of `index_pending` and the entries written for those that were still there and whose
//! message still is. On PostgreSQL that transaction begins first and locks the batch's ids
//! (SKIP LOCKED), so several instances' indexers take different batches. A crash before the
//! commit leaves the ids waiting (indexed by the next batch); after it, they are gone: nothing
//! is indexed twice.

use std::collections::HashSet;

use async_trait::async_trait;

use super::columns::{summary_columns, DETAIL_COLUMNS};
use super::derive::{derive_each, incoming, insert_rows};
use super::{args, ArchiveRow, Conn, Dialect, SqlArchive};
use crate::archive::{ArchiveError, Index, IngestRules, SearchText};

#[async_trait]
impl<T: SqlArchive> Index for T {
    async fn index_batch(&self, rules: &IngestRules, limit: u32) -> Result<u64, ArchiveError> {
        let db = self.db();
        let d = db.dialect();
        // PostgreSQL: the batch's ids are locked from here to the commit, so another
        // instance's indexer passes them over (SKIP LOCKED) and takes the next ones, instead
        // of deriving the same batch only for one commit to win. SQLite has one writer and
        // its transactions take the write lock: its transaction begins after the derivation,
        // so that ingest never waits on it.
        let mut held = match d {
            Dialect::Postgres => Some(db.begin().await?),
            Dialect::Sqlite => None,
        };
        let sql = format!(
            "SELECT id FROM index_pending ORDER BY id LIMIT $1{}",
            d.skip_locked()
        );
        let limit_arg = args![i64::from(limit.max(1))];
        let waiting: Vec<i64> = match held.as_mut() {
            Some(tx) => tx.conn().fetch_all(&sql, limit_arg).await?,
            None => db.fetch_all(&sql, limit_arg).await?,
        }
        .iter()
        .map(|row| row.column("id"))
        .collect::<Result<_, _>>()?;
        if waiting.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "SELECT {}, {DETAIL_COLUMNS} FROM messages WHERE {} ORDER BY id",
            summary_columns(db.dialect()),
            db.dialect().in_ids("id", 1)
        );
        let rows = db.fetch_all(&sql, args![&waiting[..]]).await?;
        let rules = rules.clone();
        let mut entries: Vec<Entry> = derive_each(self, &rows, move |message, body| {
            let id = message.summary.id;
            let (fields, text) =
                crate::archive::record::searchable(&incoming(message, body), &rules);
            Some(Entry { id, text, fields })
        })
        .await?;
        let mut tx = match held {
            Some(tx) => tx,
            None => db.begin().await?,
        };
        let mut conn = tx.conn();
        let taken = take_waiting(&mut conn, &waiting).await?;
        if taken.len() < waiting.len() {
            // Derived in vain: another indexer took them first (one of an older version on
            // the same database, which does not lock them), or a purge deleted them.
            tracing::info!(
                derived = waiting.len(),
                taken = taken.len(),
                "part of an index batch was taken first by another indexer or a purge"
            );
        }
        // Only ids still waiting (another indexer may have taken some) of messages still
        // archived (a purge may have deleted some meanwhile).
        let live = still_archived(&mut conn, &taken).await?;
        entries.retain(|e| live.contains(&e.id));
        let texts: Vec<(i64, SearchText)> = entries
            .iter_mut()
            .map(|e| (e.id, std::mem::take(&mut e.text)))
            .collect();
        self.write_search(&mut conn, &texts).await?;
        write_fields(&mut conn, &entries).await?;
        tx.commit().await?;
        Ok(taken.len() as u64)
    }
}

/// A message's search entries, as ingest derives them.
struct Entry {
    id: i64,
    text: SearchText,
    fields: Vec<(String, String)>,
}

/// Deletes `ids` from `index_pending`: those that were there.
async fn take_waiting(conn: &mut Conn<'_>, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    ids_of(conn, "DELETE FROM index_pending WHERE", "RETURNING id", ids).await
}

/// Which of `ids` are archived.
async fn still_archived(conn: &mut Conn<'_>, ids: &[i64]) -> Result<HashSet<i64>, sqlx::Error> {
    let found = ids_of(conn, "SELECT id FROM messages WHERE", "", ids).await?;
    Ok(found.into_iter().collect())
}

/// The ids `{head} id IN (ids) {tail}` returns.
async fn ids_of(
    conn: &mut Conn<'_>,
    head: &str,
    tail: &str,
    ids: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!("{head} {} {tail}", conn.dialect().in_ids("id", 1));
    conn.fetch_all(&sql, args![ids])
        .await?
        .iter()
        .map(|row| row.column("id"))
        .collect()
}

/// The business field values of `entries` and their keys (`field:value`), as ingest writes
/// them; one already there is left as it is.
async fn write_fields(conn: &mut Conn<'_>, entries: &[Entry]) -> Result<(), sqlx::Error> {
    let fields: Vec<(i64, &str, &str)> = entries
        .iter()
        .flat_map(|e| e.fields.iter().map(|(n, v)| (e.id, n.as_str(), v.as_str())))
        .collect();
    let keys: Vec<(i64, &str, String)> = entries
        .iter()
        .flat_map(|e| {
            crate::archive::record::field_keys(&e.fields)
                .into_iter()
                .map(|(n, k)| (e.id, n, k))
        })
        .collect();
    let keys: Vec<(i64, &str, &str)> = keys
        .iter()
        .map(|(id, n, k)| (*id, *n, k.as_str()))
        .collect();
    insert_rows(conn, "message_fields (message_id, name, value)", &fields).await?;
    insert_rows(conn, "message_field_keys (message_id, name, folded)", &keys).await
}

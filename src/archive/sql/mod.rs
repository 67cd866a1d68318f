//! What both backends share: the time columns, row readers, column lists, the filter
//! builder, overview arithmetic, and a handle ([`Pool`], [`Tx`], [`Conn`]) that runs the
//! statements both backends run as they are. The capabilities whose SQL is the same on both
//! (accounts, the audit log, single replays, replay jobs and their runner's steps) are
//! implemented here, once, for every [`SqlArchive`]; ingest, reads and search, bulk actions
//! and the instance name live in `sqlite/` and `postgres/`.

mod accounts;
mod audit;
pub mod bodies;
mod carry;
pub mod columns;
mod db;
mod derive;
mod export;
pub mod filter;
mod group_notes;
mod groups;
mod import;
mod index;
mod jobs;
mod lease;
pub mod lifecycle;
mod messages;
mod notices;
pub mod overview;
mod regroup;
mod reindex;
mod replays;
pub mod retention;
pub mod rows;
mod statistics;

use time::OffsetDateTime;

pub use audit::audit;
pub(crate) use db::args;
pub use db::{Arg, Conn, Dialect, Pool, Row};
pub use jobs::recount;
pub use messages::page_of;
pub use rows::ArchiveRow;

use super::{ArchiveError, JobSpec, ReplayEdit, SearchText, Selection};

/// A row found by its fingerprint: (id, queue, fingerprint).
pub type ArchivedRow = (i64, String, [u8; 32]);

/// A backend, for the capabilities this module implements once for both: its pool, and what
/// only it knows how to do (find the messages of a selection: the search engines differ).
#[async_trait::async_trait]
pub trait SqlArchive: Send + Sync {
    /// Its pool (for requests, or for the background work, as this archive was opened).
    fn db(&self) -> Pool<'_>;

    /// Replaces the search index entries of the given messages, inside the transaction `conn`
    /// is in; a message deleted meanwhile gets none.
    async fn rewrite_search(
        &self,
        conn: &mut Conn<'_>,
        entries: &[(i64, SearchText)],
    ) -> Result<(), sqlx::Error>;

    /// Writes the search index entries of messages that have none yet — the indexer's, whose
    /// ids left `index_pending` in this transaction — inside the transaction `conn` is in; as
    /// [`SqlArchive::rewrite_search`], without looking for entries to replace.
    async fn write_search(
        &self,
        conn: &mut Conn<'_>,
        entries: &[(i64, SearchText)],
    ) -> Result<(), sqlx::Error> {
        self.rewrite_search(conn, entries).await
    }

    /// The rows archived with these fingerprints, each given with its message's
    /// [`fingerprint_time`](crate::archive::fingerprint_time), as (id, queue, fingerprint) in
    /// id order: through the backend's fingerprint indexes, as ingest looks a possible copy
    /// up (`lazarus import` finds what is archived already so).
    async fn archived_rows(
        &self,
        keys: &[([u8; 32], Option<i64>)],
    ) -> Result<Vec<ArchivedRow>, sqlx::Error>;

    /// Deletes these messages for good — bodies, search entries, replay records, totals —
    /// except those an unfinished job holds, inside the transaction `conn` is in, as a purge
    /// does; how many went, and their body bytes.
    async fn delete_messages(
        &self,
        conn: &mut Conn<'_>,
        ids: &[i64],
    ) -> Result<(u64, i64), sqlx::Error>;

    /// Up to `limit` ids of the selected messages above `after`, in id order (the search
    /// engines differ).
    async fn selected_ids(
        &self,
        selection: &Selection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<i64>, sqlx::Error>;

    /// `len` bytes of message `id`'s body from byte `offset` (fewer at its end), `None` when
    /// it has none: those of its first piece ([`SqlArchive::read_head_part`]), then those of
    /// the others ([`bodies`]).
    async fn read_body_part(
        &self,
        id: i64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, sqlx::Error> {
        let Some(mut part) = self.read_head_part(id, offset, len).await? else {
            return Ok(None);
        };
        if part.len() < len {
            let from = offset + part.len() as u64;
            let rest = bodies::read_rest(self.db(), id, from, len - part.len()).await?;
            part.extend_from_slice(&rest);
        }
        Ok(Some(part))
    }

    /// `len` bytes of message `id`'s first piece of body (in `message_bodies`: the whole of a
    /// body archived before pieces) from byte `offset`, fewer at its end; `None` when it has
    /// none. By default `substr()`, which PostgreSQL slices out of the stored value; SQLite's
    /// loads the whole value to cut it, so its archive reads the file's blob.
    async fn read_head_part(
        &self,
        id: i64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, sqlx::Error> {
        body_part_by_sql(self.db(), id, offset, len).await
    }

    /// Inserts job `id`'s items, inside the transaction `conn` is in: the messages of the
    /// spec's selection, with the spec's target or each message's own; how many.
    async fn freeze_selection(
        &self,
        conn: &mut Conn<'_>,
        id: i64,
        spec: &JobSpec<'_>,
    ) -> Result<u64, sqlx::Error>;
}

/// [`SqlArchive::read_head_part`] with `substr()` (1-based, in bytes on both backends).
pub async fn body_part_by_sql(
    db: Pool<'_>,
    id: i64,
    offset: u64,
    len: usize,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let row = db
        .fetch_optional(
            "SELECT substr(body, CAST($2 AS INTEGER), CAST($3 AS INTEGER)) AS part \
             FROM message_bodies WHERE message_id = $1",
            args![id, offset as i64 + 1, len as i64],
        )
        .await?;
    row.map(|row| row.column("part")).transpose()
}

/// Milliseconds since the Unix epoch: how every time column is stored.
pub fn millis(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

pub fn from_millis(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// Now, as a time column.
pub fn now() -> i64 {
    millis(OffsetDateTime::now_utc())
}

/// The error of a stored record `id` whose JSON does not read back.
pub fn corrupt(id: i64) -> impl Fn(serde_json::Error) -> ArchiveError {
    move |e| ArchiveError::Corrupt {
        id,
        reason: e.to_string(),
    }
}

/// The edited headers of a replay, as stored beside its record.
pub fn edited_headers(
    message_id: i64,
    edit: Option<&ReplayEdit>,
) -> Result<Option<String>, ArchiveError> {
    edit.and_then(|e| e.headers.as_ref())
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| ArchiveError::Corrupt {
            id: message_id,
            reason: e.to_string(),
        })
}

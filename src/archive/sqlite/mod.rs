//! The SQLite archive: WAL with `synchronous=FULL`, so a committed batch survives power loss.
//! What only SQLite does is here (opening, ingest, search, dismiss and purge, the instance
//! name); what both backends do the same way is in `sql/`.

mod actions;
mod blobs;
mod file;
mod ingest;
mod messages;
mod terms;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};

use super::sql::columns::HELD_BY_UNFINISHED_JOB;
use super::sql::filter::{push_freeze, GroupParts};
use super::sql::{args, Conn, Pool, SqlArchive};
use super::{ArchiveError, InstanceLock, JobSpec, NameLock, SearchText, Selection};

/// WAL pages (4 KiB) after which a commit checkpoints the WAL into the database file.
const WAL_CHECKPOINT_PAGES: u64 = 16_384;

#[derive(Debug, Clone)]
pub struct SqliteArchive {
    pool: SqlitePool,
    /// Where bodies are read a piece at a time (none for an in-memory database).
    blobs: Option<blobs::Blobs>,
}

impl SqliteArchive {
    pub async fn open(url: &str) -> Result<Self, ArchiveError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL syncs the WAL on every commit: an acked message is on disk.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true)
            // Checkpoint the WAL into the file every 64 MiB of WAL, not SQLite's 4 MiB: a
            // page ingest rewrites batch after batch (index interiors, counts, search terms)
            // is copied once per checkpoint, so fewer, larger ones cost less in all (ingest
            // +~12 %, docs/lab-notebook.md). The file left after one is cut back to that size.
            .pragma("wal_autocheckpoint", WAL_CHECKPOINT_PAGES.to_string())
            .pragma(
                "journal_size_limit",
                (WAL_CHECKPOINT_PAGES * 4096).to_string(),
            );
        // Every body is in these files: the owner's alone, before SQLite first writes them.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let file = (!in_memory).then(|| options.get_filename().to_path_buf());
        // Space freed by retention is given back in small steps (`reclaim_space`): set on a
        // new, empty file only, where it takes effect (an older archive is converted by
        // `VACUUM`, docs/retention.md). On an existing one the pragma would be a write on every new
        // connection, failing while another writer holds the database or the disk is full.
        let fresh = file
            .as_ref()
            .is_some_and(|f| std::fs::metadata(f).map_or(true, |m| m.len() == 0));
        if let Some(file) = &file {
            file::make_private(file).map_err(sqlx::Error::Io)?;
        }
        if fresh {
            // One connection sets it before WAL mode writes the file's first page.
            use sqlx::{ConnectOptions, Connection};
            let first = options
                .clone()
                .auto_vacuum(SqliteAutoVacuum::Incremental)
                .connect()
                .await?;
            first.close().await?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .after_release(|conn, _| Box::pin(release_only_if_idle(conn)))
            .connect_with(options)
            .await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        if let Some(file) = &file {
            file::make_private(file).map_err(sqlx::Error::Io)?;
        }
        let blobs = file.map(|file| blobs::Blobs { file });
        Ok(SqliteArchive { pool, blobs })
    }

    /// The pool, for tests and tools that inspect the file directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Whether a connection given back to the pool may be used again: not if it is still in a
/// transaction. When a write fails with `database or disk is full` (or an I/O error), SQLite
/// may roll the whole transaction back by itself; the ROLLBACK that sqlx then sends for the
/// dropped transaction fails ("no transaction is active"), sqlx's count of open transactions
/// on the connection stays at one, and every later `BEGIN` on it fails ("attempted to call
/// begin_with at non-zero transaction depth") until the process restarts. Closing such a
/// connection (which also ends any transaction SQLite did keep) lets every write path recover
/// as soon as the disk has room again.
async fn release_only_if_idle(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    // The connection's worker runs commands in order: once the ping returns, the rollback a
    // dropped transaction queued has been tried.
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}

#[async_trait]
impl SqlArchive for SqliteArchive {
    fn db(&self) -> Pool<'_> {
        Pool::Sqlite(&self.pool)
    }

    async fn read_head_part(
        &self,
        id: i64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, sqlx::Error> {
        let Some(blobs) = self.blobs.clone() else {
            return super::sql::body_part_by_sql(self.db(), id, offset, len).await;
        };
        tokio::task::spawn_blocking(move || blobs.read(id, offset, len))
            .await
            .map_err(|e| sqlx::Error::Io(std::io::Error::other(e)))?
            .map_err(|e| sqlx::Error::Io(std::io::Error::other(e)))
    }

    async fn rewrite_search(
        &self,
        conn: &mut Conn<'_>,
        entries: &[(i64, SearchText)],
    ) -> Result<(), sqlx::Error> {
        let mut terms = terms::Terms::default();
        for (id, text) in entries {
            conn.execute("DELETE FROM messages_fts WHERE rowid = $1", args![*id])
                .await?;
            conn.execute(
                "INSERT INTO messages_fts (rowid, body, ids, headers) \
                 SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM messages WHERE id = $1)",
                args![*id, &text.body, &text.ids, &text.headers],
            )
            .await?;
            terms.add(text);
        }
        let Conn::Sqlite(conn) = conn else {
            unreachable!("a SQLite archive's transactions are SQLite's")
        };
        terms.save(conn).await
    }

    /// Multi-row inserts of a few fixed sizes, as ingest writes a batch's entries.
    async fn write_search(
        &self,
        conn: &mut Conn<'_>,
        entries: &[(i64, SearchText)],
    ) -> Result<(), sqlx::Error> {
        let Conn::Sqlite(conn) = conn else {
            unreachable!("a SQLite archive's transactions are SQLite's")
        };
        let mut terms = terms::Terms::default();
        let rows: Vec<(i64, &SearchText)> = entries
            .iter()
            .map(|(id, text)| {
                terms.add(text);
                (*id, text)
            })
            .collect();
        ingest::insert_fts(conn, &rows).await?;
        terms.save(conn).await
    }

    async fn selected_ids(
        &self,
        selection: &Selection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let group = GroupParts::of_selection(&mut Conn::Sqlite(&mut conn), selection).await?;
        let mut q = QueryBuilder::<Sqlite>::new("SELECT messages.id");
        messages::push_selection(&mut q, selection, group.as_ref());
        q.push(" AND messages.id > ")
            .push_bind(after)
            .push(" ORDER BY messages.id LIMIT ")
            .push_bind(i64::from(limit));
        q.build_query_scalar().fetch_all(&mut *conn).await
    }

    async fn archived_rows(
        &self,
        keys: &[([u8; 32], Option<i64>)],
    ) -> Result<Vec<super::sql::ArchivedRow>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        ingest::archived_rows(&mut conn, keys).await
    }

    async fn delete_messages(
        &self,
        conn: &mut Conn<'_>,
        ids: &[i64],
    ) -> Result<(u64, i64), sqlx::Error> {
        let Conn::Sqlite(conn) = conn else {
            unreachable!("a SQLite archive's transactions are SQLite's")
        };
        actions::clear_purge_ids(conn).await?;
        sqlx::query(&format!(
            "INSERT INTO purge_ids SELECT id FROM messages \
             WHERE id IN (SELECT value FROM json_each(?)) AND NOT {HELD_BY_UNFINISHED_JOB}"
        ))
        .bind(serde_json::to_string(ids).unwrap_or_else(|_| "[]".into()))
        .execute(&mut **conn)
        .await?;
        actions::delete_purge_ids(conn).await
    }

    async fn freeze_selection(
        &self,
        conn: &mut Conn<'_>,
        id: i64,
        spec: &JobSpec<'_>,
    ) -> Result<u64, sqlx::Error> {
        let Conn::Sqlite(conn) = conn else {
            unreachable!("a SQLite archive's transactions are SQLite's")
        };
        let group = GroupParts::of_selection(&mut Conn::Sqlite(conn), spec.selection).await?;
        let mut q = QueryBuilder::<Sqlite>::new("");
        push_freeze(&mut q, id, spec);
        messages::push_selection(&mut q, spec.selection, group.as_ref());
        Ok(q.build().execute(&mut **conn).await?.rows_affected())
    }
}

/// Takes the exclusive lock on `path` (created when missing) and writes who holds it; `None`
/// when another process holds it.
fn lock_file(path: &std::path::Path, name: &str) -> std::io::Result<Option<NameLock>> {
    use std::io::{Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    // For whoever looks: the name and the process that holds it.
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{name}\npid {}", std::process::id())?;
    Ok(Some(NameLock::File(file)))
}

#[async_trait]
impl InstanceLock for SqliteArchive {
    /// Takes the instance name `name` for this process, if no other live process holds it
    /// (`Ok(None)` when one does), for as long as the returned lock lasts.
    async fn lock_instance_name(&self, name: &str) -> Result<Option<NameLock>, ArchiveError> {
        let options = self.pool.connect_options();
        let archive = options.get_filename();
        if archive.as_os_str().is_empty() || archive.as_os_str() == ":memory:" {
            return Ok(Some(NameLock::Private));
        }
        let mut path = archive.as_os_str().to_owned();
        path.push(".instance.lock");
        let path = std::path::PathBuf::from(path);
        lock_file(&path, name).map_err(|source| ArchiveError::InstanceLock {
            path: path.display().to_string(),
            source,
        })
    }
}

//! The archive: what it can do (`store`, one trait per capability), the records it stores and
//! returns (`model`, `record`, `failure`, `groups`, `jobs`, `accounts`), and its two backends (`sqlite`,
//! `postgres`, with what they share in `sql`), chosen from the database URL here.

mod accounts;
pub mod admit;
mod audit_text;
mod copies;
mod exported;
mod failure;
mod group_notes;
mod groups;
mod jobs;
mod model;
mod postgres;
mod record;
pub mod selection;
mod sql;
mod sqlite;
mod store;

use std::sync::Arc;

pub use accounts::{Actor, Grant, Grants, Rights, Role, TokenRecord, TokenSpec, UserRecord};
pub(crate) use copies::{copy_keys, counted, without_copies, ArchivedCopies};
pub use exported::{read_unread_body, ExportLine};
pub use failure::{failure, Failure, Framework, TRACE_HEADERS, TYPE_HEADERS};
pub use group_notes::{GroupMinute, GroupNote, GroupNoteChange, GroupStatus};
pub use groups::{FailureGroup, GroupBy, GroupKey, GroupQuery};
pub use jobs::{
    AuditEntry, Canary, ChunkLimit, CopyCounts, ItemOutcome, JobAction, JobCounts, JobItem,
    JobSpec, JobState, JobStep, OutgoingBody, OutgoingMessage, Plan, ReplayEdit, ReplayJob,
    Selection, TargetCount,
};
pub use model::*;
pub use postgres::PostgresArchive;
pub use record::{
    error_description, extract_fields, fingerprint, fingerprint_time, stream_positions,
    BusinessField, IncomingMessage, IngestRules, PreparedMessage, SearchText,
    DEFAULT_ERROR_HEADERS,
};
pub use sqlite::SqliteArchive;
pub use store::{
    Accounts, Actions, Archive, AuditLog, Carry, Console, Export, GroupNotes, Import, Index,
    Ingest, InstanceLock, JobLease, JobStore, MessageSearch, MessageStore, Noted, Notices,
    Numbering, Reindex, ReindexProgress, ReplayLog, Retention, RetentionLog, Space, Upkeep,
};

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("stored record {id} is unreadable: {reason}")]
    Corrupt { id: i64, reason: String },
    #[error("unsupported database URL {0:?}: use sqlite://path or postgres://user@host/database")]
    UnsupportedUrl(String),
    #[error("no replay job with id {0}")]
    UnknownJob(i64),
    /// The action does not fit the current state (resume a completed job, ...).
    #[error("{0}")]
    Conflict(String),
    #[error("the instance lock file {path}: {source}")]
    InstanceLock {
        path: String,
        source: std::io::Error,
    },
}

impl ArchiveError {
    /// Whether the database could not be reached or could not do the work just now (a lost
    /// connection, a full pool, a lock held too long, a full disk, a server shutting down):
    /// the caller may try again. Any other database error is a fault in the statement (a
    /// query the database refuses) and must not read as "unavailable".
    pub fn is_unavailable(&self) -> bool {
        let ArchiveError::Database(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                match db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                    Some(_) => unavailable_sqlstate(&code),
                    None => code.parse().is_ok_and(unavailable_sqlite_code),
                }
            }
            _ => false,
        }
    }
}

/// SQLite result codes (the primary code is the low byte) that say the file cannot serve now:
/// BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL.
fn unavailable_sqlite_code(code: i64) -> bool {
    matches!(code & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14 | 15)
}

/// PostgreSQL SQLSTATEs that say the server cannot serve now: connection exceptions,
/// insufficient resources, operator intervention (shutdown, a statement timeout), system
/// errors; a serialization failure or deadlock; a lock not available; a read-only
/// transaction (a standby); a table that is not there yet.
fn unavailable_sqlstate(code: &str) -> bool {
    matches!(code.get(..2), Some("08" | "53" | "57" | "58"))
        || matches!(code, "40001" | "40P01" | "55P03" | "25006")
        // An undefined table: the archive is not migrated yet (a server that came up after
        // Lazarus started, before its migrations ran).
        || code == "42P01"
}

/// Proof that no other live process goes by an instance name, while it lasts.
#[derive(Debug)]
pub enum NameLock {
    /// An exclusive lock on a file beside the SQLite archive (`<archive>.instance.lock`),
    /// held until the process ends. One `lazarus serve` runs per SQLite archive.
    File(std::fs::File),
    /// A session-level advisory lock of PostgreSQL, on a connection of its own: held while
    /// that session lives, and freed by the server when the process dies.
    Session(sqlx::PgConnection),
    /// An archive no other process can open (SQLite in memory).
    Private,
}

impl NameLock {
    /// Whether the lock is still held: a PostgreSQL session can end under it (a restart, a
    /// failover, a cut connection), and then another process may take the name.
    pub async fn held(&mut self) -> bool {
        use sqlx::Connection;
        match self {
            NameLock::Session(conn) => {
                matches!(
                    tokio::time::timeout(std::time::Duration::from_secs(5), conn.ping()).await,
                    Ok(Ok(()))
                )
            }
            NameLock::File(_) | NameLock::Private => true,
        }
    }
}

/// The archive as `lazarus serve` uses it: one database, reached two ways.
#[derive(Clone)]
pub struct ServedArchive {
    /// For the consumers and the replay job runner, which wait for the database (up to the
    /// pool's 5 s per attempt) and retry while it is away, holding what they have.
    pub background: Arc<dyn Archive>,
    /// For HTTP requests: on PostgreSQL a pool of its own that gives up on a database it
    /// cannot reach within [`PostgresArchive::REQUEST_ACQUIRE_TIMEOUT`], so that `/readyz`, pages
    /// and `/metrics` answer within a second while it is down, and a burst of page requests
    /// never takes ingest's connections. SQLite, a local file, is one pool for both.
    pub requests: Arc<dyn Archive>,
    /// The PostgreSQL URL whose database could not be created or migrated at start-up (the
    /// server did not answer): [`ServedArchive::prepare`] does it once it answers.
    unprepared: Option<String>,
}

impl ServedArchive {
    /// Whether the database still has to be created or migrated.
    pub fn is_prepared(&self) -> bool {
        self.unprepared.is_none()
    }

    /// Gets the archive ready to store: creates and migrates the database if start-up could
    /// not (a no-op otherwise, and when done already), then checks it takes a write as a
    /// batch makes one ([`Ingest::writable`]).
    pub async fn prepare(&self) -> Result<(), ArchiveError> {
        if let Some(url) = &self.unprepared {
            PostgresArchive::prepare(url).await?;
        }
        self.background.writable().await
    }
}

/// Opens (and migrates) the archive the URL names, for [`ServedArchive`]'s two uses. A
/// PostgreSQL server that does not answer is no error: the archive is served unprepared
/// (requests answer "unavailable" until it answers) and [`ServedArchive::prepare`] creates
/// and migrates it later, so a supervisor has no reason to restart Lazarus in a loop.
pub async fn open_served(database_url: &str) -> Result<ServedArchive, ArchiveError> {
    if is_postgres(database_url) {
        let unprepared = match PostgresArchive::prepare(database_url).await {
            Ok(()) => None,
            Err(e) if e.is_unavailable() => {
                tracing::warn!(
                    error = %e,
                    "PostgreSQL does not answer: serving, and consuming nothing until it does"
                );
                Some(database_url.to_owned())
            }
            Err(e) => return Err(e),
        };
        let background = PostgresArchive::unprepared(database_url)?;
        let requests = background.for_requests();
        return Ok(ServedArchive {
            background: Arc::new(background),
            requests: Arc::new(requests),
            unprepared,
        });
    }
    let archive = open(database_url).await?;
    Ok(ServedArchive {
        background: archive.clone(),
        requests: archive,
        unprepared: None,
    })
}

fn is_postgres(database_url: &str) -> bool {
    database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")
}

/// Opens (and migrates) the archive the URL names.
pub async fn open(database_url: &str) -> Result<Arc<dyn Archive>, ArchiveError> {
    if database_url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteArchive::open(database_url).await?))
    } else if is_postgres(database_url) {
        Ok(Arc::new(PostgresArchive::open(database_url).await?))
    } else {
        Err(ArchiveError::UnsupportedUrl(
            crate::support::secret_url::redact_url(database_url),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_statement_is_a_fault_and_a_lost_database_is_unavailable() {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::query("CREATE VIRTUAL TABLE t USING fts5 (x)")
            .execute(&mut conn)
            .await
            .unwrap();
        // The query of the SQLite list search that once answered "unavailable".
        let refused = sqlx::query("SELECT * FROM t WHERE t MATCH '(\"a\" OR \"b\") \"c\"'")
            .execute(&mut conn)
            .await
            .unwrap_err();
        assert!(!ArchiveError::Database(refused).is_unavailable());
        let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(ArchiveError::Database(sqlx::Error::Io(lost)).is_unavailable());
        assert!(ArchiveError::Database(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(!ArchiveError::UnknownJob(1).is_unavailable());
        for code in [5, 517, 13, 778] {
            assert!(unavailable_sqlite_code(code), "{code}");
        }
        for code in [1, 19, 2067, 787] {
            assert!(!unavailable_sqlite_code(code), "{code}");
        }
        for code in ["08006", "57P01", "57014", "53100", "40001"] {
            assert!(unavailable_sqlstate(code), "{code}");
        }
        for code in ["42601", "22021", "23505", "42703"] {
            assert!(!unavailable_sqlstate(code), "{code}");
        }
    }
}

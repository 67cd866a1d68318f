//! The archive: what it can do (`store`, one trait per capability), the records it stores and
//! returns (`model`, `record`, `jobs`, `accounts`), and its two backends (`sqlite`,
//! `postgres`, with what they share in `sql`), chosen from the database URL here.

mod accounts;
pub mod admit;
mod audit_text;
mod copies;
mod jobs;
mod model;
mod postgres;
mod record;
mod sql;
mod sqlite;
mod store;

use std::sync::Arc;

pub use accounts::{Actor, Role, TokenRecord, TokenSpec, UserRecord};
pub(crate) use copies::{without_copies, ArchivedCopies};
pub use jobs::{
    AuditEntry, Canary, ChunkLimit, ItemOutcome, JobAction, JobCounts, JobItem, JobSpec, JobState,
    JobStep, OutgoingMessage, Plan, ReplayEdit, ReplayJob, Selection, TargetCount,
};
pub use model::*;
pub use postgres::PostgresArchive;
pub use record::{
    error_description, extract_fields, fingerprint, stream_positions, BusinessField,
    IncomingMessage, IngestRules, PreparedMessage, SearchText, DEFAULT_ERROR_HEADERS,
};
pub use sqlite::SqliteArchive;
pub use store::{
    Accounts, Actions, Archive, AuditLog, Carry, Console, Export, Import, Ingest, InstanceLock,
    JobLease, JobStore, MessageSearch, MessageStore, Noted, Notices, Numbering, Reindex,
    ReindexProgress, ReplayLog, Retention, RetentionLog, Upkeep,
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
}

/// Opens (and migrates) the archive the URL names, for [`ServedArchive`]'s two uses.
pub async fn open_served(database_url: &str) -> Result<ServedArchive, ArchiveError> {
    if is_postgres(database_url) {
        let background = PostgresArchive::open(database_url).await?;
        let requests = background.for_requests();
        return Ok(ServedArchive {
            background: Arc::new(background),
            requests: Arc::new(requests),
        });
    }
    let archive = open(database_url).await?;
    Ok(ServedArchive {
        background: archive.clone(),
        requests: archive,
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
        Err(ArchiveError::UnsupportedUrl(crate::config::redact_url(
            database_url,
        )))
    }
}

//! The archive: the [`Archive`] trait every backend implements, the records it stores and
//! returns, list filters and keyset pages. The backend is chosen from the database URL.

mod accounts;
mod jobs;
mod postgres;
mod postgres_accounts;
mod postgres_actions;
mod postgres_audit;
mod postgres_jobs;
mod postgres_search;
mod record;
mod rows;
mod sqlite;
mod sqlite_accounts;
mod sqlite_actions;
mod sqlite_audit;
mod sqlite_file;
mod sqlite_jobs;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amqp::headers::{MessageProperties, Table};
use crate::death::{DeathRecord, FirstDeath, ReplayTarget};

pub use accounts::{Actor, Role, TokenRecord, TokenSpec, UserRecord};
pub use jobs::{
    AuditEntry, Canary, ChunkLimit, ItemOutcome, JobAction, JobCounts, JobItem, JobSpec, JobState,
    JobStep, OutgoingMessage, Plan, ReplayEdit, ReplayJob, Selection, TargetCount,
};
pub use postgres::PostgresArchive;
pub use record::{
    error_description, extract_fields, fingerprint, stream_positions, BusinessField,
    IncomingMessage, IngestRules, PreparedMessage, SearchText, DEFAULT_ERROR_HEADERS,
};
pub use sqlite::SqliteArchive;

/// The reason under which messages without death history are counted and filtered.
pub const NO_REASON: &str = "none";

/// Largest page the list API returns, whatever `limit` asks for.
pub const MAX_PAGE_SIZE: u32 = 500;
/// Page size when `limit` is not given.
pub const DEFAULT_PAGE_SIZE: u32 = 50;

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

/// What became of one stored batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StoreOutcome {
    pub inserted: u64,
    /// Redeliveries of messages already archived (a crash or reconnect before the ack, a
    /// broker crash after it).
    pub duplicates: u64,
}

/// Rows archived from a queue with a fingerprint: `(queue, fingerprint) → rows`, for the
/// messages of a batch that may be copies of archived ones.
pub(crate) type ArchivedCopies = HashMap<(String, [u8; 32]), i64>;

/// The messages of a batch to store: all but the redeliveries (and retries, see
/// [`PreparedMessage::may_be_archived`]) that are copies of archived rows, each archived row
/// standing for one such copy in the batch; and how many were left out (pure).
pub(crate) fn without_copies(
    batch: &[PreparedMessage],
    mut archived: ArchivedCopies,
) -> (Vec<&PreparedMessage>, u64) {
    let mut duplicates = 0;
    let fresh = batch
        .iter()
        .filter(|m| {
            if !m.may_be_archived() {
                return true;
            }
            match archived.get_mut(&(m.message.queue.clone(), m.fingerprint)) {
                Some(rows) if *rows > 0 => {
                    *rows -= 1;
                    duplicates += 1;
                    false
                }
                _ => true,
            }
        })
        .collect();
    (fresh, duplicates)
}

/// What has happened to an archived message since it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Archived,
    Replayed,
    ReplayFailed,
    Dismissed,
}

impl MessageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Archived => "archived",
            MessageStatus::Replayed => "replayed",
            MessageStatus::ReplayFailed => "replay_failed",
            MessageStatus::Dismissed => "dismissed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Archived,
            Self::Replayed,
            Self::ReplayFailed,
            Self::Dismissed,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
    }
}

/// One archived message as the list shows it (the API's `MessageSummary`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageSummary {
    #[serde(serialize_with = "id_as_string")]
    pub id: i64,
    pub queue: String,
    #[serde(with = "time::serde::rfc3339")]
    pub archived_at: OffsetDateTime,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub body_size: i64,
    pub first_death: Option<FirstDeath>,
    pub deaths: Vec<DeathRecord>,
    pub replay_target: Option<ReplayTarget>,
    pub status: MessageStatus,
    /// Business field values (`--field`), by name.
    pub fields: BTreeMap<String, String>,
}

pub fn id_as_string<S: serde::Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

/// One archived message with everything needed to show or replay it, except the body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArchivedMessage {
    #[serde(flatten)]
    pub summary: MessageSummary,
    /// The exchange and routing key it was delivered into the DLQ with.
    pub delivered_exchange: String,
    pub delivered_routing_key: String,
    pub redelivered: bool,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    /// What could not be decoded from the death headers (empty when all was well).
    pub death_problems: Vec<String>,
    /// The note left when it was dismissed.
    pub status_note: Option<String>,
}

/// The stored body bytes and what the message said about them.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBody {
    pub bytes: Vec<u8>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
}

/// Filters of the message list; every field narrows the result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageFilter {
    /// The DLQ it was archived from.
    pub queue: Option<String>,
    /// The reason of its first death ([`NO_REASON`] for messages without history).
    pub reason: Option<String>,
    /// The queue of its first death (the DLQ for messages without history).
    pub first_death_queue: Option<String>,
    /// The error description its failing consumer left (`""`: none).
    pub error: Option<String>,
    /// The exchange of its first death (its replay target exchange).
    pub exchange: Option<String>,
    /// The routing key of its replay target.
    pub routing_key: Option<String>,
    pub status: Option<MessageStatus>,
    pub content_type: Option<String>,
    /// Words and phrases to find, as an FTS5 query built by [`crate::search::Search::fts_query`].
    pub text: Option<String>,
    /// `field:value` terms of a search (built-in or business fields), all required.
    pub terms: Vec<crate::search::FieldTerm>,
    /// Archived at or after.
    pub since: Option<OffsetDateTime>,
    /// Archived before.
    pub until: Option<OffsetDateTime>,
}

impl MessageFilter {
    /// Every `field = value` condition, from the filter's own fields and the search terms,
    /// with the names of empty values (`(AMQP default)`, ...) resolved.
    pub fn conditions(&self) -> Vec<(&str, &str)> {
        let named = [
            ("queue", &self.queue),
            ("reason", &self.reason),
            ("first_death_queue", &self.first_death_queue),
            ("error", &self.error),
            ("exchange", &self.exchange),
            ("routing_key", &self.routing_key),
            ("content_type", &self.content_type),
        ];
        let mut out: Vec<(&str, &str)> = named
            .into_iter()
            .filter_map(|(field, v)| v.as_deref().map(|v| (field, v)))
            .collect();
        if let Some(status) = self.status {
            out.push(("status", status.as_str()));
        }
        out.extend(
            self.terms
                .iter()
                .map(|t| (t.field.as_str(), t.value.as_str())),
        );
        // The names of empty values resolve here, once, for every backend.
        for (field, value) in &mut out {
            if matches!(*field, "exchange" | "routing_key" | "error") {
                *value = filter_value(value);
            }
        }
        out
    }
}

/// How filters name the empty values they can select: the default exchange, the empty
/// routing key and "no error given" (an empty filter value means no filter at all).
pub const EMPTY_NAMES: [&str; 3] = [DEFAULT_EXCHANGE, EMPTY_KEY, NO_ERROR];
/// The default exchange, as RabbitMQ's management UI names it.
pub const DEFAULT_EXCHANGE: &str = "(AMQP default)";
pub const EMPTY_KEY: &str = "(empty)";
pub const NO_ERROR: &str = "(none)";

/// The value a filter compares with: a name of an empty value becomes that empty value.
pub fn filter_value(value: &str) -> &str {
    if EMPTY_NAMES.contains(&value) {
        ""
    } else {
        value
    }
}

/// Newest first; `before` is the cursor (an id) the previous page ended at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: u32,
    pub before: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessagePage {
    pub messages: Vec<MessageSummary>,
    /// Pass back as `cursor` for the next (older) page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Archived messages for one DLQ and first-death reason (`none` without death history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueReasonCount {
    pub queue: String,
    pub reason: String,
    pub messages: i64,
    pub oldest: OffsetDateTime,
    pub newest: OffsetDateTime,
}

/// Messages archived from one DLQ in one hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HourlyCount {
    pub queue: String,
    /// Unix time / 3600.
    pub hour: i64,
    pub messages: i64,
}

/// Messages that first died in the same queue, for the same reason, with the same error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The first-death queue (the DLQ for messages without death history).
    pub queue: String,
    pub reason: String,
    /// The failing consumer's error description; empty when it left none.
    pub error: String,
    pub messages: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub first_seen: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen: OffsetDateTime,
}

/// One replay of one message, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRecord {
    #[serde(serialize_with = "id_as_string")]
    pub id: i64,
    #[serde(serialize_with = "id_as_string")]
    pub message_id: i64,
    /// The key the request was made under: the same key never publishes twice.
    pub request_key: String,
    pub actor: String,
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    pub target: ReplayTarget,
    /// `publishing` until the broker answered, then `published`, `unroutable`, `nacked` or `failed`.
    pub outcome: String,
    pub detail: Option<String>,
    /// Published with an edited body or headers (kept with the record).
    pub edited: bool,
}

/// What [`Archive::begin_replay`] found for a request key.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStart {
    /// First time: publish, then [`Archive::finish_replay`] this id.
    New(i64),
    /// The key was used before (a double click, a retried request): do not publish again.
    Existing(ReplayRecord),
}

/// The durable archive of dead letters. One implementation per database backend.
#[async_trait]
pub trait Archive: Send + Sync + 'static {
    /// Stores a batch in one durable transaction and returns only once the commit is on disk.
    /// A redelivered message (or one a failed attempt may have stored: see
    /// [`PreparedMessage::maybe_stored`]) whose fingerprint is archived from its queue is
    /// skipped, as many of them in the batch as there are such rows ([`without_copies`]);
    /// anything else is stored, even when identical content is already archived.
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError>;
    /// Where to resume reading a stream DLQ: the offset after the last one archived from it
    /// (`None`: nothing archived from it as a stream yet).
    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError>;
    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError>;
    async fn get_message(&self, id: i64) -> Result<Option<ArchivedMessage>, ArchiveError>;
    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError>;
    /// Totals by DLQ and first-death reason, kept incrementally (no table scan).
    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError>;
    /// Archived messages per DLQ and hour, from `since` on.
    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError>;
    /// The largest failure groups, most recent activity first.
    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError>;
    /// Other records of the same message: the same message-id, the record it is a replayed
    /// copy of, and the copies of it that died again; newest first.
    async fn related(&self, message: &MessageSummary) -> Result<Vec<MessageSummary>, ArchiveError>;
    /// Records the start of a single replay, once per request key, before anything is
    /// published: the decision to publish, its record and its audit entry are one
    /// transaction. An edit is kept with the record.
    async fn begin_replay(
        &self,
        message_id: i64,
        request_key: &str,
        actor: &Actor,
        target: &ReplayTarget,
        edit: Option<&ReplayEdit>,
    ) -> Result<ReplayStart, ArchiveError>;
    /// Records how the publish ended, sets the message's status from it, and returns the record.
    async fn finish_replay(
        &self,
        replay_id: i64,
        outcome: &str,
        detail: Option<&str>,
        status: MessageStatus,
    ) -> Result<ReplayRecord, ArchiveError>;
    /// The replays of a message, newest first.
    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError>;
    /// Freezes a selection into a new job (or plan), once per request key: the same key
    /// returns the job it made before.
    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError>;
    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError>;
    /// The newest jobs first.
    async fn jobs(&self, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError>;
    /// A job's messages in publishing order, after message id `after`, optionally only those
    /// with one outcome (`pending` for those still to do).
    async fn job_items(
        &self,
        id: i64,
        outcome: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobItem>, ArchiveError>;
    /// Start, pause, resume or cancel a job, recorded in the audit log.
    async fn control_job(
        &self,
        id: i64,
        action: JobAction,
        actor: &Actor,
    ) -> Result<ReplayJob, ArchiveError>;
    /// Takes the oldest queued job (or job `only`), or a running one whose runner's lease
    /// ran out, for `owner` until `lease_ms` from now. A runner that holds its `instance`
    /// name ([`Archive::lock_instance_name`]) also takes, lease or not, a job whose lease
    /// another runner of that name holds: an earlier life of this instance, gone, since
    /// nobody else could hold the name meanwhile.
    async fn claim_job(
        &self,
        owner: &str,
        instance: Option<&str>,
        lease_ms: u64,
        only: Option<i64>,
    ) -> Result<Option<ReplayJob>, ArchiveError>;
    /// One transaction: records the outcomes of the last step, renews the lease, and hands
    /// out the next messages (recorded as `sending` before they are returned).
    async fn advance_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        outcomes: &[ItemOutcome],
        next: ChunkLimit,
    ) -> Result<JobStep, ArchiveError>;
    /// The runner stops holding the job: `Paused` with the reason (a canary, a missing
    /// exchange), or `Queued` for another runner (shutdown). Only while `owner` holds it.
    /// `canary_done`: the canary has been judged and is not run again on resume.
    async fn release_job(
        &self,
        id: i64,
        owner: &str,
        state: JobState,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<(), ArchiveError>;
    /// Notes what the runner is doing (waiting for a canary, for the broker) and renews its
    /// lease; `false` when the job is no longer running under `owner`.
    async fn note_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, ArchiveError>;
    /// Whether the job's canary has been judged (or it has none).
    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError>;
    /// Copies published by the job that came back into an archived DLQ after `since`.
    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError>;
    /// Marks the selected messages resolved without replaying, with a note; returns how many.
    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError>;
    /// Deletes the selected messages from the archive for good — bodies, search entries,
    /// replay records, totals — except those an unfinished job still holds; returns how
    /// many. Audited with the note.
    async fn purge(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError>;
    /// The audit log, newest first, before entry id `before`; actors and summaries too
    /// long for a page are cut (and the entry marked `truncated`).
    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError>;
    /// Whole entries, oldest first, after entry id `after`: for the export.
    async fn audit_export(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError>;
    /// Adds a user, or changes the role (and password, when given) of an existing one.
    async fn put_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        by: &Actor,
    ) -> Result<(), ArchiveError>;
    /// `false` when there is no such user.
    async fn set_password(
        &self,
        name: &str,
        password_hash: &str,
        by: &Actor,
    ) -> Result<bool, ArchiveError>;
    /// Removes a user, ends their sessions and revokes the API tokens they own; `false`
    /// when there was none.
    async fn remove_user(&self, name: &str, by: &Actor) -> Result<bool, ArchiveError>;
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, ArchiveError>;
    async fn users(&self) -> Result<Vec<UserRecord>, ArchiveError>;
    async fn create_session(&self, token_hash: &str, user: &str) -> Result<(), ArchiveError>;
    /// The user of a session used within the last `idle_ms` and made within the last
    /// `max_ms` (any other is ended).
    async fn session_user(
        &self,
        token_hash: &str,
        idle_ms: u64,
        max_ms: u64,
    ) -> Result<Option<UserRecord>, ArchiveError>;
    async fn end_session(&self, token_hash: &str) -> Result<(), ArchiveError>;
    async fn create_token(&self, token: &TokenSpec<'_>, by: &Actor) -> Result<i64, ArchiveError>;
    /// The token with this hash, unless revoked (an expired one too: the caller says so).
    async fn token(&self, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError>;
    /// `false` when there is no such token or it was revoked already.
    async fn revoke_token(&self, id: i64, by: &Actor) -> Result<bool, ArchiveError>;
    async fn tokens(&self) -> Result<Vec<TokenRecord>, ArchiveError>;
    /// Appends an audit entry that no other change goes with (a login, a failed login).
    async fn record(&self, actor: &Actor, action: &str, summary: &str) -> Result<(), ArchiveError>;
    /// Checks the database answers.
    async fn ping(&self) -> Result<(), ArchiveError>;
    /// Checks the database would take a write now (not locked by another writer, not a
    /// read-only replica): consumers take no deliveries before it would.
    async fn writable(&self) -> Result<(), ArchiveError>;
    /// Takes the instance name `name` for this process, if no other live process holds it
    /// (`Ok(None)` when one does), for as long as the returned lock lasts.
    async fn lock_instance_name(&self, name: &str) -> Result<Option<NameLock>, ArchiveError>;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(body: &[u8], redelivered: bool) -> PreparedMessage {
        PreparedMessage::new(IncomingMessage {
            queue: "dlq".into(),
            exchange: String::new(),
            routing_key: "dlq".into(),
            redelivered,
            properties: MessageProperties::default(),
            headers: None,
            body: body.to_vec(),
            received_at: OffsetDateTime::UNIX_EPOCH,
            decode_problems: Vec::new(),
            stream_offset: None,
        })
    }

    fn archived(rows: &[(&PreparedMessage, i64)]) -> ArchivedCopies {
        rows.iter()
            .map(|(m, n)| ((m.message.queue.clone(), m.fingerprint), *n))
            .collect()
    }

    #[test]
    fn each_archived_row_stands_for_one_redelivered_copy() {
        let (a, b) = (delivery(b"a", true), delivery(b"b", true));
        let batch = [a.clone(), a.clone(), a.clone(), b.clone()];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&a, 2)]));
        assert_eq!(duplicates, 2);
        assert_eq!(fresh.len(), 2);
        assert_eq!(fresh[0].message.body, b"a");
        assert_eq!(fresh[1].message.body, b"b");
    }

    #[test]
    fn first_deliveries_are_stored_whatever_is_archived() {
        let first = delivery(b"a", false);
        let batch = [first.clone()];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&first, 5)]));
        assert_eq!((fresh.len(), duplicates), (1, 0));
        // Unless an earlier attempt at this very batch may have stored it.
        let mut retried = first.clone();
        retried.maybe_stored = true;
        let batch = [retried];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&first, 1)]));
        assert_eq!((fresh.len(), duplicates), (0, 1));
    }

    #[test]
    fn a_copy_is_looked_for_in_its_own_queue() {
        let mut elsewhere = delivery(b"a", true);
        elsewhere.message.queue = "other.dlq".into();
        let here = delivery(b"a", true);
        let batch = [here];
        let key = ("other.dlq".to_owned(), elsewhere.fingerprint);
        let (fresh, duplicates) = without_copies(&batch, HashMap::from([(key, 1)]));
        assert_eq!((fresh.len(), duplicates), (1, 0));
    }
}

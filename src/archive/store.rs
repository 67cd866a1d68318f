//! What the archive can do, one trait per capability, each implemented by both backends.
//! [`Archive`] is all of them (for the process that wires things up); [`Console`] is what the
//! web may use: it cannot store deliveries or step a replay job, which are the consumers' and
//! the job runner's alone.

use std::collections::HashMap;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::watch;

use super::{
    Actor, ArchiveError, ArchivedMessage, AuditEntry, AuditRow, BodyStart, ChunkLimit, CopyCounts,
    ExportedMessage, FailureGroup, GroupBy, GroupMinute, GroupNote, GroupNoteChange, GroupQuery,
    HourlyCount, IngestRules, ItemOutcome, ItemRow, JobAction, JobItem, JobRow, JobSpec, JobState,
    JobStep, MessageFilter, MessagePage, MessageSummary, NameLock, Outcome, PageRequest,
    PreparedMessage, QueueReasonCount, QueueTotals, ReplayEdit, ReplayJob, ReplayRecord,
    ReplayStart, RetentionRun, Role, Scan, Selection, StoreOutcome, StoredBody, TokenRecord,
    TokenRow, TokenSpec, UserRecord,
};
use crate::archive::Grant;
use crate::message::death::ReplayTarget;

/// Storing what the consumers deliver: only the DLQ consumers hold this.
#[async_trait]
pub trait Ingest: Send + Sync {
    /// Stores a batch in one durable transaction and returns only once the commit is on disk.
    /// A redelivered message (or one a failed attempt may have stored: see
    /// [`PreparedMessage::maybe_stored`]) whose fingerprint is archived from its queue is
    /// skipped, as many of them in the batch as there are such rows ([`without_copies`]);
    /// anything else is stored, even when identical content is already archived.
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError>;
    /// As [`Ingest::store_batch`], for a batch that may be stored beside others of its
    /// consumer ([`Ingest::batches_at_once`]): its rows are numbered after the batch before
    /// it, and keep their numbers when the store is tried again (see [`Numbering`]).
    async fn store_numbered(
        &self,
        batch: &[PreparedMessage],
        _numbering: &mut Numbering,
    ) -> Result<StoreOutcome, ArchiveError> {
        // One batch at a time: numbered in turn by storing in turn.
        self.store_batch(batch).await
    }
    /// As [`Ingest::store_numbered`], but what only search needs — the full-text entries,
    /// search words, business fields and their keys — is left to the indexer ([`Index`]):
    /// the DLQ consumers' write, so that a batch is durable, listed, counted and acked sooner
    /// (issue 37: append, then index). Both archives do; one without an indexer would
    /// store the batch whole, as here.
    async fn append_numbered(
        &self,
        batch: &[PreparedMessage],
        numbering: &mut Numbering,
    ) -> Result<StoreOutcome, ArchiveError> {
        self.store_numbered(batch, numbering).await
    }
    /// Where to resume reading a stream DLQ: the offset after the last one archived from it
    /// (`None`: nothing archived from it as a stream yet).
    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError>;
    /// Checks the database would take a write now (not locked by another writer, not a
    /// read-only replica): consumers take no deliveries before it would.
    async fn writable(&self) -> Result<(), ArchiveError>;
    /// How many batches of one consumer may be stored at once (each on a connection of its
    /// own; they are acked in delivery order whichever commits first).
    fn batches_at_once(&self) -> usize {
        1
    }
}

/// The archive ids of a batch stored beside others: taken once the batch before it has
/// taken its own, kept across attempts, so archive ids follow delivery order whichever
/// batch commits first.
#[derive(Debug, Default)]
pub struct Numbering {
    ids: Vec<i64>,
    /// The batch before: `true` once its ids are taken (or closed, once its store ended).
    before: Option<watch::Receiver<bool>>,
    /// For the batch after this one.
    taken: Option<watch::Sender<bool>>,
}

impl Numbering {
    /// Numbering for a batch after the one `before` follows; the receiver returned follows
    /// this one, for the batch after it.
    pub fn after(before: Option<watch::Receiver<bool>>) -> (Self, watch::Receiver<bool>) {
        let (taken, follow) = watch::channel(false);
        let numbering = Numbering {
            ids: Vec::new(),
            before,
            taken: Some(taken),
        };
        (numbering, follow)
    }

    /// The ids taken by an earlier attempt (empty before the first).
    pub fn taken(&self) -> &[i64] {
        &self.ids
    }

    /// Waits until the batch before this one has its ids.
    pub async fn wait_turn(&mut self) {
        if let Some(mut before) = self.before.take() {
            // An error: its store ended without ids (all copies, or given up).
            let _ = before.wait_for(|taken| *taken).await;
        }
    }

    /// Keeps the ids taken for the batch, and tells the batch after it.
    pub fn keep(&mut self, ids: Vec<i64>) {
        self.ids = ids;
        if let Some(taken) = self.taken.take() {
            taken.send_replace(true);
        }
    }
}

/// Reading the archive: one message, its body, totals and failure groups.
#[async_trait]
pub trait MessageStore: Send + Sync {
    async fn get_message(&self, id: i64) -> Result<Option<ArchivedMessage>, ArchiveError>;
    /// A body whole, read a piece at a time into one buffer of its size: for a body known to
    /// be small (a larger one is read with [`MessageStore::body_part`] as it is used).
    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError>;
    /// A body's first `max` bytes and its size: never more of it read (a page, an API
    /// answer).
    async fn body_start(&self, id: i64, max: usize) -> Result<Option<BodyStart>, ArchiveError>;
    /// `len` bytes of a body from byte `offset`, fewer at its end: a download, a piece at a
    /// time. `None` when the message (or its body) is gone.
    async fn body_part(
        &self,
        id: i64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, ArchiveError>;
    /// Values of the business field `name` with a key in `[low, high)`
    /// ([`crate::message::field_match`]), at most `limit`, through the keys' index: what a search
    /// that found nothing is offered instead.
    async fn field_values_in(
        &self,
        name: &str,
        low: &str,
        high: &str,
        limit: u32,
    ) -> Result<Vec<String>, ArchiveError>;
    /// Totals by DLQ and first-death reason, kept incrementally (no table scan).
    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError>;
    /// Messages archived whose search entries the indexer has not written yet ([`Index`]):
    /// listed and counted already, not yet found by a search.
    async fn index_behind(&self) -> Result<u64, ArchiveError>;
    /// Archived messages per DLQ and hour, from `since` on.
    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError>;
    /// Archived messages per DLQ from `since` on (within the last hour): what dies now.
    async fn recent_counts(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<(String, i64)>, ArchiveError>;
    /// The failure groups `query` asks for, grouped as it says: those with open messages
    /// first, then by their latest failure, newest first. Reads the groups' own counts.
    async fn groups(&self, query: &GroupQuery) -> Result<Vec<FailureGroup>, ArchiveError>;
    /// Up to `limit` failure groups by cause, as [`MessageStore::groups`] orders them.
    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        self.groups(&GroupQuery::by_cause(limit)).await
    }
    /// Messages per failure group (as grouped `by`) in each of the `spans` spans of `span`
    /// minutes that end at minute `newest` (Unix time / 60): each group's trend, a row per
    /// group and span, named by the span's newest minute. Summed by the database, so a page
    /// reads a row per bar, not one per minute. Kept by ingest for the last few hours.
    async fn group_minutes(
        &self,
        by: GroupBy,
        newest: i64,
        span: i64,
        spans: usize,
    ) -> Result<Vec<GroupMinute>, ArchiveError>;
    /// Replayed messages still settling, per DLQ (DLQs with none left out).
    async fn settling_by_dlq(&self) -> Result<Vec<(String, i64)>, ArchiveError>;
    /// The keys of the default broker's DLQs that hold `:` (each once): those a `--broker
    /// NAME`'s `NAME:` prefix could share. Read from a partial index of just those rows.
    async fn default_keys_with_colon(&self) -> Result<Vec<String>, ArchiveError>;
    /// Checks the database answers.
    async fn ping(&self) -> Result<(), ArchiveError>;
}

/// Finding messages: lists and search, and the other records of a message, each backend
/// through its own indexes.
#[async_trait]
pub trait MessageSearch: Send + Sync {
    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError>;
    /// How many messages the filter finds, counted up to `cap` (a count of `cap` means at
    /// least that many): the list's "1,234 match".
    async fn count_messages(&self, filter: &MessageFilter, cap: u64) -> Result<u64, ArchiveError>;
    /// How many messages an action's selection holds, exactly.
    async fn count_selection(&self, selection: &Selection) -> Result<u64, ArchiveError> {
        match selection {
            Selection::Filter(filter) => self.count_messages(filter, i64::MAX as u64).await,
            ids => self.count_ids(ids).await,
        }
    }
    /// How many of a selection's ids are archived (and of its DLQs).
    async fn count_ids(&self, selection: &Selection) -> Result<u64, ArchiveError>;
    /// Other records of the same message: the same message-id, the record it is a replayed
    /// copy of, and the copies of it that died again; newest first.
    async fn related(&self, message: &MessageSummary) -> Result<Vec<MessageSummary>, ArchiveError>;
}

/// Single replays: recorded before anything is published, once per request key.
#[async_trait]
pub trait ReplayLog: Send + Sync {
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
        outcome: Outcome,
        detail: Option<&str>,
    ) -> Result<ReplayRecord, ArchiveError>;
    /// The replays of a message, newest first.
    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError>;
}

/// Replay jobs as users make, follow and control them.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Freezes a selection into a new job (or plan), once per request key: the same key
    /// returns the job it made before.
    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError>;
    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError>;
    /// What became of the copies the job published, by their messages' status now.
    async fn job_copies(&self, id: i64) -> Result<CopyCounts, ArchiveError>;
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
}

/// The name a runner's instance goes by (`--instance-name`), held by one live process.
#[async_trait]
pub trait InstanceLock: Send + Sync {
    /// Takes the instance name `name` for this process, if no other live process holds it
    /// (`Ok(None)` when one does), for as long as the returned lock lasts.
    async fn lock_instance_name(&self, name: &str) -> Result<Option<NameLock>, ArchiveError>;
}

/// What only the job runner does: claim a job under a lease, step through it, let it go.
#[async_trait]
pub trait JobLease: Send + Sync {
    /// Takes the oldest queued job (or job `only`), or a running one whose runner's lease
    /// ran out, for `owner` until `lease_ms` from now — of the jobs whose brokers `owner`
    /// can publish to ([`JobLease::announce_runner`]; every runner can to the default one).
    /// A runner that holds its `instance` name ([`InstanceLock::lock_instance_name`]) also
    /// takes, lease or not, a job whose lease another runner of that name holds: an earlier
    /// life of this instance, gone, since nobody else could hold the name meanwhile.
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
    /// Whether the job's canary has been judged (`false` until then; the runner asks only of
    /// jobs that have one).
    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError>;
    /// Copies published by the job that came back into an archived DLQ after `since`.
    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError>;
    /// Says that the runner `owner` runs and can publish to `brokers` (`--broker` names; the
    /// default one goes without saying) until `live_ms` from now: it claims only jobs whose
    /// brokers it has, and a queued job says which of its brokers no running instance has
    /// ([`ReplayJob::waiting_for_brokers`](crate::archive::ReplayJob)). Cheap to call before
    /// every claim: written only once half of that time is gone. Words of runners gone for an
    /// hour are forgotten.
    async fn announce_runner(
        &self,
        owner: &str,
        brokers: &[&str],
        live_ms: u64,
    ) -> Result<(), ArchiveError>;
    /// The runner `owner` stops: its word is taken back at once.
    async fn retire_runner(&self, owner: &str) -> Result<(), ArchiveError>;
}

/// Bulk actions on a selection, audited: dismiss and purge.
#[async_trait]
pub trait Actions: Send + Sync {
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
}

/// The append-only audit log.
#[async_trait]
pub trait AuditLog: Send + Sync {
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
    /// Appends an audit entry that no other change goes with (a login, a failed login).
    async fn record(&self, actor: &Actor, action: &str, summary: &str) -> Result<(), ArchiveError>;
}

/// Users, their sessions and API tokens; every change is audited in its transaction.
#[async_trait]
pub trait Accounts: Send + Sync {
    /// Adds a user, or changes the role (and password, when given) of an existing one.
    async fn put_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        grants: &[Grant],
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
    /// A session of `user`; `id_token`: the ID token of their sign-in at the OpenID provider,
    /// kept to sign them out there too.
    async fn create_session(
        &self,
        token_hash: &str,
        user: &str,
        id_token: Option<&str>,
    ) -> Result<(), ArchiveError>;
    /// The user of a session used within the last `idle_ms` and made within the last
    /// `max_ms` (any other is ended).
    async fn session_user(
        &self,
        token_hash: &str,
        idle_ms: u64,
        max_ms: u64,
    ) -> Result<Option<UserRecord>, ArchiveError>;
    /// Ends a session; the ID token it was signed in with, if it was there and had one.
    async fn end_session(&self, token_hash: &str) -> Result<Option<String>, ArchiveError>;
    async fn create_token(&self, token: &TokenSpec<'_>, by: &Actor) -> Result<i64, ArchiveError>;
    /// The token with this hash, unless revoked (an expired one too: the caller says so).
    async fn token(&self, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError>;
    /// `false` when there is no such token or it was revoked already.
    async fn revoke_token(&self, id: i64, by: &Actor) -> Result<bool, ArchiveError>;
    async fn tokens(&self) -> Result<Vec<TokenRecord>, ArchiveError>;
}

/// Bringing messages archived by an earlier version up to date, in the background and in small
/// batches: their search index (CJK bigrams came after the first archives did) and their
/// failure groups (keyed on causes since issue 33).
#[async_trait]
pub trait Reindex: Send + Sync {
    /// Derives the search text of up to `limit` messages not reindexed yet, with `rules`, and
    /// rewrites the index entries it changes; `None` once nothing is left to do.
    async fn reindex_batch(
        &self,
        rules: &IngestRules,
        limit: u32,
    ) -> Result<Option<ReindexProgress>, ArchiveError>;
    /// Regroups up to `limit` messages archived before failures were grouped by cause
    /// (their failure derived with `rules`, their counts moved to their cause group in the
    /// same transaction); `None` once nothing is left to do.
    async fn regroup_batch(
        &self,
        rules: &IngestRules,
        limit: u32,
    ) -> Result<Option<ReindexProgress>, ArchiveError>;
}

/// Writing the search entries of messages ingest appended without them
/// ([`Ingest::append_numbered`]), after their ack: the id of each waits in `index_pending`
/// until a transaction writes its entries and deletes it, so a crash at any point loses
/// nothing and indexes nothing twice.
#[async_trait]
pub trait Index: Send + Sync {
    /// Derives and writes the search entries of up to `limit` waiting messages, oldest first;
    /// how many waited (0: none did).
    async fn index_batch(&self, rules: &IngestRules, limit: u32) -> Result<u64, ArchiveError>;
}

/// What the search index still has to catch up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReindexProgress {
    /// Messages up to this id are done.
    pub done_through: i64,
    /// The newest message archived before the index changed: later ones are indexed anew.
    pub last_id: i64,
    /// Index entries this batch rewrote.
    pub rewritten: u64,
}

/// Keeping the archive within its retention policy (`src/retention/`): passes recorded as
/// runs, what is due read in id order, deleted in small transactions as a purge deletes.
#[async_trait]
pub trait Retention: Send + Sync {
    /// Each DLQ's kept totals (no table scan).
    async fn queue_totals(&self) -> Result<Vec<QueueTotals>, ArchiveError>;
    /// Up to `limit` messages of `queue` with an id above `after` that `scan` selects and no
    /// unfinished job holds, in id order: their ids and body sizes.
    async fn retention_scan(
        &self,
        queue: &str,
        scan: Scan,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, i64)>, ArchiveError>;
    /// Starts a run for `owner`, unless another is under way (heard of within `stale_ms`):
    /// `None` then, one run at a time across instances. Runs interrupted earlier (not heard
    /// of since) are finished and audited first.
    async fn begin_retention(
        &self,
        owner: &str,
        stale_ms: i64,
    ) -> Result<Option<i64>, ArchiveError>;
    /// Deletes these messages as a purge does (but those an unfinished job holds) and counts
    /// them in run `run` under `queue` and `rule`, in one transaction; how many went.
    async fn expire(
        &self,
        run: i64,
        queue: &str,
        rule: &str,
        ids: &[i64],
    ) -> Result<u64, ArchiveError>;
    /// Ends run `run` (audited if it deleted anything), to be followed at `next_at`.
    async fn finish_retention(
        &self,
        run: i64,
        next_at: OffsetDateTime,
    ) -> Result<RetentionRun, ArchiveError>;
}

/// The space of deleted rows, given back after retention's passes and the web's purges.
#[async_trait]
pub trait Space: Send + Sync {
    /// Gives the space of deleted rows back to the file system, in small steps, where the
    /// backend does not itself (SQLite's incremental vacuum); pages freed.
    async fn reclaim_space(&self) -> Result<u64, ArchiveError>;
}

/// Taking messages out of the archive whole (`lazarus export`, `GET /api/export`).
#[async_trait]
pub trait Export: Send + Sync {
    /// The selected messages with an id above `after`, in id order, whole: up to `limit` of
    /// them, and fewer once their bodies pass `max_bytes` (always at least one). A body over
    /// a MiB is left in the archive ([`crate::archive::ExportedMessage::unread_body`]), read
    /// as its line is written ([`crate::archive::ExportLine`]).
    async fn export_batch(
        &self,
        selection: &Selection,
        after: i64,
        limit: u32,
        max_bytes: i64,
    ) -> Result<Vec<ExportedMessage>, ArchiveError>;
}

/// Bringing exported messages back (`lazarus import`): ingest stores them; this finds what
/// is archived already and gives what was stored its exported state.
#[async_trait]
pub trait Import: Send + Sync {
    /// The ids of the messages archived with each (queue, fingerprint), in id order (none
    /// for a key without any). Each key comes with its message's
    /// [`fingerprint_time`](crate::archive::fingerprint_time), which the lookup goes by.
    async fn ids_with_fingerprints(
        &self,
        keys: &[(String, [u8; 32], Option<i64>)],
    ) -> Result<HashMap<(String, [u8; 32]), Vec<i64>>, ArchiveError>;
    /// Gives each message (by its new id) its exported redelivered flag, status, note, times
    /// and replay records (those not recorded yet), keeping the open counts; one transaction.
    /// `untouched_only`: the state only of messages still as ingest stored them (archived,
    /// their status never changed) — what an import cut short between storing and restoring
    /// left — never overwriting what happened to a message since.
    async fn restore(
        &self,
        messages: &[(i64, &ExportedMessage)],
        untouched_only: bool,
    ) -> Result<(), ArchiveError>;
}

/// What the overview says of retention: the last run that finished.
#[async_trait]
pub trait RetentionLog: Send + Sync {
    async fn last_retention(&self) -> Result<Option<RetentionRun>, ArchiveError>;
}

/// Users, tokens, replay jobs and the audit log as stored, for `lazarus migrate` to carry into
/// another archive (`sql/carry.rs`); carrying them again adds nothing.
#[async_trait]
pub trait Carry: Send + Sync {
    /// Every API token, with its hash, oldest first.
    async fn token_rows(&self) -> Result<Vec<TokenRow>, ArchiveError>;
    /// Up to `limit` audit entries after id `after`, in order.
    async fn audit_rows(&self, after: i64, limit: u32) -> Result<Vec<AuditRow>, ArchiveError>;
    /// The whole audit log, in order (read 10,000 entries at a time).
    async fn all_audit_rows(&self) -> Result<Vec<AuditRow>, ArchiveError> {
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, |e: &AuditRow| e.id);
            let batch = self.audit_rows(after, 10_000).await?;
            if batch.is_empty() {
                return Ok(all);
            }
            all.extend(batch);
        }
    }
    /// Adds the users (by name) and tokens (by hash) it does not have; how many of each.
    async fn carry_accounts(
        &self,
        users: &[UserRecord],
        tokens: &[TokenRow],
    ) -> Result<(u64, u64), ArchiveError>;
    /// Every replay job, oldest first, without its items.
    async fn job_rows(&self) -> Result<Vec<JobRow>, ArchiveError>;
    /// The items of job `id`, in message order.
    async fn item_rows(&self, id: i64) -> Result<Vec<ItemRow>, ArchiveError>;
    /// Adds `job` with `items` unless a job with its request key is there (one transaction):
    /// the job's id here, and whether it was added. A job that was queued or running is
    /// added paused, for someone to resume.
    async fn carry_job(&self, job: &JobRow, items: &[ItemRow])
        -> Result<(i64, bool), ArchiveError>;
    /// Appends the entries it does not hold yet (the same content counted: the n-th entry
    /// of a content only while fewer than n are there), in one transaction; how many.
    async fn carry_audit(&self, entries: &[AuditRow]) -> Result<u64, ArchiveError>;
}

/// How a watched thing's state was noted (see [`Notices::note_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// The archive had no state for it yet: this call recorded the first.
    New,
    /// It had another state, which this call replaced.
    Changed,
    /// It had this state already (perhaps written by another instance just now).
    Same,
}

/// What the webhooks (`src/notify/`) read and record: new failure groups, and the state each
/// watched thing was last told in, written so that of several instances only one sees the
/// change.
#[async_trait]
pub trait Notices: Send + Sync {
    /// Failure groups by cause first seen at or after `since`, oldest first.
    async fn failure_groups_since(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<FailureGroup>, ArchiveError>;
    /// Records that `key` is now in `state`; whether that is new, a change, or known already.
    async fn note_state(&self, key: &str, state: &str) -> Result<Noted, ArchiveError>;
}

/// Notes and statuses of failure groups (by cause), each change in the audit log.
#[async_trait]
pub trait GroupNotes: Send + Sync {
    /// Sets cause group `group`'s note and status (replacing what it had), and audits it.
    async fn set_group_note(
        &self,
        group: i64,
        change: &GroupNoteChange,
        by: &Actor,
    ) -> Result<GroupNote, ArchiveError>;
    /// The notes of these cause groups (those without one left out).
    async fn group_notes(&self, groups: &[i64]) -> Result<Vec<(i64, GroupNote)>, ArchiveError>;
}

/// What `lazarus serve` keeps up in the background: resolving replayed messages whose copy
/// did not come back within the settle time, and forgetting old per-minute counts.
#[async_trait]
pub trait Upkeep: Send + Sync {
    /// Settles up to `limit` messages replayed before `before` whose copy has not died again:
    /// they are resolved. Returns how many.
    async fn settle(&self, before: OffsetDateTime, limit: u32) -> Result<u64, ArchiveError>;
    /// Forgets the per-minute counts older than `MINUTES_KEPT` minutes (ingest only adds).
    async fn prune_minutes(&self) -> Result<(), ArchiveError>;
    /// Brings the query planner's statistics up to date where a burst of writes left them
    /// stale (PostgreSQL; SQLite's plans need none): the tables analyzed.
    async fn refresh_statistics(&self) -> Result<Vec<String>, ArchiveError>;
}

/// What the web may use: everything but storing deliveries and stepping replay jobs (a
/// purge gives its space back as retention does).
pub trait Console:
    MessageStore
    + GroupNotes
    + MessageSearch
    + ReplayLog
    + JobStore
    + Actions
    + AuditLog
    + Accounts
    + RetentionLog
    + Export
    + Space
{
}

impl<T> Console for T where
    T: MessageStore
        + GroupNotes
        + MessageSearch
        + ReplayLog
        + JobStore
        + Actions
        + AuditLog
        + Accounts
        + RetentionLog
        + Export
        + Space
{
}

/// The whole archive: what `lazarus serve` opens and hands out by capability.
pub trait Archive:
    Console
    + Ingest
    + JobLease
    + InstanceLock
    + Reindex
    + Index
    + Upkeep
    + Retention
    + Import
    + Notices
    + Carry
    + 'static
{
}

impl<
        T: Console
            + Ingest
            + JobLease
            + InstanceLock
            + Reindex
            + Index
            + Upkeep
            + Retention
            + Import
            + Notices
            + Carry
            + 'static,
    > Archive for T
{
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Numbering;

    #[tokio::test]
    async fn a_batch_is_numbered_once_the_batch_before_it_is() {
        let (mut first, numbered) = Numbering::after(None);
        let (mut second, _) = Numbering::after(Some(numbered));
        let mut waiting = tokio::spawn(async move {
            second.wait_turn().await;
            second
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "numbered before the batch before it"
        );
        first.keep(vec![7, 8]);
        let second = (&mut waiting).await.unwrap();
        assert!(second.taken().is_empty());
        // A retry keeps the ids it took.
        assert_eq!(first.taken(), &[7, 8]);
    }

    #[tokio::test]
    async fn a_batch_whose_store_ended_unnumbered_lets_the_next_go() {
        let (first, numbered) = Numbering::after(None);
        let (mut second, _) = Numbering::after(Some(numbered));
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second.wait_turn())
            .await
            .expect("not held by a store that ended");
    }
}

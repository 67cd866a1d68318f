//! The archive's contract, capability by capability (ingest, reading, search, single replays,
//! jobs and their lease, bulk actions, the audit log, accounts, instance names): tests that talk
//! to the archive API directly — no broker, no HTTP — each declared with `on_both_backends!`, so
//! that SQLite and PostgreSQL are held to one contract.

mod accounts;
mod actions;
mod audit;
mod bodies;
mod index;
mod ingest;
mod jobs;
mod lease;
mod lifecycle;
mod regroup;
mod reindex;
mod replays;
mod search;
mod search_terms;
mod statistics;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use lazarus::archive::{
    Actor, Archive, ArchiveError, ChunkLimit, IncomingMessage, ItemOutcome, JobItem, JobSpec,
    JobStep, MessageFilter, MessageStatus, MessageSummary, Outcome, PageRequest, PreparedMessage,
    ReplayJob, Selection,
};
use lazarus::message::exchange_policy::ExchangePolicy;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
use time::OffsetDateTime;

use crate::helpers::*;

/// A new, empty archive on the current backend (the directory holds a SQLite one).
pub(super) async fn archive() -> (tempfile::TempDir, Arc<dyn Archive>) {
    let dir = tempfile::tempdir().unwrap();
    let archive = lazarus::archive::open(&archive_url(dir.path()).await)
        .await
        .unwrap();
    (dir, archive)
}

/// The message-ids `q` finds (at most 500), sorted.
pub(super) async fn found(archive: &dyn Archive, q: &str) -> Vec<String> {
    let search = lazarus::message::search::parse(q, &[]).unwrap();
    let filter = MessageFilter {
        text: search.text_query(),
        ..Default::default()
    };
    message_ids(archive, &filter).await
}

/// The message-ids `filter` finds (at most 500), sorted.
pub(super) async fn message_ids(archive: &dyn Archive, filter: &MessageFilter) -> Vec<String> {
    let page = archive
        .list_messages(
            filter,
            PageRequest {
                limit: 500,
                before: None,
            },
        )
        .await
        .unwrap();
    let mut ids: Vec<String> = page
        .messages
        .into_iter()
        .filter_map(|m| m.message_id)
        .collect();
    ids.sort();
    ids
}

/// Now, in whole seconds: a time the archive's milliseconds keep exactly.
pub(super) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc().replace_nanosecond(0).unwrap()
}

pub(super) fn hour_of(t: OffsetDateTime) -> i64 {
    t.unix_timestamp().div_euclid(3600)
}

/// How a message first died: in `work`, for `reason`, published to `exchange` with `key`.
#[derive(Clone, Copy)]
pub(super) struct Death<'a> {
    reason: &'a str,
    exchange: &'a str,
    key: &'a str,
}

pub(super) const REJECTED: Death<'static> = Death {
    reason: "rejected",
    exchange: "orders",
    key: "order.created",
};

/// A first delivery from `queue`, with message-id `name`: dead-lettered as `death` says (so
/// with a replay target), or a message without death history.
pub(super) fn delivery(queue: &str, name: &str, death: Option<Death<'_>>) -> IncomingMessage {
    let headers = death.map(|d| {
        let mut entry = Table::new();
        entry.insert("queue", AmqpValue::text("work"));
        entry.insert("reason", AmqpValue::text(d.reason));
        entry.insert("count", AmqpValue::LongLongInt(1));
        entry.insert("exchange", AmqpValue::text(d.exchange));
        entry.insert(
            "routing-keys",
            AmqpValue::Array(vec![AmqpValue::text(d.key)]),
        );
        let mut headers = Table::new();
        headers.insert("x-death", AmqpValue::Array(vec![AmqpValue::Table(entry)]));
        headers.insert("x-first-death-queue", AmqpValue::text("work"));
        headers.insert("x-first-death-reason", AmqpValue::text(d.reason));
        headers.insert("x-first-death-exchange", AmqpValue::text(d.exchange));
        headers
    });
    IncomingMessage {
        broker: "default".into(),
        vhost: String::new(),
        queue: queue.into(),
        exchange: "dlx".into(),
        routing_key: "work".into(),
        redelivered: false,
        properties: MessageProperties {
            message_id: Some(name.into()),
            content_type: Some("application/json".into()),
            ..Default::default()
        },
        headers,
        body: format!(r#"{{"name": "{name}"}}"#).into_bytes(),
        received_at: now(),
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

/// The same delivery with the failing consumer's error in a header.
pub(super) fn with_error(mut message: IncomingMessage, error: &str) -> IncomingMessage {
    message
        .headers
        .get_or_insert_with(Table::new)
        .insert("x-exception-message", AmqpValue::text(error));
    message
}

pub(super) fn at(mut message: IncomingMessage, received_at: OffsetDateTime) -> IncomingMessage {
    message.received_at = received_at;
    message
}

/// Stores the deliveries as one batch: (inserted, duplicates).
pub(super) async fn store(archive: &dyn Archive, batch: Vec<IncomingMessage>) -> (u64, u64) {
    let prepared: Vec<PreparedMessage> = batch.into_iter().map(PreparedMessage::new).collect();
    let outcome = archive.store_batch(&prepared).await.unwrap();
    (outcome.inserted, outcome.duplicates)
}

/// Every message archived from `queue`, oldest first (through the list's pages).
pub(super) async fn listed(archive: &dyn Archive, queue: &str) -> Vec<MessageSummary> {
    let filter = MessageFilter {
        queue: Some(queue.into()),
        ..Default::default()
    };
    let mut all = Vec::new();
    let mut before = None;
    loop {
        let page = archive
            .list_messages(&filter, PageRequest { limit: 2, before })
            .await
            .unwrap();
        assert!(page.messages.len() <= 2);
        all.extend(page.messages);
        match page.next_cursor {
            Some(cursor) => before = Some(cursor.parse().unwrap()),
            None => break,
        }
    }
    all.reverse();
    all
}

pub(super) async fn listed_ids(archive: &dyn Archive, queue: &str) -> Vec<i64> {
    listed(archive, queue).await.iter().map(|m| m.id).collect()
}

/// Stores one message per name, from `queue`, all dead-lettered as `death` says; returns their
/// archive ids in the order of the names.
pub(super) async fn stored(
    archive: &dyn Archive,
    queue: &str,
    names: &[&str],
    death: Death<'_>,
) -> Vec<i64> {
    let batch = names
        .iter()
        .map(|n| delivery(queue, n, Some(death)))
        .collect();
    assert_eq!(store(archive, batch).await, (names.len() as u64, 0));
    let listed = listed(archive, queue).await;
    names
        .iter()
        .map(|name| {
            listed
                .iter()
                .find(|m| m.message_id.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name} is archived"))
                .id
        })
        .collect()
}

pub(super) fn ids(ids: &[i64]) -> Selection {
    Selection::Ids(ids.to_vec())
}

pub(super) fn of_queue(queue: &str) -> Selection {
    Selection::Filter(Box::new(MessageFilter {
        queue: Some(queue.into()),
        ..Default::default()
    }))
}

static OPEN: LazyLock<ExchangePolicy> = LazyLock::new(ExchangePolicy::default);

/// A job (`start`) or plan of `selection`, to each message's own target, made by `actor`.
pub(super) fn spec<'a>(
    key: &'a str,
    actor: &'a Actor,
    selection: &'a Selection,
    start: bool,
) -> JobSpec<'a> {
    JobSpec {
        request_key: key,
        actor,
        selection,
        selection_text: r#"{"contract": true}"#,
        target: None,
        to_first_death_queue: false,
        rate_per_sec: None,
        include_replayed: false,
        canary: None,
        start,
        policy: &OPEN,
    }
}

pub(super) async fn job(archive: &dyn Archive, key: &str, selection: &Selection) -> ReplayJob {
    let actor = Actor::system("test");
    archive
        .create_job(&spec(key, &actor, selection, true))
        .await
        .unwrap()
}

pub(super) async fn reread(archive: &dyn Archive, id: i64) -> ReplayJob {
    archive.job(id).await.unwrap().expect("the job exists")
}

pub(super) async fn items(archive: &dyn Archive, id: i64, outcome: Option<&str>) -> Vec<JobItem> {
    archive.job_items(id, outcome, None, 1000).await.unwrap()
}

pub(super) async fn item(archive: &dyn Archive, id: i64, message: i64) -> JobItem {
    items(archive, id, None)
        .await
        .into_iter()
        .find(|i| i.message_id == message)
        .expect("the message is an item of the job")
}

pub(super) fn chunk(messages: u32) -> ChunkLimit {
    ChunkLimit {
        messages,
        bytes: u64::MAX,
    }
}

/// A runner's step: records `outcomes`, renews the lease for `lease_ms`, takes up to `next`.
pub(super) async fn step(
    archive: &dyn Archive,
    id: i64,
    owner: &str,
    lease_ms: u64,
    outcomes: &[ItemOutcome],
    next: u32,
) -> JobStep {
    archive
        .advance_job(id, owner, lease_ms, outcomes, chunk(next))
        .await
        .unwrap()
}

/// The ids of a step's messages, which it must hand out.
pub(super) fn handed_out(step: &JobStep) -> Vec<i64> {
    match step {
        JobStep::Publish(messages) => messages.iter().map(|m| m.message_id).collect(),
        JobStep::Stop(state) => panic!("expected messages to publish, the job stopped {state:?}"),
    }
}

pub(super) fn confirmed(message_id: i64, outcome: Outcome, detail: Option<&str>) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome,
        detail: detail.map(str::to_owned),
        retry: false,
    }
}

pub(super) fn published(ids: &[i64]) -> Vec<ItemOutcome> {
    ids.iter()
        .map(|id| confirmed(*id, Outcome::Published, None))
        .collect()
}

pub(super) async fn status(archive: &dyn Archive, id: i64) -> MessageStatus {
    archive
        .get_message(id)
        .await
        .unwrap()
        .expect("the message is archived")
        .summary
        .status
}

/// The message of a conflict, failing on anything else.
pub(super) fn conflict<T: std::fmt::Debug>(result: Result<T, ArchiveError>) -> String {
    match result {
        Err(ArchiveError::Conflict(message)) => message,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

/// The whole audit log, newest first: (action, actor, job, message, summary).
pub(super) async fn audit_trail(
    archive: &dyn Archive,
) -> Vec<(String, String, Option<i64>, Option<i64>, String)> {
    archive
        .audit_log(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                e.action,
                e.actor,
                e.job_id.map(|j| j.parse().unwrap()),
                e.message_id.map(|m| m.parse().unwrap()),
                e.summary,
            )
        })
        .collect()
}

/// The actions of the audit entries about job `id`, newest first.
pub(super) async fn job_actions(archive: &dyn Archive, id: i64) -> Vec<String> {
    audit_trail(archive)
        .await
        .into_iter()
        .filter(|e| e.2 == Some(id))
        .map(|e| e.0)
        .collect()
}

/// Waits out a lease taken (or renewed) at `since` for `lease_ms`, with a margin.
pub(super) async fn outwait(since: Instant, lease_ms: u64) {
    tokio::time::sleep_until((since + Duration::from_millis(lease_ms + 150)).into()).await;
}

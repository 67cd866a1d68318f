//! The records the archive stores and returns, list filters and keyset pages.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::message::death::{DeathRecord, FirstDeath, ReplayTarget};
use crate::message::headers::{MessageProperties, Table};

/// The reason under which messages without death history are counted and filtered.
pub const NO_REASON: &str = "none";

/// Largest page the list API returns, whatever `limit` asks for.
pub const MAX_PAGE_SIZE: u32 = 500;
/// Page size when `limit` is not given.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// What became of one stored batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StoreOutcome {
    pub inserted: u64,
    /// Redeliveries of messages already archived (a crash or reconnect before the ack, a
    /// broker crash after it).
    pub duplicates: u64,
}

/// What has happened to an archived message since it arrived. A message is **open** — counted
/// by the overview and its failure group — until it is dismissed, or replayed and its copy did
/// not come back within the settle time ([`MessageStatus::is_open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Archived,
    /// Published again, settling: open until the settle time passes without its copy dying.
    Replayed,
    ReplayFailed,
    Dismissed,
    /// Replayed, and its copy was not archived back within the settle time.
    Settled,
    /// Replayed, and its copy died again: the copy is the open record now.
    DiedAgain,
}

impl MessageStatus {
    pub const ALL: [MessageStatus; 6] = [
        Self::Archived,
        Self::Replayed,
        Self::ReplayFailed,
        Self::Dismissed,
        Self::Settled,
        Self::DiedAgain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Archived => "archived",
            MessageStatus::Replayed => "replayed",
            MessageStatus::ReplayFailed => "replay_failed",
            MessageStatus::Dismissed => "dismissed",
            MessageStatus::Settled => "settled",
            MessageStatus::DiedAgain => "died_again",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// Still to be dealt with: counted as open by the overview, its queue and its group.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            MessageStatus::Archived | MessageStatus::Replayed | MessageStatus::ReplayFailed
        )
    }

    /// Replayed once already (settling, settled or died again): a plan skips it unless asked
    /// to replay those too.
    pub fn was_replayed(self) -> bool {
        matches!(
            self,
            MessageStatus::Replayed | MessageStatus::Settled | MessageStatus::DiedAgain
        )
    }

    /// The statuses that are open, or resolved (for a filter's `IN (...)`).
    pub fn open_ones(open: bool) -> impl Iterator<Item = MessageStatus> {
        Self::ALL.into_iter().filter(move |s| s.is_open() == open)
    }
}

/// What a list filters a status by: one status, or every open (or resolved) one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    One(MessageStatus),
    /// Archived, settling after a replay, or whose replay failed.
    Open,
    /// Dismissed, settled after a replay, or died again (as a new record).
    Resolved,
}

impl StatusFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            StatusFilter::One(s) => s.as_str(),
            StatusFilter::Open => "open",
            StatusFilter::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(StatusFilter::Open),
            "resolved" => Some(StatusFilter::Resolved),
            s => MessageStatus::parse(s).map(StatusFilter::One),
        }
    }

    /// The statuses it lets through.
    pub fn statuses(self) -> Vec<MessageStatus> {
        match self {
            StatusFilter::One(s) => vec![s],
            StatusFilter::Open => MessageStatus::open_ones(true).collect(),
            StatusFilter::Resolved => MessageStatus::open_ones(false).collect(),
        }
    }
}

/// How one publish of a replay ended: what the broker answered.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Confirmed, and routed to at least one queue.
    Published,
    /// Returned by the broker: no queue is bound to the target (`mandatory`).
    Unroutable,
    /// The broker confirmed it negatively.
    Nacked,
    /// No answer: the connection or channel failed, or the record was unreadable.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Published => "published",
            Outcome::Unroutable => "unroutable",
            Outcome::Nacked => "nacked",
            Outcome::Failed => "failed",
        }
    }
}

/// One archived message as the list shows it (the API's `MessageSummary`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MessageSummary {
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    /// The DLQ it was archived from: its name, or `vhost/name` outside the AMQP URL's vhost.
    pub queue: String,
    /// The vhost of that DLQ (the archive keeps the AMQP URL's own as empty; the API and
    /// pages name it).
    pub vhost: String,
    /// The broker of that DLQ: `default` (`--amqp-url`) or a `--broker` name.
    #[serde(default = "default_broker")]
    pub broker: String,
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
    /// Still to be dealt with ([`MessageStatus::is_open`]).
    pub open: bool,
    /// The failing consumer's own description of the error (`--error-header`, or its
    /// framework's own headers), if any: a stack trace's root cause as `Type: message`.
    pub error: Option<String>,
    /// The exception type the error names (null: none named).
    pub error_type: Option<String>,
    /// What its failure group is keyed on: the exception type and the message's template
    /// (`""`: no error given; null: archived by an earlier version, not regrouped yet).
    pub cause: Option<String>,
    /// Its message type: its framework's (`Shop.Contracts.SubmitOrder`, an actor, a PHP
    /// class), else the AMQP `type` property.
    pub message_type: Option<String>,
    /// The framework error-queue convention it follows (null: none).
    pub convention: Option<crate::message::conventions::Convention>,
    /// The queue it failed in, as its framework says (null: it does not, or no framework);
    /// `vhost/name` outside the AMQP URL's vhost, as `queue`.
    pub failed_queue: Option<String>,
    /// The header(s) of its framework's convention that gave `replay_target`
    /// (`MT-Fault-InputAddress`); null when the death history gave it, or there is none.
    pub replay_target_from: Option<String>,
    /// What its convention's headers got wrong (a malformed or missing header, an unknown
    /// vhost), in words; they never stop it being archived.
    pub convention_problems: Vec<String>,
    /// The record this one is a replayed copy of (it died again).
    #[serde(serialize_with = "optional_id_as_string")]
    #[schema(value_type = Option<String>)]
    pub replay_of: Option<i64>,
    /// The start of its body as text, whitespace folded (none for binary bodies, for
    /// messages archived before snippets, and for viewers under `--mask`).
    pub snippet: Option<String>,
    /// Business field values (`--field`), by name.
    pub fields: BTreeMap<String, String>,
}

pub fn id_as_string<S: serde::Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

pub fn optional_id_as_string<S: serde::Serializer>(
    id: &Option<i64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => s.collect_str(id),
        None => s.serialize_none(),
    }
}

/// One archived message with everything needed to show or replay it, except the body.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
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

/// The start of a stored body, as much of it as was asked for, and how long it is in all:
/// a body of 100 MiB is shown and sent a piece at a time, never read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyStart {
    /// Its first bytes (all of them when [`BodyStart::is_whole`]).
    pub body: StoredBody,
    /// Its size in bytes.
    pub size: u64,
}

impl BodyStart {
    pub fn is_whole(&self) -> bool {
        self.body.bytes.len() as u64 >= self.size
    }

    /// With what its message says of its bytes ([`StoredBody::of_message`]).
    pub fn of_message(self, message: &ArchivedMessage) -> Self {
        BodyStart {
            body: self.body.of_message(message),
            size: self.size,
        }
    }
}

/// The stored body bytes and what the message said about them.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBody {
    pub bytes: Vec<u8>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// The message's headers (kombu's `compression`, a header naming a protobuf message) and
    /// its `type` property (`amqp-1.0` marks an AMQP 1.0 body): `None` as read, until
    /// [`StoredBody::of_message`] takes them from the message the caller holds (its headers
    /// and properties are parsed there already).
    pub headers: Option<Table>,
    pub message_type: Option<String>,
}

impl StoredBody {
    /// The body with what its message says of its bytes beyond the columns.
    pub fn of_message(self, message: &ArchivedMessage) -> Self {
        StoredBody {
            headers: message.headers.clone(),
            message_type: message.encoding().message_type.map(str::to_owned),
            ..self
        }
    }

    pub fn encoding(&self) -> crate::message::body::Encoding<'_> {
        crate::message::body::Encoding::new(
            self.content_type.as_deref(),
            self.content_encoding.as_deref(),
        )
        .with_headers(self.headers.as_ref())
        .with_message_type(self.message_type.as_deref())
    }
}

impl ArchivedMessage {
    /// How its body's bytes become its content.
    pub fn encoding(&self) -> crate::message::body::Encoding<'_> {
        let s = &self.summary;
        crate::message::body::Encoding::new(
            s.content_type.as_deref(),
            s.content_encoding.as_deref(),
        )
        .with_headers(self.headers.as_ref())
        .with_message_type(self.properties.kind.as_ref().and_then(|k| k.as_str()))
    }
}

/// Filters of the message list; every field narrows the result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageFilter {
    /// The DLQ it was archived from.
    pub queue: Option<String>,
    /// The vhost of that DLQ, as stored (empty: the AMQP URL's own).
    pub vhost: Option<String>,
    /// The broker of that DLQ (`default`: `--amqp-url`'s).
    pub broker: Option<String>,
    /// The reason of its first death ([`NO_REASON`] for messages without history).
    pub reason: Option<String>,
    /// The queue of its first death (the DLQ for messages without history).
    pub first_death_queue: Option<String>,
    /// The error description its failing consumer left (`""`: none).
    pub error: Option<String>,
    /// The id of its failure group (a cause group: every message type of it), as digits.
    pub group: Option<String>,
    /// The exception type its error names (`""`: none).
    pub error_type: Option<String>,
    /// Its message type, the AMQP `type` property (`""`: none).
    pub message_type: Option<String>,
    /// The exchange of its first death (its replay target exchange).
    pub exchange: Option<String>,
    /// The routing key of its replay target.
    pub routing_key: Option<String>,
    pub status: Option<StatusFilter>,
    pub content_type: Option<String>,
    /// Words, phrases and prefixes to find.
    pub text: Option<crate::message::search::TextQuery>,
    /// `field:value` terms of a search (built-in or business fields), all required.
    pub terms: Vec<crate::message::search::FieldTerm>,
    /// Archived at or after.
    pub since: Option<OffsetDateTime>,
    /// Archived before.
    pub until: Option<OffsetDateTime>,
    /// Published by this replay job.
    pub job: Option<i64>,
    /// Copies that died again (archived back) of the messages this replay job published.
    pub copies_of_job: Option<i64>,
    /// Only messages of these DLQs (keys): the DLQs a caller's rights reach (`None`: every
    /// DLQ; empty: none).
    pub dlqs: Option<Vec<String>>,
}

impl MessageFilter {
    /// The failure group (its id, as digits) whose open messages this filter asks for, when it
    /// asks for nothing else: the overview's group link.
    pub fn open_group(&self) -> Option<&str> {
        let only_group = self.queue.is_none()
            && self.vhost.is_none()
            && self.broker.is_none()
            && self.reason.is_none()
            && self.first_death_queue.is_none()
            && self.error.is_none()
            && self.error_type.is_none()
            && self.message_type.is_none()
            && self.exchange.is_none()
            && self.routing_key.is_none()
            && self.content_type.is_none()
            && self.text.is_none()
            && self.terms.is_empty()
            && self.since.is_none()
            && self.until.is_none()
            && self.job.is_none()
            && self.copies_of_job.is_none()
            && self.dlqs.is_none()
            && self.status == Some(StatusFilter::Open);
        self.group.as_deref().filter(|_| only_group)
    }

    /// The search's terms on business fields (`--field`), found by their words
    /// ([`crate::message::field_match`]), not compared whole as [`MessageFilter::conditions`] are.
    pub fn business_terms(&self) -> impl Iterator<Item = &crate::message::search::FieldTerm> {
        self.terms.iter().filter(|t| t.is_business())
    }

    /// Every `field = value` condition, from the filter's own fields and the search's terms
    /// on built-in fields, with the names of empty values (`(AMQP default)`, ...) resolved.
    pub fn conditions(&self) -> Vec<(&str, &str)> {
        let named = [
            ("queue", &self.queue),
            ("vhost", &self.vhost),
            ("broker", &self.broker),
            ("reason", &self.reason),
            ("first_death_queue", &self.first_death_queue),
            ("error", &self.error),
            ("group", &self.group),
            ("error_type", &self.error_type),
            ("message_type", &self.message_type),
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
                .filter(|t| !t.is_business())
                .map(|t| (t.field.as_str(), t.value.as_str())),
        );
        // The names of empty values resolve here, once, for every backend.
        for (field, value) in &mut out {
            if matches!(
                *field,
                "exchange" | "routing_key" | "error" | "error_type" | "message_type"
            ) {
                *value = filter_value(value);
            }
        }
        out
    }
}

/// How filters name the empty values they can select: the default exchange, the empty
/// routing key and "no error given" (also "no exception type", "no message type"); an empty
/// filter value means no filter at all.
pub const EMPTY_NAMES: [&str; 3] = [DEFAULT_EXCHANGE, EMPTY_KEY, NO_ERROR];
pub use crate::message::exchange_policy::DEFAULT_EXCHANGE;
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

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MessagePage {
    pub messages: Vec<MessageSummary>,
    /// Pass back as `cursor` for the next (older) page; `None` on the last page.
    pub next_cursor: Option<String>,
    /// Messages archived whose search entries are not written yet (the indexer follows
    /// ingest, seconds behind during a burst): listed and counted, not yet found by a search
    /// (`q`, `field:value`). 0 when search is up to date.
    pub indexing_behind: u64,
}

/// Archived messages for one DLQ and first-death reason (`none` without death history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueReasonCount {
    /// The DLQ's key ([`crate::message::dlq::Dlq::key`]).
    pub queue: String,
    /// Its broker (`default`: `--amqp-url`'s), whose `broker:` prefix the key carries.
    pub broker: String,
    pub reason: String,
    pub messages: i64,
    /// Of those, still open (not dismissed, settled or died again).
    pub open: i64,
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

/// One replay of one message, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReplayRecord {
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
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

impl ReplayRecord {
    /// Still waiting for the broker's answer (or cut off waiting: Lazarus stopped).
    pub fn is_publishing(&self) -> bool {
        self.outcome == PUBLISHING
    }
}

/// The outcome a replay record has until the broker answers.
pub const PUBLISHING: &str = "publishing";

/// What [`Archive::begin_replay`] found for a request key.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStart {
    /// First time: publish, then [`Archive::finish_replay`] this id.
    New(i64),
    /// The key was used before (a double click, a retried request): do not publish again.
    Existing(ReplayRecord),
}

/// One DLQ's kept totals, as retention reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueTotals {
    pub queue: String,
    pub messages: i64,
    /// Body bytes.
    pub bytes: i64,
    /// The archive time of its oldest message (ms since the epoch).
    pub oldest_at: Option<i64>,
}

/// Which of a DLQ's messages a retention scan reads, in id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Those archived before this time (ms since the epoch).
    ArchivedBefore(i64),
    /// Those resolved (dismissed, settled, died again) before this time.
    ResolvedBefore(i64),
    /// All of them, oldest first: for the caps.
    Oldest,
}

/// A retention pass, as recorded: what it deleted, by DLQ and rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionRun {
    pub id: i64,
    pub owner: String,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// When the instance that finished it means to run the next.
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_at: Option<OffsetDateTime>,
    pub deleted: i64,
    pub counts: Vec<RetentionCount>,
}

/// What a run deleted from one DLQ under one rule (`days=90`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionCount {
    pub queue: String,
    pub rule: String,
    pub messages: i64,
    pub bytes: i64,
}

/// Messages an export reads at a time, at most…
pub const EXPORT_BATCH: u32 = 500;
/// …and body bytes (a batch stops before it would pass them, but has one message at least).
pub const EXPORT_BATCH_BYTES: i64 = 8 * 1024 * 1024;

/// One archived message, whole, as `lazarus export` and `GET /api/export` write it and
/// `lazarus import` reads it: one JSON line each, lossless — the body's bytes (base64), every
/// property and header with its AMQP type, the status with its note and times, and its
/// replays with what they published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportedMessage {
    /// Its id in the archive it was exported from.
    #[serde(serialize_with = "id_as_string", deserialize_with = "id_from_string")]
    #[schema(value_type = String)]
    pub id: i64,
    /// The DLQ's name, within its vhost (in the archive's own form, see
    /// [`ExportedMessage::portable`], outside a file).
    pub queue: String,
    /// The DLQ's vhost, named; absent (a file of an earlier version): the importing
    /// instance's AMQP URL vhost.
    #[serde(default)]
    pub vhost: String,
    /// The DLQ's broker: `default` (`--amqp-url`'s; also when absent, a file of an earlier
    /// version) or a `--broker` name.
    #[serde(default = "default_broker")]
    pub broker: String,
    #[serde(with = "time::serde::rfc3339")]
    pub archived_at: OffsetDateTime,
    /// The exchange and routing key it was delivered into the DLQ with.
    pub exchange: String,
    pub routing_key: String,
    pub redelivered: bool,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    /// The body bytes, base64 (standard alphabet, padded).
    #[serde(with = "base64_bytes")]
    #[schema(value_type = String, content_encoding = "base64")]
    pub body: Vec<u8>,
    /// A body over a MiB that [`crate::archive::Export::export_batch`] left in the archive,
    /// `body` being empty meanwhile: its line reads it a piece at a time as it is written
    /// ([`crate::archive::ExportLine`]). Never in a file.
    #[serde(skip)]
    pub unread_body: Option<UnreadBody>,
    pub status: MessageStatus,
    pub status_note: Option<String>,
    /// When the status last changed (none while it is `archived`).
    #[serde(with = "time::serde::rfc3339::option")]
    pub status_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub replayed_at: Option<OffsetDateTime>,
    /// The message this is a replayed copy of (an id of the same archive).
    #[serde(
        serialize_with = "optional_id_as_string",
        deserialize_with = "optional_id_from_string"
    )]
    #[schema(value_type = Option<String>)]
    pub replay_of: Option<i64>,
    /// Its replays, oldest first.
    pub replays: Vec<ExportedReplay>,
}

impl ExportedMessage {
    /// As a file carries it between instances: the vhost named (the archive keeps the AMQP
    /// URL's own, `home`, as empty) and the queue by its name within that vhost.
    /// The broker by its name, the queue without its `broker:` prefix.
    pub fn portable(mut self, brokers: &crate::message::brokers::Brokers) -> Self {
        let dlq = crate::message::dlq::Dlq::from_stored(&self.queue, &self.broker, &self.vhost);
        let home = brokers.home(&self.broker);
        self.vhost = dlq.vhost_name(&home).to_owned();
        self.queue = dlq.name;
        self
    }

    /// Back in the archive's form, on the instance whose brokers are `brokers`.
    pub fn stored(mut self, brokers: &crate::message::brokers::Brokers) -> Self {
        let home = brokers.home(&self.broker);
        self.vhost = crate::message::dlq::stored_vhost(&self.vhost, &home);
        self.queue = crate::message::dlq::on_broker(
            &self.broker,
            crate::message::dlq::qualify(&self.vhost, &self.queue),
        );
        self
    }
}

/// A body left in the archive by an export: whose it is, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadBody {
    pub message_id: i64,
    pub size: u64,
}

/// One replay of an exported message, whole: what it published (an edit too) and how it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportedReplay {
    pub request_key: String,
    pub actor: String,
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    pub target: ReplayTarget,
    pub outcome: String,
    pub detail: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// The body it published instead of the message's own, base64.
    #[serde(with = "optional_base64_bytes")]
    #[schema(value_type = Option<String>, content_encoding = "base64")]
    pub edited_body: Option<Vec<u8>>,
    /// The headers it published instead of the message's own.
    pub edited_headers: Option<Table>,
}

fn id_from_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(serde::de::Error::custom)
}

fn optional_id_from_string<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<i64>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|t| t.parse().map_err(serde::de::Error::custom))
        .transpose()
}

mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde::{de, Deserializer, Serializer};

    /// Written as it is encoded: no text of it is made first.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&base64::display::Base64Display::new(bytes, &STANDARD))
    }

    /// Decodes the text where the parser holds it (borrowed from a line read whole): a body
    /// of N bytes costs N more, not 2.3 N for a copy of its text first.
    pub struct Base64;

    impl<'de> de::Visitor<'de> for Base64 {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("base64 text")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
            // Past the bound, refused before it is decoded.
            let about = text.len() / 4 * 3;
            if about > crate::archive::admit::MAX_BODY_BYTES + 2 {
                return crate::archive::admit::check_body("a body", about)
                    .map(|()| Vec::new())
                    .map_err(E::custom);
            }
            STANDARD.decode(text).map_err(E::custom)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_str(Base64)
    }
}

mod optional_base64_bytes {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => super::base64_bytes::serialize(bytes, s),
            None => s.serialize_none(),
        }
    }

    struct Optional;

    impl<'de> de::Visitor<'de> for Optional {
        type Value = Option<Vec<u8>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("base64 text or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(super::base64_bytes::Base64).map(Some)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        d.deserialize_option(Optional)
    }
}

/// An API token as stored (its hash, never the token), for `lazarus migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub name: String,
    pub token_hash: String,
    pub role: String,
    /// `ROLE:PATTERN` lines; `None`: the role on every DLQ.
    pub grants: Option<String>,
    pub created_by: String,
    /// Unix milliseconds, as every time column.
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub owner: Option<String>,
}

/// An audit entry as stored, for `lazarus migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub id: i64,
    /// Unix milliseconds.
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub job_id: Option<i64>,
    pub message_id: Option<i64>,
    pub summary: String,
    pub source: Option<String>,
}

/// A replay job as stored, for `lazarus migrate` (its items apart, see [`ItemRow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub id: i64,
    pub request_key: String,
    pub actor: String,
    pub created_at: i64,
    pub selection: String,
    pub target_exchange: Option<String>,
    pub target_routing_key: Option<String>,
    pub rate_per_sec: Option<i64>,
    pub include_replayed: bool,
    pub canary_count: i64,
    pub canary_wait_ms: i64,
    pub canary_max_deaths: i64,
    pub canary_done: bool,
    pub plan: String,
    pub state: String,
    pub detail: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// published, unroutable, nacked, failed, skipped, cancelled, total.
    pub counts: [i64; 7],
    pub to_first_death_queue: bool,
}

/// One item of a replay job as stored, for `lazarus migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRow {
    pub message_id: i64,
    pub target_exchange: Option<String>,
    pub target_routing_key: Option<String>,
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub attempts: i64,
    pub finished_at: Option<i64>,
}

/// `default`: the broker `--amqp-url` names, where a record of an earlier version names none.
pub fn default_broker() -> String {
    crate::message::dlq::DEFAULT_BROKER.to_owned()
}

/// Whether `broker` is `default`, which a plan's target leaves unsaid.
pub fn is_default_broker(broker: &str) -> bool {
    broker == crate::message::dlq::DEFAULT_BROKER
}

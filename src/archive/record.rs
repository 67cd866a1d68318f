//! A delivery as ingest hands it to the archive, and its derived, ready-to-store form:
//! fingerprint, decoded death history, typed JSON (pure).

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::message::death::{self, DeathHistory, DELIVERY_COUNTERS};
use crate::message::headers::{AmqpValue, Bytes, MessageProperties, Table};

use super::failure::{column_text, error_line};

/// A message exactly as the broker delivered it from a DLQ.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingMessage {
    /// The DLQ as the archive keys it ([`Dlq::key`](crate::message::dlq::Dlq::key)): its name
    /// (`/name` when it holds `/`), or `vhost/name` outside the AMQP URL's vhost.
    pub queue: String,
    /// The DLQ's broker: `default` (`--amqp-url`) or a `--broker` name.
    pub broker: String,
    /// The DLQ's vhost; empty: the AMQP URL's own.
    pub vhost: String,
    pub exchange: String,
    pub routing_key: String,
    /// The broker's redelivered flag: `false` proves no consumer (so no archive) saw it before.
    pub redelivered: bool,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    pub body: Vec<u8>,
    pub received_at: OffsetDateTime,
    /// What the wire decoder had to keep undecoded (its bytes are in the headers).
    pub decode_problems: Vec<String>,
    /// Its offset, when the DLQ is a stream (read from where the archive left off).
    pub stream_offset: Option<u64>,
}

fn column_bytes(value: &Option<Bytes>) -> Option<String> {
    value
        .as_ref()
        .map(|b| column_text(&b.to_text()).into_owned())
}

/// Where each stream DLQ of a batch is to be read on from: past its last offset.
pub fn stream_positions(batch: &[PreparedMessage]) -> std::collections::BTreeMap<&str, i64> {
    let mut out = std::collections::BTreeMap::new();
    for m in batch {
        if let Some(offset) = m.message.stream_offset {
            let next = out.entry(m.message.queue.as_str()).or_insert(0);
            *next = (*next).max(offset as i64 + 1);
        }
    }
    out
}

/// The message's text columns: what lists show, filter and sort on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageColumns {
    pub exchange: String,
    pub routing_key: String,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
}

/// Headers in which failing consumers commonly leave their error: Spring AMQP, MassTransit,
/// and plain ones.
pub const DEFAULT_ERROR_HEADERS: [&str; 4] = [
    "x-exception-message",
    "MT-Fault-Message",
    "exception",
    "error",
];

/// Body text indexed for search, per message (the page and the archive keep the rest).
const INDEXED_BODY_BYTES: usize = 64 * 1024;
/// Bodies up to this size are parsed as JSON to extract business fields.
const FIELD_BODY_BYTES: usize = 1024 * 1024;
/// What of a body a framework convention reads: one byte more than it takes, so that it
/// can tell a body too long to read from one that fits.
const CONVENTION_BODY_BYTES: usize = crate::message::conventions::MAX_BODY_BYTES + 1;

/// A business field: a name users search by (`invoice:INV-1`) and where it is in a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusinessField {
    pub name: String,
    /// An RFC 6901 JSON pointer, such as `/invoice_id` or `/customer/id`.
    pub pointer: String,
}

impl std::str::FromStr for BusinessField {
    type Err = String;

    /// `name=/json/pointer`
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, pointer) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not name=/json/pointer"))?;
        let name = name.trim().to_lowercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("field name {name:?} must be letters, digits and _"));
        }
        if crate::message::search::BUILT_IN_FIELDS.contains(&name.as_str()) {
            return Err(format!(
                "{name:?} is a built-in search field; choose another name"
            ));
        }
        if !pointer.starts_with('/') {
            return Err(format!(
                "{pointer:?} is not a JSON pointer (it starts with /)"
            ));
        }
        Ok(BusinessField {
            name,
            pointer: pointer.to_owned(),
        })
    }
}

/// What ingest extracts from each message beyond its death history.
#[derive(Debug, Clone)]
pub struct IngestRules {
    /// Header names (case-insensitive, first match wins) holding the failing consumer's error.
    pub error_headers: Vec<String>,
    /// JSON pointers into the body (first match wins) holding it, when no header does:
    /// frameworks such as Dramatiq leave their traceback in the body.
    pub error_pointers: Vec<String>,
    pub fields: Vec<BusinessField>,
    /// JSON pointers (`--mask`) whose values stay out of the full-text index.
    pub masks: Vec<String>,
    /// Protobuf message types bodies are decoded with (`--proto-descriptors`).
    pub schemas: Option<std::sync::Arc<crate::message::structured::protobuf::Schemas>>,
    /// The AMQP URL's vhost, which the archive stores as empty: a framework's address names
    /// it ([`crate::message::conventions`]).
    pub home_vhost: String,
}

impl Default for IngestRules {
    fn default() -> Self {
        IngestRules {
            error_headers: DEFAULT_ERROR_HEADERS
                .iter()
                .map(|h| h.to_string())
                .collect(),
            error_pointers: Vec::new(),
            fields: Vec::new(),
            masks: Vec::new(),
            schemas: None,
            home_vhost: "/".to_owned(),
        }
    }
}

/// The text search finds a message by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchText {
    /// The start of the body, where it is text (decompressed, charset decoded).
    pub body: String,
    /// message-id, correlation-id, type, app-id and business field values.
    pub ids: String,
    /// Every text value of every header, nested ones included.
    pub headers: String,
    /// The start of the body text, whitespace folded: what the list shows of it.
    pub snippet: Option<String>,
}

fn header_text(table: &Table, out: &mut String) {
    fn walk(v: &AmqpValue, out: &mut String) {
        match v {
            AmqpValue::Table(t) => header_text(t, out),
            AmqpValue::Array(items) => items.iter().for_each(|i| walk(i, out)),
            other => {
                if let Some(s) = other.as_str() {
                    out.push_str(s);
                    out.push('\n');
                }
            }
        }
    }
    for v in table.values() {
        walk(v, out);
    }
}

/// Business field values found in a JSON body: strings as they are, numbers and booleans
/// as written; objects, arrays and null are not values to search by.
pub fn extract_fields(body_text: Option<&str>, fields: &[BusinessField]) -> Vec<(String, String)> {
    let Some(text) = body_text.filter(|t| !fields.is_empty() && t.len() <= FIELD_BODY_BYTES) else {
        return Vec::new();
    };
    // Each value is found in the text and only it is parsed: the document is never built.
    fields
        .iter()
        .filter_map(|f| {
            let value = match scalar_at(text, &f.pointer)? {
                serde_json::Value::String(s) => column_text(&s).into_owned(),
                v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => v.to_string(),
                _ => return None,
            };
            Some((f.name.clone(), value))
        })
        .collect()
}

/// The search text of a message (pure).
fn search_text(
    message: &IncomingMessage,
    body_text: Option<&str>,
    fields: &[(String, String)],
) -> SearchText {
    let p = &message.properties;
    let mut ids: Vec<std::borrow::Cow<'_, str>> =
        [&p.message_id, &p.correlation_id, &p.kind, &p.app_id]
            .into_iter()
            .filter_map(MessageProperties::text)
            .collect();
    ids.extend(fields.iter().map(|(_, v)| v.as_str().into()));
    let mut headers = String::new();
    if let Some(h) = &message.headers {
        header_text(h, &mut headers);
    }
    let unescaped = json_unescaped(body_text.unwrap_or_default());
    let body = crate::message::body::prefix(&unescaped, INDEXED_BODY_BYTES);
    let snippet = snippet(body);
    // CJK runs as bigrams, so that any part of one can be searched for.
    let indexed = |text: &str| crate::message::cjk::bigrams(&column_text(text)).into_owned();
    SearchText {
        body: indexed(body),
        ids: indexed(&ids.join("\n")),
        headers: indexed(&headers),
        snippet,
    }
}

/// What the list shows of a body's text: [`search_text`]'s snippet, alone.
fn body_snippet(body_text: Option<&str>) -> Option<String> {
    let unescaped = json_unescaped(body_text.unwrap_or_default());
    snippet(crate::message::body::prefix(&unescaped, INDEXED_BODY_BYTES))
}

/// Characters of a body the list shows.
const SNIPPET_CHARS: usize = 160;

/// The start of a body's text, whitespace folded (`None` when there is no text).
fn snippet(text: &str) -> Option<String> {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.chars().count() >= SNIPPET_CHARS {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    let out: String = out.chars().take(SNIPPET_CHARS).collect();
    (!out.is_empty()).then(|| column_text(&out).into_owned())
}

/// JSON whose strings escape what is not ASCII (`"\u652f\u4ed8"`, as Python's `json.dumps`
/// and so kombu and Celery write it by default) as the characters they stand for, so that
/// its words are indexed as words; any other text as it is.
fn json_unescaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("\\u") {
        return text.into();
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value.to_string().into(),
        Err(_) => text.into(),
    }
}

/// The error description a failing consumer left in the headers, if any: the first
/// configured header with a text value, as [`error_line`] reads it.
pub fn error_description(headers: Option<&Table>, names: &[String]) -> Option<String> {
    let headers = headers?;
    names.iter().find_map(|name| {
        let (_, value) = headers
            .iter()
            .find(|(k, _)| k.as_bytes().eq_ignore_ascii_case(name.as_bytes()))?;
        error_line(value.as_str()?)
    })
}

/// The text, number or boolean at `pointer` in JSON `text`, parsed alone.
fn scalar_at(text: &str, pointer: &str) -> Option<serde_json::Value> {
    let json = crate::message::masking::value_at(text, pointer)?;
    match json.as_bytes().first()? {
        b'"' | b'-' | b'0'..=b'9' | b't' | b'f' => serde_json::from_str(json).ok(),
        _ => None,
    }
}

/// The error a failing consumer left in a JSON body, at the first of `pointers` holding text,
/// as [`error_line`] reads it.
#[cfg(test)]
pub fn body_error(body_text: Option<&str>, pointers: &[String]) -> Option<String> {
    body_error_text(body_text, pointers).and_then(|t| error_line(&t))
}

/// The whole text at the first of `pointers` holding some (a traceback, say).
fn body_error_text(body_text: Option<&str>, pointers: &[String]) -> Option<String> {
    let text = body_text.filter(|t| !pointers.is_empty() && t.len() <= FIELD_BODY_BYTES)?;
    pointers.iter().find_map(|p| match scalar_at(text, p)? {
        serde_json::Value::String(s) if error_line(&s).is_some() => Some(s),
        _ => None,
    })
}

/// The keys `field:value` finds business field values by, each (name, key) once.
pub(crate) fn field_keys(fields: &[(String, String)]) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for (name, value) in fields {
        for key in crate::message::field_match::keys(value) {
            // The same field twice with one value would repeat a key.
            if !out.iter().any(|(n, k)| n == name && *k == key) {
                out.push((name, key));
            }
        }
    }
    out
}

/// The business field values of a message and the text search finds it by, as `rules`
/// extract them: what ingest derives for the index, and the background reindex again.
pub(crate) fn searchable(
    message: &IncomingMessage,
    rules: &IngestRules,
) -> (Vec<(String, String)>, SearchText) {
    let (fields, search_text, _) = derived(message, rules, Search::Now);
    (fields, search_text)
}

/// Whether a message's search entries are derived as it is prepared, or only what the list
/// shows of it (the snippet), the rest left to the indexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    Now,
    Later,
}

/// [`searchable`] (with [`Search::Later`]: no fields, and of the search text only the
/// snippet), the error text the body holds at an `--error-pointer`, and the failure
/// ([`failure::read`](super::failure::read)), from one decoding.
fn derived(
    message: &IncomingMessage,
    rules: &IngestRules,
    search: Search,
) -> (Vec<(String, String)>, SearchText, super::Failure) {
    let p = &message.properties;
    let limit = if rules.fields.is_empty() && rules.error_pointers.is_empty() {
        INDEXED_BODY_BYTES
    } else {
        FIELD_BODY_BYTES
    };
    let content_type = MessageProperties::text(&p.content_type);
    let content_encoding = MessageProperties::text(&p.content_encoding);
    let encoding =
        crate::message::body::Encoding::new(content_type.as_deref(), content_encoding.as_deref())
            .with_headers(message.headers.as_ref())
            .with_message_type(p.kind.as_ref().and_then(|k| k.as_str()))
            .with_schemas(rules.schemas.as_deref());
    let mut text = crate::message::body::text(&message.body, &encoding, limit);
    // A framework's body (Dramatiq's, a Symfony envelope) is read further than the search
    // index's start; no other body is decoded twice.
    let cut = text.as_ref().is_some_and(|t| t.len() + 4 >= limit);
    if cut
        && limit < CONVENTION_BODY_BYTES
        && text
            .as_deref()
            .is_some_and(|t| crate::message::conventions::reads_body(&message.queue, t))
    {
        text = crate::message::body::text(&message.body, &encoding, CONVENTION_BODY_BYTES);
    }
    let fields = match search {
        Search::Now => extract_fields(text.as_deref(), &rules.fields),
        Search::Later => Vec::new(),
    };
    let error = body_error_text(text.as_deref(), &rules.error_pointers);
    let failure = super::failure::read(
        &super::failure::Source {
            queue: &message.queue,
            vhost: &message.vhost,
            broker: &message.broker,
            home_vhost: &rules.home_vhost,
            routing_key: &message.routing_key,
            headers: message.headers.as_ref(),
            properties: &message.properties,
            body_text: text.as_deref(),
            body_error: error.as_deref(),
        },
        &rules.error_headers,
    );
    let search_text = if rules.masks.is_empty() {
        match search {
            Search::Now => search_text(message, text.as_deref(), &fields),
            Search::Later => SearchText {
                snippet: body_snippet(text.as_deref()),
                ..Default::default()
            },
        }
    } else {
        // Masked values are not indexed, so no word search can reveal them: the body is
        // indexed as masked, or not at all when it cannot be masked (not JSON, too big).
        let masks = crate::message::masking::Pointers::new(&rules.masks);
        let masked = crate::message::body::whole_text(
            &message.body,
            &encoding,
            crate::message::masking::MAX_MASKED_BODY,
        )
        .ok()
        .and_then(|t| crate::message::masking::mask_json(&t, &masks));
        let indexed: Vec<(String, String)> = fields
            .iter()
            .filter(|(name, _)| {
                !rules
                    .fields
                    .iter()
                    .any(|f| &f.name == name && masks.cover(&f.pointer))
            })
            .cloned()
            .collect();
        match search {
            Search::Now => search_text(message, masked.as_deref(), &indexed),
            // What the list shows is masked as the index is.
            Search::Later => SearchText {
                snippet: body_snippet(masked.as_deref()),
                ..Default::default()
            },
        }
    };
    (fields, search_text, failure)
}

/// A stored message as the regroup reads its failure again.
pub(crate) struct Stored<'a> {
    pub queue: &'a str,
    pub vhost: &'a str,
    pub broker: &'a str,
    pub routing_key: &'a str,
    pub properties: &'a MessageProperties,
    pub headers: Option<&'a Table>,
    /// The start of its body, where a convention reads bodies ([`body_text`] of a head
    /// answered [`crate::message::conventions::reads_body`]).
    pub body: Option<&'a [u8]>,
    /// Its stored error: what an `--error-pointer` or a header no longer read gave.
    pub error: Option<&'a str>,
}

/// At most `limit` bytes of a body as text, decoded as ingest decodes it.
pub(crate) fn body_text(
    properties: &MessageProperties,
    headers: Option<&Table>,
    body: &[u8],
    rules: &IngestRules,
    limit: usize,
) -> Option<String> {
    let content_type = MessageProperties::text(&properties.content_type);
    let content_encoding = MessageProperties::text(&properties.content_encoding);
    let encoding =
        crate::message::body::Encoding::new(content_type.as_deref(), content_encoding.as_deref())
            .with_headers(headers)
            .with_message_type(properties.kind.as_ref().and_then(|k| k.as_str()))
            .with_schemas(rules.schemas.as_deref());
    crate::message::body::text(body, &encoding, limit)
}

/// A stored message's failure, read again as ingest reads it: its convention's target kept
/// only where its death history gives none ([`PreparedMessage::framework`]).
pub(crate) fn stored_failure(m: &Stored<'_>, rules: &IngestRules) -> super::Failure {
    let text = m
        .body
        .and_then(|b| body_text(m.properties, m.headers, b, rules, CONVENTION_BODY_BYTES));
    let mut failure = super::failure::read(
        &super::failure::Source {
            queue: m.queue,
            vhost: m.vhost,
            broker: m.broker,
            home_vhost: &rules.home_vhost,
            routing_key: m.routing_key,
            headers: m.headers,
            properties: m.properties,
            body_text: text.as_deref(),
            body_error: m.error,
        },
        &rules.error_headers,
    );
    if let Some(framework) = failure.framework.as_mut() {
        if framework.target.is_none() || death::decode(m.headers).replay_target.is_some() {
            framework.target = None;
            framework.target_from = None;
        }
    }
    failure
}

/// An incoming message with everything the archive stores derived from it.
#[derive(Debug, Clone)]
pub struct PreparedMessage {
    pub message: IncomingMessage,
    pub fingerprint: [u8; 32],
    /// The time its content carries ([`fingerprint_time`]): the fingerprint's index is kept
    /// in its order, so that a new row's entry lands where the archive's newest are.
    pub fingerprint_time: Option<i64>,
    pub properties_json: String,
    pub headers_json: Option<String>,
    pub history: DeathHistory,
    pub deaths_json: String,
    pub problems_json: Option<String>,
    /// What the failing consumer said: the error shown and searched, its type, the cause its
    /// failure group is keyed on, and the message's type ([`failure`](super::failure)).
    pub error: Option<String>,
    pub error_type: Option<String>,
    pub cause: String,
    pub message_type: Option<String>,
    /// The framework convention it follows ([`Framework`](super::Framework)); its `target`
    /// is taken into `history.replay_target` (so `None` here) where the history has none,
    /// and `target_from` is kept only then.
    pub framework: Option<super::Framework>,
    pub search_text: SearchText,
    pub columns: MessageColumns,
    /// Business field values: (name, value).
    pub fields: Vec<(String, String)>,
    /// The archive record this message is a replayed copy of (its `x-lazarus-replay-of`).
    pub replay_of: Option<i64>,
    /// An earlier attempt to store it failed in a way that may have committed all the same
    /// (a connection lost during COMMIT): stored only if no archived copy is found, as for
    /// a redelivery.
    pub maybe_stored: bool,
    /// Its search entries were not derived ([`PreparedMessage::to_append`]): of
    /// `search_text` only the snippet is set and `fields` is empty. However it is stored,
    /// its id waits in `index_pending` for the indexer.
    pub search_later: bool,
}

impl PreparedMessage {
    /// Derives everything with the default [`IngestRules`].
    pub fn new(message: IncomingMessage) -> Self {
        Self::with_rules(message, &IngestRules::default())
    }

    /// A message the write probe ([`crate::archive::Ingest::writable`]) writes as a batch
    /// would and rolls back: nothing is ever stored under its queue name.
    pub fn probe() -> Self {
        let properties = crate::message::headers::MessageProperties {
            message_id: Some("lazarus write probe".into()),
            ..Default::default()
        };
        Self::new(IncomingMessage {
            queue: "(lazarus write probe)".into(),
            broker: "default".into(),
            vhost: String::new(),
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
            properties,
            headers: None,
            body: b"probe".to_vec(),
            received_at: OffsetDateTime::now_utc(),
            decode_problems: Vec::new(),
            stream_offset: None,
        })
    }

    /// Whether an archived copy of it may exist: a redelivery, or a retry after a failed
    /// store.
    pub fn may_be_archived(&self) -> bool {
        self.message.redelivered || self.maybe_stored
    }

    /// Derives everything `rules` ask for, its search entries included.
    pub fn with_rules(message: IncomingMessage, rules: &IngestRules) -> Self {
        Self::derive(message, rules, Search::Now)
    }

    /// [`PreparedMessage::with_rules`] but for its search entries (the search text but the
    /// snippet, the business fields): a DLQ consumer's batch is appended without them and
    /// the indexer derives them from what is stored, so deriving them here was work between
    /// a delivery and its ack that nothing read. Stored any other way, such a message's id
    /// waits for the indexer too ([`PreparedMessage::search_later`]).
    pub fn to_append(message: IncomingMessage, rules: &IngestRules) -> Self {
        Self::derive(message, rules, Search::Later)
    }

    fn derive(message: IncomingMessage, rules: &IngestRules, search: Search) -> Self {
        let (fields, search_text, failure) = derived(&message, rules, search);
        let super::failure::Failure {
            error,
            error_type,
            cause,
            message_type,
            framework,
        } = failure;
        let properties_json = to_json(&message.properties);
        let headers_json = message.headers.as_ref().map(to_json);
        let mut history = death::decode(message.headers.as_ref());
        history
            .problems
            .extend(message.decode_problems.iter().cloned());
        history.sanitize(column_text);
        if let Some(first) = history.first_death.as_mut() {
            // Two vhosts' same-named queues are different failure groups.
            first.queue = crate::message::dlq::on_broker(
                &message.broker,
                crate::message::dlq::qualify(&message.vhost, &first.queue),
            );
        }
        // Without a death history's target, the framework's: a replay needs none chosen.
        let framework = framework.map(|mut f| {
            match (&history.replay_target, f.target.take()) {
                (None, Some(target)) => history.replay_target = Some(target),
                _ => f.target_from = None,
            }
            f
        });
        let columns = MessageColumns {
            exchange: column_text(&message.exchange).into_owned(),
            routing_key: column_text(&message.routing_key).into_owned(),
            message_id: column_bytes(&message.properties.message_id),
            correlation_id: column_bytes(&message.properties.correlation_id),
            content_type: column_bytes(&message.properties.content_type),
            content_encoding: column_bytes(&message.properties.content_encoding),
        };
        let replay_of = message
            .headers
            .as_ref()
            .and_then(|h| h.get(crate::message::headers::REPLAY_OF_HEADER))
            .and_then(|v| v.as_str()?.parse().ok());
        let deaths_json = to_json(&history.deaths);
        let problems_json = (!history.problems.is_empty()).then(|| to_json(&history.problems));
        let fingerprint = fingerprint(
            &message,
            &properties_json,
            headers_json.as_deref().unwrap_or(""),
        );
        let fingerprint_time = fingerprint_time(&history, &message.properties);
        PreparedMessage {
            message,
            fingerprint,
            fingerprint_time,
            properties_json,
            headers_json,
            history,
            deaths_json,
            problems_json,
            error,
            error_type,
            cause,
            message_type,
            framework,
            search_text,
            columns,
            fields,
            replay_of,
            maybe_stored: false,
            search_later: search == Search::Later,
        }
    }

    /// The keys `field:value` finds its business fields by, as (name, key): each value's
    /// folded words from each word to the end ([`crate::message::field_match::keys`]).
    pub fn field_keys(&self) -> Vec<(&str, String)> {
        field_keys(&self.fields)
    }

    /// The queue its framework convention says it failed in.
    pub fn failed_queue(&self) -> Option<&str> {
        self.framework.as_ref()?.failed_queue.as_deref()
    }

    /// The problems its convention found, as the archive stores them (a JSON array).
    pub fn convention_problems_json(&self) -> Option<String> {
        let problems = &self.framework.as_ref()?.problems;
        (!problems.is_empty()).then(|| to_json(problems))
    }

    /// The failure group it counts in ([`GroupKey`](super::GroupKey)): its DLQ, the queue it
    /// failed in (its first death's; else its framework's failed queue, the DLQ's without
    /// either), the reason, its cause and its message type.
    pub fn group(&self) -> super::GroupKey<'_> {
        let first = self.history.first_death.as_ref();
        let failed = self.failed_queue().unwrap_or(&self.message.queue);
        super::GroupKey {
            dlq: &self.message.queue,
            queue: first.map_or(failed, |f| f.queue.as_str()),
            reason: first.map_or(super::NO_REASON, |f| f.reason.as_str()),
            cause: &self.cause,
            message_type: self.message_type.as_deref().unwrap_or(""),
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("typed AMQP values always serialise")
}

/// sha-256 over exactly what was delivered: source queue, exchange, routing key, properties,
/// headers (with their types) and body. Each field is length-prefixed so that no two
/// different deliveries can produce the same byte stream. Left out are what a redelivery
/// changes: the redelivered flag and the broker's [`DELIVERY_COUNTERS`] (a header table that
/// held nothing else counts as none: 4.x gives a redelivered message without headers one).
/// Every other header, the message's own, is in.
pub fn fingerprint(
    message: &IncomingMessage,
    properties_json: &str,
    headers_json: &str,
) -> [u8; 32] {
    let without_counters;
    let headers_json = match &message.headers {
        Some(headers) if DELIVERY_COUNTERS.iter().any(|c| headers.get(c).is_some()) => {
            let own: Table = headers
                .iter()
                .filter(|(name, _)| {
                    !name
                        .as_str()
                        .is_some_and(|n| DELIVERY_COUNTERS.contains(&n))
                })
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            without_counters = if own.is_empty() {
                String::new()
            } else {
                to_json(&own)
            };
            &without_counters
        }
        // Unchanged since fingerprints began: rows archived before keep matching.
        _ => headers_json,
    };
    let mut hasher = Sha256::new();
    for part in [
        message.queue.as_bytes(),
        message.exchange.as_bytes(),
        message.routing_key.as_bytes(),
        properties_json.as_bytes(),
        headers_json.as_bytes(),
        &message.body,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// The time a message's content carries, in Unix seconds: its newest death's (x-death's
/// `time`), else its `timestamp` property, else none. Deliveries with one fingerprint carry
/// one time (both are of what the fingerprint hashes), so the archive looks a possible copy
/// up by both, through an index in time order: dead letters arrive roughly in the order they
/// died, so each new entry lands beside the archive's newest, where a fingerprint alone (random)
/// dirtied a page of the index anywhere for each message stored. Rows archived before this
/// existed, and messages without either time, are found by the fingerprint alone. Like the
/// fingerprint it must not change: rows archived before keep their time.
pub fn fingerprint_time(history: &DeathHistory, properties: &MessageProperties) -> Option<i64> {
    let died = history
        .deaths
        .iter()
        .filter_map(|d| d.time)
        .map(OffsetDateTime::unix_timestamp)
        .max();
    died.or_else(|| properties.timestamp.and_then(|t| i64::try_from(t).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::failure::MAX_ERROR_LEN;

    /// `message()`'s fingerprint as every version of Lazarus has computed it.
    const GOLDEN_FINGERPRINT: &str =
        "f2c07a03c586a53cc46338e2463c9f1b61e615fe4deeeb8c59dc760957f5e5d0";

    fn message() -> IncomingMessage {
        IncomingMessage {
            broker: "default".into(),
            vhost: String::new(),
            queue: "dlq".into(),
            exchange: "dlx".into(),
            routing_key: "dead".into(),
            redelivered: false,
            properties: MessageProperties {
                message_id: Some("m-1".into()),
                ..Default::default()
            },
            headers: Some(Table::from([("k", AmqpValue::LongInt(1))])),
            body: b"{}".to_vec(),
            received_at: OffsetDateTime::UNIX_EPOCH,
            decode_problems: Vec::new(),
            stream_offset: None,
        }
    }

    #[test]
    fn redelivery_has_the_same_fingerprint() {
        let first = PreparedMessage::new(message());
        let again = PreparedMessage::new(IncomingMessage {
            redelivered: true,
            received_at: OffsetDateTime::now_utc(),
            ..message()
        });
        assert_eq!(first.fingerprint, again.fingerprint);
    }

    /// The fingerprint archived rows were keyed on stays what it was.
    #[test]
    fn fingerprints_are_stable() {
        let hex: String = PreparedMessage::new(message())
            .fingerprint
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, GOLDEN_FINGERPRINT);
    }

    /// The time the fingerprint's index is ordered by: the newest death's, else the
    /// `timestamp` property, else none; the same for every delivery of one message, as the
    /// lookup of its copies needs, and what it was for rows archived before.
    #[test]
    fn fingerprint_time_is_the_newest_death_else_the_timestamp() {
        let death = |queue: &str, time: u64| {
            AmqpValue::Table(Table::from([
                ("queue", AmqpValue::text(queue)),
                ("reason", AmqpValue::text("rejected")),
                ("count", AmqpValue::LongLongInt(1)),
                ("exchange", AmqpValue::text("")),
                ("time", AmqpValue::Timestamp(time)),
            ]))
        };
        let with = |deaths: Option<Vec<AmqpValue>>, timestamp: Option<u64>| {
            let mut m = message();
            m.properties.timestamp = timestamp;
            if let Some(deaths) = deaths {
                let headers = m.headers.as_mut().unwrap();
                headers.insert("x-death", AmqpValue::Array(deaths));
            }
            m
        };
        let time = |m: IncomingMessage| PreparedMessage::new(m).fingerprint_time;
        // Broker order is newest first, but a retry loop keeps each entry's first time: the
        // largest is taken, wherever it is.
        let looped = with(
            Some(vec![
                death("work", 1_700_000_100),
                death("retry", 1_700_000_160),
            ]),
            Some(1_600_000_000),
        );
        assert_eq!(time(looped.clone()), Some(1_700_000_160));
        assert_eq!(time(with(None, Some(1_600_000_000))), Some(1_600_000_000));
        assert_eq!(time(with(None, None)), None);
        // A history without times (malformed, or not the broker's) falls back too.
        let mut untimed = with(None, Some(42));
        untimed.headers.as_mut().unwrap().insert(
            "x-death",
            AmqpValue::Array(vec![AmqpValue::Table(Table::from([(
                "queue",
                AmqpValue::text("work"),
            )]))]),
        );
        assert_eq!(time(untimed), Some(42));
        // What a redelivery changes does not change it.
        let mut again = looped.clone();
        again.redelivered = true;
        again.received_at = OffsetDateTime::now_utc();
        again
            .headers
            .as_mut()
            .unwrap()
            .insert("x-delivery-count", AmqpValue::LongLongInt(2));
        let (first, again) = (PreparedMessage::new(looped), PreparedMessage::new(again));
        assert_eq!(first.fingerprint, again.fingerprint);
        assert_eq!(first.fingerprint_time, again.fingerprint_time);
    }

    #[test]
    fn broker_delivery_counters_are_not_part_of_the_fingerprint() {
        let with = |extra: &[(&str, AmqpValue)]| {
            let mut m = message();
            let headers = m.headers.as_mut().unwrap();
            for (name, value) in extra {
                headers.insert(*name, value.clone());
            }
            PreparedMessage::new(m).fingerprint
        };
        let first = with(&[]);
        // 3.10's quorum queue counts from 0, 4.x's from the first redelivery; 4.3 adds its own.
        assert_eq!(
            with(&[("x-delivery-count", AmqpValue::LongLongInt(0))]),
            first
        );
        assert_eq!(with(&[("x-delivery-count", AmqpValue::LongInt(3))]), first);
        assert_eq!(
            with(&[
                ("x-delivery-count", AmqpValue::LongLongInt(2)),
                ("x-acquired-count", AmqpValue::LongLongInt(3)),
            ]),
            first
        );
        // A message without headers, redelivered by 4.x with a counter only.
        let bare = PreparedMessage::new(IncomingMessage {
            headers: None,
            ..message()
        });
        let counted = PreparedMessage::new(IncomingMessage {
            headers: Some(Table::from([(
                "x-delivery-count",
                AmqpValue::LongLongInt(1),
            )])),
            ..message()
        });
        assert_eq!(bare.fingerprint, counted.fingerprint);
        // The counter is kept in what is archived all the same.
        assert!(counted.headers_json.unwrap().contains("x-delivery-count"));
        // The message's own headers still tell messages apart, counters or not.
        let other = {
            let mut m = message();
            m.headers = Some(Table::from([
                ("k", AmqpValue::LongInt(2)),
                ("x-delivery-count", AmqpValue::LongLongInt(1)),
            ]));
            PreparedMessage::new(m).fingerprint
        };
        assert_ne!(other, first);
        assert_ne!(with(&[("x-delivery", AmqpValue::LongInt(1))]), first);
    }

    #[test]
    fn any_delivered_difference_changes_the_fingerprint() {
        let base = PreparedMessage::new(message()).fingerprint;
        let variants = [
            IncomingMessage {
                queue: "other".into(),
                ..message()
            },
            IncomingMessage {
                routing_key: "x".into(),
                ..message()
            },
            IncomingMessage {
                body: b"{ }".to_vec(),
                ..message()
            },
            IncomingMessage {
                headers: None,
                ..message()
            },
            IncomingMessage {
                headers: Some(Table::from([("k", AmqpValue::LongLongInt(1))])),
                ..message()
            },
            IncomingMessage {
                properties: MessageProperties::default(),
                ..message()
            },
        ];
        for v in variants {
            assert_ne!(PreparedMessage::new(v).fingerprint, base);
        }
    }

    #[test]
    fn a_snippet_is_the_start_of_the_text_whitespace_folded() {
        assert_eq!(
            snippet("{\n  \"note\":\t\"card   declined\"\n}").as_deref(),
            Some("{ \"note\": \"card declined\" }")
        );
        assert_eq!(snippet(" \n "), None);
        let long = "wörd ".repeat(100);
        assert_eq!(snippet(&long).unwrap().chars().count(), SNIPPET_CHARS);
    }

    #[test]
    fn an_error_is_named_by_its_first_line_or_a_python_tracebacks_last() {
        assert_eq!(
            error_line("java.lang.IllegalStateException: boom\n\tat a.B.c(B.java:3)").as_deref(),
            Some("java.lang.IllegalStateException: boom")
        );
        let traceback = "Traceback (most recent call last):\n  File \"tasks.py\", line 9, in charge\n    raise ValueError(\"card declined\")\n    ^^^^^^^^^^^^^\nValueError: card declined\n\n";
        assert_eq!(
            error_line(traceback).as_deref(),
            Some("ValueError: card declined")
        );
        assert_eq!(error_line("  \n  "), None);
        assert_eq!(error_line(&"x".repeat(1000)).unwrap().len(), MAX_ERROR_LEN);
    }

    #[test]
    fn a_body_error_is_read_at_the_first_pointer_holding_text() {
        let body = r#"{"options": {"retries": 3, "traceback": "Traceback (most recent call last):\n  File \"w.py\", line 1\nKeyError: 'sku'"}, "args": [1]}"#;
        let pointers = [
            "/missing".to_owned(),
            "/options/retries".to_owned(),
            "/options/traceback".to_owned(),
        ];
        assert_eq!(
            body_error(Some(body), &pointers).as_deref(),
            Some("KeyError: 'sku'")
        );
        assert_eq!(body_error(Some("not json"), &pointers), None);
        assert_eq!(body_error(Some(body), &[]), None);
        // A header, when there is one, names the error first.
        let rules = IngestRules {
            error_pointers: vec!["/options/traceback".into()],
            ..Default::default()
        };
        let mut message = IncomingMessage {
            body: body.as_bytes().to_vec(),
            ..message()
        };
        assert_eq!(
            PreparedMessage::with_rules(message.clone(), &rules)
                .error
                .as_deref(),
            Some("KeyError: 'sku'")
        );
        message
            .headers
            .get_or_insert_with(Table::new)
            .insert("x-exception-message", AmqpValue::text("from the header"));
        assert_eq!(
            PreparedMessage::with_rules(message, &rules)
                .error
                .as_deref(),
            Some("from the header")
        );
    }

    #[test]
    fn error_description_takes_the_first_configured_header() {
        let rules = IngestRules::default();
        let h = Table::from([
            ("error", AmqpValue::text("later")),
            (
                "X-Exception-Message",
                AmqpValue::LongString(crate::message::headers::Bytes(
                    b"  NullPointerException: invoice.customer\n\tat Billing.java:42".to_vec(),
                )),
            ),
        ]);
        assert_eq!(
            error_description(Some(&h), &rules.error_headers).as_deref(),
            Some("NullPointerException: invoice.customer")
        );
        assert_eq!(error_description(None, &rules.error_headers), None);
        let not_text = Table::from([("exception", AmqpValue::LongInt(3))]);
        assert_eq!(
            error_description(Some(&not_text), &rules.error_headers),
            None
        );
    }

    #[test]
    fn long_error_descriptions_are_cut_on_a_char_boundary() {
        let long = "é".repeat(400);
        let h = Table::from([("error", AmqpValue::text(&long))]);
        let cut = error_description(Some(&h), &IngestRules::default().error_headers).unwrap();
        assert!(cut.len() <= MAX_ERROR_LEN && cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn business_fields_come_from_json_pointers() {
        let fields: Vec<BusinessField> = [
            "invoice=/invoice_id",
            "customer=/customer/id",
            "total=/total",
            "lines=/lines",
        ]
        .iter()
        .map(|f| f.parse().unwrap())
        .collect();
        let body = r#"{"invoice_id": "INV-2026-00042", "customer": {"id": 17}, "total": 12.5, "lines": []}"#;
        assert_eq!(
            extract_fields(Some(body), &fields),
            [
                ("invoice".into(), "INV-2026-00042".into()),
                ("customer".into(), "17".into()),
                ("total".into(), "12.5".into())
            ]
        );
        assert!(extract_fields(Some("not json"), &fields).is_empty());
        assert!(extract_fields(None, &fields).is_empty());
    }

    #[test]
    fn business_field_flags_are_checked() {
        assert_eq!(
            "Invoice=/invoice_id".parse::<BusinessField>().unwrap().name,
            "invoice"
        );
        for bad in [
            "invoice",
            "invoice=invoice_id",
            "=/x",
            "my field=/x",
            "queue=/queue",
        ] {
            assert!(bad.parse::<BusinessField>().is_err(), "{bad}");
        }
    }

    #[test]
    fn escaped_json_is_indexed_as_the_characters_it_stands_for() {
        let mut m = message();
        m.body = br#"{"note": "\u652f\u4ed8\u5931\u8d25 Z\u00fcrich"}"#.to_vec();
        let p = PreparedMessage::new(m);
        assert!(
            p.search_text.body.contains("支付 付失 失败"),
            "{:?}",
            p.search_text
        );
        assert!(p.search_text.body.contains("Zürich"));
    }

    #[test]
    fn search_text_holds_body_ids_and_header_values() {
        let mut m = message();
        m.properties.correlation_id = Some("corr-7".into());
        m.headers = Some(Table::from([(
            "nested",
            AmqpValue::Table(Table::from([("why", AmqpValue::text("timeout"))])),
        )]));
        m.body = br#"{"invoice_id": "INV-9"}"#.to_vec();
        let rules = IngestRules {
            fields: vec!["invoice=/invoice_id".parse().unwrap()],
            ..Default::default()
        };
        let p = PreparedMessage::with_rules(m, &rules);
        assert_eq!(p.search_text.body, r#"{"invoice_id": "INV-9"}"#);
        assert_eq!(p.search_text.ids, "m-1\ncorr-7\nINV-9");
        assert_eq!(p.search_text.headers, "timeout\n");
        assert_eq!(p.fields, [("invoice".into(), "INV-9".into())]);
    }

    #[test]
    fn prepared_to_append_it_keeps_everything_but_its_search_entries() {
        let bodies: [&[u8]; 4] = [
            br#"{"invoice_id": "INV-9", "note": "  spaced   out  "}"#,
            // Escaped as Python's json.dumps writes it: the snippet shows the characters.
            br#"{"invoice_id": "INV-9", "memo": "\u652f\u4ed8"}"#,
            b"\x00\xff not text",
            b"",
        ];
        let plain = IngestRules {
            fields: vec!["invoice=/invoice_id".parse().unwrap()],
            ..Default::default()
        };
        let masked = IngestRules {
            masks: vec!["/invoice_id".into()],
            ..plain.clone()
        };
        let mut compared = 0;
        for rules in [&plain, &masked] {
            for body in bodies {
                let mut m = message();
                m.body = body.to_vec();
                let all = PreparedMessage::with_rules(m.clone(), rules);
                let later = PreparedMessage::to_append(m, rules);
                assert!(!all.search_later && later.search_later);
                // What the list shows, masked as the index is, and everything stored but
                // the search entries: as with them.
                assert_eq!(
                    later.search_text.snippet, all.search_text.snippet,
                    "{body:?}"
                );
                assert_eq!(
                    format!("{:?}", (&later.fingerprint, &later.error, &later.cause)),
                    format!("{:?}", (&all.fingerprint, &all.error, &all.cause))
                );
                assert_eq!(later.headers_json, all.headers_json);
                // The search entries: left to the indexer.
                let SearchText {
                    body, ids, headers, ..
                } = &later.search_text;
                assert!(body.is_empty() && ids.is_empty() && headers.is_empty());
                assert!(later.fields.is_empty());
                compared += usize::from(all.search_text.snippet.is_some());
            }
        }
        assert_eq!(compared, 4, "the snippets compared were of text bodies");
        let masked_snippet = PreparedMessage::to_append(
            IncomingMessage {
                body: bodies[0].to_vec(),
                ..message()
            },
            &masked,
        )
        .search_text
        .snippet
        .unwrap();
        assert!(!masked_snippet.contains("INV-9"), "{masked_snippet}");
    }

    #[test]
    fn masked_values_stay_out_of_the_search_index() {
        let mut m = message();
        m.body = br#"{"card": {"number": "4111222233334444"}, "order": "O-7"}"#.to_vec();
        let rules = IngestRules {
            fields: vec![
                "card=/card/number".parse().unwrap(),
                "order=/order".parse().unwrap(),
            ],
            masks: vec!["/card".into()],
            ..Default::default()
        };
        let p = PreparedMessage::with_rules(m, &rules);
        let indexed = format!("{:?}", p.search_text);
        assert!(!indexed.contains("4111222233334444"), "{indexed}");
        assert!(indexed.contains("O-7"));
        // The field itself is kept, for operators' exact searches.
        assert!(p
            .fields
            .iter()
            .any(|(n, v)| n == "card" && v == "4111222233334444"));
    }

    #[test]
    fn bodies_that_cannot_be_masked_stay_out_of_the_search_index() {
        let rules = IngestRules {
            fields: vec!["order=/order".parse().unwrap()],
            masks: vec!["/card/number".into()],
            ..Default::default()
        };
        let card = r#"{"number": "4111222233334444"}"#;
        let huge = format!(r#"{{"card": {card}, "pad": "{}"}}"#, "x ".repeat(1 << 20));
        let deep = format!(
            r#"{{"card": {card}, "d": {}{}}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        for body in [
            "card 4111222233334444".to_owned(),
            format!("\u{feff}{{\"card\": {card}}}"),
            huge,
            deep,
        ] {
            let mut m = message();
            m.body = body.into_bytes();
            let p = PreparedMessage::with_rules(m, &rules);
            assert!(
                !p.search_text.body.contains("4111"),
                "{:.80}",
                p.search_text.body
            );
        }
    }

    /// A MassTransit `_error` message in vhost `shop`, with `x-death` when `dead` is given.
    fn masstransit(input_address: &str, dead: Option<&str>) -> IncomingMessage {
        let mut headers = Table::from([
            (
                "MT-Fault-ExceptionType",
                AmqpValue::text("Shop.OrderException"),
            ),
            (
                "MT-Fault-Message",
                AmqpValue::text("order O-17 has no lines"),
            ),
            ("MT-Fault-InputAddress", AmqpValue::text(input_address)),
            ("MT-Fault-MessageType", AmqpValue::text("Shop.SubmitOrder")),
        ]);
        if let Some(queue) = dead {
            let entry = Table::from([
                ("queue", AmqpValue::text(queue)),
                ("reason", AmqpValue::text("rejected")),
                ("count", AmqpValue::LongLongInt(1)),
                ("exchange", AmqpValue::text("orders")),
                (
                    "routing-keys",
                    AmqpValue::Array(vec![AmqpValue::text("order.new")]),
                ),
            ]);
            headers.insert("x-death", AmqpValue::Array(vec![AmqpValue::Table(entry)]));
        }
        IncomingMessage {
            broker: "default".into(),
            vhost: "shop".into(),
            queue: "shop/submit-order_error".into(),
            headers: Some(headers),
            ..message()
        }
    }

    #[test]
    fn a_convention_gives_the_target_group_queue_and_type_without_a_death_history() {
        let rules = IngestRules::default();
        let p = PreparedMessage::with_rules(
            masstransit("rabbitmq://mq/shop/submit-order", None),
            &rules,
        );
        assert_eq!(
            p.history.replay_target,
            Some(death::ReplayTarget {
                exchange: String::new(),
                routing_key: "submit-order".into()
            })
        );
        let framework = p.framework.as_ref().expect("MassTransit's");
        assert_eq!(
            framework.convention,
            crate::message::conventions::Convention::MassTransit
        );
        assert_eq!(
            framework.target_from.as_deref(),
            Some("MT-Fault-InputAddress")
        );
        assert_eq!(p.failed_queue(), Some("shop/submit-order"));
        assert_eq!(p.group().queue, "shop/submit-order");
        assert_eq!(p.message_type.as_deref(), Some("Shop.SubmitOrder"));
        assert_eq!(p.error_type.as_deref(), Some("Shop.OrderException"));
        assert_eq!(p.cause, "Shop.OrderException: order O-<n> has no lines");
        assert_eq!(p.convention_problems_json(), None);
        // The death history's target wins, and its first-death queue groups it.
        let dead = PreparedMessage::with_rules(
            masstransit("rabbitmq://mq/shop/submit-order", Some("submit-order")),
            &rules,
        );
        assert_eq!(
            dead.history.replay_target.as_ref().unwrap().exchange,
            "orders"
        );
        assert_eq!(dead.framework.as_ref().unwrap().target_from, None);
        assert_eq!(dead.group().queue, "shop/submit-order");
    }

    #[test]
    fn a_malformed_convention_header_is_said_and_the_message_kept() {
        let rules = IngestRules::default();
        let p = PreparedMessage::with_rules(masstransit("not-a-url", None), &rules);
        assert_eq!(p.history.replay_target, None);
        let problems = p.convention_problems_json().expect("said");
        assert!(
            problems.contains("target unknown: MT-Fault-InputAddress is not a rabbitmq:// address"),
            "{problems}"
        );
        // Grouped under the queue its name says it failed in, or the DLQ.
        assert!(
            p.group().queue.starts_with("shop/submit-order"),
            "{:?}",
            p.group()
        );
        let elsewhere = PreparedMessage::with_rules(
            masstransit("rabbitmq://mq/other/submit-order", None),
            &rules,
        );
        assert!(elsewhere
            .convention_problems_json()
            .unwrap()
            .contains("names vhost \\\"other\\\""));
    }

    #[test]
    fn a_dramatiq_body_past_the_indexed_start_is_read_whole() {
        let traceback = format!(
            "Traceback (most recent call last):\n  File \"tasks.py\", line 9, in charge\n{}ValueError: card C-17 declined",
            format!("  File \"lib.py\", line 3, in step\n    step({})\n", "x, ".repeat(60)).repeat(400)
        );
        let body = serde_json::json!({
            "queue_name": "charges",
            "actor_name": "charge",
            "args": [],
            "kwargs": {},
            "options": {"traceback": traceback},
            "message_id": "m",
            "message_timestamp": 1,
        });
        let body = serde_json::to_string(&body).unwrap();
        assert!(body.len() > INDEXED_BODY_BYTES);
        let p = PreparedMessage::new(IncomingMessage {
            queue: "charges.XQ".into(),
            body: body.into_bytes(),
            headers: None,
            ..message()
        });
        assert_eq!(
            p.framework.as_ref().map(|f| f.convention),
            Some(crate::message::conventions::Convention::Dramatiq)
        );
        assert_eq!(p.convention_problems_json(), None);
        assert_eq!(p.error.as_deref(), Some("ValueError: card C-17 declined"));
        assert_eq!(p.failed_queue(), Some("charges"));
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let a = IncomingMessage {
            exchange: "ab".into(),
            routing_key: "c".into(),
            ..message()
        };
        let b = IncomingMessage {
            exchange: "a".into(),
            routing_key: "bc".into(),
            ..message()
        };
        assert_ne!(
            PreparedMessage::new(a).fingerprint,
            PreparedMessage::new(b).fingerprint
        );
    }
}

//! One message's page: properties, typed headers, death timeline, replay target, payload
//! viewer, past replays and related records.

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use base64::{engine::general_purpose::STANDARD as BASE64, Engine};

use crate::archive::{ArchivedMessage, MessageStatus, MessageSummary, ReplayRecord, Role};
use crate::message::death::ReplayTarget;
use crate::message::headers::{AmqpValue, Table};
use crate::replay::plan::new_request_key;
use crate::web::auth::Caller;
use crate::web::extract::{AppQuery, MessageId};
use crate::web::html::{filters, human_bytes, render, utc, PageError};
use crate::web::nav::Nav;
use crate::web::pages::highlight::{self, Marked, Terms};
use crate::web::pages::messages::{target_text, Row};
use crate::web::pages::payload::{self, PayloadView};
use crate::web::{AppError, AppState};

/// A header (or a nested entry) as a row of the headers table.
pub struct HeaderRow {
    pub depth: usize,
    pub name: String,
    pub kind: &'static str,
    pub value: String,
}

/// Nested tables and arrays become indented rows under their parent.
pub fn header_rows(table: &Table) -> Vec<HeaderRow> {
    let mut rows = Vec::new();
    for (name, v) in table {
        push_value(&mut rows, 0, name.describe(), v);
    }
    rows
}

fn push_value(rows: &mut Vec<HeaderRow>, depth: usize, name: String, v: &AmqpValue) {
    let text = match v {
        AmqpValue::Boolean(b) => b.to_string(),
        AmqpValue::ShortShortInt(n) => n.to_string(),
        AmqpValue::ShortShortUint(n) => n.to_string(),
        AmqpValue::ShortInt(n) => n.to_string(),
        AmqpValue::ShortUint(n) => n.to_string(),
        AmqpValue::LongInt(n) => n.to_string(),
        AmqpValue::LongUint(n) => n.to_string(),
        AmqpValue::LongLongInt(n) => n.to_string(),
        AmqpValue::Float(f) => f.0.to_string(),
        AmqpValue::Double(f) => f.0.to_string(),
        AmqpValue::Decimal { scale, value } => decimal(*scale, *value),
        AmqpValue::ShortString(s) => s.describe(),
        AmqpValue::LongString(b) | AmqpValue::ByteArray(b) => {
            match (v, std::str::from_utf8(&b.0)) {
                (AmqpValue::LongString(_), Ok(s)) => s.to_owned(),
                _ => format!("{} (base64)", BASE64.encode(&b.0)),
            }
        }
        AmqpValue::Timestamp(t) => match time::OffsetDateTime::from_unix_timestamp(*t as i64) {
            Ok(at) => format!("{t} ({})", utc(at)),
            Err(_) => t.to_string(),
        },
        AmqpValue::Void => String::new(),
        AmqpValue::Array(items) => format!("{} items", items.len()),
        AmqpValue::Table(t) => format!("{} entries", t.len()),
        AmqpValue::Encoded(bytes) => format!(
            "nested more than {} levels deep: {} bytes, shown collapsed, kept and replayed byte for byte",
            crate::message::headers::MAX_DEPTH,
            bytes.len()
        ),
    };
    rows.push(HeaderRow {
        depth: depth.min(4),
        name,
        kind: v.type_name(),
        value: text,
    });
    match v {
        AmqpValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                push_value(rows, depth + 1, format!("[{i}]"), item);
            }
        }
        AmqpValue::Table(t) => {
            for (k, item) in t {
                push_value(rows, depth + 1, k.describe(), item);
            }
        }
        _ => {}
    }
}

fn decimal(scale: u8, value: u32) -> String {
    let digits = value.to_string();
    let scale = scale as usize;
    if scale == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{int}.{frac}")
}

pub struct DeathRow {
    pub queue: String,
    pub reason: String,
    pub count: i64,
    pub exchange: String,
    pub routing_keys: String,
    pub time: Option<String>,
    pub original_expiration: Option<String>,
}

#[derive(Template)]
#[template(path = "message.html")]
pub struct MessagePage {
    pub nav: Nav,
    pub id: String,
    pub summary: MessageSummary,
    /// The vhost it was archived from, named.
    pub vhost: String,
    /// The name of the queue it first died in, within that vhost (the archive's first-death
    /// queue reads vhost/name outside the AMQP URL's vhost).
    pub died_in: Option<String>,
    pub archived_at: String,
    pub delivered: String,
    pub properties: Vec<(&'static str, String)>,
    pub headers: Option<Vec<HeaderRow>>,
    pub deaths: Vec<DeathRow>,
    pub target: String,
    pub problems: Vec<String>,
    pub payload: PayloadView,
    /// The payload's tokens with the hits of the search that led here marked.
    pub marked: Vec<Marked>,
    /// How many hits are marked, and the search they are of.
    pub hits: usize,
    pub search: String,
    pub size: String,
    pub related: Vec<Row>,
    /// One key per rendered page: a double click replays once.
    pub request_key: String,
    pub target_exchange: String,
    pub target_routing_key: String,
    pub replays: Vec<ReplayRow>,
    /// The body as text to edit before a replay; `None` when it is binary, encoded or large.
    pub editable_body: Option<String>,
    /// The headers to edit, as typed JSON, death headers left out.
    pub editable_headers: String,
    pub status_note: Option<String>,
    /// Where it stands (open or resolved, and why), said first.
    pub lifecycle: Lifecycle,
    /// May replay and dismiss it (viewers see the replays, not the forms).
    pub can_act: bool,
    /// What names it for people: its first business field, its message-id, or `#id`.
    pub title: String,
    /// The stack trace (or the whole error text) its consumer left, shown under the error:
    /// its framework's, whatever header or body field held it, else the error header's
    /// whole text where it says more than the error line.
    pub stack_trace: Option<String>,
    /// Where the error and trace were read (`MassTransit's MT-Fault-Message, …`).
    pub error_from: Option<String>,
    /// The framework convention it follows, named.
    pub convention: Option<&'static str>,
    /// What gave its replay target, when its convention did (`MassTransit's
    /// MT-Fault-InputAddress`).
    pub target_from: Option<String>,
    /// Why it has no replay target, when it has none.
    pub no_target: Option<String>,
}

/// The name of a message on its page: its first business field value, else its message-id,
/// else its archive id.
fn title(s: &MessageSummary, field_names: &[String]) -> String {
    field_names
        .iter()
        .find_map(|f| s.fields.get(f).filter(|v| !v.is_empty()))
        .or(s.message_id.as_ref().filter(|m| !m.is_empty()))
        .map_or_else(
            || format!("#{}", s.id),
            |name| format!("{name} · #{}", s.id),
        )
}

/// The whole text of the header the error line was taken from: the first top-level header
/// whose text holds that line.
fn error_text(error: Option<&str>, headers: Option<&[HeaderRow]>) -> Option<String> {
    let error = error?;
    headers?
        .iter()
        .find(|h| h.depth == 0 && h.value.contains(error))
        .map(|h| h.value.trim().to_owned())
}

/// What the framework convention a message follows says of it (read again from its headers
/// and the start of its body, for its stack trace and where it was found).
fn framework(
    message: &ArchivedMessage,
    vhost: &str,
    body: &[u8],
    encoding: &crate::message::body::Encoding<'_>,
) -> Option<crate::message::conventions::FrameworkFailure> {
    message.summary.convention?;
    let text = crate::message::body::text(
        body,
        encoding,
        crate::message::conventions::MAX_BODY_BYTES + 1,
    );
    let dlq = crate::message::dlq::Dlq::from_stored(
        &message.summary.queue,
        &message.summary.broker,
        &message.summary.vhost,
    );
    crate::message::conventions::read(&crate::message::conventions::Delivery {
        queue: &dlq.name,
        vhost,
        routing_key: &message.delivered_routing_key,
        headers: message.headers.as_ref(),
        body_text: text.as_deref(),
    })
}

/// Where a message stands, as its page says first.
pub struct Lifecycle {
    pub open: bool,
    pub text: String,
    /// A record to go to: the copy that died again, or the record this one is a copy of.
    pub link: Option<(String, String)>,
}

impl Lifecycle {
    fn new(s: &MessageSummary, related: &[MessageSummary], settle: std::time::Duration) -> Self {
        let minutes = settle.as_secs().div_ceil(60);
        let copy = related.iter().find(|r| r.replay_of == Some(s.id));
        let (text, mut link) = match s.status {
            MessageStatus::Archived => ("Open: never replayed.".to_owned(), None),
            MessageStatus::ReplayFailed => (
                "Open: its last replay was not taken by the broker (see the replays below).".to_owned(),
                None,
            ),
            MessageStatus::Replayed => (
                format!(
                    "Open, settling: replayed; resolved {minutes} min after the replay unless its copy dies again."
                ),
                None,
            ),
            MessageStatus::Settled => (
                "Resolved: replayed, and its copy did not come back.".to_owned(),
                None,
            ),
            MessageStatus::DiedAgain => (
                "Resolved here: replayed, and its copy died again — that copy is the open record."
                    .to_owned(),
                copy.map(|c| (format!("/messages/{}", c.id), format!("died again as #{}", c.id))),
            ),
            MessageStatus::Dismissed => ("Resolved: dismissed.".to_owned(), None),
        };
        if link.is_none() {
            link = s.replay_of.map(|of| {
                (
                    format!("/messages/{of}"),
                    format!("a replayed copy of #{of}"),
                )
            });
        }
        Lifecycle {
            open: s.status.is_open(),
            text,
            link,
        }
    }
}

/// The largest body the edit form offers.
const MAX_EDITABLE_BODY: usize = 256 * 1024;

fn editable_body(message: &ArchivedMessage, bytes: &[u8]) -> Option<String> {
    if bytes.len() > MAX_EDITABLE_BODY
        || !crate::message::body::edits_as_text(bytes, &message.encoding())
    {
        return None;
    }
    let text = String::from_utf8(bytes.to_vec()).ok()?;
    Some(pretty_json(&text).unwrap_or(text))
}

/// JSON laid out to edit, when nothing but its layout changes: every number, escape and key
/// order as written. A body serde_json would write otherwise (`1e3`, a number too big for a
/// double, an escape such as `\u00e9`, a repeated key) keeps its text as it was.
fn pretty_json(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    if !value.is_object() && !value.is_array() {
        return None;
    }
    let same = serde_json::to_string(&value).ok()? == without_layout(text);
    same.then(|| serde_json::to_string_pretty(&value).ok())
        .flatten()
}

/// JSON text without the whitespace between its tokens.
fn without_layout(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

fn editable_headers(message: &ArchivedMessage) -> String {
    let kept: Table = message
        .headers
        .iter()
        .flatten()
        .filter(|(name, _)| !crate::message::death::is_death_header(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_string_pretty(&kept).expect("tables serialize")
}

/// A past replay as the detail page lists it.
pub struct ReplayRow {
    pub requested_at: String,
    pub actor: String,
    pub target: String,
    pub outcome: String,
    pub detail: String,
    pub edited: bool,
}

impl ReplayRow {
    pub(crate) fn new(r: &ReplayRecord) -> Self {
        ReplayRow {
            requested_at: utc(r.requested_at),
            actor: r.actor.clone(),
            target: ReplayTarget::label(&r.target),
            outcome: r.outcome.clone(),
            detail: r.detail.clone().unwrap_or_default(),
            edited: r.edited,
        }
    }
}

fn properties(m: &ArchivedMessage) -> Vec<(&'static str, String)> {
    let p = &m.properties;
    let text = |v: &Option<crate::message::headers::Bytes>| v.as_ref().map(|b| b.describe());
    [
        ("content-type", text(&p.content_type)),
        ("content-encoding", text(&p.content_encoding)),
        (
            "delivery-mode",
            p.delivery_mode
                .map(|d| format!("{d}{}", if d == 2 { " (persistent)" } else { "" })),
        ),
        ("priority", p.priority.map(|v| v.to_string())),
        ("correlation-id", text(&p.correlation_id)),
        ("reply-to", text(&p.reply_to)),
        ("expiration", text(&p.expiration)),
        ("message-id", text(&p.message_id)),
        (
            "timestamp",
            p.timestamp
                .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t as i64).ok())
                .map(utc),
        ),
        ("type", text(&p.kind)),
        ("user-id", text(&p.user_id)),
        ("app-id", text(&p.app_id)),
        ("cluster-id", text(&p.cluster_id)),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect()
}

/// The search a message was opened from (`?q=`), whose hits the page marks.
#[derive(Debug, Default, serde::Deserialize)]
pub struct FromSearch {
    q: Option<String>,
}

/// `/messages/{id}`: everything about one archived message.
pub async fn detail_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppQuery(from): AppQuery<FromSearch>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let not_found = || {
        page_error(AppError::NotFound(format!(
            "no archived message with id {id:?}"
        )))
    };
    let _reading = state.reads.acquire().await.map_err(page_error)?;
    let mut message = caller
        .message(&state, numeric, &id, Role::Viewer)
        .await
        .map_err(page_error)?;
    // Their role on this message's DLQ: what they see of it and may do with it.
    let role = caller
        .role_on(&message.summary.queue, &message.summary.vhost, &state)
        .unwrap_or(Role::Viewer);
    state.masking.summary(role, &mut message.summary);
    // A few bodies at a time are loaded, decoded and rendered, off the async threads; of a
    // large one, only what the page can show (or what masking may decode) is read.
    let permit = state.bodies.acquire().await.map_err(page_error)?;
    let read = match state.masking.applies(role) {
        true => crate::message::masking::MAX_MASKED_BODY,
        false => payload::READ_LIMIT,
    };
    let stored = state
        .archive
        .body_start(numeric, read)
        .await
        .map_err(|e| page_error(e.into()))?
        .ok_or_else(not_found)?;
    let (masking, archived) = (state.masking.clone(), message.clone());
    let vhost = state.vhost_name(&message.summary.vhost).to_owned();
    let schemas = state.schemas.clone();
    // A search that does not parse (edited by hand) marks nothing.
    let search = from.q.unwrap_or_default();
    let terms = crate::message::search::parse(&search, &state.business_fields)
        .map(|s| Terms::new(&s))
        .unwrap_or_default();
    let (payload, (marked, hits), editable_body, framework) = state
        .bodies
        .run_with(permit, move || {
            let schemas = schemas.as_deref();
            let start = masking.start(role, stored.of_message(&archived), schemas);
            let body = &start.body;
            let encoding = body.encoding().with_schemas(schemas);
            let payload = payload::view(&body.bytes, start.size, &encoding);
            let marked = highlight::mark(&payload, &terms);
            // Only those who may replay get the form (its JSON is laid out as a tree).
            let editable = (role >= crate::archive::Role::Operator && start.is_whole())
                .then(|| editable_body(&archived, &body.bytes))
                .flatten();
            let framework = framework(&archived, &vhost, &body.bytes, &encoding);
            (payload, marked, editable, framework)
        })
        .await
        .map_err(page_error)?;
    let replays = state
        .archive
        .replays_of(numeric)
        .await
        .map_err(|e| page_error(e.into()))?;
    let related: Vec<MessageSummary> = state
        .archive
        .related(&message.summary)
        .await
        .map_err(|e| page_error(e.into()))?
        .into_iter()
        .filter(|m| caller.role_on(&m.queue, &m.vhost, &state).is_some())
        .collect();
    let s = &message.summary;
    let headers = message.headers.as_ref().map(header_rows);
    let error_text = error_text(s.error.as_deref(), headers.as_deref())
        .filter(|whole| Some(whole.as_str()) != s.error.as_deref());
    let convention = s
        .convention
        .map(crate::message::conventions::Convention::label);
    let said = framework.as_ref().filter(|f| !f.found_in.is_empty());
    let page = MessagePage {
        nav: Nav::new(Some(&caller), state.auth.mode),
        id: id.clone(),
        vhost: state.vhost_name(&s.vhost).to_owned(),
        died_in: s
            .first_death
            .as_ref()
            .map(|f| crate::message::dlq::Dlq::from_stored(&f.queue, &s.broker, &s.vhost).name),
        archived_at: utc(s.archived_at),
        delivered: format!(
            "{} → {}{}",
            if message.delivered_exchange.is_empty() {
                "(AMQP default)"
            } else {
                &message.delivered_exchange
            },
            message.delivered_routing_key,
            if message.redelivered {
                " (redelivered)"
            } else {
                ""
            }
        ),
        properties: properties(&message),
        headers,
        deaths: s
            .deaths
            .iter()
            .map(|d| DeathRow {
                queue: d.queue.clone(),
                reason: d.reason.clone(),
                count: d.count,
                exchange: if d.exchange.is_empty() {
                    "(AMQP default)".into()
                } else {
                    d.exchange.clone()
                },
                routing_keys: d.routing_keys.join(", "),
                time: d.time.map(utc),
                original_expiration: d.original_expiration.clone(),
            })
            .collect(),
        target: target_text(s),
        problems: message.death_problems.clone(),
        payload,
        marked,
        hits,
        search,
        size: human_bytes(s.body_size),
        related: related.iter().map(|m| Row::new(m, &[], None)).collect(),
        request_key: new_request_key(),
        target_exchange: s
            .replay_target
            .as_ref()
            .map(|t| t.exchange.clone())
            .unwrap_or_default(),
        target_routing_key: s
            .replay_target
            .as_ref()
            .map(|t| t.routing_key.clone())
            .unwrap_or_default(),
        replays: replays.iter().map(ReplayRow::new).collect(),
        editable_body,
        editable_headers: editable_headers(&message),
        status_note: message.status_note.clone(),
        lifecycle: Lifecycle::new(s, &related, state.settle),
        title: title(s, &state.business_fields),
        stack_trace: framework
            .as_ref()
            .and_then(|f| f.stack_trace.clone())
            .or(error_text),
        error_from: said.map(|f| format!("{}'s {}", f.convention.label(), f.found_in.join(", "))),
        convention,
        target_from: s
            .convention
            .zip(s.replay_target_from.as_deref())
            .map(|(c, from)| crate::archive::Framework::source(c, from)),
        no_target: s.replay_target.is_none().then(|| match convention {
            Some(label) => format!(
                "no death history, and its {label} headers give none: a replay needs a target \
                 chosen by hand"
            ),
            None => "no death history: a replay needs a target chosen by hand".to_owned(),
        }),
        can_act: role >= Role::Operator,
        summary: s.clone(),
    };
    Ok(render(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_to_edit_is_laid_out_only_when_nothing_else_changes() {
        assert_eq!(
            pretty_json(r#"{"b":1,"a":[true,"x y"]}"#).as_deref(),
            Some("{\n  \"b\": 1,\n  \"a\": [\n    true,\n    \"x y\"\n  ]\n}")
        );
        // Written in a way serde_json would change: kept as it is.
        for kept in [
            r#"{"n": 1e3}"#,
            r#"{"big": 123456789012345678901234567890}"#,
            r#"{"s": "\u00e9"}"#,
            r#"{"a": 1, "a": 2}"#,
            "42",
        ] {
            assert_eq!(pretty_json(kept), None, "{kept}");
        }
    }

    #[test]
    fn decimals_read_as_numbers() {
        assert_eq!(decimal(2, 12345), "123.45");
        assert_eq!(decimal(3, 5), "0.005");
        assert_eq!(decimal(0, 7), "7");
    }

    #[test]
    fn nested_headers_are_indented_rows() {
        let t = Table::from([(
            "outer".to_owned(),
            AmqpValue::Table(Table::from([(
                "inner".to_owned(),
                AmqpValue::Array(vec![AmqpValue::Void]),
            )])),
        )]);
        let rows = header_rows(&t);
        let shape: Vec<(usize, &str, &str)> = rows
            .iter()
            .map(|r| (r.depth, r.name.as_str(), r.kind))
            .collect();
        assert_eq!(
            shape,
            [
                (0, "outer", "table"),
                (1, "inner", "array"),
                (2, "[0]", "void")
            ]
        );
    }
}

//! The message list (filters, keyset pages, htmx partial updates) and the message detail
//! page (properties, typed headers, death timeline, replay target, payload viewer).

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine};

use super::api_replays::dismiss_selection;
use super::auth::Caller;
use super::extract::{AppForm, AppQuery, MessageId};
use super::html::{filters, human_bytes, is_htmx, render, utc, PageError};
use super::nav::Nav;
use super::payload::{self, PayloadView};
use super::{AppError, AppState};
use crate::amqp::headers::{AmqpValue, Table};
use crate::archive::{ArchivedMessage, MessageSummary, ReplayEdit, ReplayRecord};
use crate::death::ReplayTarget;
use crate::replay::plan::{
    check_request_key, check_target, new_request_key, IdValue, SelectionRequest,
};
use crate::replay::single::{replay_one, SingleReplay};
use crate::selection::ListParams;
use serde::Deserialize;

pub struct Row {
    pub id: String,
    pub queue: String,
    pub archived_at: String,
    pub message_id: String,
    pub reason: String,
    pub first_queue: String,
    pub target: String,
    pub size: String,
    pub status: &'static str,
    /// Business field values, in the order of the configured fields.
    pub fields: Vec<String>,
}

impl Row {
    fn new(m: &MessageSummary, field_names: &[String]) -> Self {
        Row {
            fields: field_names
                .iter()
                .map(|f| m.fields.get(f).cloned().unwrap_or_default())
                .collect(),
            id: m.id.to_string(),
            queue: m.queue.clone(),
            archived_at: utc(m.archived_at),
            message_id: m.message_id.clone().unwrap_or_default(),
            reason: m
                .first_death
                .as_ref()
                .map_or("none".into(), |f| f.reason.clone()),
            first_queue: m
                .first_death
                .as_ref()
                .map_or(String::new(), |f| f.queue.clone()),
            target: target_text(m),
            size: human_bytes(m.body_size),
            status: m.status.as_str(),
        }
    }
}

fn target_text(m: &MessageSummary) -> String {
    m.replay_target
        .as_ref()
        .map_or_else(|| "unknown".into(), ReplayTarget::label)
}

#[derive(Template)]
#[template(path = "messages.html")]
pub struct MessagesPage {
    pub nav: Nav,
    pub form: ListParams,
    /// `since` and `until` as a datetime-local field shows them (UTC).
    pub since_input: String,
    pub until_input: String,
    pub field_names: Vec<String>,
    pub queues: Vec<String>,
    pub rows: Vec<Row>,
    pub next_link: Option<String>,
    pub error: Option<String>,
    /// The filters as hidden fields of the selection form ("all matching").
    pub filter_pairs: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "partials/message_rows.html")]
pub struct MessageRowsPartial {
    pub field_names: Vec<String>,
    pub rows: Vec<Row>,
    pub next_link: Option<String>,
    pub error: Option<String>,
    pub filter_pairs: Vec<(String, String)>,
}

/// The filters of the list as name/value pairs (empty ones left out).
fn filter_pairs(form: &ListParams) -> Vec<(String, String)> {
    form_urlencoded::parse(form.to_query(None).as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A time filter as `<input type="datetime-local">` takes it: `2026-12-02T09:30` (UTC).
fn datetime_local(v: &Option<String>) -> String {
    let v = value(v);
    let minutes = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
    match time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339) {
        Ok(t) => t
            .to_offset(time::UtcOffset::UTC)
            .format(minutes)
            .unwrap_or_default(),
        Err(_) => v.to_owned(),
    }
}

fn value(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// `/messages`: the whole page, or only the result rows when htmx asks (live filtering).
pub async fn list_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    AppQuery(form): AppQuery<ListParams>,
) -> Result<Response, PageError> {
    let parsed = form
        .parse(&state.business_fields)
        .map_err(AppError::from)
        .and_then(|(filter, page)| {
            state.masking.check_search(caller.role, &filter)?;
            Ok((filter, page))
        });
    let (rows, next_link, error) = match parsed {
        Ok((filter, page)) => {
            let mut page = state
                .archive
                .list_messages(&filter, page)
                .await
                .map_err(|e| PageError::new(e, &headers))?;
            for m in &mut page.messages {
                state.masking.fields(caller.role, &mut m.fields);
            }
            let next = page
                .next_cursor
                .as_deref()
                .map(|c| format!("/messages?{}", form.to_query(Some(c))));
            (
                page.messages
                    .iter()
                    .map(|m| Row::new(m, &state.business_fields))
                    .collect(),
                next,
                None,
            )
        }
        Err(e) => (Vec::new(), None, Some(e.to_string())),
    };
    if is_htmx(&headers) {
        // 200 even for a bad filter: the inline message replaces the results as you type.
        return Ok((
            [(header::VARY, "HX-Request")],
            render(&MessageRowsPartial {
                field_names: state.business_fields.to_vec(),
                rows,
                next_link,
                error,
                filter_pairs: filter_pairs(&form),
            }),
        )
            .into_response());
    }
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut queues: Vec<String> = state
        .archive
        .counts()
        .await
        .map_err(|e| PageError::new(e, &headers))?
        .into_iter()
        .map(|c| c.queue)
        .collect();
    queues.dedup();
    Ok((
        status,
        [(header::VARY, "HX-Request")],
        render(&MessagesPage {
            nav: Nav::new(Some(&caller), state.auth.mode),
            filter_pairs: filter_pairs(&form),
            since_input: datetime_local(&form.since),
            until_input: datetime_local(&form.until),
            field_names: state.business_fields.to_vec(),
            form,
            queues,
            rows,
            next_link,
            error,
        }),
    )
        .into_response())
}

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
            crate::amqp::headers::MAX_DEPTH,
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
    pub archived_at: String,
    pub delivered: String,
    pub properties: Vec<(&'static str, String)>,
    pub headers: Option<Vec<HeaderRow>>,
    pub deaths: Vec<DeathRow>,
    pub target: String,
    pub problems: Vec<String>,
    pub payload: PayloadView,
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
}

/// The largest body the edit form offers.
const MAX_EDITABLE_BODY: usize = 256 * 1024;

fn editable_body(message: &ArchivedMessage, bytes: &[u8]) -> Option<String> {
    if message.summary.content_encoding.is_some() || bytes.len() > MAX_EDITABLE_BODY {
        return None;
    }
    String::from_utf8(bytes.to_vec()).ok()
}

fn editable_headers(message: &ArchivedMessage) -> String {
    let kept: Table = message
        .headers
        .iter()
        .flatten()
        .filter(|(name, _)| !crate::death::is_death_header(name))
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
    fn new(r: &ReplayRecord) -> Self {
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

#[derive(Template)]
#[template(path = "partials/replay_result.html")]
pub struct ReplayResultPartial {
    pub row: ReplayRow,
}

#[derive(Debug, Deserialize)]
pub struct ReplayForm {
    exchange: String,
    routing_key: String,
    request_key: String,
    /// Set by the edit & replay form, with the edited `body` and `headers` (typed JSON).
    edit: Option<String>,
    body: Option<String>,
    headers: Option<String>,
}

impl ReplayForm {
    /// The edit from the form. Browsers send a textarea's line breaks as CRLF: they are
    /// turned back into LF unless the archived body itself used CR.
    fn edit(&self, original: &[u8]) -> Result<Option<ReplayEdit>, AppError> {
        if self.edit.is_none() {
            return Ok(None);
        }
        let headers = match self.headers.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(serde_json::from_str::<Table>(text).map_err(|e| {
                AppError::BadRequest(format!(
                    "the headers must be a JSON object of typed values, as shown ({e}); nothing was published"
                ))
            })?),
        };
        let keep_cr = original.contains(&b'\r');
        let body = self.body.as_ref().map(|b| match keep_cr {
            true => b.clone().into_bytes(),
            false => b.replace("\r\n", "\n").into_bytes(),
        });
        Ok(Some(ReplayEdit { body, headers }))
    }
}

/// `POST /messages/{id}/replay` from the detail page's form.
pub async fn replay_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppForm(form): AppForm<ReplayForm>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let target = ReplayTarget {
        exchange: form.exchange.trim().to_owned(),
        routing_key: form.routing_key.trim().to_owned(),
    };
    check_target(&target).map_err(|e| page_error(e.into()))?;
    check_request_key(&form.request_key).map_err(|e| page_error(e.into()))?;
    if target.exchange.is_empty() && target.routing_key.is_empty() {
        return Err(page_error(AppError::BadRequest(
            "choose a target: an exchange, a routing key, or both (the default exchange routes by queue name)".into(),
        )));
    }
    let original = match form.edit.is_some() {
        true => state
            .archive
            .get_body(numeric)
            .await
            .map_err(|e| page_error(e.into()))?
            .map(|b| b.bytes)
            .unwrap_or_default(),
        false => Vec::new(),
    };
    let edit = form.edit(&original).map_err(page_error)?;
    let answer = replay_one(
        state.archive.clone(),
        &state.amqp_url,
        SingleReplay {
            id: numeric,
            target: Some(target),
            edit,
            request_key: &form.request_key,
            actor: &caller.actor(),
            metrics: state.metrics.clone(),
            policy: &state.replay_policy,
        },
    )
    .await
    .map_err(|e| page_error(e.into()))?;
    let record = answer.record();
    if is_htmx(&headers) {
        return Ok(render(&ReplayResultPartial {
            row: ReplayRow::new(record),
        }));
    }
    Ok(Redirect::to(&format!("/messages/{id}")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct DismissForm {
    #[serde(default)]
    note: String,
}

/// `POST /messages/{id}/dismiss`: resolved without a replay, with a note.
pub async fn dismiss_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppForm(form): AppForm<DismissForm>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    state
        .archive
        .get_message(numeric)
        .await
        .map_err(|e| page_error(e.into()))?
        .ok_or_else(|| {
            page_error(AppError::NotFound(format!(
                "no archived message with id {id:?}"
            )))
        })?;
    let selection = SelectionRequest {
        ids: Some(vec![IdValue::Number(numeric)]),
        ..Default::default()
    };
    dismiss_selection(&state, &selection, &form.note, &caller.actor())
        .await
        .map_err(page_error)?;
    Ok(Redirect::to(&format!("/messages/{id}")).into_response())
}

fn properties(m: &ArchivedMessage) -> Vec<(&'static str, String)> {
    let p = &m.properties;
    let text = |v: &Option<crate::amqp::headers::Bytes>| v.as_ref().map(|b| b.describe());
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

/// `/messages/{id}`: everything about one archived message.
pub async fn detail_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let not_found = || {
        page_error(AppError::NotFound(format!(
            "no archived message with id {id:?}"
        )))
    };
    let mut message = state
        .archive
        .get_message(numeric)
        .await
        .map_err(|e| page_error(e.into()))?
        .ok_or_else(not_found)?;
    state
        .masking
        .fields(caller.role, &mut message.summary.fields);
    // A few bodies at a time are loaded, decoded and rendered, off the async threads.
    let permit = state.bodies.acquire().await.map_err(page_error)?;
    let stored = state
        .archive
        .get_body(numeric)
        .await
        .map_err(|e| page_error(e.into()))?
        .ok_or_else(not_found)?;
    let (masking, role, archived) = (state.masking.clone(), caller.role, message.clone());
    let (payload, editable_body) = state
        .bodies
        .run_with(permit, move || {
            let body = masking.body(role, stored);
            let payload = payload::view(
                &body.bytes,
                body.content_type.as_deref(),
                body.content_encoding.as_deref(),
            );
            (payload, editable_body(&archived, &body.bytes))
        })
        .await
        .map_err(page_error)?;
    let replays = state
        .archive
        .replays_of(numeric)
        .await
        .map_err(|e| page_error(e.into()))?;
    let related = state
        .archive
        .related(&message.summary)
        .await
        .map_err(|e| page_error(e.into()))?;
    let s = &message.summary;
    let page = MessagePage {
        nav: Nav::new(Some(&caller), state.auth.mode),
        id: id.clone(),
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
        headers: message.headers.as_ref().map(header_rows),
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
        size: human_bytes(s.body_size),
        related: related.iter().map(|m| Row::new(m, &[])).collect(),
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
        summary: s.clone(),
    };
    Ok(render(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_filters_fill_datetime_local_fields() {
        assert_eq!(
            datetime_local(&Some("2026-12-02T09:30:00+01:00".into())),
            "2026-12-02T08:30"
        );
        assert_eq!(
            datetime_local(&Some("2026-12-02T09:30".into())),
            "2026-12-02T09:30"
        );
        assert_eq!(datetime_local(&None), "");
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

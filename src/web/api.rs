//! The JSON API over the archive: list with filters and keyset pages, one message, its body.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::auth::Caller;
use super::{AppError, AppState};
use crate::amqp::headers::Table;
use crate::archive::{
    ArchivedMessage, MessageFilter, MessagePage, MessageStatus, PageRequest, ReplayEdit,
    ReplayRecord, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE,
};
use crate::death::ReplayTarget;
use crate::replay::single::{replay_one, ReplayAnswer, SingleReplay};
use crate::search;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/messages", get(list_messages))
        .route("/messages/{id}", get(get_message))
        .route("/messages/{id}/body", get(download_body))
        .route("/messages/{id}/replay", post(replay_message))
}

/// Query string of the list, as received: everything is validated into a filter with
/// messages a user can act on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_death_queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Empty form fields mean "no filter", as a browser sends them.
pub(super) fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ListParams {
    /// The same filters with empty values left out, and without the page (limit, cursor):
    /// what a selection is, and what links and the audit log show.
    pub fn filters_only(&self) -> ListParams {
        let keep = |v: &Option<String>| given(v).map(str::to_owned);
        ListParams {
            q: keep(&self.q),
            queue: keep(&self.queue),
            reason: keep(&self.reason),
            first_death_queue: keep(&self.first_death_queue),
            error: keep(&self.error),
            exchange: keep(&self.exchange),
            routing_key: keep(&self.routing_key),
            status: keep(&self.status),
            content_type: keep(&self.content_type),
            since: keep(&self.since),
            until: keep(&self.until),
            limit: None,
            cursor: None,
        }
    }

    /// The query string of these filters (empty ones left out), with a page size and cursor.
    pub fn to_query(&self, cursor: Option<&str>) -> String {
        let mut params = self.filters_only();
        params.limit = given(&self.limit).map(str::to_owned);
        params.cursor = cursor.map(str::to_owned);
        serde_urlencoded::to_string(&params).expect("strings always encode")
    }

    /// No stored text holds NUL, and PostgreSQL refuses it in a parameter: a 400 that says
    /// so, not a database error.
    fn refuse_nul(&self) -> Result<(), AppError> {
        let named = [
            ("q", &self.q),
            ("queue", &self.queue),
            ("reason", &self.reason),
            ("first_death_queue", &self.first_death_queue),
            ("error", &self.error),
            ("exchange", &self.exchange),
            ("routing_key", &self.routing_key),
            ("status", &self.status),
            ("content_type", &self.content_type),
            ("since", &self.since),
            ("until", &self.until),
            ("limit", &self.limit),
            ("cursor", &self.cursor),
        ];
        match named
            .iter()
            .find(|(_, v)| v.as_deref().is_some_and(|v| v.contains('\0')))
        {
            Some((name, _)) => Err(AppError::BadRequest(format!(
                "{name} contains a NUL character (%00), which no archived value holds"
            ))),
            None => Ok(()),
        }
    }

    /// Validates the filters; `business_fields` are the `--field` names `q` may use.
    pub fn parse(
        &self,
        business_fields: &[String],
    ) -> Result<(MessageFilter, PageRequest), AppError> {
        self.refuse_nul()?;
        let search = search::parse(given(&self.q).unwrap_or(""), business_fields)
            .map_err(|e| AppError::BadRequest(e.to_string()))?;

        let time = |name: &str, v: &Option<String>| -> Result<Option<OffsetDateTime>, AppError> {
            given(v)
                .map(|s| {
                    // RFC 3339, or what a datetime-local field sends (taken as UTC).
                    let local = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
                    OffsetDateTime::parse(s, &Rfc3339)
                        .or_else(|_| time::PrimitiveDateTime::parse(s, local).map(|t| t.assume_utc()))
                        .map_err(|_| {
                        AppError::BadRequest(format!(
                            "{name} must be an RFC 3339 time such as 2026-12-02T09:00:00Z, not {s:?}"
                        ))
                    })
                })
                .transpose()
        };
        let status = given(&self.status)
            .map(|s| {
                MessageStatus::parse(s).ok_or_else(|| {
                    AppError::BadRequest(format!(
                        "status must be archived, replayed, replay_failed or dismissed, not {s:?}"
                    ))
                })
            })
            .transpose()?;
        let limit = match given(&self.limit) {
            None => DEFAULT_PAGE_SIZE,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
                .ok_or_else(|| {
                    AppError::BadRequest(format!(
                        "limit must be between 1 and {MAX_PAGE_SIZE}, not {s:?}"
                    ))
                })?,
        };
        let before = given(&self.cursor)
            .map(|s| {
                s.parse::<i64>().map_err(|_| {
                    AppError::BadRequest(format!("cursor {s:?} is not one this API returned"))
                })
            })
            .transpose()?;
        let text = |v: &Option<String>| given(v).map(str::to_owned);
        let filter = MessageFilter {
            queue: text(&self.queue),
            reason: text(&self.reason),
            first_death_queue: text(&self.first_death_queue),
            error: text(&self.error),
            exchange: text(&self.exchange),
            routing_key: text(&self.routing_key),
            status,
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            content_type: text(&self.content_type),
            text: search.fts_query(),
            terms: search.fields,
        };
        Ok((filter, PageRequest { limit, before }))
    }
}

async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<MessagePage>, AppError> {
    let Query(params) = params.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let (filter, page) = params.parse(&state.business_fields)?;
    state.masking.check_search(caller.role, &filter)?;
    let mut page = state.archive.list_messages(&filter, page).await?;
    for m in &mut page.messages {
        state.masking.fields(caller.role, &mut m.fields);
    }
    Ok(Json(page))
}

/// Ids are opaque to clients; anything that is not one of ours is simply not found.
pub(super) fn parse_id(id: Result<Path<String>, PathRejection>) -> Result<(String, i64), AppError> {
    let Path(id) = id
        .map_err(|e| AppError::NotFound(format!("no archived message there: {}", e.body_text())))?;
    match id.parse() {
        Ok(numeric) => Ok((id, numeric)),
        Err(_) => Err(not_found(&id)),
    }
}

fn not_found(id: &str) -> AppError {
    AppError::NotFound(format!("no archived message with id {id:?}"))
}

/// The body inside the JSON detail: text where it is UTF-8, base64 otherwise.
#[derive(Debug, Serialize)]
struct BodyJson {
    encoding: &'static str,
    data: String,
}

impl BodyJson {
    fn new(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => BodyJson {
                encoding: "text",
                data: text.to_owned(),
            },
            Err(_) => BodyJson {
                encoding: "base64",
                data: BASE64.encode(bytes),
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct MessageDetail {
    #[serde(flatten)]
    message: ArchivedMessage,
    body: BodyJson,
}

async fn get_message(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<impl IntoResponse, AppError> {
    let (id, numeric) = parse_id(id)?;
    let mut message = state
        .archive
        .get_message(numeric)
        .await?
        .ok_or_else(|| not_found(&id))?;
    // A few bodies at a time are loaded and decoded; the rest wait, or hear 503.
    let permit = state.bodies.acquire().await?;
    let body = state
        .archive
        .get_body(numeric)
        .await?
        .ok_or_else(|| not_found(&id))?;
    let masking = state.masking.clone();
    let role = caller.role;
    let body = state
        .bodies
        .run_with(permit, move || {
            BodyJson::new(&masking.body(role, body).bytes)
        })
        .await?;
    state
        .masking
        .fields(caller.role, &mut message.summary.fields);
    Ok(Json(MessageDetail { message, body }))
}

/// The exact stored bytes, always as an attachment: a body is never rendered by the browser.
async fn download_body(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<impl IntoResponse, AppError> {
    let (id, numeric) = parse_id(id)?;
    let permit = state.bodies.acquire().await?;
    let body = state
        .archive
        .get_body(numeric)
        .await?
        .ok_or_else(|| not_found(&id))?;
    let body = match state.masking.applies(caller.role) {
        true => {
            let masking = state.masking.clone();
            let role = caller.role;
            state
                .bodies
                .run_with(permit, move || masking.body(role, body))
                .await?
        }
        false => body,
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"message-{numeric}.bin\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        body.bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> ListParams {
        let query = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        serde_urlencoded_from(&query)
    }

    fn serde_urlencoded_from(query: &str) -> ListParams {
        let uri: axum::http::Uri = format!("/api/messages?{query}").parse().unwrap();
        Query::<ListParams>::try_from_uri(&uri).unwrap().0
    }

    #[test]
    fn empty_query_is_newest_default_page() {
        let (filter, page) = params(&[]).parse(&[]).unwrap();
        assert_eq!(filter, MessageFilter::default());
        assert_eq!(
            page,
            PageRequest {
                limit: DEFAULT_PAGE_SIZE,
                before: None
            }
        );
    }

    #[test]
    fn filters_are_parsed() {
        let (filter, page) = params(&[
            ("queue", "invoices.dlq"),
            ("reason", "rejected"),
            ("status", "archived"),
            ("since", "2026-12-02T09:00:00Z"),
            ("limit", "10"),
            ("cursor", "1234"),
        ])
        .parse(&[])
        .unwrap();
        assert_eq!(filter.queue.as_deref(), Some("invoices.dlq"));
        assert_eq!(filter.status, Some(MessageStatus::Archived));
        assert_eq!(filter.since.unwrap().hour(), 9);
        assert_eq!(
            page,
            PageRequest {
                limit: 10,
                before: Some(1234)
            }
        );
    }

    #[test]
    fn bad_values_get_clear_messages() {
        for (pairs, expected) in [
            (vec![("limit", "0")], "limit must be between 1 and 500"),
            (vec![("limit", "lots")], "limit must be between"),
            (vec![("cursor", "abc")], "cursor \"abc\" is not one"),
            (vec![("status", "gone")], "status must be archived"),
            (
                vec![("since", "yesterday")],
                "since must be an RFC 3339 time",
            ),
            (vec![("q", "%22open")], "never closed"),
        ] {
            let err = params(&pairs).parse(&[]).unwrap_err();
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }

    #[test]
    fn empty_fields_are_no_filter() {
        let (filter, _) = params(&[("exchange", ""), ("queue", ""), ("error", "")])
            .parse(&[])
            .unwrap();
        assert_eq!(filter, MessageFilter::default());
    }

    #[test]
    fn q_becomes_text_and_terms() {
        let (filter, _) = params(&[("q", "timeout%20invoice:INV-1")])
            .parse(&["invoice".into()])
            .unwrap();
        assert_eq!(filter.text.as_deref(), Some("\"timeout\""));
        assert_eq!(filter.terms[0].value, "INV-1");
        // Without the business field, `invoice:` is text.
        let (filter, _) = params(&[("q", "invoice:INV-1")]).parse(&[]).unwrap();
        assert_eq!(filter.text.as_deref(), Some("\"invoice:INV-1\""));
    }

    #[test]
    fn keys_and_targets_are_bounded_at_the_edge() {
        assert!(check_request_key("click-1").is_ok());
        assert!(check_request_key(&"k".repeat(MAX_REQUEST_KEY_CHARS + 1)).is_err());
        assert!(check_request_key("a\nb").is_err() && check_request_key("").is_err());
        let target = |exchange: &str| ReplayTarget {
            exchange: exchange.into(),
            routing_key: "k".into(),
        };
        assert!(check_target(&target("billing")).is_ok());
        assert!(check_target(&target(&"e".repeat(256))).is_err());
        assert!(check_target(&target("a\0b")).is_err());
    }

    #[test]
    fn nul_in_any_filter_is_refused_by_name() {
        let err = params(&[("routing_key", "a%00b")]).parse(&[]).unwrap_err();
        assert!(
            err.to_string().starts_with("routing_key contains a NUL"),
            "{err}"
        );
    }

    #[test]
    fn datetime_local_values_are_utc() {
        let (filter, _) = params(&[("since", "2026-12-02T09:30")]).parse(&[]).unwrap();
        assert_eq!(filter.since.unwrap().unix_timestamp(), 1_796_203_800);
    }
}

/// `POST /api/messages/{id}/replay`: `{"target": {"exchange", "routing_key"}?, "request_key"?,
/// "body"?, "headers"?}`. Send a `request_key` to make retries safe: the same key never
/// publishes twice. `body` (text) and `headers` (typed, as `GET` returns them; they replace
/// the archived ones) make it an edit & replay.
#[derive(Debug, Deserialize)]
pub struct ReplayRequest {
    target: Option<ReplayTarget>,
    request_key: Option<String>,
    body: Option<String>,
    headers: Option<Table>,
}

async fn replay_message(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
    request: Result<Json<ReplayRequest>, JsonRejection>,
) -> Result<(axum::http::StatusCode, Json<ReplayRecord>), AppError> {
    let (_, numeric) = parse_id(id)?;
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let key = request.request_key.unwrap_or_else(new_request_key);
    check_request_key(&key)?;
    if let Some(target) = &request.target {
        check_target(target)?;
    }
    let edit = (request.body.is_some() || request.headers.is_some()).then(|| ReplayEdit {
        body: request.body.map(String::into_bytes),
        headers: request.headers,
    });
    let answer = replay_one(
        state.archive.clone(),
        &state.amqp_url,
        SingleReplay {
            id: numeric,
            target: request.target,
            edit,
            request_key: &key,
            actor: &caller.actor(),
            metrics: state.metrics.clone(),
            policy: &state.replay_policy,
        },
    )
    .await?;
    // 202: published, the broker's confirm still to come (the record says so and settles).
    let status = match answer {
        ReplayAnswer::Settled(_) => axum::http::StatusCode::OK,
        ReplayAnswer::Pending(_) => axum::http::StatusCode::ACCEPTED,
    };
    Ok((status, Json(answer.record().clone())))
}

/// The longest request key accepted (they are stored, and audited with their replay).
pub const MAX_REQUEST_KEY_CHARS: usize = 200;
/// The longest exchange name and routing key AMQP carries (short strings).
const MAX_TARGET_BYTES: usize = 255;

/// A request key, bounded, without control characters.
pub(super) fn check_request_key(key: &str) -> Result<(), AppError> {
    if key.is_empty()
        || key.chars().count() > MAX_REQUEST_KEY_CHARS
        || key.contains(char::is_control)
    {
        return Err(AppError::BadRequest(format!(
            "request_key has 1 to {MAX_REQUEST_KEY_CHARS} characters, no control characters"
        )));
    }
    Ok(())
}

/// A target AMQP can carry: exchange and routing key of at most 255 bytes, no NUL.
pub(super) fn check_target(target: &ReplayTarget) -> Result<(), AppError> {
    for (name, value) in [
        ("exchange", &target.exchange),
        ("routing_key", &target.routing_key),
    ] {
        if value.len() > MAX_TARGET_BYTES || value.contains('\0') {
            return Err(AppError::BadRequest(format!(
                "the target's {name} has at most {MAX_TARGET_BYTES} bytes and no NUL (AMQP's limit)"
            )));
        }
    }
    Ok(())
}

/// A request key no one else has: time and a process-wide counter.
pub fn new_request_key() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}-{}-{n}",
        OffsetDateTime::now_utc().unix_timestamp_nanos(),
        std::process::id()
    )
}

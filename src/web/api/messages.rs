//! The JSON API over the archive: list with filters and keyset pages, one message, its body.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use serde::{Deserialize, Serialize};

use crate::archive::selection::ListParams;
use crate::archive::{ArchivedMessage, BodyStart, MessagePage, ReplayEdit, ReplayRecord, Role};
use crate::message::death::ReplayTarget;
use crate::message::headers::Table;
use crate::replay::plan::{check_request_key, check_target, new_request_key};
use crate::replay::single::{replay_one, ReplayAnswer, SingleReplay};
use crate::web::api::download;
use crate::web::auth::Caller;
use crate::web::caller::not_found;
use crate::web::extract::{AppJson, AppQuery, MessageId};
use crate::web::masking::MAX_MASKED_BODY;
use crate::web::{AppError, AppState};

/// Archived messages, newest first.
///
/// Filters as the list page's search box and selects; `next_cursor` fetches the next
/// (older) page. Under `--mask` a viewer sees summaries masked.
#[utoipa::path(get, path = "/api/messages", tag = "messages", params(ListParams),
    responses((status = 200, description = "A page of summaries", body = MessagePage)))]
pub(crate) async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(params): AppQuery<ListParams>,
) -> Result<Json<MessagePage>, AppError> {
    let (filter, page) = caller.filter(&state, &params).await?;
    let _reading = state.reads.acquire().await?;
    let mut page = state.archive.list_messages(&filter, page).await?;
    page.indexing_behind = state.index_behind().await?;
    for m in &mut page.messages {
        let role = caller.role_on(&m.queue, &m.vhost, &state);
        let role = role.unwrap_or(Role::Viewer);
        state.masking.summary(role, m);
        m.vhost = state.vhost_name(&m.vhost).to_owned();
    }
    Ok(Json(page))
}

/// The most of a body the JSON detail holds; the download has it all.
pub const DETAIL_BODY_BYTES: usize = 1024 * 1024;

/// The body inside the JSON detail: text where it is UTF-8, base64 otherwise; its first
/// [`DETAIL_BODY_BYTES`] when it is larger.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct BodyJson {
    /// `text` or `base64`.
    #[schema(value_type = String)]
    encoding: &'static str,
    data: String,
    /// The body's size in bytes (as stored; as masked for a viewer under `--mask`).
    size: u64,
    /// Whether `data` is only its start (`GET /api/messages/{id}/body` has it all).
    truncated: bool,
}

impl BodyJson {
    fn new(start: &BodyStart) -> Self {
        let bytes = &start.body.bytes[..start.body.bytes.len().min(DETAIL_BODY_BYTES)];
        let truncated = (bytes.len() as u64) < start.size;
        let (encoding, data) = match std::str::from_utf8(bytes) {
            Ok(text) => ("text", text.to_owned()),
            // Text cut inside a character: up to it.
            Err(e) if truncated && e.error_len().is_none() => (
                "text",
                String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
            ),
            Err(_) => ("base64", BASE64.encode(bytes)),
        };
        BodyJson {
            encoding,
            data,
            size: start.size,
            truncated,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct MessageDetail {
    #[serde(flatten)]
    message: ArchivedMessage,
    body: BodyJson,
    /// Its replays, newest first.
    replays: Vec<ReplayRecord>,
    /// The ids of its replayed copies that died again (and are archived), newest first.
    died_again_as: Vec<String>,
}

/// One message: its summary, properties, typed headers, body, replays, and the copies that
/// died again.
///
/// The body is text where it is UTF-8, base64 otherwise (masked for a viewer under `--mask`).
#[utoipa::path(get, path = "/api/messages/{id}", tag = "messages", params(MessageId),
    responses((status = 200, description = "The message", body = MessageDetail)))]
pub(crate) async fn get_message(
    State(state): State<AppState>,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
) -> Result<impl IntoResponse, AppError> {
    let _reading = state.reads.acquire().await?;
    let mut message = caller.message(&state, numeric, &id, Role::Viewer).await?;
    let role = caller
        .role_on(&message.summary.queue, &message.summary.vhost, &state)
        .unwrap_or(Role::Viewer);
    // A few bodies at a time are loaded and decoded; the rest wait, or hear 503. Only the
    // start of a large one is read: what the answer holds, or what masking may decode.
    let permit = state.bodies.acquire().await?;
    let read = match state.masking.applies(role) {
        true => MAX_MASKED_BODY,
        false => DETAIL_BODY_BYTES,
    };
    let start = state
        .archive
        .body_start(numeric, read)
        .await?
        .ok_or_else(|| not_found(&id))?
        .of_message(&message);
    let (masking, schemas) = (state.masking.clone(), state.schemas.clone());
    let body = state
        .bodies
        .run_with(permit, move || {
            BodyJson::new(&masking.start(role, start, schemas.as_deref()))
        })
        .await?;
    state.masking.summary(role, &mut message.summary);
    message.summary.vhost = state.vhost_name(&message.summary.vhost).to_owned();
    let replays = state.archive.replays_of(numeric).await?;
    let died_again_as = state
        .archive
        .related(&message.summary)
        .await?
        .into_iter()
        .filter(|r| r.replay_of == Some(numeric))
        .filter(|r| caller.role_on(&r.queue, &r.vhost, &state).is_some())
        .map(|r| r.id.to_string())
        .collect();
    Ok(Json(MessageDetail {
        message,
        body,
        replays,
        died_again_as,
    }))
}

/// The exact stored bytes, as an attachment.
///
/// A body is never rendered by the browser. A viewer under `--mask` gets the masked body.
#[utoipa::path(get, path = "/api/messages/{id}/body", tag = "messages", params(MessageId),
    responses((status = 200, description = "The body's bytes", content_type = "application/octet-stream", body = String)))]
pub(crate) async fn download_body(
    State(state): State<AppState>,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
) -> Result<Response, AppError> {
    let headers = [
        (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"message-{numeric}.bin\""),
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
    ];
    // A caller whose rights are of some DLQs sees only theirs, with their role there.
    let (role, message) = match caller.rights.everywhere_at(Role::Viewer) {
        true => (caller.role, None),
        false => {
            let message = caller.message(&state, numeric, &id, Role::Viewer).await?;
            let s = &message.summary;
            let role = caller.role_on(&s.queue, &s.vhost, &state);
            (role.unwrap_or(Role::Viewer), Some(message))
        }
    };
    if state.masking.applies(role) {
        // Masking decodes the body whole (at most 8 MiB of it) and needs what the message
        // says of its bytes.
        let permit = state.bodies.acquire().await?;
        let message = match message {
            Some(message) => message,
            None => state
                .archive
                .get_message(numeric)
                .await?
                .ok_or_else(|| not_found(&id))?,
        };
        let start = state
            .archive
            .body_start(numeric, MAX_MASKED_BODY)
            .await?
            .ok_or_else(|| not_found(&id))?
            .of_message(&message);
        let (masking, schemas) = (state.masking.clone(), state.schemas.clone());
        let masked = state
            .bodies
            .run_with(permit, move || {
                masking.start(role, start, schemas.as_deref())
            })
            .await?;
        return Ok((headers, masked.body.bytes).into_response());
    }
    // As stored, a piece at a time: a few downloads at once, each holding a piece.
    let permit = state.downloads.acquire().await?;
    let start = state
        .archive
        .body_start(numeric, download::PIECE_BYTES)
        .await?
        .ok_or_else(|| not_found(&id))?;
    let body = download::stream(
        state.archive.clone(),
        numeric,
        start.size,
        start.body.bytes,
        permit,
    );
    let length = (header::CONTENT_LENGTH, start.size.to_string());
    Ok((headers, [length], body).into_response())
}

/// `POST /api/messages/{id}/replay`: `{"target": {"exchange", "routing_key"}?, "request_key"?,
/// "body"?, "headers"?}`. Send a `request_key` to make retries safe: the same key never
/// publishes twice. `body` (text) and `headers` (typed, as `GET` returns them; they replace
/// the archived ones) make it an edit & replay.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ReplayRequest {
    /// Where to publish it instead of its own replay target.
    target: Option<ReplayTarget>,
    /// The same key never publishes twice: send one to make retries safe.
    request_key: Option<String>,
    /// An edited body (text) to publish instead of the archived one.
    body: Option<String>,
    /// Edited headers, typed as `GET` returns them; they replace the archived ones.
    headers: Option<Table>,
}

/// Replays one message to its replay target (or the one given), with a publisher confirm.
///
/// 200 once the broker answered (the record says how), 202 while its confirm is awaited
/// (the record gets its outcome later). `body` and `headers` make it an edit & replay.
#[utoipa::path(post, path = "/api/messages/{id}/replay", tag = "messages", params(MessageId),
    request_body = ReplayRequest,
    responses(
        (status = 200, description = "Published; the broker answered", body = ReplayRecord),
        (status = 202, description = "Published; its confirm is still awaited", body = ReplayRecord),
        (status = 409, description = "The request key was used for another message, or its replay is in progress", body = crate::web::error::ErrorBody),
    ))]
pub(crate) async fn replay_message(
    State(state): State<AppState>,
    caller: Caller,
    MessageId { id: numeric, raw }: MessageId,
    AppJson(request): AppJson<ReplayRequest>,
) -> Result<(axum::http::StatusCode, Json<ReplayRecord>), AppError> {
    caller.may_act_on(&state, numeric, &raw).await?;
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
        &state.brokers,
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
    // 202: published, the broker's confirm still to come (the record says so, and gets its
    // outcome when it comes).
    let status = match answer {
        ReplayAnswer::Settled(_) => axum::http::StatusCode::OK,
        ReplayAnswer::Pending(_) => axum::http::StatusCode::ACCEPTED,
    };
    Ok((status, Json(answer.record().clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::StoredBody;

    fn start(bytes: &[u8], size: u64) -> BodyStart {
        BodyStart {
            body: StoredBody {
                bytes: bytes.to_vec(),
                content_type: None,
                content_encoding: None,
                headers: None,
                message_type: None,
            },
            size,
        }
    }

    #[test]
    fn the_detail_holds_a_bodys_start_and_says_so() {
        let whole = BodyJson::new(&start("café".as_bytes(), 5));
        assert_eq!((whole.encoding, whole.data.as_str()), ("text", "café"));
        assert!(!whole.truncated);
        // Cut inside "é": text up to it, not base64.
        let cut = BodyJson::new(&start(&"café".as_bytes()[..4], 100));
        assert_eq!(
            (cut.encoding, cut.data.as_str(), cut.size),
            ("text", "caf", 100)
        );
        assert!(cut.truncated);
        let binary = BodyJson::new(&start(&[0xff, 0x00], 2));
        assert_eq!(binary.encoding, "base64");
        let large = vec![b'a'; DETAIL_BODY_BYTES + 10];
        let large = BodyJson::new(&start(&large, large.len() as u64));
        assert_eq!(large.data.len(), DETAIL_BODY_BYTES);
        assert!(large.truncated);
    }
}

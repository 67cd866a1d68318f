//! Administration: the users and API tokens (create, revoke) on a page and in the API,
//! and the audit log as NDJSON for export.

use askama::Template;
use axum::extract::rejection::{FormRejection, JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api_replays::{SelectionRequest, MAX_NOTE_CHARS};
use super::auth::Caller;
use super::html::{filters, render, utc, PageError};
use super::{AppError, AppState};
use crate::archive::{Role, TokenRecord, UserRecord};
use crate::auth::{new_secret, secret_hash, TOKEN_PREFIX};

pub fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/admin/users", get(list_users))
        .route("/admin/tokens", get(list_tokens).post(create_token))
        .route("/admin/tokens/{id}/revoke", post(revoke_token))
        .route("/admin/purge", post(purge))
        .route("/audit.ndjson", get(audit_ndjson))
}

#[derive(Debug, Deserialize)]
pub struct TokenRequest {
    name: String,
    role: String,
}

/// A new token: stored hashed, shown once (never `Debug`: it holds the secret).
#[derive(Serialize)]
pub struct NewToken {
    #[serde(serialize_with = "crate::archive::id_as_string")]
    id: i64,
    name: String,
    role: Role,
    /// Send as `Authorization: Bearer <token>`; it is not shown again.
    token: String,
}

async fn make_token(
    state: &AppState,
    caller: &Caller,
    request: &TokenRequest,
) -> Result<NewToken, AppError> {
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(AppError::BadRequest(
            "name the token (1 to 100 characters): what uses it".into(),
        ));
    }
    let role = request.role.parse::<Role>().map_err(AppError::BadRequest)?;
    let token = format!("{TOKEN_PREFIX}{}", new_secret());
    let id = state
        .archive
        .create_token(name, &secret_hash(&token), role, &caller.actor())
        .await?;
    Ok(NewToken {
        id,
        name: name.to_owned(),
        role,
        token,
    })
}

async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    request: Result<Json<TokenRequest>, JsonRejection>,
) -> Result<Json<NewToken>, AppError> {
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    Ok(Json(make_token(&state, &caller, &request).await?))
}

async fn revoke(
    state: &AppState,
    caller: &Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<i64, AppError> {
    let (_, id) = super::api::parse_id(id)?;
    if !state.archive.revoke_token(id, &caller.actor()).await? {
        return Err(AppError::NotFound(format!(
            "no API token {id} to revoke (or it was revoked already)"
        )));
    }
    Ok(id)
}

async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let id = revoke(&state, &caller, id).await?;
    Ok(Json(json!({ "revoked": id.to_string() })))
}

async fn list_users(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    Ok(Json(json!({ "users": state.archive.users().await? })))
}

async fn list_tokens(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    Ok(Json(json!({ "tokens": state.archive.tokens().await? })))
}

/// `POST /api/admin/purge`: `{"ids"|"filter", "all"?, "note"}`.
#[derive(Debug, Deserialize)]
pub struct PurgeRequest {
    #[serde(flatten)]
    selection: SelectionRequest,
    #[serde(default)]
    note: String,
}

/// Deletes the selected messages for good (retention, data removal requests); the note
/// says why in the audit log.
async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    request: Result<Json<PurgeRequest>, JsonRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let note = request.note.trim();
    if note.is_empty() || note.chars().count() > MAX_NOTE_CHARS {
        return Err(AppError::BadRequest(format!(
            "say why in a note (1 to {MAX_NOTE_CHARS} characters): a purge cannot be undone"
        )));
    }
    let (selection, text) = request.selection.resolve(&state.business_fields)?;
    let purged = state
        .archive
        .purge(&selection, &text, note, &caller.actor())
        .await?;
    Ok(Json(json!({ "purged": purged })))
}

/// `GET /api/audit.ndjson`: the whole audit log, oldest first, one JSON object per line.
async fn audit_ndjson(State(state): State<AppState>) -> Result<Response, AppError> {
    let mut entries = Vec::new();
    let mut before = None;
    loop {
        let page = state.archive.audit_log(before, 500).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        entries.extend(page);
    }
    let mut out = String::new();
    for e in entries.iter().rev() {
        out.push_str(&serde_json::to_string(e).expect("entries serialize"));
        out.push('\n');
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"lazarus-audit.ndjson\"",
            ),
        ],
        out,
    )
        .into_response())
}

#[derive(Template)]
#[template(path = "admin.html")]
pub struct AdminPage {
    pub users: Vec<UserRecord>,
    pub tokens: Vec<TokenRecord>,
    /// A token just created, shown this once.
    pub new_token: Option<String>,
}

impl AdminPage {
    fn when(t: &time::OffsetDateTime) -> String {
        utc(*t)
    }
}

async fn admin_page_with(
    state: &AppState,
    headers: &HeaderMap,
    new_token: Option<String>,
) -> Result<Response, PageError> {
    let page_error = |e: crate::archive::ArchiveError| PageError::new(e, headers);
    Ok(render(&AdminPage {
        users: state.archive.users().await.map_err(page_error)?,
        tokens: state.archive.tokens().await.map_err(page_error)?,
        new_token,
    }))
}

/// `GET /admin`
pub async fn admin_page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    admin_page_with(&state, &headers, None).await
}

/// `POST /admin/tokens` from the page: the new token is shown once.
pub async fn token_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    form: Result<Form<TokenRequest>, FormRejection>,
) -> Result<Response, PageError> {
    let Form(request) =
        form.map_err(|e| PageError::new(AppError::BadRequest(e.body_text()), &headers))?;
    let token = make_token(&state, &caller, &request)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    admin_page_with(&state, &headers, Some(token.token)).await
}

/// `POST /admin/tokens/{id}/revoke` from the page.
pub async fn revoke_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, PageError> {
    revoke(&state, &caller, id)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    Ok(axum::response::Redirect::to("/admin").into_response())
}

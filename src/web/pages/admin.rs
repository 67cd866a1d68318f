//! Administration: the users and API tokens (create, revoke) on a page and in the API,
//! and the audit log as NDJSON for export.

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::archive::Grant;
use crate::archive::{AuditEntry, Role, TokenRecord, TokenSpec, UserRecord};
use crate::auth::{new_secret, secret_hash, MAX_TOKEN_DAYS, TOKEN_DAYS, TOKEN_PREFIX};
use crate::replay::plan::{SelectionRequest, MAX_NOTE_CHARS};
use crate::web::auth::Caller;
use crate::web::extract::{AppForm, AppJson, TokenId};
use crate::web::html::{filters, render, utc, PageError};
use crate::web::nav::Nav;
use crate::web::{AppError, AppState};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct TokenRequest {
    /// What uses it.
    #[schema(min_length = 1, max_length = 100)]
    name: String,
    #[schema(value_type = Role)]
    role: String,
    /// The role only on the DLQs these patterns name (`tenant-a/*`, `billing.*`; none:
    /// every DLQ). A form sends them one per line.
    #[serde(default, deserialize_with = "patterns")]
    on: Vec<String>,
    /// Days until it stops working (default 90, at most 366). A form sends it as text.
    #[serde(default, deserialize_with = "days")]
    #[schema(minimum = 1, maximum = 366)]
    expires_in_days: Option<u32>,
}

/// Patterns, as JSON sends them (a list) or a form does (one per line).
fn patterns<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Patterns {
        List(Vec<String>),
        Lines(String),
    }
    Ok(match Patterns::deserialize(d)? {
        Patterns::List(list) => list,
        Patterns::Lines(text) => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// A number, as JSON sends it or a form does (an empty field is none).
fn days<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Days {
        Number(u32),
        Text(String),
    }
    match Option::<Days>::deserialize(d)? {
        None => Ok(None),
        Some(Days::Number(n)) => Ok(Some(n)),
        Some(Days::Text(t)) if t.trim().is_empty() => Ok(None),
        Some(Days::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not a number of days"))),
    }
}

/// A new token: stored hashed, shown once (never `Debug`: it holds the secret).
#[derive(Serialize, utoipa::ToSchema)]
pub struct NewToken {
    #[serde(serialize_with = "crate::archive::id_as_string")]
    #[schema(value_type = String)]
    id: i64,
    name: String,
    role: Role,
    /// The DLQs the role is held on; none: every DLQ.
    grants: Vec<Grant>,
    /// Send as `Authorization: Bearer <token>`; it is not shown again.
    token: String,
    #[serde(with = "time::serde::rfc3339")]
    expires_at: time::OffsetDateTime,
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
    if name.contains(char::is_control) {
        return Err(AppError::BadRequest(
            "a token's name has no control characters".into(),
        ));
    }
    let role = request.role.parse::<Role>().map_err(AppError::BadRequest)?;
    let grants = Grant::on_each(role, &request.on).map_err(AppError::BadRequest)?;
    let days = request.expires_in_days.unwrap_or(TOKEN_DAYS);
    if !(1..=MAX_TOKEN_DAYS).contains(&days) {
        return Err(AppError::BadRequest(format!(
            "expires_in_days is 1 to {MAX_TOKEN_DAYS}: every token expires"
        )));
    }
    let expires_at = time::OffsetDateTime::now_utc() + time::Duration::days(days.into());
    let token = format!("{TOKEN_PREFIX}{}", new_secret());
    let hash = secret_hash(&token);
    let spec = TokenSpec {
        name,
        token_hash: &hash,
        role,
        grants: &grants,
        // The caller's user owns it (a token made with a token, that token's owner):
        // removing them revokes it.
        owner: caller.owner.as_deref(),
        expires_at,
    };
    let id = state.archive.create_token(&spec, &caller.actor()).await?;
    Ok(NewToken {
        id,
        name: name.to_owned(),
        role,
        grants,
        token,
        expires_at,
    })
}

/// Creates an API token; the token is shown this once.
#[utoipa::path(post, path = "/api/admin/tokens", tag = "admin", request_body = TokenRequest,
    responses((status = 200, description = "The token", body = NewToken)))]
pub(crate) async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(request): AppJson<TokenRequest>,
) -> Result<Json<NewToken>, AppError> {
    Ok(Json(make_token(&state, &caller, &request).await?))
}

async fn revoke(state: &AppState, caller: &Caller, id: i64) -> Result<i64, AppError> {
    if !state.archive.revoke_token(id, &caller.actor()).await? {
        return Err(AppError::NotFound(format!(
            "no API token {id} to revoke (or it was revoked already)"
        )));
    }
    Ok(id)
}

/// The token a revocation revoked.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Revoked {
    revoked: String,
}

/// Revokes an API token: it stops working at once.
#[utoipa::path(post, path = "/api/admin/tokens/{id}/revoke", tag = "admin", params(TokenId),
    responses((status = 200, description = "Revoked", body = Revoked)))]
pub(crate) async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    TokenId { id, .. }: TokenId,
) -> Result<Json<Revoked>, AppError> {
    let id = revoke(&state, &caller, id).await?;
    Ok(Json(Revoked {
        revoked: id.to_string(),
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct UserList {
    users: Vec<UserRecord>,
}

/// Users and their roles.
#[utoipa::path(get, path = "/api/admin/users", tag = "admin",
    responses((status = 200, description = "The users", body = UserList)))]
pub(crate) async fn list_users(State(state): State<AppState>) -> Result<Json<UserList>, AppError> {
    Ok(Json(UserList {
        users: state.archive.users().await?,
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TokenList {
    tokens: Vec<TokenRecord>,
}

/// API tokens, never the token itself.
#[utoipa::path(get, path = "/api/admin/tokens", tag = "admin",
    responses((status = 200, description = "The tokens", body = TokenList)))]
pub(crate) async fn list_tokens(
    State(state): State<AppState>,
) -> Result<Json<TokenList>, AppError> {
    Ok(Json(TokenList {
        tokens: state.archive.tokens().await?,
    }))
}

/// `POST /api/admin/purge`: `{"ids"|"filter", "all"?, "note"}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct PurgeRequest {
    #[serde(flatten)]
    selection: SelectionRequest,
    /// Why (required): a purge cannot be undone.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 2000)]
    note: String,
}

/// How many messages a purge deleted.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Purged {
    purged: u64,
}

/// Deletes a selection for good, except what an unfinished job holds.
///
/// For retention and data removal requests; the note says why in the audit log.
#[utoipa::path(post, path = "/api/admin/purge", tag = "admin", request_body = PurgeRequest,
    responses((status = 200, description = "How many were deleted", body = Purged)))]
pub(crate) async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(request): AppJson<PurgeRequest>,
) -> Result<Json<Purged>, AppError> {
    let note = request.note.trim();
    if note.is_empty() || note.chars().count() > MAX_NOTE_CHARS {
        return Err(AppError::BadRequest(format!(
            "say why in a note (1 to {MAX_NOTE_CHARS} characters): a purge cannot be undone"
        )));
    }
    let (selection, text) = request
        .selection
        .resolve(&state.business_fields, &state.home_vhost)?;
    let purged = state
        .archive
        .purge(&selection, &text, note, &caller.actor())
        .await?;
    if purged > 0 {
        // The space given back as retention gives it, a small step at a time, once answered:
        // a SQLite archive's free pages stay in the file otherwise, and the drains after a
        // large purge write more, reusing them.
        let archive = state.archive.clone();
        tokio::spawn(async move {
            match archive.reclaim_space().await {
                Ok(pages) => tracing::debug!(pages, "space of purged messages given back"),
                Err(error) => {
                    tracing::warn!(%error, "the space of purged messages was not given back")
                }
            }
        });
    }
    Ok(Json(Purged { purged }))
}

/// Entries read per step of the export: a page of whole entries stays small.
const EXPORT_PAGE: u32 = 50;

/// The whole audit log, oldest first, one JSON object per line.
///
/// Streamed a page at a time: memory stays the same however long the log is.
#[utoipa::path(get, path = "/api/audit.ndjson", tag = "admin",
    responses((status = 200, description = "One entry per line", content_type = "application/x-ndjson", body = AuditEntry)))]
pub(crate) async fn audit_ndjson(State(state): State<AppState>) -> Result<Response, AppError> {
    let first = state.archive.audit_export(None, EXPORT_PAGE).await?;
    let archive = state.archive.clone();
    Ok(crate::web::ndjson::download(
        first,
        move |last: &AuditEntry| {
            let (archive, after) = (archive.clone(), last.id);
            async move { archive.audit_export(Some(after), EXPORT_PAGE).await }
        },
        "lazarus-audit.ndjson",
    ))
}

#[derive(Template)]
#[template(path = "admin.html")]
pub struct AdminPage {
    pub nav: Nav,
    pub users: Vec<UserRecord>,
    pub tokens: Vec<TokenRecord>,
    /// A token just created, shown this once.
    pub new_token: Option<String>,
}

impl AdminPage {
    fn when(t: &time::OffsetDateTime) -> String {
        utc(*t)
    }

    /// When a token stops working, or that it has.
    fn expiry(t: &TokenRecord) -> String {
        match t.expires_at {
            Some(at) if at <= time::OffsetDateTime::now_utc() => "expired".to_owned(),
            Some(at) => utc(at),
            None => "never".to_owned(),
        }
    }
}

async fn admin_page_with(
    state: &AppState,
    headers: &HeaderMap,
    nav: Nav,
    new_token: Option<String>,
) -> Result<Response, PageError> {
    let page_error = |e: crate::archive::ArchiveError| PageError::new(e, headers);
    Ok(render(&AdminPage {
        nav,
        users: state.archive.users().await.map_err(page_error)?,
        tokens: state.archive.tokens().await.map_err(page_error)?,
        new_token,
    }))
}

/// The cookie that carries a token just created to the page that shows it, once.
const NEW_TOKEN_COOKIE: &str = "lazarus_new_token";

/// `Set-Cookie` for the new token (`None`: clears it), readable by `/admin` only.
fn new_token_cookie(state: &AppState, token: Option<&str>) -> HeaderValue {
    let mut cookie = match token {
        Some(token) => {
            format!(
                "{NEW_TOKEN_COOKIE}={token}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=120"
            )
        }
        None => format!("{NEW_TOKEN_COOKIE}=; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=0"),
    };
    if state.auth.secure_cookies {
        cookie.push_str("; Secure");
    }
    HeaderValue::from_str(&cookie).expect("a token is ASCII")
}

/// `GET /admin`; a token just created is shown this once (then its cookie is cleared).
pub async fn admin_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    nav: Nav,
) -> Result<Response, PageError> {
    let new_token = crate::web::auth::cookie(&headers, NEW_TOKEN_COOKIE)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let mut response = admin_page_with(&state, &headers, nav, new_token.clone()).await?;
    if new_token.is_some() {
        response
            .headers_mut()
            .insert(header::SET_COOKIE, new_token_cookie(&state, None));
    }
    Ok(response)
}

/// `POST /admin/tokens` from the page: then to `/admin` (post-redirect-get: reloading it
/// makes no second token), which shows the new token once.
pub async fn token_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    AppForm(request): AppForm<TokenRequest>,
) -> Result<Response, PageError> {
    let token = make_token(&state, &caller, &request)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    let mut response = axum::response::Redirect::to("/admin").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        new_token_cookie(&state, Some(&token.token)),
    );
    Ok(response)
}

/// `POST /admin/tokens/{id}/revoke` from the page.
pub async fn revoke_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    TokenId { id, .. }: TokenId,
) -> Result<Response, PageError> {
    revoke(&state, &caller, id)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    Ok(axum::response::Redirect::to("/admin").into_response())
}

//! Signing in at an OpenID provider (`--auth oidc`): `/login/oidc` sends the browser there
//! with a PKCE challenge, a state and a nonce, kept meanwhile in an HttpOnly cookie of ten
//! minutes; `/login/oidc/callback` checks the state, redeems the code, has the ID token
//! checked, stores what the user's groups give them in their user row (taken again at every
//! sign-in; none: the row goes, with their tokens) and starts a session as `--auth users`
//! does. A provider that cannot be reached is a 503 page that says so.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use serde::Deserialize;

use crate::archive::{Actor, Grants};
use crate::auth::oidc::{OidcError, Pending, PENDING_SECS};
use crate::auth::{secret_hash, AuthSettings};
use crate::web::auth::client::client_ip;
use crate::web::auth::cookie;
use crate::web::auth::signin::{safe_next, session_cookie, LoginPage};
use crate::web::html::render;
use crate::web::AppState;

/// Who changes a user's row from what the provider said of them, as the audit log names it.
const ACTOR: &str = "openid-connect";

/// The page that takes the browser on after signing in: a navigation of this site's own, so
/// that the session cookie (`SameSite=Strict`) goes with it — the redirect from the provider
/// was another site's.
#[derive(Template)]
#[template(path = "signed_in.html")]
struct SignedInPage<'a> {
    name: &'a str,
    next: &'a str,
}

#[derive(Debug, Default, Deserialize)]
pub struct StartQuery {
    next: Option<String>,
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The sign-in page again, with `error`, answered with `status`.
fn again(settings: &AuthSettings, status: StatusCode, next: String, error: String) -> Response {
    (status, render(&LoginPage::new(settings, next, Some(error)))).into_response()
}

/// The status and words of a sign-in the provider did not complete.
fn refused(error: &OidcError) -> StatusCode {
    match error {
        OidcError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        OidcError::Refused(_) => StatusCode::UNAUTHORIZED,
    }
}

fn pending_cookie(settings: &AuthSettings, value: &str, max_age: i64) -> HeaderValue {
    lax_cookie(settings, settings.pending_cookie(), value, max_age)
}

/// A cookie that a browser coming back from the provider sends along: Lax, not Strict, since
/// the provider is another site.
pub(crate) fn lax_cookie(
    settings: &AuthSettings,
    name: &str,
    value: &str,
    max_age: i64,
) -> HeaderValue {
    let mut cookie = format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}");
    if settings.secure_cookies {
        cookie.push_str("; Secure");
    }
    HeaderValue::from_str(&cookie).expect("a cookie is ASCII")
}

/// `GET /login/oidc`: to the provider, the sign-in remembered in a cookie.
pub async fn start(State(state): State<AppState>, Query(query): Query<StartQuery>) -> Response {
    let next = safe_next(query.next.as_deref());
    let Some(oidc) = state.auth.oidc.clone() else {
        return Redirect::to("/login").into_response();
    };
    match oidc.start(next.clone(), now()).await {
        Ok((url, pending)) => {
            let value = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&pending).unwrap_or_default());
            let mut response = Redirect::to(&url).into_response();
            response.headers_mut().insert(
                header::SET_COOKIE,
                pending_cookie(&state.auth, &value, PENDING_SECS),
            );
            response
        }
        Err(e) => {
            tracing::warn!(error = %e, "OpenID sign-in could not start");
            again(&state.auth, refused(&e), next, e.to_string())
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    /// RFC 9207: the provider that answers, where it says so.
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The sign-in this browser started, if its cookie is there and reads.
fn pending(settings: &AuthSettings, headers: &HeaderMap) -> Option<Pending> {
    let value = cookie(headers, settings.pending_cookie())?;
    let bytes = URL_SAFE_NO_PAD.decode(value).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `GET /login/oidc/callback`: the provider's answer. The pending sign-in's cookie is
/// cleared whatever comes of it: a state, a nonce and a code serve once.
pub async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let client = client_ip(&state.auth, &headers, crate::web::auth::peer(&request));
    let query: CallbackQuery = request
        .uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default();
    let mut response = finish(&state, &headers, query, client).await;
    response
        .headers_mut()
        .append(header::SET_COOKIE, pending_cookie(&state.auth, "", 0));
    response
}

async fn finish(
    state: &AppState,
    headers: &HeaderMap,
    query: CallbackQuery,
    client: Option<std::net::IpAddr>,
) -> Response {
    let settings = &state.auth;
    let Some(oidc) = settings.oidc.clone() else {
        return Redirect::to("/login").into_response();
    };
    let Some(pending) = pending(settings, headers) else {
        return again(
            settings,
            StatusCode::BAD_REQUEST,
            "/".into(),
            "this answer of the identity provider belongs to no sign-in started in this \
             browser (or it was used already): sign in again"
                .into(),
        );
    };
    let next = pending.next.clone();
    let bad = |status: StatusCode, error: String| again(settings, status, next.clone(), error);
    if pending.expired(now()) {
        return bad(
            StatusCode::BAD_REQUEST,
            format!(
                "this sign-in took longer than {} minutes: sign in again",
                PENDING_SECS / 60
            ),
        );
    }
    let state_matches = query
        .state
        .as_deref()
        .is_some_and(|s| secret_hash(s) == secret_hash(&pending.state));
    if !state_matches {
        return bad(
            StatusCode::BAD_REQUEST,
            "this answer of the identity provider is not for the sign-in this browser started \
             (its state differs): sign in again"
                .into(),
        );
    }
    if let Some(iss) = query.iss.as_deref() {
        if iss.trim_end_matches('/') != oidc.issuer().trim_end_matches('/') {
            return bad(
                StatusCode::BAD_REQUEST,
                format!(
                    "this answer comes from {iss:?}, not from the identity provider {}: sign in again",
                    oidc.issuer()
                ),
            );
        }
    }
    if let Some(error) = query.error.as_deref() {
        let description = query
            .error_description
            .as_deref()
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        return bad(
            StatusCode::UNAUTHORIZED,
            format!("the identity provider did not sign you in ({error}{description})"),
        );
    }
    let Some(code) = query.code else {
        return bad(
            StatusCode::BAD_REQUEST,
            "the identity provider's answer holds no code: sign in again".into(),
        );
    };
    let signed_in = match oidc.finish(&pending, code).await {
        Ok(signed_in) => signed_in,
        Err(e) => {
            tracing::warn!(error = %e, "OpenID sign-in refused");
            return bad(refused(&e), e.to_string());
        }
    };
    let source = client.map(|ip| ip.to_string());
    let name = signed_in.name.clone();
    let actor = Actor {
        name: ACTOR.to_owned(),
        source: source.clone(),
    };
    let user_actor = Actor {
        name: name.clone(),
        source,
    };
    let groups = signed_in.groups.join(", ");
    let Some(mapped) = signed_in.mapped else {
        // No access any more: what their row (and their tokens) gave them goes too.
        let removed = match state.archive.user(&name).await {
            Ok(Some(_)) => state.archive.remove_user(&name, &actor).await.is_ok(),
            _ => false,
        };
        let line = format!(
            "signed in at {} but refused: in no group Lazarus maps (groups: {}){}",
            oidc.issuer(),
            if groups.is_empty() { "none" } else { &groups },
            if removed { "; their user removed" } else { "" }
        );
        let _ = state
            .archive
            .record(&user_actor, "login_refused", &line)
            .await;
        return bad(
            StatusCode::FORBIDDEN,
            format!(
                "you signed in at the identity provider as {name}, but your account is in no \
                 group that Lazarus maps: ask an admin to add you to one"
            ),
        );
    };
    let (role, grants) = match &mapped.grants {
        Grants::Everywhere(role) => (*role, Vec::new()),
        Grants::On(grants) => (
            mapped
                .grants
                .highest()
                .unwrap_or(crate::archive::Role::Viewer),
            grants.clone(),
        ),
    };
    let unavailable = |e: crate::archive::ArchiveError| {
        crate::web::html::PageError::new(e, &HeaderMap::new()).into_response()
    };
    match state.archive.user(&name).await {
        Ok(Some(user)) if user.grants() == mapped.grants => {}
        Ok(_) => {
            if let Err(e) = state
                .archive
                .put_user(&name, None, role, &grants, &actor)
                .await
            {
                return unavailable(e);
            }
        }
        Err(e) => return unavailable(e),
    }
    let secret = crate::auth::new_secret();
    if let Err(e) = state
        .archive
        .create_session(&secret_hash(&secret), &name, Some(&signed_in.id_token))
        .await
    {
        return unavailable(e);
    }
    let from = match mapped.groups.is_empty() {
        true => "the default role: in no mapped group".to_owned(),
        false => format!("groups {}", mapped.groups.join(", ")),
    };
    let line = format!(
        "signed in at {} as {} ({from})",
        oidc.issuer(),
        mapped.grants.describe()
    );
    let _ = state.archive.record(&user_actor, "login", &line).await;
    let mut response = render(&SignedInPage {
        name: &name,
        next: &next,
    });
    response
        .headers_mut()
        .append(header::SET_COOKIE, session_cookie(settings, &secret));
    response
}

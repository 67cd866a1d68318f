//! Signing out (`POST /logout`): the session ends and its cookie is cleared, whatever else
//! happens. With `--auth oidc` the browser then goes on to end its session at the provider
//! too (RP-Initiated Logout 1.0: the ID token kept with the session sent as `id_token_hint`,
//! a `state` kept meanwhile in an HttpOnly cookie of ten minutes) and comes back to
//! `/signed-out`, which checks that state. A provider that offers no sign-out, or cannot be
//! reached, leaves a page saying that its session may still be open: on a shared machine,
//! "Sign in" would otherwise sign the last user straight back in.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::archive::Actor;
use crate::auth::oidc::{Oidc, SignOut};
use crate::auth::{secret_hash, AuthSettings};
use crate::web::auth::cookie;
use crate::web::auth::oidc::lax_cookie;
use crate::web::auth::signin::{LoginPage, Notice};
use crate::web::html::render;
use crate::web::AppState;

/// A sign-out at the provider that has not come back within this long is not recognised.
const SIGNING_OUT_SECS: i64 = 600;

/// The page that takes the browser on to the provider's sign-out: a navigation, not a
/// redirect of the sign-out form, which the pages' `form-action 'self'` would stop.
#[derive(Template)]
#[template(path = "signing_out.html")]
struct SigningOutPage<'a> {
    issuer: &'a str,
    url: &'a str,
}

/// `Set-Cookie` that removes the cookie `name`.
fn cleared(settings: &AuthSettings, name: &str, same_site: &str) -> HeaderValue {
    let mut clear = format!("{name}=; Path=/; HttpOnly; SameSite={same_site}; Max-Age=0");
    if settings.secure_cookies {
        clear.push_str("; Secure");
    }
    HeaderValue::from_str(&clear).expect("a cookie is ASCII")
}

/// `POST /logout`: ends the session and clears its cookie; with `--auth oidc`, on to the
/// provider's sign-out, or a page that says why not.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let settings = &state.auth;
    let mut name = None;
    let mut id_token = None;
    if let Some(secret) = cookie(&headers, settings.session_cookie()) {
        let hash = secret_hash(secret);
        if let Ok(Some(user)) = state
            .archive
            .session_user(
                &hash,
                settings.session_idle.as_millis() as u64,
                settings.session_max.as_millis() as u64,
            )
            .await
        {
            name = Some(user.name);
        }
        id_token = state.archive.end_session(&hash).await.ok().flatten();
    }
    let (mut response, line) = match settings.oidc.as_deref() {
        None => (Redirect::to("/login").into_response(), "signed out".into()),
        Some(oidc) => at_provider(settings, oidc, id_token.as_deref()).await,
    };
    if let Some(name) = name {
        let _ = state
            .archive
            .record(&Actor::system(&name), "logout", &line)
            .await;
    }
    response.headers_mut().append(
        header::SET_COOKIE,
        cleared(settings, settings.session_cookie(), "Strict"),
    );
    response
}

/// The Lazarus session has ended: the way to the provider's sign-out, or the page that says
/// there is none; and the audit line of it.
async fn at_provider(
    settings: &AuthSettings,
    oidc: &Oidc,
    id_token: Option<&str>,
) -> (Response, String) {
    let issuer = oidc.issuer();
    let may_be_open = "your session there may still be open, and signing in again may not ask \
                       for your password. On a shared machine, sign out at the identity provider \
                       too, or close the browser";
    match oidc.sign_out(id_token).await {
        Ok(SignOut::At { url, state }) => {
            let mut response = render(&SigningOutPage { issuer, url: &url });
            let headers = response.headers_mut();
            // The page holds the ID token (in the provider's address): kept by no cache.
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.append(
                header::SET_COOKIE,
                lax_cookie(
                    settings,
                    settings.signout_cookie(),
                    &state,
                    SIGNING_OUT_SECS,
                ),
            );
            let line = format!("signed out, and sent to {issuer} to sign out there");
            (response, line)
        }
        Ok(SignOut::NotOffered) => {
            let text = format!(
                "You are signed out of Lazarus. The identity provider {issuer} offers no \
                 sign-out to the applications it signs you in to (its discovery document names \
                 no end_session_endpoint), so {may_be_open}."
            );
            let line = format!("signed out; {issuer} offers no sign-out (no end_session_endpoint)");
            (page(settings, text, true), line)
        }
        Err(e) => {
            tracing::warn!(error = %e, "OpenID sign-out could not reach the provider");
            let text = format!(
                "You are signed out of Lazarus, but not at the identity provider: {e}. So \
                 {may_be_open}."
            );
            let line = format!("signed out, but not at the identity provider: {e}");
            (page(settings, text, true), line)
        }
    }
}

/// The sign-in page, saying what became of the sessions.
fn page(settings: &AuthSettings, text: String, warning: bool) -> Response {
    render(&LoginPage::signed_out(settings, Notice { text, warning }))
}

#[derive(Debug, Default, Deserialize)]
struct SignedOutQuery {
    state: Option<String>,
}

/// `GET /signed-out`: the provider's sign-out sends the browser back here, with the state of
/// the sign-out this browser started (its cookie is cleared whatever comes of it).
pub async fn signed_out(State(state): State<AppState>, request: Request) -> Response {
    let settings = &state.auth;
    let Some(oidc) = settings.oidc.as_deref() else {
        return Redirect::to("/login").into_response();
    };
    let query: SignedOutQuery = request
        .uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default();
    let started = cookie(request.headers(), settings.signout_cookie());
    let ours = match (query.state.as_deref(), started) {
        (Some(back), Some(started)) => secret_hash(back) == secret_hash(started),
        _ => false,
    };
    let mut response = if ours {
        let text = format!(
            "You are signed out of Lazarus and of the identity provider {}, unless you chose \
             there to stay signed in.",
            oidc.issuer()
        );
        page(settings, text, false)
    } else {
        let error = "this answer of the identity provider belongs to no sign-out started in this \
                     browser (its state differs, or it was used already): whether your session \
                     at the identity provider ended is not known"
            .to_owned();
        let page = LoginPage::new(settings, "/".into(), Some(error));
        (StatusCode::BAD_REQUEST, render(&page)).into_response()
    };
    response.headers_mut().append(
        header::SET_COOKIE,
        cleared(settings, settings.signout_cookie(), "Lax"),
    );
    response
}

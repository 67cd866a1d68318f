//! Authentication on every request: who the caller is (session cookie, bearer token,
//! trusted proxy, or nobody in `--auth none`), whether their role allows the route, the
//! sign-in and sign-out pages, and the page chrome that says who is signed in.

use std::net::SocketAddr;

use askama::Template;
use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::html::{is_htmx, render, PageError};
use super::{AppError, AppState};
use crate::archive::{Actor, Role};
use crate::auth::{
    required_role, secret_hash, verify_password, AuthMode, SESSION_COOKIE, TOKEN_PREFIX,
};

/// The authenticated caller of a request, put there by [`authenticate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    /// The client's address.
    pub source: Option<String>,
    /// Signed in with a session cookie (shows a sign-out button).
    pub session: bool,
}

impl Caller {
    pub fn actor(&self) -> Actor {
        Actor {
            name: self.name.clone(),
            source: self.source.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| AppError::Unauthorized("sign in first".into()))
    }
}

fn peer(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Who is calling, if anyone we know: `Err` for a bad token (never silently anonymous).
async fn identify(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<Option<Caller>, AppError> {
    let source = peer.map(|p| p.ip().to_string());
    let settings = &state.auth;
    if settings.mode == AuthMode::None {
        return Ok(Some(Caller {
            name: "anonymous".into(),
            role: Role::Admin,
            source,
            session: false,
        }));
    }
    // Only our own bearer tokens count; any other Authorization (a proxy's, a probe's
    // Basic) is not ours to judge and is ignored.
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| t.starts_with(TOKEN_PREFIX));
    if let Some(token) = token {
        let record = state
            .archive
            .token(&secret_hash(token))
            .await?
            .ok_or_else(|| AppError::Unauthorized("unknown or revoked API token".into()))?;
        return Ok(Some(Caller {
            name: format!("token:{}", record.name),
            role: record.role,
            source,
            session: false,
        }));
    }
    match settings.mode {
        AuthMode::Users => {
            let Some(secret) = cookie(headers, SESSION_COOKIE) else {
                return Ok(None);
            };
            let idle = settings.session_idle.as_millis() as u64;
            Ok(state
                .archive
                .session_user(&secret_hash(secret), idle)
                .await?
                .map(|user| Caller {
                    name: user.name,
                    role: user.role,
                    source,
                    session: true,
                }))
        }
        AuthMode::Proxy => {
            let trusted = peer.is_some_and(|p| settings.trusted_proxies.contains(&p.ip()));
            let text = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
            };
            let (Some(user), true) = (text("x-forwarded-user"), trusted) else {
                return Ok(None);
            };
            let role = state
                .archive
                .user(user)
                .await?
                .map_or(settings.proxy_default_role, |u| u.role);
            let name = match text("x-forwarded-email") {
                Some(email) if email != user => format!("{user} <{email}>"),
                _ => user.to_owned(),
            };
            Ok(Some(Caller {
                name,
                role,
                source,
                session: false,
            }))
        }
        AuthMode::None => unreachable!("answered above"),
    }
}

/// Whether the request names a loopback host: without sign-in, a page reached under any
/// other name (DNS rebinding) must not be able to drive Lazarus.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return true; // HTTP/1.0 without Host: not a browser on another site.
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a refused request came from a browser page (it gets a sign-in redirect).
fn wants_page(request: &Request) -> bool {
    !request.uri().path().starts_with("/api")
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"))
}

/// Identifies the caller and checks the route's role; refuses with 401/403 (pages: a
/// redirect to sign in, or an error page).
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let needed = required_role(request.method(), request.uri().path());
    let page = wants_page(&request);
    let headers = request.headers().clone();
    let refuse = |e: AppError| -> Response {
        if page {
            PageError::new(e, &headers).into_response()
        } else {
            e.into_response()
        }
    };
    if state.auth.mode == AuthMode::None && !loopback_host(&headers) {
        return refuse(AppError::Forbidden(
            "without sign-in (--auth none) Lazarus answers only to localhost and loopback \
             addresses"
                .into(),
        ));
    }
    let caller = match identify(&state, &headers, peer(&request)).await {
        Ok(caller) => caller,
        Err(e) => return refuse(e),
    };
    match (needed, caller) {
        (None, caller) => {
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
        }
        (Some(role), Some(caller)) if caller.role >= role => {
            request.extensions_mut().insert(caller);
        }
        (Some(_), None)
            if state.auth.mode == AuthMode::Users
                && page
                && request.method() == axum::http::Method::GET
                && !is_htmx(&headers) =>
        {
            let back = request
                .uri()
                .path_and_query()
                .map_or("/".to_owned(), |p| p.to_string());
            return Redirect::to(&format!(
                "/login?next={}",
                super::overview::urlencode(&back)
            ))
            .into_response();
        }
        (Some(_), None) => {
            return refuse(AppError::Unauthorized(match state.auth.mode {
                AuthMode::Proxy => "not signed in: sign in through your proxy".into(),
                _ => "not signed in: sign in, or send an API token".into(),
            }))
        }
        (Some(role), Some(caller)) => {
            return refuse(AppError::Forbidden(format!(
                "this needs the {} role; {} is {}",
                role.as_str(),
                caller.name,
                caller.role.as_str()
            )))
        }
    }
    let caller = request.extensions().get::<Caller>().cloned();
    let response = next.run(request).await;
    chrome(response, caller.as_ref(), state.auth.mode).await
}

/// Where a full page leaves room for the signed-in user and the no-auth banner.
pub const CHROME_SLOT: &str = "<!--chrome-->";

/// Fills the chrome slot of a full HTML page: who is signed in (with sign-out), or the
/// warning that nobody has to sign in.
async fn chrome(response: Response, caller: Option<&Caller>, mode: AuthMode) -> Response {
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    if !is_html {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, super::security::MAX_REQUEST_BYTES * 4).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "page too large").into_response();
    };
    let html = String::from_utf8_lossy(&bytes);
    if !html.contains(CHROME_SLOT) {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let fill = ChromePartial {
        no_auth: mode == AuthMode::None,
        name: caller.map(|c| c.name.clone()),
        role: caller.map_or("", |c| c.role.as_str()),
        session: caller.is_some_and(|c| c.session),
    }
    .render()
    .unwrap_or_default();
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(html.replacen(CHROME_SLOT, &fill, 1)))
}

#[derive(Template)]
#[template(path = "partials/chrome.html")]
struct ChromePartial {
    no_auth: bool,
    name: Option<String>,
    role: &'static str,
    session: bool,
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub next: String,
    pub error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Only a path on this site may be returned to after signing in (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// `GET /login`
pub async fn login_page(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<LoginQuery>,
) -> Response {
    if state.auth.mode != AuthMode::Users {
        return Redirect::to("/").into_response();
    }
    render(&LoginPage {
        next: safe_next(query.next.as_deref()),
        error: None,
    })
}

/// Never `Debug`: it holds a password.
#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

/// `POST /login`: a session cookie for a right password; throttled after failures.
pub async fn login(State(state): State<AppState>, request: Request) -> Response {
    let source = peer(&request).map(|p| p.ip().to_string());
    let address = source.clone().unwrap_or_else(|| "unknown".into());
    let form: Result<Form<LoginForm>, _> = Form::from_request(request, &state).await;
    let Ok(Form(form)) = form else {
        return (StatusCode::BAD_REQUEST, "send name and password as a form").into_response();
    };
    let next = safe_next(form.next.as_deref());
    let again = |status: StatusCode, error: String| {
        (
            status,
            render(&LoginPage {
                next: next.clone(),
                error: Some(error),
            }),
        )
            .into_response()
    };
    if state.auth.mode != AuthMode::Users {
        return again(StatusCode::NOT_FOUND, "sign-in is not used here".into());
    }
    let name = form.name.trim().to_owned();
    if let Some(wait) = state.throttle.blocked(&name, &address) {
        return again(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many failed sign-ins: try again in {} minutes",
                wait.as_secs().div_ceil(60)
            ),
        );
    }
    let actor = Actor {
        name: name.clone(),
        source: source.clone(),
    };
    let user = match state.archive.user(&name).await {
        Ok(user) => user,
        Err(e) => return PageError::new(e, &HeaderMap::new()).into_response(),
    };
    let hash = user.as_ref().and_then(|u| u.password_hash.clone());
    let password = form.password;
    // Verified off the async threads (argon2 is slow on purpose); an unknown user costs
    // the same as a wrong password.
    let ok = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => verify_password(&password, &hash),
        None => {
            let _ = crate::auth::hash_password("a password nobody has, to spend the same time");
            false
        }
    })
    .await
    .unwrap_or(false);
    if !ok {
        state.throttle.failed(&name, &address);
        let _ = state
            .archive
            .record(
                &actor,
                "login_failed",
                &format!("failed sign-in as {name:?}"),
            )
            .await;
        return again(StatusCode::UNAUTHORIZED, "wrong name or password".into());
    }
    state.throttle.succeeded(&name);
    let secret = crate::auth::new_secret();
    if let Err(e) = state
        .archive
        .create_session(&secret_hash(&secret), &name)
        .await
    {
        return PageError::new(e, &HeaderMap::new()).into_response();
    }
    let _ = state.archive.record(&actor, "login", "signed in").await;
    let mut cookie = format!("{SESSION_COOKIE}={secret}; Path=/; HttpOnly; SameSite=Strict");
    if state.auth.secure_cookies {
        cookie.push_str("; Secure");
    }
    let mut response = Redirect::to(&next).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a cookie is ASCII"),
    );
    response
}

/// `POST /logout`: ends the session and clears the cookie.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(secret) = cookie(&headers, SESSION_COOKIE) {
        let hash = secret_hash(secret);
        if let Ok(Some(user)) = state
            .archive
            .session_user(&hash, state.auth.session_idle.as_millis() as u64)
            .await
        {
            let _ = state
                .archive
                .record(&Actor::system(&user.name), "logout", "signed out")
                .await;
        }
        let _ = state.archive.end_session(&hash).await;
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("lazarus_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(safe_next(Some("/messages?q=a")), "/messages?q=a");
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(Some("/\t/evil.example")), "/");
        assert_eq!(safe_next(Some("/a\r\nSet-Cookie: x")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn only_loopback_names_pass_without_sign_in() {
        let host = |h: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, HeaderValue::from_static(h));
            loopback_host(&m)
        };
        assert!(host("127.0.0.1:8080") && host("localhost:8080") && host("[::1]:8080"));
        assert!(host("LOCALHOST"));
        assert!(!host("rebind.evil.example:8080"));
        assert!(!host("10.0.0.5:8080"));
        assert!(loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; lazarus_session=s3cret; b=2"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("s3cret"));
        assert_eq!(cookie(&h, "c"), None);
    }
}

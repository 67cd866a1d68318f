//! Authentication on every request: who the caller is (session cookie, bearer token,
//! trusted proxy, or nobody in `--auth none`), and whether the route's access allows them.
//! Signing in is `signin` (at an OpenID provider: `oidc`), signing out `signout`; what the
//! page header shows of the caller is `nav`.

pub mod access;
pub mod client;
pub mod oidc;
pub mod signin;
pub mod signout;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::archive::{Grants, Rights, Role};
use crate::auth::{check_name, secret_hash, AuthMode, TOKEN_PREFIX};
use crate::web::auth::access::{Access, AccessTable};
use crate::web::auth::client::{client_ip, from_trusted_proxy};
pub use crate::web::caller::Caller;
use crate::web::html::{is_htmx, with_nav, PageError};
use crate::web::nav::Nav;
use crate::web::{AppError, AppState};

/// The longest `X-Forwarded-Email` believed.
const MAX_EMAIL_CHARS: usize = 254;

pub(crate) fn peer(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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
    let settings = &state.auth;
    let source = client_ip(settings, headers, peer).map(|ip| ip.to_string());
    if settings.mode == AuthMode::None {
        return Ok(Some(Caller {
            source,
            ..Caller::everywhere("anonymous".into(), Role::Admin)
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
        if record.expired(time::OffsetDateTime::now_utc()) {
            let on = record
                .expires_at
                .map(crate::web::html::utc)
                .unwrap_or_default();
            return Err(AppError::Unauthorized(format!(
                "this API token expired on {on}: an admin makes a new one"
            )));
        }
        // A token acts for its owner: it never has more rights than they have now.
        let rights = Rights::new(record.grants());
        let rights = match &record.owner {
            None => rights,
            Some(owner) => match owner_grants(state, owner).await? {
                Some(now) => rights.capped_by(now),
                None => {
                    return Err(AppError::Unauthorized(format!(
                        "this API token's owner {owner} has no access any more"
                    )))
                }
            },
        };
        return Ok(Some(Caller {
            source,
            owner: record.owner,
            ..caller_with(format!("token:{}", record.name), rights)
        }));
    }
    match settings.mode {
        AuthMode::Users | AuthMode::Oidc => {
            let Some(secret) = cookie(headers, settings.session_cookie()) else {
                return Ok(None);
            };
            Ok(state
                .archive
                .session_user(
                    &secret_hash(secret),
                    settings.session_idle.as_millis() as u64,
                    settings.session_max.as_millis() as u64,
                )
                .await?
                .map(|user| Caller {
                    owner: Some(user.name.clone()),
                    source,
                    session: true,
                    ..caller_with(user.name.clone(), Rights::new(user.grants()))
                }))
        }
        AuthMode::Proxy => {
            let trusted = from_trusted_proxy(settings, peer);
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
            check_name(user).map_err(|e| AppError::BadRequest(format!("X-Forwarded-User: {e}")))?;
            let grants = state
                .archive
                .user(user)
                .await?
                .map_or(Grants::Everywhere(settings.proxy_default_role), |u| {
                    u.grants()
                });
            let email = text("x-forwarded-email")
                .filter(|e| e.chars().count() <= MAX_EMAIL_CHARS && !e.contains(char::is_control));
            let name = match email {
                Some(email) if email != user => format!("{user} <{email}>"),
                _ => user.to_owned(),
            };
            Ok(Some(Caller {
                source,
                owner: Some(user.to_owned()),
                ..caller_with(name, Rights::new(grants))
            }))
        }
        AuthMode::None => unreachable!("answered above"),
    }
}

/// A caller with `rights`, their route role the highest those hold.
fn caller_with(name: String, rights: Rights) -> Caller {
    let role = rights.highest().unwrap_or(Role::Viewer);
    Caller {
        rights,
        ..Caller::everywhere(name, role)
    }
}

/// A user's grants now: their row's, or for a user of the trusted proxy without one, the
/// proxy's default role everywhere; `None` for a user who may not sign in at all.
async fn owner_grants(state: &AppState, name: &str) -> Result<Option<Grants>, AppError> {
    let user = state.archive.user(name).await?;
    Ok(match (user, state.auth.mode) {
        (Some(user), _) => Some(user.grants()),
        (None, AuthMode::Proxy) => Some(Grants::Everywhere(state.auth.proxy_default_role)),
        (None, _) => None,
    })
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

/// What the matched route needs ([`AccessTable`]): a request that matched no route goes on to
/// the fallback's 404, open to all; one that matched a route without an access rule, nobody
/// may make (`None`).
fn needed(request: &Request) -> Option<Access> {
    let Some(pattern) = request.extensions().get::<MatchedPath>() else {
        return Some(Access::Public);
    };
    request
        .extensions()
        .get::<Arc<AccessTable>>()
        .and_then(|table| table.needed(request.method(), pattern.as_str()))
}

/// Identifies the caller and checks the route's access; refuses with 401/403 (pages: a
/// redirect to sign in, or an error page).
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let needed = needed(&request);
    let page = wants_page(&request);
    let headers = request.headers().clone();
    // An error page shows who is signed in, as every page does.
    let mut nav = Nav::default();
    let refuse = |e: AppError, nav: &Nav| -> Response {
        if page {
            with_nav(PageError::new(e, &headers).into_response(), nav.clone())
        } else {
            e.into_response()
        }
    };
    if state.auth.mode == AuthMode::None && !loopback_host(&headers) {
        return refuse(
            AppError::Forbidden(
                "without sign-in (--auth none) Lazarus answers only to localhost and loopback \
                 addresses"
                    .into(),
            ),
            &nav,
        );
    }
    let caller = match identify(&state, &headers, peer(&request)).await {
        Ok(caller) => caller,
        Err(e) => return refuse(e, &nav),
    };
    nav = Nav::new(caller.as_ref(), state.auth.mode);
    let needed = match needed {
        Some(needed) => needed,
        None => {
            return refuse(
                AppError::Forbidden("nobody may use this route: it has no access rule".into()),
                &nav,
            )
        }
    };
    let whole = matches!(needed, Access::Role(_));
    let needed = needed.role();
    match (needed, caller) {
        (None, caller) => {
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
        }
        (Some(role), Some(caller))
            if caller.role >= role && (!whole || caller.rights.everywhere_at(role)) =>
        {
            request.extensions_mut().insert(caller);
        }
        (Some(_), None)
            if state.auth.sessions()
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
                crate::archive::selection::query_value(&back)
            ))
            .into_response();
        }
        (Some(_), None) => {
            return refuse(
                AppError::Unauthorized(match state.auth.mode {
                    AuthMode::Proxy => "not signed in: sign in through your proxy".into(),
                    _ => "not signed in: sign in, or send an API token".into(),
                }),
                &nav,
            )
        }
        (Some(role), Some(caller)) => {
            let of_every = if whole { " on every DLQ" } else { "" };
            return refuse(
                AppError::Forbidden(format!(
                    "this needs the {} role{of_every}; {} is {}",
                    role.as_str(),
                    caller.name,
                    caller.rights.describe()
                )),
                &nav,
            );
        }
    }
    with_nav(next.run(request).await, nav)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
        assert_eq!(cookie(&h, crate::auth::SESSION_COOKIE), Some("s3cret"));
        assert_eq!(cookie(&h, "c"), None);
    }
}

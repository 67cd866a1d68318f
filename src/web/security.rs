//! Hardening every response and request: security headers (a Content-Security-Policy
//! without inline script, no framing, no sniffing, no referrer leaks), refusal of cross-site
//! state-changing requests (CSRF), and limits on request size and time.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::web::AppError;

/// Scripts, styles and everything else only from Lazarus itself; no inline script or
/// style, no plugins, never inside a frame.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The largest request body accepted (an edited message body travels in one).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// A request that takes longer is answered 503 (a broker or database that hangs).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Adds the security headers to every response that does not set its own.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}

/// Why a state-changing request is refused as cross-site, if it is. Browsers send
/// `Sec-Fetch-Site` (and `Origin`) with every such request; a script or the CLI sends
/// neither and is not a CSRF vector (authentication covers it).
pub fn cross_site(method: &Method, headers: &HeaderMap) -> Option<String> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return match site {
            "same-origin" | "none" => None,
            other => Some(format!(
                "cross-site request refused (Sec-Fetch-Site: {other}): state changes must come from Lazarus's own pages"
            )),
        };
    }
    let origin = text("origin")?;
    let host = text("host").unwrap_or_default();
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(origin);
    if origin == "null" || !origin_host.eq_ignore_ascii_case(host) {
        return Some(format!(
            "cross-site request refused (Origin {origin} is not {host}): state changes must come from Lazarus's own pages"
        ));
    }
    None
}

/// Refuses cross-site state-changing requests with 403.
pub async fn refuse_cross_site(request: Request, next: Next) -> Response {
    match cross_site(request.method(), request.headers()) {
        Some(reason) => AppError::Forbidden(reason).into_response(),
        None => next.run(request).await,
    }
}

/// Answers 503 when a request takes longer than [`REQUEST_TIMEOUT`].
pub async fn time_limit(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(%path, "request timed out");
            AppError::Unavailable(format!(
                "the request took longer than {} s; try again shortly",
                REQUEST_TIMEOUT.as_secs()
            ))
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn reads_are_never_refused() {
        let h = headers(&[("sec-fetch-site", "cross-site")]);
        assert_eq!(cross_site(&Method::GET, &h), None);
    }

    #[test]
    fn browsers_must_post_from_the_same_origin() {
        let post = Method::POST;
        assert_eq!(
            cross_site(&post, &headers(&[("sec-fetch-site", "same-origin")])),
            None
        );
        assert!(cross_site(&post, &headers(&[("sec-fetch-site", "cross-site")])).is_some());
        assert!(cross_site(&post, &headers(&[("sec-fetch-site", "same-site")])).is_some());
        let same = headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert_eq!(cross_site(&post, &same), None);
        let other = headers(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(cross_site(&post, &other).unwrap().contains("evil.example"));
        assert!(cross_site(&post, &headers(&[("origin", "null"), ("host", "x")])).is_some());
    }

    #[test]
    fn scripts_without_browser_headers_pass() {
        assert_eq!(cross_site(&Method::POST, &headers(&[("host", "x")])), None);
    }
}

//! Outgoing HTTP(S) requests to URLs users configure (webhooks, the management API, an OpenID
//! provider): the URL read and shown without its secrets, one connection per request, TLS
//! through the same rustls connector (and system roots, `SSL_CERT_FILE` included) that
//! `amqps://` uses; redirects are never followed.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use lapin::tcp::{AsyncTcpStream, TLSConfig};
use tokio_util::compat::{FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};

/// The most of a webhook's answer read (and thrown away): receivers answer "ok" or an error.
const MAX_WEBHOOK_ANSWER: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0:?} is not an http:// or https:// URL with a host")]
    Url(String),
    /// No connection: the host does not resolve, refuses, or is not reached.
    #[error("{target}: connecting: {reason}")]
    Unconnected { target: String, reason: String },
    /// Connected, but no HTTP answer came (TLS, the exchange).
    #[error("{target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error("{target}: no answer within {timeout:?}")]
    Timeout { target: String, timeout: Duration },
    #[error("{target}: its answer is longer than {max} bytes")]
    TooLong { target: String, max: usize },
}

/// A URL requests are sent to. Its `Debug` and [`Target::redacted`] show the scheme and
/// host only: webhook URLs carry their secret in the path (Slack, Teams) or the userinfo.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    tls: bool,
    host: String,
    port: u16,
    /// The path and query, as given (`/` when none).
    path: String,
    /// `Basic …`, from the URL's userinfo.
    authorization: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::str::FromStr for Target {
    type Err = HttpError;

    fn from_str(url: &str) -> Result<Self, HttpError> {
        let bad = || HttpError::Url(without_path(url));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad());
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let close = v6.find(']').ok_or_else(bad)?;
            (&v6[..close], v6[close + 1..].strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if tls => 443,
            None => 80,
        };
        if host.is_empty() {
            return Err(bad());
        }
        let authorization = userinfo.map(|info| {
            use base64::Engine;
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            let pair = format!("{}:{}", percent_decode(user), percent_decode(password));
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        Ok(Target {
            tls,
            host: host.to_owned(),
            port,
            path,
            authorization,
        })
    }
}

/// A URL that is not read, as an error may show it: no path, no password.
fn without_path(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find(['/', '?', '#']) {
        Some(end) => format!(
            "{}…",
            crate::support::secret_url::redact_url(&url[..start + end + 1])
        ),
        None => crate::support::secret_url::redact_url(url),
    }
}

impl Target {
    /// Its user and password, when the URL gave them.
    pub fn has_credentials(&self) -> bool {
        self.authorization.is_some()
    }

    /// The same, with basic authentication as `user`.
    pub fn with_credentials(mut self, user: &str, password: &str) -> Self {
        use base64::Engine;
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.authorization = Some(format!("Basic {pair}"));
        self
    }

    /// The host it names (without brackets for IPv6).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `https://host[:port]/…`: what logs and pages may show.
    pub fn redacted(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        let port = if self.port == default {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        let path = if self.path == "/" { "/" } else { "/…" };
        format!("{scheme}://{host}{port}{path}")
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// `%XX` escapes decoded (a URL's user and password).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: StatusCode,
    /// `Retry-After` in seconds, when it gave one (Slack does with 429).
    pub retry_after: Option<Duration>,
}

/// POSTs `json` to `target` on a connection of its own, within `timeout` in all (connecting,
/// TLS, the request and reading the answer).
pub async fn post_json(
    target: &Target,
    json: Bytes,
    timeout: Duration,
) -> Result<Answer, HttpError> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(&target.path)
        .header(CONTENT_TYPE, "application/json");
    if let Some(authorization) = target.authorization_header()? {
        request = request.header(AUTHORIZATION, authorization);
    }
    let request = request
        .body(Full::new(json))
        .map_err(|e| target.unreachable(e.to_string()))?;
    let (parts, _) = send(target, request, MAX_WEBHOOK_ANSWER, timeout).await?;
    Ok(answer(&parts))
}

/// GETs `path` (after the URL's own path, which must not end in `/`) from `target`: the answer
/// and its body, at most `max` bytes of it.
pub async fn get(
    target: &Target,
    path: &str,
    max: usize,
    timeout: Duration,
) -> Result<(Answer, Bytes), HttpError> {
    let full = format!("{}{path}", target.path.trim_end_matches('/'));
    let mut request = Request::builder().method(Method::GET).uri(full);
    if let Some(authorization) = target.authorization_header()? {
        request = request.header(AUTHORIZATION, authorization);
    }
    let request = request
        .body(Full::default())
        .map_err(|e| target.unreachable(e.to_string()))?;
    match send(target, request, max, timeout).await? {
        (parts, Some(body)) => Ok((answer(&parts), body)),
        (_, None) => Err(too_long(target, max)),
    }
}

/// Sends `request` as it is — its URI absolute (http:// or https://), its method, headers and
/// body its own — and returns the whole answer, within `timeout`; a body longer than `max`
/// bytes is an error. A redirect is an answer like any other: it is not followed. (The
/// OpenID Connect client's HTTP: discovery, keys, tokens, userinfo.)
pub async fn exchange_whole(
    request: Request<Vec<u8>>,
    max: usize,
    timeout: Duration,
) -> Result<hyper::Response<Vec<u8>>, HttpError> {
    let target: Target = request.uri().to_string().parse()?;
    let (mut parts, body) = request.into_parts();
    parts.uri = target
        .path
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| target.unreachable(e.to_string()))?;
    parts.headers.remove(HOST);
    let request = Request::from_parts(parts, Full::new(Bytes::from(body)));
    match send(&target, request, max, timeout).await? {
        (parts, Some(body)) => Ok(hyper::Response::from_parts(parts, body.to_vec())),
        (_, None) => Err(too_long(&target, max)),
    }
}

fn too_long(target: &Target, max: usize) -> HttpError {
    HttpError::TooLong {
        target: target.redacted(),
        max,
    }
}

/// What a receiver answered, of the head of its answer.
fn answer(parts: &hyper::http::response::Parts) -> Answer {
    let retry_after = parts
        .headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Answer {
        status: parts.status,
        retry_after,
    }
}

impl Target {
    fn unreachable(&self, reason: String) -> HttpError {
        HttpError::Unreachable {
            target: self.redacted(),
            reason,
        }
    }

    /// The `Authorization` header of the URL's userinfo, marked sensitive.
    fn authorization_header(&self) -> Result<Option<HeaderValue>, HttpError> {
        self.authorization
            .as_deref()
            .map(|authorization| {
                let mut value = HeaderValue::from_str(authorization)
                    .map_err(|e| self.unreachable(e.to_string()))?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()
    }
}

/// Sends `request` (its URI the path) to `target` with our Host and User-Agent: the head of
/// the answer, and its body unless longer than `max` bytes.
async fn send(
    target: &Target,
    mut request: Request<Full<Bytes>>,
    max: usize,
    timeout: Duration,
) -> Result<(hyper::http::response::Parts, Option<Bytes>), HttpError> {
    let headers = request.headers_mut();
    let host = HeaderValue::from_str(&target.host_header())
        .map_err(|e| target.unreachable(e.to_string()))?;
    headers.insert(HOST, host);
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("lazarus/", env!("CARGO_PKG_VERSION"))),
    );
    tokio::time::timeout(timeout, connect_and_send(target, request, max))
        .await
        .map_err(|_| HttpError::Timeout {
            target: target.redacted(),
            timeout,
        })?
}

async fn connect_and_send(
    target: &Target,
    request: Request<Full<Bytes>>,
    max: usize,
) -> Result<(hyper::http::response::Parts, Option<Bytes>), HttpError> {
    let unreachable = |reason: String| HttpError::Unreachable {
        target: target.redacted(),
        reason,
    };
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| HttpError::Unconnected {
            target: target.redacted(),
            reason: e.to_string(),
        })?;
    let _ = tcp.set_nodelay(true);
    if target.tls {
        let tls = AsyncTcpStream::Plain(tcp.compat())
            .into_tls(&target.host, TLSConfig::default())
            .await
            .map_err(|e| {
                let hint = match e.to_string().contains("certificate") {
                    // The usual cause: a private CA the system does not trust.
                    true => " (if a CA of your own signed it, trust it: SSL_CERT_FILE=ca.pem)",
                    false => "",
                };
                unreachable(format!("TLS: {e}{hint}"))
            })?;
        exchange(TokioIo::new(tls.compat()), request, max)
            .await
            .map_err(unreachable)
    } else {
        exchange(TokioIo::new(tcp), request, max)
            .await
            .map_err(unreachable)
    }
}

/// The head of the answer, and its body unless it is longer than `max` bytes.
async fn exchange<I>(
    io: I,
    request: Request<Full<Bytes>>,
    max: usize,
) -> Result<(hyper::http::response::Parts, Option<Bytes>), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let connection = tokio::spawn(connection);
    let result = match sender.send_request(request).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, max)
                .collect()
                .await
                .ok()
                .map(|b| b.to_bytes());
            Ok((parts, body))
        }
        Err(e) => Err(e.to_string()),
    };
    connection.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        url.parse().unwrap()
    }

    #[test]
    fn urls_are_read_with_their_defaults() {
        let t = target("https://hooks.slack.com/services/T000/B000/XXXX");
        assert!(t.tls);
        assert_eq!((t.host.as_str(), t.port), ("hooks.slack.com", 443));
        assert_eq!(t.path, "/services/T000/B000/XXXX");
        assert_eq!(t.host_header(), "hooks.slack.com");
        let t = target("http://127.0.0.1:9000");
        assert_eq!((t.tls, t.port, t.path.as_str()), (false, 9000, "/"));
        assert_eq!(t.host_header(), "127.0.0.1:9000");
        let t = target("http://[::1]:8080?token=1#x");
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.path, "/?token=1");
        assert_eq!(t.host_header(), "[::1]:8080");
        let t = target("http://user:p%40ss@example.com/hook");
        assert_eq!(t.authorization.as_deref(), Some("Basic dXNlcjpwQHNz"));
    }

    #[test]
    fn what_is_shown_of_a_url_has_no_secret() {
        let t = target("https://user:secret@hooks.slack.com/services/T000/B000/XXXX");
        assert_eq!(t.redacted(), "https://hooks.slack.com/…");
        assert_eq!(format!("{t:?}"), "https://hooks.slack.com/…");
        assert_eq!(
            target("http://[::1]:8080/").redacted(),
            "http://[::1]:8080/"
        );
    }

    #[test]
    fn wrong_urls_are_refused_without_their_secrets() {
        for url in [
            "ftp://x/y",
            "hooks.slack.com/x",
            "http:///path",
            "http://h:port/x",
        ] {
            assert!(url.parse::<Target>().is_err(), "{url}");
        }
        for url in ["ftp://user:secret@host/x", "hooks.example.com/T0/secret"] {
            let e = url.parse::<Target>().unwrap_err().to_string();
            assert!(!e.contains("secret"), "{e}");
        }
        let e = "ftp://user:pw@host/x".parse::<Target>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"ftp://user:***@host/…\" is not an http:// or https:// URL with a host"
        );
    }
}

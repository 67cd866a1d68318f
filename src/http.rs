//! Outgoing HTTP(S) requests to URLs users configure (webhooks): the URL read and shown
//! without its secrets, one connection per request, TLS through the same rustls connector
//! (and system roots, `SSL_CERT_FILE` included) that `amqps://` uses.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use lapin::tcp::{AsyncTcpStream, TLSConfig};
use tokio_util::compat::{FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};

/// The most of an answer's body read (and thrown away): receivers answer "ok" or an error.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0:?} is not an http:// or https:// URL with a host")]
    Url(String),
    #[error("{target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error("{target}: no answer within {timeout:?}")]
    Timeout { target: String, timeout: Duration },
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
            let pair = format!(
                "{}:{}",
                crate::amqp::management::percent_decode(user),
                crate::amqp::management::percent_decode(password)
            );
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
        Some(end) => format!("{}…", crate::config::redact_url(&url[..start + end + 1])),
        None => crate::config::redact_url(url),
    }
}

impl Target {
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
    tokio::time::timeout(timeout, post(target, json))
        .await
        .map_err(|_| HttpError::Timeout {
            target: target.redacted(),
            timeout,
        })?
        .map_err(|reason| HttpError::Unreachable {
            target: target.redacted(),
            reason,
        })
}

async fn post(target: &Target, json: Bytes) -> Result<Answer, String> {
    let mut request = Request::post(&target.path)
        .header(HOST, target.host_header())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("lazarus/", env!("CARGO_PKG_VERSION")));
    if let Some(authorization) = &target.authorization {
        let mut value = HeaderValue::from_str(authorization).map_err(|e| e.to_string())?;
        value.set_sensitive(true);
        request = request.header(AUTHORIZATION, value);
    }
    let request = request.body(Full::new(json)).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let _ = tcp.set_nodelay(true);
    if target.tls {
        let tls = AsyncTcpStream::Plain(tcp.compat())
            .into_tls(&target.host, TLSConfig::default())
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        exchange(TokioIo::new(tls.compat()), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
}

async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<Answer, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let connection = tokio::spawn(connection);
    let answer = sender.send_request(request).await;
    let result = match answer {
        Ok(response) => {
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            // Read (a bounded part of) the answer so the exchange ends cleanly.
            let _ = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await;
            Ok(Answer {
                status,
                retry_after,
            })
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

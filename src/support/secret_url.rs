//! URLs that may hold a password: `SecretUrl` keeps one whole for connecting but hides the
//! password in `Debug`, so settings can derive `Debug` and never leak or forget a field;
//! `redact_url` is the same hiding for a URL in a log line or an error.

use std::convert::Infallible;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// A connection URL (`amqp://user:password@host/vhost`, `postgres://…`, `https://…`):
/// derefs to the whole URL; its `Debug` shows it with the password as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL as given, password included: for connecting, never for logs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl Deref for SecretUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(&self.0), f)
    }
}

impl FromStr for SecretUrl {
    type Err = Infallible;

    fn from_str(url: &str) -> Result<Self, Infallible> {
        Ok(SecretUrl(url.to_owned()))
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        SecretUrl(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        SecretUrl(url.to_owned())
    }
}

/// The URL with any password replaced by `***`, fit for logs and error messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &userinfo[..colon],
            &url[scheme_end + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("amqp://guest:s3cret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact_url("postgres://u:p@w@db/x"), "postgres://u:***@db/x");
        assert_eq!(redact_url("sqlite://lazarus.db"), "sqlite://lazarus.db");
        assert_eq!(redact_url("amqp://user@host/"), "amqp://user@host/");
    }

    #[test]
    fn a_secret_url_connects_whole_and_debugs_redacted() {
        let url: SecretUrl = "amqp://guest:s3cret@host/%2f".parse().unwrap();
        assert_eq!(&*url, "amqp://guest:s3cret@host/%2f");
        assert_eq!(format!("{url:?}"), "\"amqp://guest:***@host/%2f\"");
    }
}

//! Who may look and who may replay: authentication modes, the role each route needs,
//! password hashing (argon2id) and the passwords accepted, session and API token secrets,
//! sign-in throttling, and signing in at an OpenID provider (`oidc`). The HTTP side is
//! `web::auth`.

mod hashing;
pub mod oidc;
mod passwords;
mod throttle;

use std::net::IpAddr;
use std::time::Duration;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use sha2::{Digest, Sha256};

pub use crate::archive::Role;
pub use hashing::{hash_password, verify_password};
pub use passwords::{check_password, MIN_PASSWORD_CHARS};
pub use throttle::{
    Attempt, Failure, Refusal, Throttle, LOGIN_WINDOW, MAX_FAILED_LOGINS,
    MAX_FAILED_LOGINS_PER_ADDRESS,
};

/// How callers prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// Everyone is an admin: only allowed on a loopback address, and every page says so.
    None,
    /// Built-in users (`lazarus user add`) sign in with a password; sessions in cookies.
    Users,
    /// A reverse proxy (oauth2-proxy style) signs people in and sends X-Forwarded-User;
    /// honoured only from `--trusted-proxy` addresses.
    Proxy,
    /// People sign in at an OpenID provider (`--oidc-issuer`); their groups give their
    /// roles, taken again at every sign-in; sessions in cookies.
    Oidc,
}

/// The authentication settings of a running instance.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// Addresses whose X-Forwarded-User / X-Forwarded-Email are believed.
    pub trusted_proxies: Vec<IpAddr>,
    /// The role of a proxy user without a `users` row.
    pub proxy_default_role: Role,
    /// A session unused this long is ended.
    pub session_idle: Duration,
    /// A session this old is ended, however much it is used (with `--auth oidc`, at most
    /// `--oidc-session-max-secs`: the roles a sign-in took are taken again that often).
    pub session_max: Duration,
    /// Mark the session cookie `Secure` (serve over TLS, or behind a TLS proxy).
    pub secure_cookies: bool,
    /// The OpenID provider of `--auth oidc`.
    pub oidc: Option<std::sync::Arc<oidc::Oidc>>,
}

impl AuthSettings {
    /// No authentication (tests and loopback-only use).
    pub fn none() -> Self {
        AuthSettings {
            mode: AuthMode::None,
            trusted_proxies: Vec::new(),
            proxy_default_role: Role::Viewer,
            session_idle: Duration::from_secs(3600),
            session_max: Duration::from_secs(12 * 3600),
            secure_cookies: false,
            oidc: None,
        }
    }
}

impl AuthSettings {
    /// The session cookie's name: `__Host-` prefixed when it is `Secure`, so browsers keep
    /// it to this host and path, unset by any subdomain or plain-HTTP page.
    pub fn session_cookie(&self) -> &'static str {
        if self.secure_cookies {
            SECURE_SESSION_COOKIE
        } else {
            SESSION_COOKIE
        }
    }

    /// The cookie that holds a sign-in while the browser is at the OpenID provider.
    pub fn pending_cookie(&self) -> &'static str {
        if self.secure_cookies {
            SECURE_PENDING_COOKIE
        } else {
            PENDING_COOKIE
        }
    }

    /// The cookie that holds the `state` of a sign-out at the OpenID provider while the
    /// browser is there.
    pub fn signout_cookie(&self) -> &'static str {
        if self.secure_cookies {
            SECURE_SIGNOUT_COOKIE
        } else {
            SIGNOUT_COOKIE
        }
    }

    /// Whether people sign in with a session cookie (not a proxy's headers).
    pub fn sessions(&self) -> bool {
        matches!(self.mode, AuthMode::Users | AuthMode::Oidc)
    }
}

/// The name of the session cookie over plain HTTP…
pub const SESSION_COOKIE: &str = "lazarus_session";
/// …and with `--secure-cookies`.
pub const SECURE_SESSION_COOKIE: &str = "__Host-lazarus_session";
/// A sign-in at the OpenID provider under way, over plain HTTP…
pub const PENDING_COOKIE: &str = "lazarus_oidc";
/// …and with `--secure-cookies`.
pub const SECURE_PENDING_COOKIE: &str = "__Host-lazarus_oidc";
/// A sign-out at the OpenID provider under way, over plain HTTP…
pub const SIGNOUT_COOKIE: &str = "lazarus_signout";
/// …and with `--secure-cookies`.
pub const SECURE_SIGNOUT_COOKIE: &str = "__Host-lazarus_signout";
/// The prefix of API tokens (so they are recognisable in a secret scanner).
pub const TOKEN_PREFIX: &str = "lzr_";
/// The longest user name accepted (sign-in, the proxy's header, `lazarus user add`).
pub const MAX_NAME_CHARS: usize = 64;
/// The longest password accepted (argon2 takes any; a form needs a bound).
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// How long an API token lasts unless told otherwise, and at most.
pub const TOKEN_DAYS: u32 = 90;
pub const MAX_TOKEN_DAYS: u32 = 366;

/// Why a user name cannot be one: empty, too long, or with control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("a user name has 1 to {MAX_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("a user name has no control characters".into());
    }
    Ok(())
}

/// A new random secret: 32 bytes from the OS, URL-safe base64.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What the database keeps of a session cookie or an API token: its SHA-256, hex.
pub fn secret_hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse battery!", &hash));
        assert!(!verify_password("anything", "not a hash"));
    }

    #[test]
    fn names_are_bounded() {
        assert!(check_name("alice").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name(&"a".repeat(MAX_NAME_CHARS + 1)).is_err());
        assert!(check_name("a\0b").is_err() && check_name("a\nb").is_err());
    }

    #[test]
    fn secure_cookies_are_host_only() {
        let mut s = AuthSettings::none();
        assert_eq!(s.session_cookie(), "lazarus_session");
        s.secure_cookies = true;
        assert_eq!(s.session_cookie(), "__Host-lazarus_session");
    }

    #[test]
    fn secrets_are_random_and_stored_hashed() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(secret_hash(&a).len(), 64);
        assert_ne!(secret_hash(&a), a);
    }
}

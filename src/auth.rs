//! Who may look and who may replay: authentication modes, the role each route needs,
//! password hashing (argon2id), session and API token secrets, and login throttling.
//! Pure rules here; the HTTP side is `web::auth`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use axum::http::Method;
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use sha2::{Digest, Sha256};

pub use crate::archive::Role;

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
    /// Mark the session cookie `Secure` (serve over TLS, or behind a TLS proxy).
    pub secure_cookies: bool,
}

impl AuthSettings {
    /// No authentication (tests and loopback-only use).
    pub fn none() -> Self {
        AuthSettings {
            mode: AuthMode::None,
            trusted_proxies: Vec::new(),
            proxy_default_role: Role::Viewer,
            session_idle: Duration::from_secs(3600),
            secure_cookies: false,
        }
    }
}

/// The name of the session cookie.
pub const SESSION_COOKIE: &str = "lazarus_session";
/// The prefix of API tokens (so they are recognisable in a secret scanner).
pub const TOKEN_PREFIX: &str = "lzr_";
/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// The role a request needs: `None` for public routes (sign-in, health, assets).
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    let public = matches!(path, "/login" | "/logout" | "/healthz" | "/readyz")
        || path.starts_with("/static/");
    if public {
        return None;
    }
    let admin = path == "/audit"
        || path.starts_with("/admin")
        || path.starts_with("/api/admin")
        || path.starts_with("/api/audit");
    if admin {
        return Some(Role::Admin);
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        Some(Role::Viewer)
    } else {
        Some(Role::Operator)
    }
}

/// An argon2id PHC string for the password (salted; slow on purpose).
pub fn hash_password(password: &str) -> Result<String, String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "a password has at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether the password matches the stored hash (false for a malformed hash).
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
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

/// Failed sign-ins allowed per user name within the window…
pub const MAX_FAILED_LOGINS: u32 = 5;
/// …and per address (higher: an office shares one address).
pub const MAX_FAILED_LOGINS_PER_ADDRESS: u32 = 20;
pub const LOGIN_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Counts failed sign-ins per user name and per address, to slow down guessing.
#[derive(Debug, Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Throttle {
    /// `Some(wait)` while `user` or `address` has too many recent failures.
    pub fn blocked(&self, user: &str, address: &str) -> Option<Duration> {
        let failures = self.failures.lock().expect("throttle lock");
        [
            (format!("user:{user}"), MAX_FAILED_LOGINS),
            (format!("addr:{address}"), MAX_FAILED_LOGINS_PER_ADDRESS),
        ]
        .iter()
        .filter_map(|(key, limit)| failures.get(key).map(|f| (f, *limit)))
        .filter(|((n, since), limit)| *n >= *limit && since.elapsed() < LOGIN_WINDOW)
        .map(|((_, since), _)| LOGIN_WINDOW - since.elapsed())
        .max()
    }

    pub fn failed(&self, user: &str, address: &str) {
        let mut failures = self.failures.lock().expect("throttle lock");
        for key in [format!("user:{user}"), format!("addr:{address}")] {
            let entry = failures.entry(key).or_insert((0, Instant::now()));
            if entry.1.elapsed() >= LOGIN_WINDOW {
                *entry = (0, Instant::now());
            }
            entry.0 += 1;
        }
    }

    pub fn succeeded(&self, user: &str) {
        self.failures
            .lock()
            .expect("throttle lock")
            .remove(&format!("user:{user}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_need_the_roles_the_issue_names() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(required_role(&get, "/login"), None);
        assert_eq!(required_role(&post, "/login"), None);
        assert_eq!(required_role(&get, "/healthz"), None);
        assert_eq!(required_role(&get, "/static/lazarus-1.css"), None);
        assert_eq!(required_role(&get, "/"), Some(Role::Viewer));
        assert_eq!(required_role(&get, "/api/messages/7"), Some(Role::Viewer));
        assert_eq!(required_role(&get, "/metrics"), Some(Role::Viewer));
        assert_eq!(
            required_role(&post, "/api/messages/7/replay"),
            Some(Role::Operator)
        );
        assert_eq!(
            required_role(&post, "/messages/select"),
            Some(Role::Operator)
        );
        assert_eq!(
            required_role(&post, "/replays/3/cancel"),
            Some(Role::Operator)
        );
        assert_eq!(required_role(&get, "/audit"), Some(Role::Admin));
        assert_eq!(required_role(&get, "/api/audit"), Some(Role::Admin));
        assert_eq!(required_role(&post, "/api/admin/tokens"), Some(Role::Admin));
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
    }

    #[test]
    fn passwords_hash_and_verify() {
        assert!(hash_password("short").is_err());
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse battery!", &hash));
        assert!(!verify_password("anything", "not a hash"));
    }

    #[test]
    fn secrets_are_random_and_stored_hashed() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(secret_hash(&a).len(), 64);
        assert_ne!(secret_hash(&a), a);
    }

    #[test]
    fn the_throttle_blocks_after_repeated_failures() {
        let t = Throttle::default();
        for _ in 0..MAX_FAILED_LOGINS - 1 {
            t.failed("alice", "10.0.0.1");
        }
        assert!(t.blocked("alice", "10.0.0.9").is_none());
        t.failed("alice", "10.0.0.1");
        assert!(t.blocked("alice", "10.0.0.9").is_some(), "by user name");
        assert!(
            t.blocked("bob", "10.0.0.1").is_none(),
            "an address allows more"
        );
        for i in 0..MAX_FAILED_LOGINS_PER_ADDRESS {
            t.failed(&format!("guess-{i}"), "10.0.0.1");
        }
        assert!(t.blocked("bob", "10.0.0.1").is_some(), "by address");
        assert!(t.blocked("bob", "10.0.0.2").is_none());
        t.succeeded("alice");
        assert!(t.blocked("alice", "10.0.0.9").is_none());
    }
}

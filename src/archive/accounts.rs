//! Who may do what, as every backend stores it: roles, users, API tokens, the actor an
//! audit entry names, and when a session ends (pure).

use serde::Serialize;
use time::OffsetDateTime;

/// What a caller may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Pages and API reads.
    Viewer,
    /// Replay, edit & replay, dismiss.
    Operator,
    /// Users, tokens, the audit log.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Role::Viewer, Role::Operator, Role::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::parse(s).ok_or_else(|| format!("a role is viewer, operator or admin, not {s:?}"))
    }
}

/// Who did something, and from where, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub name: String,
    /// The client's address, when it came over the network.
    pub source: Option<String>,
}

impl Actor {
    /// Lazarus itself (the job runner) or a command-line verb.
    pub fn system(name: &str) -> Self {
        Actor {
            name: name.to_owned(),
            source: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UserRecord {
    pub name: String,
    /// An argon2id PHC string; `None` for users who only come through the trusted proxy.
    #[serde(skip)]
    pub password_hash: Option<String>,
    pub role: Role,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TokenRecord {
    #[serde(serialize_with = "super::id_as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it stops working (`None` only for tokens of a database older than expiry).
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// The user whose token it is: removing them revokes it.
    pub owner: Option<String>,
    pub revoked: bool,
}

impl TokenRecord {
    pub fn expired(&self, now: OffsetDateTime) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// A new API token, as it is stored (its secret only as a hash).
#[derive(Debug, Clone, Copy)]
pub struct TokenSpec<'a> {
    pub name: &'a str,
    pub token_hash: &'a str,
    pub role: Role,
    /// The user it belongs to (revoked with them); `None` for one made on the command line.
    pub owner: Option<&'a str>,
    pub expires_at: OffsetDateTime,
}

/// A session's `last_seen` is written at most this often (not on every request)…
const TOUCH_EVERY_MS: i64 = 60_000;

/// …and at least four times per idle limit, so that a session in use never looks idle.
fn touch_every(idle_ms: u64) -> i64 {
    TOUCH_EVERY_MS.min(idle_ms as i64 / 4)
}

/// A session's times, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTimes {
    pub created_at: i64,
    pub last_seen: i64,
}

/// What a session needs when it is used at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionUse {
    /// Unused for longer than the idle limit, or older than the absolute one: it is ended.
    Ended,
    /// Its `last_seen` is old enough to be written again.
    Touch,
    Fresh,
}

pub fn session_use(times: SessionTimes, idle_ms: u64, max_ms: u64, now: i64) -> SessionUse {
    if now - times.last_seen > idle_ms as i64 || now - times.created_at > max_ms as i64 {
        SessionUse::Ended
    } else if now - times.last_seen > touch_every(idle_ms) {
        SessionUse::Touch
    } else {
        SessionUse::Fresh
    }
}

/// An account change, as the audit log records it.
pub enum AccountChange<'a> {
    UserPut {
        name: &'a str,
        role: Role,
    },
    Password {
        name: &'a str,
    },
    UserRemove {
        name: &'a str,
        tokens: u64,
    },
    TokenCreate {
        id: i64,
        name: &'a str,
        role: Role,
        expires_at: OffsetDateTime,
    },
    TokenRevoke {
        id: i64,
    },
}

impl AccountChange<'_> {
    /// The audit action and line.
    pub fn entry(&self) -> (&'static str, String) {
        match *self {
            AccountChange::UserPut { name, role } => {
                ("user_put", format!("user {name} is {}", role.as_str()))
            }
            AccountChange::Password { name } => (
                "user_password",
                format!("password of {name} changed; their sessions ended"),
            ),
            AccountChange::UserRemove { name, tokens } => (
                "user_remove",
                format!("user {name} removed; their sessions ended, {tokens} API tokens of theirs revoked"),
            ),
            AccountChange::TokenCreate {
                id,
                name,
                role,
                expires_at,
            } => (
                "token_create",
                format!(
                    "API token {id} ({name}) created as {}, expires {}",
                    role.as_str(),
                    expires_at
                        .format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default()
                ),
            ),
            AccountChange::TokenRevoke { id } => {
                ("token_revoke", format!("API token {id} revoked"))
            }
        }
    }
}

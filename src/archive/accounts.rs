//! Who may do what, as every backend stores it: roles, users, API tokens, and the actor an
//! audit entry names.

use serde::Serialize;
use time::OffsetDateTime;

/// What a caller may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserRecord {
    pub name: String,
    /// An argon2id PHC string; `None` for users who only come through the trusted proxy.
    #[serde(skip)]
    pub password_hash: Option<String>,
    pub role: Role,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenRecord {
    #[serde(serialize_with = "super::id_as_string")]
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

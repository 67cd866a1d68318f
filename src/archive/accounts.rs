//! Who may do what, as every backend stores it: roles, grants of a role on some DLQs,
//! users, API tokens, the actor an audit entry names, and when a session ends (pure).

use serde::Serialize;
use time::OffsetDateTime;

use crate::message::dlq::{check_pattern, pattern_matches, Dlq};

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

/// A role on the DLQs a pattern names (`operator of billing.*`, `viewer of tenant-a/*`; the
/// pattern read as [`pattern_matches`] reads it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Grant {
    pub role: Role,
    /// `NAME` in the AMQP URL's vhost or `VHOST/NAME`, `*` for any run of characters.
    pub on: String,
}

impl Grant {
    /// Reads `ROLE:PATTERN` (`viewer:tenant-a/*`); admin is no role of some DLQs only (it
    /// manages users, tokens and the audit log of the whole archive).
    pub fn parse(text: &str) -> Result<Grant, String> {
        let (role, on) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: a grant is ROLE:PATTERN, e.g. viewer:tenant-a/*"))?;
        let role: Role = role.trim().parse()?;
        if role == Role::Admin {
            return Err(format!(
                "{text:?}: admin is granted on the whole archive (--role admin), not on DLQs"
            ));
        }
        check_pattern(on)?;
        Ok(Grant {
            role,
            on: on.to_owned(),
        })
    }
}

impl Grant {
    /// `role` on each of `patterns` (none: no grants, the role everywhere).
    pub fn on_each(role: Role, patterns: &[String]) -> Result<Vec<Grant>, String> {
        patterns
            .iter()
            .map(|p| Grant::parse(&format!("{}:{p}", role.as_str())))
            .collect()
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.role.as_str(), self.on)
    }
}

/// One principal's grants: a role on every DLQ, or roles on the DLQs some patterns name
/// (and none elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grants {
    Everywhere(Role),
    On(Vec<Grant>),
}

impl Grants {
    /// A user's or token's, from its role and its grants (none: the role everywhere).
    pub fn of(role: Role, grants: &[Grant]) -> Grants {
        match grants.is_empty() {
            true => Grants::Everywhere(role),
            false => Grants::On(grants.to_vec()),
        }
    }

    /// The role held on `dlq` (`home`: the AMQP URL's vhost), if any.
    pub fn role_on(&self, dlq: &Dlq, home: &str) -> Option<Role> {
        match self {
            Grants::Everywhere(role) => Some(*role),
            Grants::On(grants) => grants
                .iter()
                .filter(|g| pattern_matches(&g.on, dlq, home))
                .map(|g| g.role)
                .max(),
        }
    }

    /// The role held on every DLQ, if any: the role everywhere, or one granted on a pattern
    /// that names every DLQ (`*/*`).
    pub fn everywhere(&self) -> Option<Role> {
        match self {
            Grants::Everywhere(role) => Some(*role),
            Grants::On(grants) => grants
                .iter()
                .filter(|g| names_every_dlq(&g.on))
                .map(|g| g.role)
                .max(),
        }
    }

    /// The highest role held on some DLQ.
    pub fn highest(&self) -> Option<Role> {
        match self {
            Grants::Everywhere(role) => Some(*role),
            Grants::On(grants) => grants.iter().map(|g| g.role).max(),
        }
    }

    /// `viewer`, or `viewer of tenant-a/*, operator of billing.*`.
    pub fn describe(&self) -> String {
        match self {
            Grants::Everywhere(role) => role.as_str().to_owned(),
            Grants::On(grants) => grants
                .iter()
                .map(Grant::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Whether a pattern names every DLQ of every vhost: `*/*` (stars only, on both sides).
fn names_every_dlq(pattern: &str) -> bool {
    let stars = |part: &str| !part.is_empty() && part.chars().all(|c| c == '*');
    pattern
        .split_once('/')
        .is_some_and(|(vhost, name)| stars(vhost) && stars(name))
}

/// The grants column as stored: `ROLE:PATTERN` lines (a pattern holds no line break).
pub fn stored_grants(grants: &[Grant]) -> Option<String> {
    (!grants.is_empty()).then(|| {
        grants
            .iter()
            .map(|g| format!("{}:{}", g.role.as_str(), g.on))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// The grants column read back.
pub fn grants_from_stored(stored: Option<&str>) -> Result<Vec<Grant>, String> {
    stored
        .into_iter()
        .flat_map(str::lines)
        .filter(|l| !l.is_empty())
        .map(Grant::parse)
        .collect()
}

/// What a caller may do on each DLQ: every layer's grants at once — a token's own, capped by
/// its owner's as they are now. A route needs [`Rights::highest`] of its role; what it shows
/// or changes, each DLQ's own role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights {
    layers: Vec<Grants>,
}

impl Rights {
    pub fn new(grants: Grants) -> Rights {
        Rights {
            layers: vec![grants],
        }
    }

    pub fn everywhere(role: Role) -> Rights {
        Rights::new(Grants::Everywhere(role))
    }

    /// These rights, never more than `cap`'s.
    pub fn capped_by(mut self, cap: Grants) -> Rights {
        self.layers.push(cap);
        self
    }

    /// The role held on `dlq`: the least of the layers'.
    pub fn role_on(&self, dlq: &Dlq, home: &str) -> Option<Role> {
        self.layers
            .iter()
            .map(|l| l.role_on(dlq, home))
            .min()
            .flatten()
    }

    /// At most the role held on any DLQ (exact but for layers whose patterns do not meet):
    /// what a route's role is checked against; each DLQ's is checked where it is used.
    pub fn highest(&self) -> Option<Role> {
        self.layers.iter().map(Grants::highest).min().flatten()
    }

    /// Whether `role` is held on every DLQ, so that nothing needs to be left out.
    pub fn everywhere_at(&self, role: Role) -> bool {
        self.layers
            .iter()
            .all(|l| l.everywhere().is_some_and(|r| r >= role))
    }

    /// The DLQs (keys) among `keys` on which `role` is held; `None` when it is held on every
    /// DLQ (nothing to leave out).
    pub fn dlqs_at<'a>(
        &self,
        role: Role,
        keys: impl IntoIterator<Item = &'a str>,
        home: &str,
    ) -> Option<Vec<String>> {
        if self.everywhere_at(role) {
            return None;
        }
        Some(
            keys.into_iter()
                .filter(|key| {
                    Dlq::parse(key, home)
                        .ok()
                        .and_then(|dlq| self.role_on(&dlq, home))
                        .is_some_and(|r| r >= role)
                })
                .map(str::to_owned)
                .collect(),
        )
    }

    /// `viewer`, `operator of billing.*`, or the layers joined with "within".
    pub fn describe(&self) -> String {
        self.layers
            .iter()
            .map(Grants::describe)
            .collect::<Vec<_>>()
            .join(", within ")
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
    /// The highest role of `grants` when there are grants.
    pub role: Role,
    /// The DLQs the role is held on; none: every DLQ.
    pub grants: Vec<Grant>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl UserRecord {
    pub fn grants(&self) -> Grants {
        Grants::of(self.role, &self.grants)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TokenRecord {
    #[serde(serialize_with = "super::id_as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    pub name: String,
    /// The highest role of `grants` when there are grants.
    pub role: Role,
    /// The DLQs the role is held on; none: every DLQ.
    pub grants: Vec<Grant>,
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
    pub fn grants(&self) -> Grants {
        Grants::of(self.role, &self.grants)
    }

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
    /// The DLQs the role is held on; none: every DLQ.
    pub grants: &'a [Grant],
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
        grants: Grants,
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
        grants: Grants,
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
            AccountChange::UserPut { name, ref grants } => {
                ("user_put", format!("user {name} is {}", grants.describe()))
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
                ref grants,
                expires_at,
            } => (
                "token_create",
                format!(
                    "API token {id} ({name}) created as {}, expires {}",
                    grants.describe(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(role: Role, on: &str) -> Grant {
        Grant {
            role,
            on: on.to_owned(),
        }
    }

    #[test]
    fn rights_are_each_dlqs_role_the_least_of_their_layers() {
        let home = "/";
        let a = Dlq::parse("tenant-a/orders.dlq", home).unwrap();
        let b = Dlq::parse("tenant-b/orders.dlq", home).unwrap();
        let billing = Dlq::parse("billing.dlq", home).unwrap();
        let mixed = Grants::On(vec![
            grant(Role::Viewer, "*/*"),
            grant(Role::Operator, "tenant-a/*"),
        ]);
        let rights = Rights::new(mixed.clone());
        assert_eq!(rights.role_on(&a, home), Some(Role::Operator));
        assert_eq!(rights.role_on(&b, home), Some(Role::Viewer));
        assert_eq!(rights.role_on(&billing, home), Some(Role::Viewer));
        assert!(rights.everywhere_at(Role::Viewer) && !rights.everywhere_at(Role::Operator));
        let keys = ["tenant-a/orders.dlq", "tenant-b/orders.dlq", "billing.dlq"];
        assert_eq!(rights.dlqs_at(Role::Viewer, keys, home), None);
        assert_eq!(
            rights.dlqs_at(Role::Operator, keys, home),
            Some(vec!["tenant-a/orders.dlq".to_owned()])
        );
        // A token of operator everywhere, owned by someone with the mixed grants: theirs.
        let token = Rights::everywhere(Role::Operator).capped_by(mixed);
        assert_eq!(token.role_on(&b, home), Some(Role::Viewer));
        assert_eq!(token.role_on(&a, home), Some(Role::Operator));
        // A tenant's viewer: nothing of the other tenant, nor of the home vhost.
        let vera = Rights::new(Grants::On(vec![grant(Role::Viewer, "tenant-a/*")]));
        assert_eq!(vera.role_on(&b, home), None);
        assert_eq!(vera.role_on(&billing, home), None);
        assert_eq!(vera.highest(), Some(Role::Viewer));
        assert_eq!(
            vera.dlqs_at(Role::Viewer, keys, home),
            Some(vec!["tenant-a/orders.dlq".to_owned()])
        );
        assert_eq!(vera.dlqs_at(Role::Operator, keys, home), Some(vec![]));
        assert_eq!(vera.describe(), "viewer of tenant-a/*");
    }

    #[test]
    fn grants_are_read_back_as_stored_and_admin_is_never_of_some_dlqs() {
        let grants = vec![
            grant(Role::Viewer, "tenant-a/*"),
            grant(Role::Operator, "billing.*"),
        ];
        let stored = stored_grants(&grants);
        assert_eq!(grants_from_stored(stored.as_deref()).unwrap(), grants);
        assert_eq!(stored_grants(&[]), None);
        assert!(grants_from_stored(None).unwrap().is_empty());
        assert!(Grant::parse("admin:tenant-a/*").is_err());
        assert!(Grant::parse("viewer:").is_err() && Grant::parse("viewer:/x").is_err());
        assert!(Grant::parse("viewer").is_err());
        assert!(names_every_dlq("*/*") && names_every_dlq("**/*"));
        assert!(!names_every_dlq("*") && !names_every_dlq("*/orders.*"));
    }
}

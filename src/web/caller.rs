//! Who is calling: the caller `auth` authenticated (name, rights, address, session, owner),
//! as handlers and the page chrome take it from the request, and the DLQs their rights reach.

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;

use crate::archive::{Actor, ArchivedMessage, Rights, Role};
use crate::message::dlq::Dlq;
use crate::web::{AppError, AppState};

/// The authenticated caller of a request, put there by
/// [`authenticate`](crate::web::auth::authenticate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    /// The highest role their rights hold on any DLQ: what a route's role is checked
    /// against. What a route shows or changes is each DLQ's own ([`Caller::may`]).
    pub role: Role,
    /// Their role on each DLQ.
    pub rights: Rights,
    /// The client's address.
    pub source: Option<String>,
    /// Signed in with a session cookie (shows a sign-out button).
    pub session: bool,
    /// The user this caller acts for (a token's owner): what they make is theirs.
    pub owner: Option<String>,
}

impl Caller {
    /// Someone with `role` on every DLQ.
    pub fn everywhere(name: String, role: Role) -> Caller {
        Caller {
            name,
            role,
            rights: Rights::everywhere(role),
            source: None,
            session: false,
            owner: None,
        }
    }

    /// Their role on the DLQ of a message (its `queue` and `vhost` columns), if any.
    /// Patterns are matched against the key as `--queue` reads it on the default broker, as
    /// [`Caller::least_role`] reads a list's: another broker's `us:tenant/q` is matched by
    /// `us:tenant/*`, its home queue `us:q` by `us:*`.
    pub fn role_on(&self, queue: &str, vhost: &str, state: &AppState) -> Option<Role> {
        let dlq =
            Dlq::parse(queue, &state.home_vhost).unwrap_or_else(|_| Dlq::from_key(queue, vhost));
        self.rights.role_on(&dlq, &state.home_vhost)
    }

    /// Their role for what a list of the DLQs `dlqs` ([`Caller::dlqs_at`]) shows: the least
    /// they hold on any of them (`None`: every DLQ).
    pub fn least_role(&self, dlqs: Option<&[String]>, state: &AppState) -> Role {
        let Some(dlqs) = dlqs else {
            return self.role;
        };
        dlqs.iter()
            .filter_map(|key| Dlq::parse(key, &state.home_vhost).ok())
            .filter_map(|dlq| self.rights.role_on(&dlq, &state.home_vhost))
            .min()
            .unwrap_or(Role::Viewer)
    }

    /// The message `id` (as the request wrote it: `raw`) when they hold `role` on its DLQ.
    /// One of a DLQ they may not see is not found — that it exists is not theirs to know;
    /// one they may see but not act on is forbidden.
    pub async fn message(
        &self,
        state: &AppState,
        id: i64,
        raw: &str,
        role: Role,
    ) -> Result<ArchivedMessage, AppError> {
        let message = state
            .archive
            .get_message(id)
            .await?
            .ok_or_else(|| not_found(raw))?;
        let summary = &message.summary;
        match self.role_on(&summary.queue, &summary.vhost, state) {
            Some(held) if held >= role => Ok(message),
            Some(held) => Err(AppError::Forbidden(format!(
                "this needs the {} role on {}; {} is {} there",
                role.as_str(),
                summary.queue,
                self.name,
                held.as_str()
            ))),
            None => Err(not_found(raw)),
        }
    }

    /// The archived DLQs (keys) on which they hold `role`; `None` when they hold it on every
    /// DLQ (nothing to leave out).
    pub async fn dlqs_at(
        &self,
        role: Role,
        state: &AppState,
    ) -> Result<Option<Vec<String>>, AppError> {
        if self.rights.everywhere_at(role) {
            return Ok(None);
        }
        let keys = archived_dlqs(state).await?;
        Ok(self.dlqs_among(role, &keys, state))
    }

    /// Of the DLQs `keys`, those on which they hold `role`; `None` when they hold it on every
    /// DLQ.
    pub fn dlqs_among(&self, role: Role, keys: &[String], state: &AppState) -> Option<Vec<String>> {
        self.rights
            .dlqs_at(role, keys.iter().map(String::as_str), &state.home_vhost)
    }

    /// `Ok` when they may replay or dismiss the message `id`: operator on its DLQ.
    pub async fn may_act_on(&self, state: &AppState, id: i64, raw: &str) -> Result<(), AppError> {
        match self.rights.everywhere_at(Role::Operator) {
            true => Ok(()),
            false => self
                .message(state, id, raw, Role::Operator)
                .await
                .map(|_| ()),
        }
    }

    /// The archived DLQs (keys) they may view.
    pub async fn visible_dlqs(&self, state: &AppState) -> Result<Vec<String>, AppError> {
        match self.dlqs_at(Role::Viewer, state).await? {
            Some(dlqs) => Ok(dlqs),
            None => archived_dlqs(state).await,
        }
    }

    /// The list's filter and page as `params` ask, of the DLQs they may view, with masked
    /// fields refused to a caller who is a viewer of one of those DLQs.
    pub async fn filter(
        &self,
        state: &AppState,
        params: &crate::archive::selection::ListParams,
    ) -> Result<(crate::archive::MessageFilter, crate::archive::PageRequest), AppError> {
        let (mut filter, page) = params.parse(&state.business_fields, &state.home_vhost)?;
        filter.dlqs = self.dlqs_at(Role::Viewer, state).await?;
        let role = self.least_role(filter.dlqs.as_deref(), state);
        state.masking.check_search(role, &filter)?;
        Ok((filter, page))
    }

    /// Whether a failure group is of a DLQ they may view.
    pub fn sees_group(&self, group: &crate::archive::FailureGroup, state: &AppState) -> bool {
        self.rights.everywhere_at(Role::Viewer)
            || group.queue.as_deref().is_some_and(|queue| {
                Dlq::parse(queue, &state.home_vhost)
                    .ok()
                    .and_then(|dlq| self.rights.role_on(&dlq, &state.home_vhost))
                    .is_some()
            })
    }

    /// Whether they see a replay job: every job when they are viewer of every DLQ, else the
    /// jobs they made (of messages their rights let them replay).
    pub fn sees_job(&self, job: &crate::archive::ReplayJob) -> bool {
        self.rights.everywhere_at(Role::Viewer) || job.actor == self.name
    }

    pub fn actor(&self) -> Actor {
        Actor {
            name: self.name.clone(),
            source: self.source.clone(),
        }
    }
}

/// Every DLQ (key) the archive holds messages of.
pub async fn archived_dlqs(state: &AppState) -> Result<Vec<String>, AppError> {
    let mut keys: Vec<String> = state
        .archive
        .counts()
        .await?
        .into_iter()
        .map(|c| c.queue)
        .collect();
    keys.dedup();
    Ok(keys)
}

/// A message that is not there, or not the caller's to see.
pub fn not_found(raw: &str) -> AppError {
    AppError::NotFound(format!("no archived message with id {raw:?}"))
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| AppError::Unauthorized("sign in first".into()))
    }
}

/// A public route's caller, when someone signed in is calling.
impl<S: Send + Sync> OptionalFromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned())
    }
}

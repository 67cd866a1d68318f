//! `GET /api/groups`: the failure groups the overview shows, as JSON — by cause, or by one of
//! its parts — with the list filters that select each one's messages and its note and status.

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::archive::{filter_value, FailureGroup, GroupBy, GroupNote, GroupQuery, Role};
use crate::web::auth::Caller;
use crate::web::extract::AppQuery;
use crate::web::{AppError, AppState};

/// Groups answered when `limit` is not given, and at most.
const DEFAULT_GROUPS: u32 = 100;
const MAX_GROUPS: u32 = 1_000;

/// What `/api/groups` filters by: what the groups themselves know.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
pub struct GroupParams {
    /// cause (default: DLQ, failing queue, reason, exception type and message template),
    /// error_type, message_type, queue (the failing queue) or reason.
    group_by: Option<String>,
    /// Only groups of messages archived from this DLQ.
    queue: Option<String>,
    /// Only groups of messages that failed in this queue (their first death's).
    first_death_queue: Option<String>,
    /// Only this first-death reason (none: messages without death history).
    reason: Option<String>,
    /// Only this exception type ("(none)": errors that name none).
    error_type: Option<String>,
    /// Only this message type ("(none)": messages without one).
    message_type: Option<String>,
    /// Only the group with this id (and, grouped otherwise, what of it the grouping holds).
    group: Option<String>,
    /// open: groups with open messages; resolved: groups with resolved ones.
    status: Option<String>,
    /// Groups answered: 1 to 1000 (default 100).
    limit: Option<String>,
}

/// The parameters `/api/groups` takes.
const PARAMETERS: [&str; 9] = [
    "group_by",
    "queue",
    "first_death_queue",
    "reason",
    "error_type",
    "message_type",
    "group",
    "status",
    "limit",
];

/// A failure group, and the list filters that select exactly its messages.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupAnswer {
    #[serde(flatten)]
    group: FailureGroup,
    /// For `GET /api/messages` or a replay's `filter` (add `"status": "open"` for its open
    /// messages only).
    filter: BTreeMap<&'static str, String>,
    /// Its note and status (`POST /api/groups/{id}/note`), when one was set: grouped by
    /// cause only (null otherwise).
    note: Option<GroupNote>,
}

/// What `GET /api/groups` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupList {
    /// Those with open messages first, then by their latest failure, newest first.
    groups: Vec<GroupAnswer>,
}

impl GroupParams {
    /// The query these parameters ask for, or what is wrong with them.
    fn query(&self) -> Result<GroupQuery, AppError> {
        let bad = |s: String| AppError::BadRequest(s);
        let given = |v: &Option<String>| crate::archive::selection::given(v).map(str::to_owned);
        let named = |v: &Option<String>| given(v).map(|v| filter_value(&v).to_owned());
        let by = match crate::archive::selection::given(&self.group_by) {
            None => GroupBy::Cause,
            Some(v) => GroupBy::parse(v).ok_or_else(|| {
                bad(format!(
                    "group_by must be one of {}, not {v:?}",
                    GroupBy::ALL.map(GroupBy::as_str).join(", ")
                ))
            })?,
        };
        let group = crate::archive::selection::given(&self.group)
            .map(|g| {
                g.parse::<i64>().map_err(|_| {
                    bad(format!(
                        "group must be the id of a failure group, not {g:?}"
                    ))
                })
            })
            .transpose()?;
        let open = match crate::archive::selection::given(&self.status) {
            None => None,
            Some("open") => Some(true),
            Some("resolved") => Some(false),
            Some(s) => {
                return Err(bad(format!(
                    "status of a group must be open or resolved, not {s:?}"
                )))
            }
        };
        let limit = match crate::archive::selection::given(&self.limit) {
            None => DEFAULT_GROUPS,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_GROUPS).contains(n))
                .ok_or_else(|| {
                    bad(format!(
                        "limit must be between 1 and {MAX_GROUPS}, not {s:?}"
                    ))
                })?,
        };
        let texts = [
            ("queue", &self.queue),
            ("first_death_queue", &self.first_death_queue),
            ("reason", &self.reason),
            ("error_type", &self.error_type),
            ("message_type", &self.message_type),
        ];
        if let Some((name, _)) = texts
            .iter()
            .find(|(_, v)| v.as_deref().is_some_and(|v| v.contains('\0')))
        {
            return Err(bad(format!(
                "{name} contains a NUL character (%00), which no archived value holds"
            )));
        }
        Ok(GroupQuery {
            by,
            dlq: given(&self.queue),
            queue: given(&self.first_death_queue),
            reason: given(&self.reason),
            error_type: named(&self.error_type),
            message_type: named(&self.message_type),
            group,
            open,
            dlqs: None,
            limit,
        })
    }
}

/// The parameters of `query` that `/api/groups` does not take, named in a 400: a list filter
/// the groups cannot answer (`q`, `since`...) is not silently left out.
fn refuse_unknown(query: Option<&str>) -> Result<(), AppError> {
    let unknown: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, _)| k.into_owned())
        .filter(|k| !PARAMETERS.contains(&k.as_str()))
        .collect();
    match unknown.first() {
        None => Ok(()),
        Some(name) => Err(AppError::BadRequest(format!(
            "failure groups cannot be filtered by {name:?}: they filter by {}; \
             GET /api/messages takes every filter",
            PARAMETERS[1..].join(", ")
        ))),
    }
}

/// Failure groups: one bug in one place, whatever ids its messages name.
///
/// By default one group per DLQ, failing queue, first-death reason and cause (the exception
/// type and the error's template: ids, numbers, UUIDs, emails, quoted values as
/// placeholders); `group_by` groups by one of those parts instead. Counts are the groups'
/// own, kept as messages arrive and change status. Each group's `filter` selects its messages
/// in `GET /api/messages` and `POST /api/replays`.
#[utoipa::path(get, path = "/api/groups", tag = "messages", params(GroupParams),
    responses((status = 200, description = "The failure groups", body = GroupList)))]
pub(crate) async fn list_groups(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(raw): RawQuery,
    AppQuery(params): AppQuery<GroupParams>,
) -> Result<Json<GroupList>, AppError> {
    refuse_unknown(raw.as_deref())?;
    let query = GroupQuery {
        dlqs: caller.dlqs_at(Role::Viewer, &state).await?,
        ..params.query()?
    };
    let _reading = state.reads.acquire().await?;
    let groups = state.archive.groups(&query).await?;
    let ids: Vec<i64> = groups.iter().filter_map(|g| g.id).collect();
    let mut notes: BTreeMap<i64, GroupNote> =
        state.archive.group_notes(&ids).await?.into_iter().collect();
    Ok(Json(GroupList {
        groups: groups
            .into_iter()
            .map(|group| GroupAnswer {
                filter: group.filter(query.by).into_iter().collect(),
                note: group.id.and_then(|id| notes.remove(&id)),
                group,
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Result<GroupQuery, AppError> {
        refuse_unknown(Some(query))?;
        serde_urlencoded::from_str::<GroupParams>(query)
            .unwrap()
            .query()
    }

    #[test]
    fn parameters_are_checked_with_clear_answers() {
        let q =
            params("group_by=error_type&queue=a.dlq&error_type=%28none%29&status=open").unwrap();
        assert_eq!(q.by, GroupBy::ErrorType);
        assert_eq!(q.dlq.as_deref(), Some("a.dlq"));
        assert_eq!(q.error_type.as_deref(), Some(""));
        assert_eq!(q.open, Some(true));
        assert_eq!(q.limit, DEFAULT_GROUPS);
        for (query, said) in [
            ("group_by=bug", "group_by must be one of cause, error_type"),
            ("group=abc", "group must be the id"),
            ("status=archived", "open or resolved"),
            ("limit=0", "limit must be between 1 and 1000"),
            ("q=timeout", "cannot be filtered by \"q\""),
            (
                "since=2026-01-01T00:00:00Z",
                "cannot be filtered by \"since\"",
            ),
            ("reason=a%00b", "NUL"),
        ] {
            let err = params(query).unwrap_err().to_string();
            assert!(err.contains(said), "{query}: {err}");
        }
    }
}

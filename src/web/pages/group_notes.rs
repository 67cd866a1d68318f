//! A failure group's note and status ("investigating — PAY-123", waiting for a fix, snoozed
//! until a time): `POST /api/groups/{id}/note` and its page twin, the overview's "Note…" form.
//! Operators only; every change is audited.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use time::{Duration, OffsetDateTime};

use crate::archive::{GroupNote, GroupNoteChange, GroupQuery, GroupStatus, Role};
use crate::web::auth::Caller;
use crate::web::extract::{AppJson, GroupId};
use crate::web::html::{flash, PageError};
use crate::web::pages::replays::{see_other, FormPairs};
use crate::web::{AppError, AppState};

/// The longest note kept.
pub const MAX_NOTE_CHARS: usize = 2000;
/// How long a group may be snoozed for, at most.
const MAX_SNOOZE: Duration = Duration::days(30);
/// The snoozes the overview's form offers, in hours.
pub const SNOOZE_HOURS: [(i64, &str); 4] = [
    (1, "1 hour"),
    (4, "4 hours"),
    (24, "a day"),
    (168, "a week"),
];

/// What `POST /api/groups/{id}/note` takes.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupNoteRequest {
    /// Where the group stands; `snoozed` folds it away on the overview until `snoozed_until`.
    status: GroupStatus,
    /// What the people on it say ("investigating — PAY-123"); "" for none.
    #[serde(default)]
    #[schema(max_length = 2000)]
    note: String,
    /// Until when (RFC 3339, within 30 days): required with `snoozed`, refused otherwise.
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    snoozed_until: Option<OffsetDateTime>,
}

/// The change a request asks for, or what is wrong with it.
fn change_of(
    status: GroupStatus,
    note: &str,
    snoozed_until: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Result<GroupNoteChange, AppError> {
    let bad = |s: &str| Err(AppError::BadRequest(s.to_owned()));
    let note = note.trim();
    if note.chars().count() > MAX_NOTE_CHARS {
        return bad("a group's note is at most 2000 characters");
    }
    if note.contains('\0') {
        return bad("a group's note cannot hold a NUL character");
    }
    match (status, snoozed_until) {
        (GroupStatus::Snoozed, None) => {
            return bad("snoozed needs snoozed_until: until when the group is folded away")
        }
        (GroupStatus::Snoozed, Some(until)) if until <= now || until > now + MAX_SNOOZE => {
            return bad("snoozed_until must be in the future, within 30 days")
        }
        (GroupStatus::Snoozed, _) => {}
        (_, Some(_)) => return bad("snoozed_until is only for the status snoozed"),
        (_, None) => {}
    }
    Ok(GroupNoteChange {
        status,
        note: note.to_owned(),
        snoozed_until,
    })
}

/// Sets the note of cause group `id` (any id of its rows names it; the note is kept under
/// the group's own), when the caller is operator of its DLQ.
async fn set_note(
    state: &AppState,
    id: i64,
    change: &GroupNoteChange,
    caller: &Caller,
) -> Result<GroupNote, AppError> {
    let query = GroupQuery {
        group: Some(id),
        dlqs: caller.dlqs_at(Role::Operator, state).await?,
        ..GroupQuery::by_cause(1)
    };
    let group = state
        .archive
        .groups(&query)
        .await?
        .into_iter()
        .next()
        .and_then(|g| g.id)
        .ok_or_else(|| AppError::NotFound(format!("no failure group with id \"{id}\"")))?;
    Ok(state
        .archive
        .set_group_note(group, change, &caller.actor())
        .await?)
}

/// Sets a failure group's note and status (replacing the last), as shown on the overview and
/// in `GET /api/groups`; audited. `snoozed` folds the group away on the overview until
/// `snoozed_until`.
#[utoipa::path(post, path = "/api/groups/{id}/note", tag = "messages", params(GroupId),
    request_body = GroupNoteRequest,
    responses((status = 200, description = "The group's note and status as now set", body = GroupNote)))]
pub(crate) async fn note_group(
    State(state): State<AppState>,
    caller: Caller,
    GroupId { id, .. }: GroupId,
    AppJson(request): AppJson<GroupNoteRequest>,
) -> Result<Json<GroupNote>, AppError> {
    let change = change_of(
        request.status,
        &request.note,
        request.snoozed_until,
        OffsetDateTime::now_utc(),
    )?;
    Ok(Json(set_note(&state, id, &change, &caller).await?))
}

/// `POST /groups/{id}/note`: the overview's "Note…" form (`status`, `note`, and
/// `snooze_hours` for a snooze); back to the overview, saying what was set.
pub async fn note_group_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    GroupId { id, .. }: GroupId,
    body: Bytes,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let form = FormPairs::parse(&body);
    let status = form.get("status").unwrap_or("none");
    let status = GroupStatus::parse(status).ok_or_else(|| {
        page_error(AppError::BadRequest(format!(
            "a group's status is one of {}, not {status:?}",
            GroupStatus::ALL.map(GroupStatus::as_str).join(", ")
        )))
    })?;
    let now = OffsetDateTime::now_utc();
    let until = match status {
        GroupStatus::Snoozed => {
            let hours = form
                .number::<i64>("snooze_hours", "the snooze")
                .map_err(page_error)?
                .unwrap_or(4);
            Some(now + Duration::hours(hours.clamp(1, MAX_SNOOZE.whole_hours())))
        }
        _ => None,
    };
    let change =
        change_of(status, form.get("note").unwrap_or_default(), until, now).map_err(page_error)?;
    let note = set_note(&state, id, &change, &caller)
        .await
        .map_err(page_error)?;
    let said = match note.status {
        GroupStatus::Snoozed => "Group snoozed: folded away until its time.".to_owned(),
        GroupStatus::None => "Group note saved.".to_owned(),
        s => format!("Group marked {}.", s.label()),
    };
    Ok(flash(see_other(&headers, "/"), &said))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snooze_needs_a_time_to_come() {
        let now = OffsetDateTime::now_utc();
        let ok = change_of(GroupStatus::Investigating, " PAY-123 ", None, now).unwrap();
        assert_eq!(ok.note, "PAY-123");
        let hour = Some(now + Duration::hours(1));
        assert!(change_of(GroupStatus::Snoozed, "", hour, now).is_ok());
        for (status, until, said) in [
            (GroupStatus::Snoozed, None, "needs snoozed_until"),
            (GroupStatus::Snoozed, Some(now), "in the future"),
            (
                GroupStatus::Snoozed,
                Some(now + Duration::days(31)),
                "30 days",
            ),
            (
                GroupStatus::Investigating,
                hour,
                "only for the status snoozed",
            ),
        ] {
            let err = change_of(status, "", until, now).unwrap_err().to_string();
            assert!(err.contains(said), "{err}");
        }
        let long = "x".repeat(MAX_NOTE_CHARS + 1);
        assert!(change_of(GroupStatus::None, &long, None, now).is_err());
    }
}

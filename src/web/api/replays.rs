//! The JSON API of bulk actions: replay plans and jobs (create, follow, pause, resume,
//! cancel, per-message outcomes), dismissals, and the audit log.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::archive::selection::given;
use crate::archive::{AuditEntry, CopyCounts, JobItem, ReplayJob, Role, MAX_PAGE_SIZE};
use crate::replay::plan::{self, IdValue, JobRequest, SelectionRequest};
use crate::web::auth::Caller;
use crate::web::caller::archived_dlqs;
use crate::web::error::ErrorBody;
use crate::web::extract::{AppJson, AppQuery, JobActionPath, JobId, MessageId};
use crate::web::{AppError, AppState};

/// A plan or job, and what of the selection the caller may see but not replay: left out.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Planned {
    #[serde(flatten)]
    pub job: ReplayJob,
    /// Messages of the selection on DLQs the caller may view but not replay, left out of
    /// it (0 for a caller who is operator of every DLQ).
    pub left_out: u64,
}

/// Freezes a selection into a plan or job of the messages the caller may replay, and wakes
/// the local runner for a job.
pub async fn create(
    state: &AppState,
    mut request: JobRequest,
    caller: &Caller,
) -> Result<Planned, AppError> {
    let left_out = match caller.rights.everywhere_at(Role::Operator) {
        true => 0,
        false => {
            // The archived DLQs read once: those acted on, and those only seen.
            let archived = archived_dlqs(state).await?;
            let acted_on = caller.dlqs_among(Role::Operator, &archived, state);
            let seen = caller
                .dlqs_among(Role::Viewer, &archived, state)
                .unwrap_or(archived);
            request.selection.within = acted_on;
            left_out(state, &request.selection, seen).await?
        }
    };
    let job = plan::create_job(
        &*state.archive,
        &request,
        &caller.actor(),
        &state.business_fields,
        &state.home_vhost,
        &state.replay_policy,
    )
    .await?;
    state.jobs_wake.notify_one();
    Ok(Planned { job, left_out })
}

/// How many messages of `selection` (already kept to the DLQs the caller may act on) are
/// of the DLQs `seen` (those the caller may view) but not acted on: what an action left out,
/// said to them.
async fn left_out(
    state: &AppState,
    selection: &SelectionRequest,
    seen: Vec<String>,
) -> Result<u64, AppError> {
    let Some(acted_on) = &selection.within else {
        return Ok(0);
    };
    let only_seen: Vec<String> = seen.into_iter().filter(|d| !acted_on.contains(d)).collect();
    if only_seen.is_empty() {
        return Ok(0);
    }
    let only_seen = SelectionRequest {
        within: Some(only_seen),
        ..selection.clone()
    };
    let (only_seen, _) = only_seen.resolve(&state.business_fields, &state.home_vhost)?;
    Ok(state.archive.count_selection(&only_seen).await?)
}

/// Starts, pauses, resumes or cancels a job the caller sees, and wakes the local runner.
pub async fn control(
    state: &AppState,
    id: i64,
    action: &str,
    caller: &Caller,
) -> Result<ReplayJob, AppError> {
    find_job(state, caller, id).await?;
    let job = plan::control_job(&*state.archive, id, action, &caller.actor()).await?;
    state.jobs_wake.notify_one();
    Ok(job)
}

/// Dismisses the messages of the selection the caller may act on, with a note (required:
/// it says why, later).
pub async fn dismiss_selection(
    state: &AppState,
    selection: &SelectionRequest,
    note: &str,
    caller: &Caller,
) -> Result<u64, AppError> {
    let selection = SelectionRequest {
        within: caller.dlqs_at(Role::Operator, state).await?,
        ..selection.clone()
    };
    Ok(plan::dismiss(
        &*state.archive,
        &selection,
        note,
        &caller.actor(),
        &state.business_fields,
        &state.home_vhost,
    )
    .await?)
}

/// The job, or a 404 that says which id was not found. A caller whose rights are of some
/// DLQs only sees the jobs they made (each made of the messages they may replay).
pub async fn find_job(state: &AppState, caller: &Caller, id: i64) -> Result<ReplayJob, AppError> {
    state
        .archive
        .job(id)
        .await?
        .filter(|job| caller.sees_job(job))
        .ok_or_else(|| AppError::NotFound(format!("no replay job with id {id}")))
}

/// The job as a caller with `role` may see it: a search by a masked field is masked.
pub fn shown(state: &AppState, role: Role, mut job: ReplayJob) -> ReplayJob {
    job.selection = state
        .masking
        .selection(role, &job.selection, &state.business_fields);
    job
}

/// Plans (`"dry_run": true`) or starts a bulk replay of `ids` or a `filter`.
///
/// The selection is frozen into the job at once; messages archived later are not in it.
/// A plan is started with `POST /api/replays/{id}/start`. The same `request_key` never
/// makes a second job.
#[utoipa::path(post, path = "/api/replays", tag = "replays", request_body = JobRequest,
    responses(
        (status = 200, description = "The plan or job", body = Planned),
        (status = 404, description = "An id of the selection is not archived", body = ErrorBody),
        (status = 409, description = "The request key was used for another request", body = ErrorBody),
    ))]
pub(crate) async fn create_job(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(request): AppJson<JobRequest>,
) -> Result<Json<Planned>, AppError> {
    Ok(Json(create(&state, request, &caller).await?))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct JobList {
    replays: Vec<ReplayJob>,
}

/// Replay jobs and plans, newest first (the latest 100).
#[utoipa::path(get, path = "/api/replays", tag = "replays",
    responses((status = 200, description = "The jobs", body = JobList)))]
pub(crate) async fn list_jobs(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<JobList>, AppError> {
    let _reading = state.reads.acquire().await?;
    let jobs = state.archive.jobs(100).await?;
    Ok(Json(JobList {
        replays: jobs
            .into_iter()
            .filter(|job| caller.sees_job(job))
            .map(|job| shown(&state, caller.role, job))
            .collect(),
    }))
}

/// A job with what became of the copies it published: did the fix hold?
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct JobDetail {
    #[serde(flatten)]
    job: ReplayJob,
    /// The messages it published, by their status now: copies still settling, settled
    /// (resolved: their copy did not come back within `--settle-secs`), died again (their
    /// copy was archived back and is the open record now: list them with
    /// `copies_of_job=ID`), or dismissed or replayed once more since (`changed_since`).
    /// "Done" in `counts` is about publishing: every message has an outcome; "settled" here
    /// is what happened to the copies afterwards.
    copies: CopyCounts,
    /// `false` once a copy died again; `true` once the job is over and every copy settled
    /// with none dying again; `null` while that is still to be seen, or when it published
    /// nothing.
    fix_held: Option<bool>,
}

/// One job: its state, plan (targets, skipped), counts and progress, and what became of
/// its copies (`copies`, `fix_held`).
#[utoipa::path(get, path = "/api/replays/{id}", tag = "replays", params(JobId),
    responses((status = 200, description = "The job, and whether the fix held", body = JobDetail)))]
pub(crate) async fn get_job(
    State(state): State<AppState>,
    caller: Caller,
    JobId { id, .. }: JobId,
) -> Result<Json<JobDetail>, AppError> {
    let job = find_job(&state, &caller, id).await?;
    let copies = state.job_copies(&job).await?;
    let fix_held = copies.fix_held(job.state);
    Ok(Json(JobDetail {
        job: shown(&state, caller.role, job),
        copies,
        fix_held,
    }))
}

/// `?outcome=published|unroutable|nacked|failed|skipped|cancelled|pending&after=&limit=`
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemParams {
    /// Only items with this outcome: pending, sending, published, unroutable, nacked,
    /// failed, skipped or cancelled.
    pub outcome: Option<String>,
    /// The `next_after` of the page before.
    pub after: Option<String>,
    /// Items per page: 1 to 500 (default 100).
    pub limit: Option<String>,
}

pub const ITEM_OUTCOMES: [&str; 8] = [
    "pending",
    "sending",
    "published",
    "unroutable",
    "nacked",
    "failed",
    "skipped",
    "cancelled",
];

impl ItemParams {
    /// The outcome filter, the cursor and the page size, validated.
    pub fn parse(&self) -> Result<(Option<&str>, Option<i64>, u32), AppError> {
        let outcome = given(&self.outcome)
            .map(|o| {
                ITEM_OUTCOMES
                    .iter()
                    .copied()
                    .find(|known| *known == o)
                    .ok_or_else(|| {
                        AppError::BadRequest(format!(
                            "outcome must be one of {}, not {o:?}",
                            ITEM_OUTCOMES.join(", ")
                        ))
                    })
            })
            .transpose()?;
        let after = given(&self.after)
            .map(|a| {
                a.parse::<i64>()
                    .map_err(|_| AppError::BadRequest(format!("after {a:?} is not a message id")))
            })
            .transpose()?;
        let limit = match given(&self.limit) {
            None => 100,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
                .ok_or_else(|| {
                    AppError::BadRequest(format!(
                        "limit must be between 1 and {MAX_PAGE_SIZE}, not {l:?}"
                    ))
                })?,
        };
        Ok((outcome, after, limit))
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ItemPage {
    items: Vec<JobItem>,
    /// Pass back as `after` for the next page; `None` on the last one.
    next_after: Option<String>,
}

/// A job's messages and how each ended, in message order.
#[utoipa::path(get, path = "/api/replays/{id}/items", tag = "replays", params(JobId, ItemParams),
    responses((status = 200, description = "A page of items", body = ItemPage)))]
pub(crate) async fn job_items(
    State(state): State<AppState>,
    caller: Caller,
    JobId { id, .. }: JobId,
    AppQuery(params): AppQuery<ItemParams>,
) -> Result<Json<ItemPage>, AppError> {
    let (outcome, after, limit) = params.parse()?;
    let _reading = state.reads.acquire().await?;
    find_job(&state, &caller, id).await?;
    let items = state.archive.job_items(id, outcome, after, limit).await?;
    let next_after = (items.len() == limit as usize)
        .then(|| items.last().map(|i| i.message_id.to_string()))
        .flatten();
    Ok(Json(ItemPage { items, next_after }))
}

/// Starts a plan, or pauses, resumes or cancels a job.
#[utoipa::path(post, path = "/api/replays/{id}/{action}", tag = "replays", params(JobActionPath),
    responses(
        (status = 200, description = "The job, changed", body = ReplayJob),
        (status = 409, description = "Its state does not allow the action", body = ErrorBody),
    ))]
pub(crate) async fn control_job(
    State(state): State<AppState>,
    caller: Caller,
    JobActionPath { id, action }: JobActionPath,
) -> Result<Json<ReplayJob>, AppError> {
    Ok(Json(control(&state, id, &action, &caller).await?))
}

/// `POST /api/messages/dismiss`: `{"ids": [...]}` or `{"filter": {...}}`, and a `note`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct DismissRequest {
    #[serde(flatten)]
    pub selection: SelectionRequest,
    /// Why (required): it is kept with each message and in the audit log.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 2000)]
    pub note: String,
}

/// How many messages a dismissal dismissed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Dismissed {
    /// Dismissed now (those dismissed already are not counted).
    pub dismissed: u64,
}

/// Dismisses a selection (`ids` or a `filter`) with a note saying why.
#[utoipa::path(post, path = "/api/messages/dismiss", tag = "messages", request_body = DismissRequest,
    responses((status = 200, description = "How many were dismissed", body = Dismissed)))]
pub(crate) async fn dismiss(
    State(state): State<AppState>,
    caller: Caller,
    AppJson(request): AppJson<DismissRequest>,
) -> Result<Json<Dismissed>, AppError> {
    let dismissed = dismiss_selection(&state, &request.selection, &request.note, &caller).await?;
    Ok(Json(Dismissed { dismissed }))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct NoteRequest {
    /// Why (required): it is kept with the message and in the audit log.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 2000)]
    note: String,
}

/// Dismisses one message with a note saying why (`dismissed` is 0 when it already was).
#[utoipa::path(post, path = "/api/messages/{id}/dismiss", tag = "messages", params(MessageId),
    request_body = NoteRequest,
    responses((status = 200, description = "Whether it was dismissed now", body = Dismissed)))]
pub(crate) async fn dismiss_one(
    State(state): State<AppState>,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppJson(request): AppJson<NoteRequest>,
) -> Result<Json<Dismissed>, AppError> {
    caller.message(&state, numeric, &id, Role::Operator).await?;
    let selection = SelectionRequest {
        ids: Some(vec![IdValue::Number(numeric)]),
        ..Default::default()
    };
    let dismissed = dismiss_selection(&state, &selection, &request.note, &caller).await?;
    Ok(Json(Dismissed { dismissed }))
}

/// `?before=&limit=`
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// The `next_before` of the page before.
    pub before: Option<String>,
    /// Entries per page: 1 to 500 (default 100).
    pub limit: Option<String>,
}

impl AuditParams {
    pub fn parse(&self) -> Result<(Option<i64>, u32), AppError> {
        let item = ItemParams {
            outcome: None,
            after: self.before.clone(),
            limit: self.limit.clone(),
        };
        let (_, before, limit) = item
            .parse()
            .map_err(|e| AppError::BadRequest(e.to_string().replace("after", "before")))?;
        Ok((before, limit))
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AuditPage {
    entries: Vec<AuditEntry>,
    next_before: Option<String>,
}

/// The audit log, newest first.
#[utoipa::path(get, path = "/api/audit", tag = "admin", params(AuditParams),
    responses((status = 200, description = "A page of entries", body = AuditPage)))]
pub(crate) async fn audit_log(
    State(state): State<AppState>,
    AppQuery(params): AppQuery<AuditParams>,
) -> Result<Json<AuditPage>, AppError> {
    let (before, limit) = params.parse()?;
    let entries = state.archive.audit_log(before, limit).await?;
    let next_before = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(AuditPage {
        entries,
        next_before,
    }))
}

//! The JSON API of bulk actions: replay plans and jobs (create, follow, pause, resume,
//! cancel, per-message outcomes), dismissals, and the audit log.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api::{new_request_key, parse_id, ListParams};
use super::auth::Caller;
use super::{AppError, AppState};
use crate::archive::{
    Actor, AuditEntry, Canary, JobAction, JobItem, JobSpec, ReplayJob, Role, Selection,
    MAX_PAGE_SIZE,
};
use crate::death::ReplayTarget;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/replays", get(list_jobs).post(create_job))
        .route("/replays/{id}", get(get_job))
        .route("/replays/{id}/items", get(job_items))
        .route("/replays/{id}/{action}", post(control_job))
        .route("/messages/dismiss", post(dismiss))
        .route("/messages/{id}/dismiss", post(dismiss_one))
        .route("/audit", get(audit_log))
}

/// Most ids one request may name; larger selections are made with a filter.
pub const MAX_IDS: usize = 100_000;
/// The fastest rate a job may ask for (messages per second).
pub const MAX_RATE: u32 = 1_000_000;
/// The longest canary wait, in seconds.
pub const MAX_CANARY_WAIT_SECS: u32 = 3600;

/// An id as clients send it: the opaque string the API returned (or a number).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum IdValue {
    Text(String),
    Number(i64),
}

/// The messages an action applies to, as asked: `ids`, or a `filter` with the list's fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SelectionRequest {
    pub ids: Option<Vec<IdValue>>,
    pub filter: Option<ListParams>,
    /// Required with an empty filter: yes, the whole archive.
    #[serde(default)]
    pub all: bool,
}

impl SelectionRequest {
    /// The selection, and what it was as JSON (for the job page and the audit log).
    pub fn resolve(&self, business_fields: &[String]) -> Result<(Selection, String), AppError> {
        match (&self.ids, &self.filter) {
            (Some(ids), None) => {
                if ids.is_empty() {
                    return Err(AppError::BadRequest("select at least one message".into()));
                }
                if ids.len() > MAX_IDS {
                    return Err(AppError::BadRequest(format!(
                        "at most {MAX_IDS} ids per request; select by filter instead"
                    )));
                }
                let ids = ids
                    .iter()
                    .map(|id| match id {
                        IdValue::Number(n) => Ok(*n),
                        IdValue::Text(s) => s.trim().parse().map_err(|_| {
                            AppError::BadRequest(format!("id {s:?} is not one this API returned"))
                        }),
                    })
                    .collect::<Result<Vec<i64>, _>>()?;
                let text = if ids.len() <= 20 {
                    json!({ "ids": ids.iter().map(i64::to_string).collect::<Vec<_>>() })
                } else {
                    json!({ "ids": ids.len() })
                };
                Ok((Selection::Ids(ids), text.to_string()))
            }
            (None, Some(filter)) => {
                let filter = filter.filters_only();
                if filter == ListParams::default() && !self.all {
                    return Err(AppError::BadRequest(
                        "an empty filter selects the whole archive: narrow it, or send \"all\": true".into(),
                    ));
                }
                let (parsed, _) = filter.parse(business_fields)?;
                let text = json!({ "filter": filter }).to_string();
                Ok((Selection::Filter(Box::new(parsed)), text))
            }
            _ => Err(AppError::BadRequest(
                "give either \"ids\" or \"filter\" (the list's filters) to select messages".into(),
            )),
        }
    }
}

/// `POST /api/replays`: a plan (`"dry_run": true`) or a job.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JobRequest {
    #[serde(flatten)]
    pub selection: SelectionRequest,
    /// One target for every message; without it each goes to its own replay target.
    pub target: Option<ReplayTarget>,
    pub rate_per_sec: Option<u32>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    /// The same key never makes a second job (safe retries).
    pub request_key: Option<String>,
}

impl JobRequest {
    /// Validates the options; the selection is resolved separately.
    pub fn check(&self) -> Result<(), AppError> {
        if let Some(rate) = self.rate_per_sec {
            if rate == 0 || rate > MAX_RATE {
                return Err(AppError::BadRequest(format!(
                    "rate_per_sec must be between 1 and {MAX_RATE} (leave it out for no limit)"
                )));
            }
        }
        if let Some(c) = &self.canary {
            if c.count == 0 {
                return Err(AppError::BadRequest(
                    "a canary replays at least one message first".into(),
                ));
            }
            if c.wait_secs > MAX_CANARY_WAIT_SECS {
                return Err(AppError::BadRequest(format!(
                    "a canary waits at most {MAX_CANARY_WAIT_SECS} seconds"
                )));
            }
        }
        Ok(())
    }
}

/// Freezes a selection into a plan or job, and wakes the local runner for a job.
pub async fn create(
    state: &AppState,
    request: JobRequest,
    actor: &Actor,
) -> Result<ReplayJob, AppError> {
    request.check()?;
    let (selection, selection_text) = request.selection.resolve(&state.business_fields)?;
    let key = request.request_key.clone().unwrap_or_else(new_request_key);
    super::api::check_request_key(&key)?;
    if let Some(target) = &request.target {
        super::api::check_target(target)?;
    }
    let job = state
        .archive
        .create_job(&JobSpec {
            request_key: &key,
            actor,
            selection: &selection,
            selection_text: &selection_text,
            target: request.target.as_ref(),
            rate_per_sec: request.rate_per_sec,
            include_replayed: request.include_replayed,
            canary: request.canary,
            start: !request.dry_run,
            policy: &state.replay_policy,
        })
        .await?;
    // The same key is the same request: asked again for something else, it is refused
    // rather than answered with a job that is not what was asked.
    let asked: serde_json::Value =
        serde_json::from_str(&selection_text).unwrap_or(serde_json::Value::Null);
    if job.selection != asked || job.target != request.target {
        return Err(AppError::Archive(crate::archive::ArchiveError::Conflict(
            format!(
                "request_key {key:?} was used for replay job {} with another selection or target; \
             use a new key",
                job.id
            ),
        )));
    }
    state.jobs_wake.notify_one();
    Ok(job)
}

/// Starts, pauses, resumes or cancels a job, and wakes the local runner.
pub async fn control(
    state: &AppState,
    id: i64,
    action: &str,
    actor: &Actor,
) -> Result<ReplayJob, AppError> {
    let action = JobAction::parse(action).ok_or_else(|| {
        AppError::NotFound(format!(
            "no job action {action:?}: use start, pause, resume or cancel"
        ))
    })?;
    let job = state.archive.control_job(id, action, actor).await?;
    state.jobs_wake.notify_one();
    Ok(job)
}

/// The job, or a 404 that says which id was not found.
pub async fn find_job(state: &AppState, id: i64) -> Result<ReplayJob, AppError> {
    state
        .archive
        .job(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no replay job with id {id}")))
}

/// The job as a caller with `role` may see it: a search by a masked field is masked.
pub fn shown(state: &AppState, role: Role, mut job: ReplayJob) -> ReplayJob {
    job.selection = state
        .masking
        .selection(role, &job.selection, &state.business_fields);
    job
}

async fn create_job(
    State(state): State<AppState>,
    caller: Caller,
    request: Result<Json<JobRequest>, JsonRejection>,
) -> Result<Json<ReplayJob>, AppError> {
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    Ok(Json(create(&state, request, &caller.actor()).await?))
}

#[derive(Debug, Serialize)]
struct JobList {
    replays: Vec<ReplayJob>,
}

async fn list_jobs(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<JobList>, AppError> {
    let jobs = state.archive.jobs(100).await?;
    Ok(Json(JobList {
        replays: jobs
            .into_iter()
            .map(|job| shown(&state, caller.role, job))
            .collect(),
    }))
}

async fn get_job(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<ReplayJob>, AppError> {
    let (_, id) = parse_id(id)?;
    let job = find_job(&state, id).await?;
    Ok(Json(shown(&state, caller.role, job)))
}

/// `?outcome=published|unroutable|nacked|failed|skipped|cancelled|pending&after=&limit=`
#[derive(Debug, Default, Deserialize)]
pub struct ItemParams {
    pub outcome: Option<String>,
    pub after: Option<String>,
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
        let outcome = super::api::given(&self.outcome)
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
        let after = super::api::given(&self.after)
            .map(|a| {
                a.parse::<i64>()
                    .map_err(|_| AppError::BadRequest(format!("after {a:?} is not a message id")))
            })
            .transpose()?;
        let limit = match super::api::given(&self.limit) {
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

#[derive(Debug, Serialize)]
struct ItemPage {
    items: Vec<JobItem>,
    /// Pass back as `after` for the next page; `None` on the last one.
    next_after: Option<String>,
}

async fn job_items(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<ItemParams>, QueryRejection>,
) -> Result<Json<ItemPage>, AppError> {
    let (_, id) = parse_id(id)?;
    let Query(params) = params.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let (outcome, after, limit) = params.parse()?;
    find_job(&state, id).await?;
    let items = state.archive.job_items(id, outcome, after, limit).await?;
    let next_after = (items.len() == limit as usize)
        .then(|| items.last().map(|i| i.message_id.to_string()))
        .flatten();
    Ok(Json(ItemPage { items, next_after }))
}

async fn control_job(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<ReplayJob>, AppError> {
    let Path((id, action)) =
        path.map_err(|e| AppError::NotFound(format!("no replay job there: {}", e.body_text())))?;
    let id = id
        .parse()
        .map_err(|_| AppError::NotFound(format!("no replay job with id {id:?}")))?;
    Ok(Json(control(&state, id, &action, &caller.actor()).await?))
}

/// `POST /api/messages/dismiss`: `{"ids": [...]}` or `{"filter": {...}}`, and a `note`.
#[derive(Debug, Deserialize)]
pub struct DismissRequest {
    #[serde(flatten)]
    pub selection: SelectionRequest,
    #[serde(default)]
    pub note: String,
}

/// The most a dismissal note may say.
pub const MAX_NOTE_CHARS: usize = 2000;

/// Dismisses the selection with a note (required: it says why, later).
pub async fn dismiss_selection(
    state: &AppState,
    selection: &SelectionRequest,
    note: &str,
    actor: &Actor,
) -> Result<u64, AppError> {
    let note = note.trim();
    if note.is_empty() {
        return Err(AppError::BadRequest(
            "say why in a note: it is what the next person reads".into(),
        ));
    }
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(AppError::BadRequest(format!(
            "a note has at most {MAX_NOTE_CHARS} characters"
        )));
    }
    let (selection, text) = selection.resolve(&state.business_fields)?;
    Ok(state
        .archive
        .dismiss(&selection, &text, note, actor)
        .await?)
}

async fn dismiss(
    State(state): State<AppState>,
    caller: Caller,
    request: Result<Json<DismissRequest>, JsonRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let n = dismiss_selection(&state, &request.selection, &request.note, &caller.actor()).await?;
    Ok(Json(json!({ "dismissed": n })))
}

#[derive(Debug, Deserialize)]
struct NoteRequest {
    #[serde(default)]
    note: String,
}

async fn dismiss_one(
    State(state): State<AppState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
    request: Result<Json<NoteRequest>, JsonRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let (id, numeric) = parse_id(id)?;
    let Json(request) = request.map_err(|e| AppError::BadRequest(e.body_text()))?;
    state
        .archive
        .get_message(numeric)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no archived message with id {id:?}")))?;
    let selection = SelectionRequest {
        ids: Some(vec![IdValue::Number(numeric)]),
        ..Default::default()
    };
    let n = dismiss_selection(&state, &selection, &request.note, &caller.actor()).await?;
    Ok(Json(json!({ "dismissed": n })))
}

/// `?before=&limit=`
#[derive(Debug, Default, Deserialize)]
pub struct AuditParams {
    pub before: Option<String>,
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

#[derive(Debug, Serialize)]
struct AuditPage {
    entries: Vec<AuditEntry>,
    next_before: Option<String>,
}

async fn audit_log(
    State(state): State<AppState>,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> Result<Json<AuditPage>, AppError> {
    let Query(params) = params.map_err(|e| AppError::BadRequest(e.body_text()))?;
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

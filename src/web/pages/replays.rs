//! Replay pages: a selection from the list becomes a plan (or a dismissal), a plan becomes
//! a job, and a job page shows live progress, its controls and every message's outcome.

use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use crate::archive::selection::ListParams;
use crate::archive::{Canary, CopyCounts, JobItem, JobState, ReplayJob};
use crate::message::death::ReplayTarget;
use crate::replay::plan::{human_duration, IdValue, JobRequest, SelectionRequest};
use crate::web::api;
use crate::web::api::replays::{dismiss_selection, find_job, ItemParams, ITEM_OUTCOMES};
use crate::web::auth::Caller;
use crate::web::extract::{AppQuery, JobActionPath, JobId};
use crate::web::html::{filters, flash, is_htmx, render, thousands, utc, PageError};
use crate::web::nav::Nav;
use crate::web::pages::chips::{self, Chip};
use crate::web::{AppError, AppState};

/// The fields of a posted form, repeated names included (the list's ticked `id`s).
pub struct FormPairs(Vec<(String, String)>);

impl FormPairs {
    pub fn parse(body: &[u8]) -> Self {
        FormPairs(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first non-empty value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim())
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn number<T: std::str::FromStr>(
        &self,
        name: &str,
        label: &str,
    ) -> Result<Option<T>, AppError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    AppError::BadRequest(format!("{label} must be a whole number, not {v:?}"))
                })
            })
            .transpose()
    }
}

/// The selection a list form posts: the ticked rows, or every message matching its filters.
fn selection_of(form: &FormPairs, body: &[u8]) -> Result<SelectionRequest, AppError> {
    if form.get("all_matching").is_some() {
        let filter: ListParams = serde_urlencoded::from_bytes(body)
            .map_err(|e| AppError::BadRequest(format!("the list's filters are malformed: {e}")))?;
        if filter.filters_only() == ListParams::default() {
            return Err(AppError::BadRequest(
                "\"all matching\" with no filter would select the whole archive: filter first"
                    .into(),
            ));
        }
        return Ok(SelectionRequest {
            filter: Some(filter),
            ..Default::default()
        });
    }
    let ids = form.all("id");
    if ids.is_empty() {
        return Err(AppError::BadRequest(
            "tick the messages to act on, or \"select all messages matching these filters\"".into(),
        ));
    }
    Ok(SelectionRequest {
        ids: Some(ids.into_iter().map(IdValue::Text).collect()),
        ..Default::default()
    })
}

/// The replay options of the list's selection form.
fn job_request_of(form: &FormPairs, selection: SelectionRequest) -> Result<JobRequest, AppError> {
    let exchange = form.get("target_exchange");
    let routing_key = form.get("target_routing_key");
    let target = (exchange.is_some() || routing_key.is_some()).then(|| ReplayTarget {
        exchange: exchange.unwrap_or_default().to_owned(),
        routing_key: routing_key.unwrap_or_default().to_owned(),
    });
    let canary = match form.number::<u32>("canary_count", "the canary size")? {
        Some(count) if count > 0 => Some(Canary {
            count,
            wait_secs: form
                .number("canary_wait_secs", "the canary wait")?
                .unwrap_or(30),
            max_deaths: form
                .number("canary_max_deaths", "the canary threshold")?
                .unwrap_or(0),
        }),
        _ => None,
    };
    Ok(JobRequest {
        selection,
        target,
        to_first_death_queue: form.get("send_to") == Some("first_death_queue"),
        rate_per_sec: form.number("rate_per_sec", "the rate")?,
        dry_run: true,
        include_replayed: form.get("include_replayed").is_some(),
        canary,
        request_key: form.get("request_key").map(str::to_owned),
    })
}

/// `POST /messages/select`: the list's selection, planned for replay or dismissed.
pub async fn selection_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    body: Bytes,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let form = FormPairs::parse(&body);
    let selection = selection_of(&form, &body).map_err(page_error)?;
    match form.get("action") {
        Some("dismiss") => {
            let note = form.get("note").unwrap_or_default();
            let dismissed = dismiss_selection(&state, &selection, note, &caller)
                .await
                .map_err(page_error)?;
            let said = dismissed_said(dismissed);
            if form.get("return_to") == Some("overview") {
                return Ok(flash(see_other(&headers, "/"), &said));
            }
            let back: ListParams = serde_urlencoded::from_bytes(&body).unwrap_or_default();
            Ok(flash(
                see_other(&headers, &format!("/messages?{}", back.to_query(None))),
                &said,
            ))
        }
        _ => {
            let request = job_request_of(&form, selection).map_err(page_error)?;
            let planned = api::replays::create(&state, request, &caller)
                .await
                .map_err(page_error)?;
            let to = see_other(&headers, &format!("/replays/{}", planned.job.id));
            Ok(match planned.left_out {
                0 => to,
                n => flash(
                    to,
                    &format!(
                        "{} left out: their DLQs are yours to view, not to replay.",
                        crate::support::format::count(n as i64, "message was", "messages were")
                    ),
                ),
            })
        }
    }
}

/// What a dismissal did, said on the page it leads to.
pub fn dismissed_said(n: u64) -> String {
    match n {
        0 => "Nothing dismissed: they were dismissed already.".to_owned(),
        1 => "Dismissed 1 message.".to_owned(),
        n => format!("Dismissed {} messages.", thousands(n as i64)),
    }
}

/// Where a form's answer goes next: a redirect, or for htmx (whose errors are answered in
/// the page the form is on) the page htmx is to open.
pub(crate) fn see_other(headers: &HeaderMap, to: &str) -> Response {
    match is_htmx(headers) {
        true => ([("HX-Redirect", to.to_owned())], "").into_response(),
        false => Redirect::to(to).into_response(),
    }
}

/// What became of the copies a job published, said plainly: did the fix hold?
pub struct CopiesView {
    /// "20 of 50,000 copies died again — the fix did not hold for them."
    pub verdict: String,
    /// `bad`, `pending` or `ok`: how the verdict is shown.
    pub tone: &'static str,
    /// The list of each kind: (what, how many, link).
    pub links: Vec<(&'static str, i64, String)>,
}

impl CopiesView {
    /// `None` for a plan, or a job that published nothing yet.
    pub fn new(job: &ReplayJob, copies: &CopyCounts, settle: std::time::Duration) -> Option<Self> {
        let published = copies.published();
        if job.state == JobState::Planned || published == 0 {
            return None;
        }
        let n = |v: i64| thousands(v);
        let (verdict, tone) = if copies.died_again > 0 {
            let mut v = format!(
                "{} of {} copies died again — the fix did not hold for them.",
                n(copies.died_again),
                n(published)
            );
            if copies.settling > 0 {
                v.push_str(&format!(" {} still settling.", n(copies.settling)));
            }
            (v, "bad")
        } else if copies.settling > 0 {
            (
                format!(
                    "{} of {} copies still settling: none died again so far. Each is resolved {}                      after it was published, unless it dies again first.",
                    n(copies.settling),
                    n(published),
                    human_duration(settle.as_secs_f64())
                ),
                "pending",
            )
        } else if job.state.is_final() && copies.settled > 0 {
            let all = match copies.changed_since {
                0 => format!("All {} settled", n(published)),
                changed => format!(
                    "All {} settled ({} dismissed or replayed again since)",
                    n(published),
                    n(changed)
                ),
            };
            (format!("{all}: none died again — the fix held."), "ok")
        } else {
            (
                format!(
                    "{} of {} copies settled so far: none died again.",
                    n(copies.settled),
                    n(published)
                ),
                "pending",
            )
        };
        let id = job.id;
        let links = [
            (
                "died again (the copies, open)",
                copies.died_again,
                format!("/messages?copies_of_job={id}"),
            ),
            (
                "still settling",
                copies.settling,
                format!("/messages?job={id}&status=replayed"),
            ),
            (
                "settled",
                copies.settled,
                format!("/messages?job={id}&status=settled"),
            ),
        ]
        .into_iter()
        .filter(|(_, count, _)| *count > 0)
        .collect();
        Some(CopiesView {
            verdict,
            tone,
            links,
        })
    }
}

/// One job as its pages show it.
pub struct JobView {
    pub id: i64,
    pub state: &'static str,
    pub detail: String,
    /// What it waits for when no running instance has a broker of its messages (empty: it
    /// waits for nothing of the kind).
    pub waiting: String,
    pub actor: String,
    pub created_at: String,
    /// What it selected, as the list's chips.
    pub selection: Vec<Chip>,
    pub target: String,
    pub rate: String,
    pub estimate: String,
    pub canary: String,
    pub include_replayed: bool,
    pub total: i64,
    pub done: i64,
    /// Percent done, for the progress bar.
    pub percent: i64,
    pub counts: Vec<(&'static str, i64)>,
    /// The bar, split by outcome: (outcome, x, width) in a 1000-wide box.
    pub segments: Vec<(&'static str, i64, i64)>,
    /// Still changing: its page refreshes itself (a cancelled job until its last messages
    /// have their outcome too, a finished one while its copies settle).
    pub live: bool,
    /// How often it refreshes: each second while publishing, slower while copies settle.
    pub every: &'static str,
    /// What became of its copies (a job page's; not on the list of jobs).
    pub copies: Option<CopiesView>,
    /// The heading: a plan, a job running, paused, cancelled or completed.
    pub heading: &'static str,
    /// Why a plan publishes nothing, and what to do about it (empty otherwise).
    pub nothing_to_publish: Vec<String>,
    pub can_pause: bool,
    pub can_resume: bool,
    pub can_cancel: bool,
    pub can_start: bool,
}

impl JobView {
    pub fn new(job: &ReplayJob) -> Self {
        let c = &job.counts;
        let state = job.state;
        JobView {
            id: job.id,
            state: state.as_str(),
            detail: job.detail.clone().unwrap_or_default(),
            waiting: waiting_text(&job.waiting_for_brokers),
            actor: job.actor.clone(),
            created_at: utc(job.created_at),
            selection: chips::of_selection(&job.selection).unwrap_or_else(|| {
                vec![Chip {
                    label: job.selection.to_string(),
                    link: "/messages".into(),
                }]
            }),
            target: match (&job.target, job.to_first_death_queue) {
                (_, true) => {
                    "only the queue each message first died in (default exchange)".to_owned()
                }
                (Some(target), false) => target.label(),
                (None, false) => {
                    "each message's original exchange and routing key (every queue bound to it)"
                        .to_owned()
                }
            },
            rate: job.rate_per_sec.map_or_else(
                || "no limit".to_owned(),
                |r| format!("{} messages/s", thousands(i64::from(r))),
            ),
            estimate: match job.estimated_seconds {
                Some(s) => format!("about {}", human_duration(s)),
                None => "as fast as the broker confirms".to_owned(),
            },
            canary: job.canary.map_or_else(
                || "none".to_owned(),
                |c| {
                    format!(
                        "first {} messages, then wait {} s; pause if more than {} die again",
                        c.count, c.wait_secs, c.max_deaths
                    )
                },
            ),
            include_replayed: job.include_replayed,
            total: job.total,
            done: job.done(),
            percent: if job.total > 0 {
                job.done() * 100 / job.total
            } else {
                100
            },
            counts: vec![
                ("published", c.published),
                ("unroutable", c.unroutable),
                ("nacked", c.nacked),
                ("failed", c.failed),
                ("skipped", c.skipped),
                ("cancelled", c.cancelled),
                ("pending", c.pending),
            ],
            segments: segments(job),
            live: state != JobState::Planned && (!state.is_final() || c.pending > 0),
            every: "1s",
            copies: None,
            heading: match state {
                JobState::Planned => "Replay plan",
                JobState::Queued => "Replay job (queued)",
                JobState::Running => "Replay job (running)",
                JobState::Paused => "Replay job (paused)",
                JobState::Cancelled => "Replay job (cancelled)",
                JobState::Completed => "Replay job (completed)",
            },
            nothing_to_publish: nothing_to_publish(job),
            can_start: state == JobState::Planned && job.plan.to_publish > 0,
            can_pause: matches!(state, JobState::Queued | JobState::Running),
            can_resume: state == JobState::Paused,
            can_cancel: !state.is_final(),
        }
    }
}

impl JobView {
    /// With what became of its copies: the page follows them while they settle.
    pub fn with_copies(
        mut self,
        job: &ReplayJob,
        copies: &CopyCounts,
        settle: std::time::Duration,
    ) -> Self {
        self.copies = CopiesView::new(job, copies, settle);
        if !self.live && copies.settling > 0 {
            self.live = true;
            self.every = "5s";
        }
        self
    }
}

/// What a job says while no running instance has a `--broker` for some of its messages'
/// brokers (none: nothing).
fn waiting_text(brokers: &[String]) -> String {
    let flag = |suffix: &str| {
        brokers
            .iter()
            .map(|b| format!("--broker {b}{suffix}"))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    match brokers {
        [] => String::new(),
        [_] => format!(
            "Waiting for an instance with {}: none of those running can publish to that \
             broker, whose messages this job replays. Start one with {} (it takes the job up \
             by itself), or cancel the job.",
            flag(""),
            flag("=AMQP_URL")
        ),
        _ => format!(
            "Waiting for an instance with {}: none of those running can publish to those \
             brokers, whose messages this job replays. Start one with {} (it takes the job \
             up by itself), or cancel the job.",
            flag(""),
            flag("=AMQP_URL")
        ),
    }
}

/// The progress bar's parts, by outcome, in a 1000-wide box.
fn segments(job: &ReplayJob) -> Vec<(&'static str, i64, i64)> {
    let c = &job.counts;
    let total = job.total.max(1);
    let mut x = 0;
    [
        ("published", c.published),
        ("failed", c.unroutable + c.nacked + c.failed),
        ("skipped", c.skipped),
        ("cancelled", c.cancelled),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| {
        let width = n * 1000 / total;
        let segment = (name, x, width);
        x += width;
        segment
    })
    .collect()
}

/// Why a plan would publish nothing, each with what to do instead.
fn nothing_to_publish(job: &ReplayJob) -> Vec<String> {
    let p = &job.plan;
    if job.state != JobState::Planned || p.to_publish > 0 {
        return Vec::new();
    }
    let mut why = Vec::new();
    if p.messages == 0 {
        why.push("the selection holds no message: change the filters".to_owned());
    }
    if p.no_target > 0 {
        why.push(format!(
            "{} have no known target (no death history): plan again with an exchange and routing key in the Replay options",
            p.no_target
        ));
    }
    if p.already_replayed + p.dismissed > 0 {
        why.push(format!(
            "{} were replayed and {} dismissed before: plan again with \"include already replayed or dismissed\" ticked to replay them anyway",
            p.already_replayed, p.dismissed
        ));
    }
    if p.in_other_jobs > 0 {
        why.push(format!(
            "{} wait in another unfinished job: let it finish, or cancel it",
            p.in_other_jobs
        ));
    }
    if p.not_allowed > 0 {
        why.push(format!(
            "{} go to an exchange --replay-exchange does not allow: plan again with an allowed target",
            p.not_allowed
        ));
    }
    why
}

pub struct ItemRow {
    pub message_id: i64,
    pub target: String,
    pub outcome: String,
    pub detail: String,
}

impl ItemRow {
    fn new(item: &JobItem) -> Self {
        ItemRow {
            message_id: item.message_id,
            target: item
                .target
                .as_ref()
                .map_or_else(|| "—".to_owned(), ReplayTarget::label),
            outcome: item.outcome.clone().unwrap_or_else(|| "pending".into()),
            detail: item.detail.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "replay.html")]
pub struct JobPage {
    pub nav: Nav,
    pub job: JobView,
    pub plan: crate::archive::Plan,
    pub outcome_filter: String,
    pub outcomes: &'static [&'static str],
    pub items: Vec<ItemRow>,
    pub next_link: Option<String>,
    /// This page's own address (with its outcome filter), which it refreshes itself from.
    pub self_link: String,
    /// For a plan, with `--management-url`: the queues each of its targets reaches, in the
    /// order of the plan's targets.
    pub reaches: Vec<String>,
}

/// Plan targets whose reach is looked up at most (each costs two management API calls).
const REACH_LOOKUPS: usize = 20;

/// What each target of a plan reaches, said in words, through its broker's management API
/// (none without any management API, or for a job already started).
async fn reaches(state: &AppState, job: &ReplayJob) -> Vec<String> {
    if state.managements.is_empty() || job.state != JobState::Planned {
        return Vec::new();
    }
    let mut out = Vec::new();
    for t in job.plan.targets.iter().take(REACH_LOOKUPS) {
        let Some(management) = state.managements.get(&t.broker) else {
            out.push(format!(
                "not known (no {} for broker {:?})",
                crate::amqp::managements::management_flag(&t.broker),
                t.broker
            ));
            continue;
        };
        let vhost = crate::message::dlq::named_vhost(&t.vhost, management.vhost());
        out.push(
            match management.reach(vhost, &t.exchange, &t.routing_key).await {
                Ok(found) if found.is_empty() => "no queue: it would be unroutable".to_owned(),
                Ok(found) => found
                    .iter()
                    .map(crate::amqp::routing::Destination::label)
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(e) => format!("not known ({e})"),
            },
        );
    }
    out
}

#[derive(Template)]
#[template(path = "partials/job_progress.html")]
pub struct ProgressPartial {
    pub job: JobView,
}

/// `/replays/{id}`: a plan to start, or a job's progress and outcomes.
pub async fn job_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    JobId { id, .. }: JobId,
    AppQuery(params): AppQuery<ItemParams>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let (outcome, after, limit) = params.parse().map_err(page_error)?;
    let job = find_job(&state, &caller, id).await.map_err(page_error)?;
    let job = api::replays::shown(&state, caller.role, job);
    let items = state
        .archive
        .job_items(id, outcome, after, limit)
        .await
        .map_err(|e| page_error(e.into()))?;
    let next_link = (items.len() == limit as usize)
        .then(|| items.last())
        .flatten()
        .map(|last| {
            format!(
                "/replays/{id}?outcome={}&after={}",
                outcome.unwrap_or_default(),
                last.message_id
            )
        });
    let copies = state
        .job_copies(&job)
        .await
        .map_err(|e| page_error(e.into()))?;
    Ok(render(&JobPage {
        nav: Nav::new(Some(&caller), state.auth.mode),
        job: JobView::new(&job).with_copies(&job, &copies, state.settle),
        plan: job.plan.clone(),
        outcome_filter: outcome.unwrap_or_default().to_owned(),
        outcomes: &ITEM_OUTCOMES,
        items: items.iter().map(ItemRow::new).collect(),
        next_link,
        reaches: reaches(&state, &job).await,
        self_link: match (outcome, after) {
            (None, None) => format!("/replays/{id}"),
            (outcome, after) => format!(
                "/replays/{id}?outcome={}&after={}",
                outcome.unwrap_or_default(),
                after.map(|a| a.to_string()).unwrap_or_default()
            ),
        },
    }))
}

/// `/replays/{id}/progress`: the live part of the job page alone (the page itself refreshes
/// the whole of it; this serves scripts and older pages).
pub async fn progress_partial(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    JobId { id, .. }: JobId,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let job = find_job(&state, &caller, id).await.map_err(page_error)?;
    let copies = state
        .job_copies(&job)
        .await
        .map_err(|e| page_error(e.into()))?;
    Ok(render(&ProgressPartial {
        job: JobView::new(&job).with_copies(&job, &copies, state.settle),
    }))
}

/// `POST /replays/{id}/{start|pause|resume|cancel}` from the job page.
pub async fn control_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    JobActionPath { id, action }: JobActionPath,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    api::replays::control(&state, id, &action, &caller)
        .await
        .map_err(page_error)?;
    // The whole page again: its heading, bar and messages follow the new state.
    Ok(see_other(&headers, &format!("/replays/{id}")))
}

#[derive(Template)]
#[template(path = "replays.html")]
pub struct JobsPage {
    pub nav: Nav,
    pub jobs: Vec<JobView>,
}

/// `/replays`: every job and plan, newest first.
pub async fn list_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
) -> Result<Response, PageError> {
    let _reading = state
        .reads
        .acquire()
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    let jobs: Vec<ReplayJob> = state
        .archive
        .jobs(200)
        .await
        .map_err(|e| PageError::new(e, &headers))?
        .into_iter()
        .filter(|job| caller.sees_job(job))
        .map(|job| api::replays::shown(&state, caller.role, job))
        .collect();
    Ok(render(&JobsPage {
        nav: Nav::new(Some(&caller), state.auth.mode),
        jobs: jobs.iter().map(JobView::new).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_fields_are_all_kept() {
        let form = FormPairs::parse(b"id=3&id=5&note=&rate_per_sec=%2010%20");
        assert_eq!(form.all("id"), ["3", "5"]);
        assert_eq!(form.get("note"), None);
        assert_eq!(
            form.number::<u32>("rate_per_sec", "rate").unwrap(),
            Some(10)
        );
        assert!(form.number::<u32>("id", "x").is_ok());
    }

    #[test]
    fn a_selection_needs_ticks_or_all_matching() {
        let body = b"queue=billing.dlq&action=plan";
        let err = selection_of(&FormPairs::parse(body), body).unwrap_err();
        assert!(err.to_string().contains("tick the messages"), "{err}");
        let body = b"queue=billing.dlq&all_matching=1&id=4";
        let selection = selection_of(&FormPairs::parse(body), body).unwrap();
        assert_eq!(
            selection.filter.unwrap().queue.as_deref(),
            Some("billing.dlq")
        );
    }

    #[test]
    fn plan_options_come_from_the_form() {
        let body = b"id=1&target_exchange=orders&rate_per_sec=50&canary_count=5&include_replayed=1";
        let form = FormPairs::parse(body);
        let request = job_request_of(&form, selection_of(&form, body).unwrap()).unwrap();
        assert_eq!(request.target.unwrap().exchange, "orders");
        assert_eq!(request.rate_per_sec, Some(50));
        assert_eq!(request.canary.unwrap().wait_secs, 30);
        assert!(request.include_replayed && request.dry_run);
        let body = b"id=1&rate_per_sec=fast";
        let form = FormPairs::parse(body);
        let err = job_request_of(&form, selection_of(&form, body).unwrap()).unwrap_err();
        assert!(err.to_string().contains("the rate must be a whole number"));
    }

    #[test]
    fn a_job_waiting_for_brokers_says_which_flag_would_serve_it() {
        assert_eq!(waiting_text(&[]), "");
        let one = waiting_text(&["us".into()]);
        assert!(
            one.starts_with("Waiting for an instance with --broker us:")
                && one.contains("Start one with --broker us=AMQP_URL"),
            "{one}"
        );
        let two = waiting_text(&["eu".into(), "us".into()]);
        assert!(
            two.contains("--broker eu and --broker us:")
                && two.contains("--broker eu=AMQP_URL and --broker us=AMQP_URL"),
            "{two}"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(12.2), "13 s");
        assert_eq!(human_duration(600.0), "10 min");
        assert_eq!(human_duration(9000.0), "2.5 h");
    }
}

//! Replay jobs on SQLite: freezing a selection into items, handing them to a runner under a
//! lease, recording outcomes, all in short transactions.

use sqlx::{QueryBuilder, Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;

use super::rows::ArchiveRow;
use super::sqlite::{from_millis, millis, push_selection};
use super::sqlite_audit::audit;
use super::{
    Actor, ArchiveError, Canary, ChunkLimit, ItemOutcome, JobAction, JobCounts, JobItem, JobSpec,
    JobState, JobStep, OutgoingMessage, Plan, ReplayJob, TargetCount,
};
use crate::amqp::headers::Table;
use crate::death::ReplayTarget;

/// A message handed out this many times without a recorded confirm is given up as failed
/// (it keeps breaking the channel, or the broker keeps going away mid-publish).
pub const MAX_ATTEMPTS: i64 = 3;

/// Skip reasons, as items and plans name them.
pub(super) const NO_TARGET: &str = "no known target";
pub(super) const ALREADY_REPLAYED: &str = "already replayed";
pub(super) const DISMISSED: &str = "dismissed";
pub(super) const IN_OTHER_JOB: &str = "in another unfinished replay job";
pub(super) const NOT_ALLOWED: &str =
    "its target exchange is not one replays may publish to (--replay-exchange)";
/// Items the runner settles itself when it hands out the next step.
pub(super) const REPLAYED_SINCE: &str = "replayed or dismissed after the plan was made";
pub(super) const GIVEN_UP: &str = "handed to the broker 3 times without a confirm";

/// Still to publish (or handed out without a recorded confirm): the partial index's condition.
pub(super) const TODO: &str = "(outcome IS NULL OR outcome = 'sending')";

/// Items still to do in another unfinished job than the item's own (PostgreSQL has its own
/// form, which its planner cannot turn into a scan of a whole index per item).
pub(super) const ELSEWHERE: &str = "EXISTS (SELECT 1 FROM replay_job_items other JOIN replay_jobs j ON j.id = other.job_id \
     WHERE other.message_id = replay_job_items.message_id AND other.job_id != replay_job_items.job_id \
     AND j.state IN ('queued', 'running', 'paused') AND (other.outcome IS NULL OR other.outcome = 'sending'))";

pub(super) const JOB_COLUMNS: &str = "id, state, detail, actor, created_at, started_at, finished_at, selection, \
    target_exchange, target_routing_key, rate_per_sec, include_replayed, canary_count, canary_wait_ms, \
    canary_max_deaths, plan, published, unroutable, nacked, failed, skipped, cancelled, total";

pub(super) fn now() -> i64 {
    millis(OffsetDateTime::now_utc())
}

pub(super) fn corrupt(id: i64) -> impl Fn(serde_json::Error) -> ArchiveError {
    move |e| ArchiveError::Corrupt {
        id,
        reason: e.to_string(),
    }
}

/// A replay job from a row of either backend, selected with [`JOB_COLUMNS`].
pub(super) fn job_from_row<R: ArchiveRow>(row: &R) -> Result<ReplayJob, ArchiveError> {
    let id: i64 = row.column("id")?;
    let state: String = row.column("state")?;
    let state = JobState::parse(&state).ok_or_else(|| ArchiveError::Corrupt {
        id,
        reason: format!("unknown job state {state:?}"),
    })?;
    let target = target_from_row(row)?;
    let canary_count: i64 = row.column("canary_count")?;
    let canary = (canary_count > 0).then(|| -> Result<Canary, sqlx::Error> {
        Ok(Canary {
            count: canary_count as u32,
            wait_secs: (row.column::<i64>("canary_wait_ms")? / 1000) as u32,
            max_deaths: row.column::<i64>("canary_max_deaths")? as u32,
        })
    });
    let plan: Plan = serde_json::from_str(&row.column::<String>("plan")?).map_err(corrupt(id))?;
    let selection =
        serde_json::from_str(&row.column::<String>("selection")?).map_err(corrupt(id))?;
    let total: i64 = row.column("total")?;
    let mut counts = JobCounts {
        published: row.column("published")?,
        unroutable: row.column("unroutable")?,
        nacked: row.column("nacked")?,
        failed: row.column("failed")?,
        skipped: row.column("skipped")?,
        cancelled: row.column("cancelled")?,
        pending: 0,
    };
    counts.pending =
        total - counts.published - counts.problems() - counts.skipped - counts.cancelled;
    let rate_per_sec: Option<i64> = row.column("rate_per_sec")?;
    Ok(ReplayJob {
        id,
        state,
        detail: row.column("detail")?,
        actor: row.column("actor")?,
        created_at: from_millis(row.column("created_at")?),
        started_at: row.column::<Option<i64>>("started_at")?.map(from_millis),
        finished_at: row.column::<Option<i64>>("finished_at")?.map(from_millis),
        selection,
        target,
        rate_per_sec: rate_per_sec.map(|r| r as u32),
        include_replayed: row.column("include_replayed")?,
        canary: canary.transpose()?,
        estimated_seconds: rate_per_sec
            .filter(|r| *r > 0)
            .map(|r| plan.to_publish as f64 / r as f64),
        plan,
        counts,
        total,
    })
}

/// A job's or an item's target: both columns, or none.
fn target_from_row<R: ArchiveRow>(row: &R) -> Result<Option<ReplayTarget>, sqlx::Error> {
    Ok(
        match (
            row.column::<Option<String>>("target_exchange")?,
            row.column::<Option<String>>("target_routing_key")?,
        ) {
            (Some(exchange), Some(routing_key)) => Some(ReplayTarget {
                exchange,
                routing_key,
            }),
            _ => None,
        },
    )
}

/// One job item from a row of either backend (as [`job_items`] selects them).
pub(super) fn item_from_row<R: ArchiveRow>(row: &R) -> Result<JobItem, ArchiveError> {
    Ok(JobItem {
        message_id: row.column("message_id")?,
        target: target_from_row(row)?,
        outcome: row.column("outcome")?,
        detail: row.column("detail")?,
        attempts: row.column("attempts")?,
    })
}

/// A message handed out to publish, from a row of either backend (as [`advance_job`]
/// selects them).
pub(super) fn outgoing_from_row<R: ArchiveRow>(row: &R) -> Result<OutgoingMessage, ArchiveError> {
    let message_id: i64 = row.column("message_id")?;
    let headers: Option<String> = row.column("headers")?;
    let properties = serde_json::from_str(&row.column::<String>("properties")?);
    let headers = headers.map(|h| Table::from_json(&h)).transpose();
    // A record that cannot be read is not published (it would go out changed) and does not
    // stop the job: it ends failed, saying why.
    let (properties, headers, unreadable) = match (properties, headers) {
        (Ok(p), Ok(h)) => (p, h, None),
        (Err(e), _) | (_, Err(e)) => (
            Default::default(),
            None,
            Some(format!(
                "the stored record is unreadable ({e}); nothing was published"
            )),
        ),
    };
    Ok(OutgoingMessage {
        message_id,
        target: ReplayTarget {
            exchange: row.column("target_exchange")?,
            routing_key: row.column("target_routing_key")?,
        },
        properties,
        headers,
        body: row.column("body")?,
        unreadable,
    })
}

/// A plan from the counts of a job's items: still to do by target (`target_exchange`,
/// `target_routing_key`, `n`), and skipped by reason (`detail`, `n`).
pub(super) fn plan_from_rows<R: ArchiveRow>(
    targets: &[R],
    skipped: &[R],
    refused: &[R],
) -> Result<Plan, sqlx::Error> {
    let mut plan = Plan::default();
    let target = |row: &R| -> Result<TargetCount, sqlx::Error> {
        Ok(TargetCount {
            exchange: row.column("target_exchange")?,
            routing_key: row.column("target_routing_key")?,
            messages: row.column("n")?,
        })
    };
    for row in targets {
        let t = target(row)?;
        plan.to_publish += t.messages;
        plan.targets.push(t);
    }
    for row in refused {
        plan.refused_targets.push(target(row)?);
    }
    for row in skipped {
        let n: i64 = row.column("n")?;
        match row.column::<String>("detail")?.as_str() {
            NO_TARGET => plan.no_target = n,
            ALREADY_REPLAYED => plan.already_replayed = n,
            DISMISSED => plan.dismissed = n,
            NOT_ALLOWED => plan.not_allowed = n,
            _ => plan.in_other_jobs = n,
        }
    }
    plan.messages = plan.to_publish
        + plan.no_target
        + plan.already_replayed
        + plan.dismissed
        + plan.in_other_jobs
        + plan.not_allowed;
    Ok(plan)
}

/// The audit action and line of a new job (or plan).
pub(super) fn create_summary(spec: &JobSpec<'_>, id: i64, plan: &Plan) -> (&'static str, String) {
    let target = spec.target.map_or_else(
        || "each message's own target".to_owned(),
        ReplayTarget::label,
    );
    let (action, verb) = if spec.start {
        ("job_start", "started")
    } else {
        ("job_plan", "planned")
    };
    let summary = format!(
        "{verb} replay job {id}: {} of {} selected messages to publish to {target}; selection {}{}{}",
        plan.to_publish,
        plan.messages,
        spec.selection_text,
        spec.rate_per_sec
            .map(|r| format!("; at most {r}/s"))
            .unwrap_or_default(),
        if spec.include_replayed {
            "; including already replayed"
        } else {
            ""
        },
    );
    (action, summary)
}

/// The state `action` takes a job in `state` to, or why it cannot.
pub(super) fn next_state(
    id: i64,
    action: JobAction,
    state: JobState,
) -> Result<JobState, ArchiveError> {
    use JobState::*;
    match (action, state) {
        (JobAction::Start, Planned) => Ok(Queued),
        (JobAction::Pause, Queued | Running) => Ok(Paused),
        (JobAction::Resume, Paused) => Ok(Queued),
        (JobAction::Cancel, Planned | Queued | Running | Paused) => Ok(Cancelled),
        (action, state) => Err(ArchiveError::Conflict(format!(
            "replay job {id} is {}: it cannot {}",
            state.as_str(),
            match action {
                JobAction::Start => "be started (only a plan can)",
                JobAction::Pause => "be paused (only a queued or running job can)",
                JobAction::Resume => "be resumed (only a paused job can)",
                JobAction::Cancel => "be cancelled any more",
            }
        ))),
    }
}

/// The audit line of a user's action on a job, with the job as it is afterwards.
pub(super) fn control_summary(action: JobAction, job: &ReplayJob) -> String {
    format!(
        "{} replay job {} ({} published, {} not published, {} still to do)",
        match action {
            JobAction::Start => "started",
            JobAction::Pause => "paused",
            JobAction::Resume => "resumed",
            JobAction::Cancel => "cancelled",
        },
        job.id,
        job.counts.published,
        job.counts.problems(),
        job.counts.pending,
    )
}

/// The audit line of a job that has nothing left to publish.
pub(super) fn complete_summary(job: &ReplayJob) -> String {
    let c = job.counts;
    format!(
        "replay job {} completed: {} published, {} unroutable, {} nacked, {} failed, {} skipped",
        job.id, c.published, c.unroutable, c.nacked, c.failed, c.skipped
    )
}

/// The audit line of a job its runner paused.
pub(super) fn pause_summary(id: i64, detail: Option<&str>) -> String {
    format!(
        "replay job {id} paused: {}",
        detail.unwrap_or("no reason given")
    )
}

/// A runner's outcomes, as the statements that record them take them: the ids to publish
/// again, and the ids of each final (outcome, detail).
pub(super) type SortedOutcomes<'a> = (
    Vec<i64>,
    std::collections::BTreeMap<(&'a str, Option<&'a str>), Vec<i64>>,
);

pub(super) fn sort_outcomes(outcomes: &[ItemOutcome]) -> SortedOutcomes<'_> {
    // Not confirmed (the connection broke, or never sent): to do again.
    let retry: Vec<i64> = outcomes
        .iter()
        .filter(|o| o.retry)
        .map(|o| o.message_id)
        .collect();
    let mut groups: std::collections::BTreeMap<(&str, Option<&str>), Vec<i64>> = Default::default();
    for o in outcomes.iter().filter(|o| !o.retry) {
        groups
            .entry((o.outcome, o.detail.as_deref()))
            .or_default()
            .push(o.message_id);
    }
    (retry, groups)
}

/// The message status and the job's count column a final outcome goes to.
pub(super) fn outcome_effects(outcome: &str) -> (&'static str, &'static str) {
    let status = if outcome == "published" {
        "replayed"
    } else {
        "replay_failed"
    };
    let column = match outcome {
        "published" => "published",
        "unroutable" => "unroutable",
        "nacked" => "nacked",
        _ => "failed",
    };
    (status, column)
}

/// The next step's candidates, sorted: to send (cut at the byte limit, one at least),
/// replayed or dismissed since the plan (unless the job includes those), and given up.
#[derive(Debug, Default)]
pub(super) struct Step {
    pub send: Vec<i64>,
    pub replayed_since: Vec<i64>,
    pub given_up: Vec<i64>,
}

/// Sorts candidate rows (`message_id`, `attempts`, `body_size`, `status`) into a [`Step`].
pub(super) fn step_from_rows<R: ArchiveRow>(
    candidates: &[R],
    include_replayed: bool,
    max_bytes: u64,
) -> Result<Step, sqlx::Error> {
    let mut bytes = 0u64;
    let mut step = Step::default();
    for row in candidates {
        let message_id: i64 = row.column("message_id")?;
        let size: i64 = row.column("body_size")?;
        if !step.send.is_empty() && bytes + size as u64 > max_bytes {
            break;
        }
        let status: String = row.column("status")?;
        if !include_replayed && (status == "replayed" || status == "dismissed") {
            // Replayed or dismissed since the plan froze the selection.
            step.replayed_since.push(message_id);
        } else if row.column::<i64>("attempts")? >= MAX_ATTEMPTS {
            step.given_up.push(message_id);
        } else {
            bytes += size as u64;
            step.send.push(message_id);
        }
    }
    Ok(step)
}

impl Step {
    /// What is settled without publishing: (ids, outcome, detail, the job's count column).
    pub(super) fn settled(&self) -> [(&[i64], &'static str, &'static str, &'static str); 2] {
        [
            (&self.replayed_since, "skipped", REPLAYED_SINCE, "skipped"),
            (&self.given_up, "failed", GIVEN_UP, "failed"),
        ]
    }
}

pub async fn job(pool: &SqlitePool, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(job_from_row).transpose()
}

async fn job_in(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<ReplayJob, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(ArchiveError::UnknownJob(id))?;
    job_from_row(&row)
}

pub async fn jobs(pool: &SqlitePool, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs ORDER BY id DESC LIMIT ?"
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(job_from_row).collect()
}

/// Recomputes a job's counts from its items (after bulk changes outside the runner).
pub(super) async fn recount(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE replay_jobs SET \
         published = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'published'), \
         unroutable = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'unroutable'), \
         nacked = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'nacked'), \
         failed = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'failed'), \
         skipped = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'skipped'), \
         cancelled = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1 AND outcome = 'cancelled'), \
         total = (SELECT count(*) FROM replay_job_items WHERE job_id = ?1) \
         WHERE id = ?1",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks items still to do as skipped for `reason` where `condition` (on the item) holds.
async fn skip_where(
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
    condition: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "UPDATE replay_job_items SET outcome = 'skipped', detail = ?, finished_at = ? \
         WHERE job_id = ? AND outcome IS NULL AND {condition}"
    ))
    .bind(reason)
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(super) const STATUS_OF_ITEM: &str =
    "(SELECT status FROM messages WHERE messages.id = replay_job_items.message_id)";

pub async fn create_job(pool: &SqlitePool, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let state = if spec.start {
        JobState::Queued
    } else {
        JobState::Planned
    };
    let canary = spec.canary.unwrap_or(Canary {
        count: 0,
        wait_secs: 0,
        max_deaths: 0,
    });
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO replay_jobs (request_key, actor, created_at, selection, target_exchange, target_routing_key, \
         rate_per_sec, include_replayed, canary_count, canary_wait_ms, canary_max_deaths, plan, state) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', ?) ON CONFLICT (request_key) DO NOTHING RETURNING id",
    )
    .bind(spec.request_key)
    .bind(&spec.actor.name)
    .bind(now())
    .bind(spec.selection_text)
    .bind(spec.target.map(|t| &t.exchange))
    .bind(spec.target.map(|t| &t.routing_key))
    .bind(spec.rate_per_sec.map(i64::from))
    .bind(spec.include_replayed)
    .bind(i64::from(canary.count))
    .bind(i64::from(canary.wait_secs) * 1000)
    .bind(i64::from(canary.max_deaths))
    .bind(state.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some(id) = inserted else {
        // The same request again: the job it made the first time.
        let existing: i64 = sqlx::query_scalar("SELECT id FROM replay_jobs WHERE request_key = ?")
            .bind(spec.request_key)
            .fetch_one(&mut *tx)
            .await?;
        let job = job_in(&mut tx, existing).await?;
        tx.commit().await?;
        return Ok(job);
    };

    // Freeze the selection: these items are the job, whatever is archived later.
    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO replay_job_items (job_id, message_id, target_exchange, target_routing_key) SELECT ",
    );
    q.push_bind(id)
        .push(", messages.id, coalesce(")
        .push_bind(spec.target.map(|t| t.exchange.clone()))
        .push(", messages.replay_exchange), coalesce(")
        .push_bind(spec.target.map(|t| t.routing_key.clone()))
        .push(", messages.replay_routing_key)");
    push_selection(&mut q, spec.selection);
    q.build().execute(&mut *tx).await?;

    skip_where(&mut tx, id, "target_exchange IS NULL", NO_TARGET).await?;
    if !spec.include_replayed {
        let replayed = format!("{STATUS_OF_ITEM} = 'replayed'");
        skip_where(&mut tx, id, &replayed, ALREADY_REPLAYED).await?;
        let dismissed = format!("{STATUS_OF_ITEM} = 'dismissed'");
        skip_where(&mut tx, id, &dismissed, DISMISSED).await?;
    }
    if !spec.policy.is_open() {
        let exchanges: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT target_exchange FROM replay_job_items WHERE job_id = ? AND outcome IS NULL",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        for exchange in exchanges.iter().filter(|e| !spec.policy.allows(e)) {
            sqlx::query(
                "UPDATE replay_job_items SET outcome = 'skipped', detail = ?, finished_at = ? \
                 WHERE job_id = ? AND outcome IS NULL AND target_exchange = ?",
            )
            .bind(NOT_ALLOWED)
            .bind(now())
            .bind(id)
            .bind(exchange)
            .execute(&mut *tx)
            .await?;
        }
    }
    let plan = skip_elsewhere_and_plan(&mut tx, id).await?;
    let (action, summary) = create_summary(spec, id, &plan);
    audit(&mut tx, spec.actor, action, Some(id), None, &summary).await?;
    let job = job_in(&mut tx, id).await?;
    tx.commit().await?;
    Ok(job)
}

/// Skips what waits in another unfinished job (so two jobs never publish one message), then
/// stores the plan and the counts. Run when a job is made and again when a plan starts.
async fn skip_elsewhere_and_plan(
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
) -> Result<Plan, sqlx::Error> {
    skip_where(tx, id, ELSEWHERE, IN_OTHER_JOB).await?;
    let plan = plan_of(tx, id).await?;
    sqlx::query("UPDATE replay_jobs SET plan = ? WHERE id = ?")
        .bind(serde_json::to_string(&plan).expect("plans serialize"))
        .bind(id)
        .execute(&mut **tx)
        .await?;
    recount(tx, id).await?;
    Ok(plan)
}

async fn plan_of(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<Plan, sqlx::Error> {
    let targets = sqlx::query(
        "SELECT target_exchange, target_routing_key, count(*) AS n FROM replay_job_items \
         WHERE job_id = ? AND outcome IS NULL GROUP BY 1, 2 ORDER BY n DESC, 1, 2",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let skipped = sqlx::query(
        "SELECT detail, count(*) AS n FROM replay_job_items WHERE job_id = ? AND outcome = 'skipped' GROUP BY 1",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let refused = sqlx::query(
        "SELECT target_exchange, target_routing_key, count(*) AS n FROM replay_job_items \
         WHERE job_id = ? AND outcome = 'skipped' AND detail = ? GROUP BY 1, 2 ORDER BY n DESC, 1, 2",
    )
    .bind(id)
    .bind(NOT_ALLOWED)
    .fetch_all(&mut **tx)
    .await?;
    plan_from_rows(&targets, &skipped, &refused)
}

pub async fn job_items(
    pool: &SqlitePool,
    id: i64,
    outcome: Option<&str>,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<JobItem>, ArchiveError> {
    let mut q = QueryBuilder::<Sqlite>::new(
        "SELECT message_id, target_exchange, target_routing_key, outcome, detail, attempts \
         FROM replay_job_items WHERE job_id = ",
    );
    q.push_bind(id);
    match outcome {
        Some("pending") => {
            q.push(format!(" AND {TODO}"));
        }
        Some(outcome) => {
            q.push(" AND outcome = ").push_bind(outcome);
        }
        None => {}
    }
    if let Some(after) = after {
        q.push(" AND message_id > ").push_bind(after);
    }
    q.push(" ORDER BY message_id LIMIT ")
        .push_bind(i64::from(limit));
    let rows = q.build().fetch_all(pool).await?;
    rows.iter().map(item_from_row).collect()
}

/// Cancels what is still to do. Items handed to a live runner are left to it: it records
/// their confirms, then sees the cancel.
async fn cancel_items(
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
    runner_alive: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE replay_job_items SET outcome = 'cancelled', detail = 'the job was cancelled', finished_at = ? \
         WHERE job_id = ? AND outcome IS NULL",
    )
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    if !runner_alive {
        sqlx::query(
            "UPDATE replay_job_items SET outcome = 'cancelled', finished_at = ?, \
             detail = 'the job was cancelled; its last publish was never confirmed, so it may have been published' \
             WHERE job_id = ? AND outcome = 'sending'",
        )
        .bind(now())
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    recount(tx, id).await
}

pub async fn control_job(
    pool: &SqlitePool,
    id: i64,
    action: JobAction,
    actor: &Actor,
) -> Result<ReplayJob, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let job = job_in(&mut tx, id).await?;
    use JobState::*;
    let next = next_state(id, action, job.state)?;
    let lease_until: Option<i64> =
        sqlx::query_scalar("SELECT lease_until FROM replay_jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    let runner_alive = job.state == Running && lease_until.is_some_and(|t| t > now());
    sqlx::query(
        "UPDATE replay_jobs SET state = ?, detail = NULL, \
         finished_at = CASE WHEN ? THEN ? ELSE finished_at END WHERE id = ?",
    )
    .bind(next.as_str())
    .bind(next == Cancelled)
    .bind(now())
    .bind(id)
    .execute(&mut *tx)
    .await?;
    if next == Cancelled {
        cancel_items(&mut tx, id, runner_alive).await?;
    }
    if action == JobAction::Start {
        // Another job may have taken some of these messages since the plan was made.
        skip_elsewhere_and_plan(&mut tx, id).await?;
    }
    let job = job_in(&mut tx, id).await?;
    let summary = control_summary(action, &job);
    audit(
        &mut tx,
        actor,
        &format!("job_{}", action.as_str()),
        Some(id),
        None,
        &summary,
    )
    .await?;
    tx.commit().await?;
    Ok(job)
}

pub async fn claim_job(
    pool: &SqlitePool,
    owner: &str,
    instance: Option<&str>,
    lease_ms: u64,
    only: Option<i64>,
) -> Result<Option<ReplayJob>, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let now = now();
    // A cancelled job whose runner died before settling what it had handed to the broker.
    let orphans: Vec<i64> = sqlx::query_scalar(&format!(
        "UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL \
         WHERE state = 'cancelled' AND lease_owner IS NOT NULL AND {LEASE_GONE} RETURNING id",
    ))
    .bind(now)
    .bind(instance)
    .bind(owner)
    .fetch_all(&mut *tx)
    .await?;
    for orphan in orphans {
        cancel_items(&mut tx, orphan, false).await?;
    }
    let claimed: Option<i64> = sqlx::query_scalar(&format!(
        "UPDATE replay_jobs SET state = 'running', lease_owner = ?, lease_instance = ?, \
         lease_until = ?, started_at = coalesce(started_at, ?), detail = NULL \
         WHERE id = (SELECT id FROM replay_jobs \
                     WHERE (state = 'queued' OR (state = 'running' AND {LEASE_GONE})) \
                     AND (? IS NULL OR id = ?) ORDER BY id LIMIT 1) \
         RETURNING id",
    ))
    .bind(owner)
    .bind(instance)
    .bind(now + lease_ms as i64)
    .bind(now)
    .bind(now)
    .bind(instance)
    .bind(owner)
    .bind(only)
    .bind(only)
    .fetch_optional(&mut *tx)
    .await?;
    let job = match claimed {
        Some(id) => {
            // Handed out by a runner that is gone: whether they reached the broker is
            // unknown, so they are published again (the documented window).
            sqlx::query(
                "UPDATE replay_job_items SET outcome = NULL WHERE job_id = ? AND outcome = 'sending'",
            )
            .bind(id)
            .execute(&mut *tx)
            .await?;
            Some(job_in(&mut tx, id).await?)
        }
        None => None,
    };
    tx.commit().await?;
    Ok(job)
}

/// Whether a job's lease is free to take, with three parameters: now, the claiming runner's
/// instance name (NULL without one) and its owner name. Free when it ran out, or when
/// another runner of the claimant's instance name holds it: a claimant with a name holds it
/// alone, so that runner was an earlier life of this instance and is gone.
const LEASE_GONE: &str = "(coalesce(lease_until, 0) < ? \
     OR (lease_instance = ? AND lease_owner IS NOT ?))";

/// Renews the lease if `owner` still runs the job; otherwise the job's state now (and the
/// lease is let go).
async fn renew(
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
    owner: &str,
    lease_ms: u64,
) -> Result<Option<JobState>, ArchiveError> {
    let renewed = sqlx::query(
        "UPDATE replay_jobs SET lease_until = ? WHERE id = ? AND lease_owner = ? AND state = 'running'",
    )
    .bind(now() + lease_ms as i64)
    .bind(id)
    .bind(owner)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if renewed == 1 {
        return Ok(None);
    }
    sqlx::query("UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?")
        .bind(id)
        .bind(owner)
        .execute(&mut **tx)
        .await?;
    let state: String = sqlx::query_scalar("SELECT state FROM replay_jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
    Ok(Some(JobState::parse(&state).unwrap_or(JobState::Paused)))
}

/// Records final outcomes: one statement per distinct (outcome, detail), ids as a JSON array.
async fn record_outcomes(
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
    outcomes: &[ItemOutcome],
) -> Result<(), sqlx::Error> {
    let (retry, groups) = sort_outcomes(outcomes);
    if !retry.is_empty() {
        sqlx::query(
            "UPDATE replay_job_items SET outcome = NULL \
             WHERE job_id = ? AND outcome = 'sending' AND message_id IN (SELECT value FROM json_each(?))",
        )
        .bind(id)
        .bind(serde_json::to_string(&retry).expect("ids serialize"))
        .execute(&mut **tx)
        .await?;
    }
    let now = now();
    for ((outcome, detail), ids) in groups {
        let ids_json = serde_json::to_string(&ids).expect("ids serialize");
        let (status, column) = outcome_effects(outcome);
        sqlx::query(
            "UPDATE messages SET status = ? WHERE id IN (SELECT message_id FROM replay_job_items \
             WHERE job_id = ? AND outcome = 'sending' AND message_id IN (SELECT value FROM json_each(?)))",
        )
        .bind(status)
        .bind(id)
        .bind(&ids_json)
        .execute(&mut **tx)
        .await?;
        // Only items still `sending` take the outcome (and count): one a cancel or another
        // runner already settled keeps its first outcome.
        let settled = sqlx::query(
            "UPDATE replay_job_items SET outcome = ?, detail = ?, finished_at = ? \
             WHERE job_id = ? AND outcome = 'sending' AND message_id IN (SELECT value FROM json_each(?))",
        )
        .bind(outcome)
        .bind(detail)
        .bind(now)
        .bind(id)
        .bind(&ids_json)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        sqlx::query(&format!(
            "UPDATE replay_jobs SET {column} = {column} + ? WHERE id = ?"
        ))
        .bind(settled as i64)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

pub async fn advance_job(
    pool: &SqlitePool,
    id: i64,
    owner: &str,
    lease_ms: u64,
    outcomes: &[ItemOutcome],
    next: ChunkLimit,
) -> Result<JobStep, ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    record_outcomes(&mut tx, id, outcomes).await?;
    if let Some(state) = renew(&mut tx, id, owner, lease_ms).await? {
        if state == JobState::Cancelled {
            // Asking for more means a step is still in flight: the runner settles it next,
            // with nothing more to ask for; then what is left is settled as cancelled.
            cancel_items(&mut tx, id, next.messages > 0).await?;
        }
        tx.commit().await?;
        return Ok(JobStep::Stop(state));
    }
    if next.messages == 0 {
        tx.commit().await?;
        return Ok(JobStep::Publish(Vec::new()));
    }
    let job = job_in(&mut tx, id).await?;

    // The next messages still to do, cut at the byte limit (one at least).
    let candidates = sqlx::query(&format!(
        "SELECT i.message_id, i.attempts, m.body_size, m.status FROM replay_job_items i \
         JOIN messages m ON m.id = i.message_id \
         WHERE i.job_id = ? AND {} AND i.outcome IS NULL ORDER BY i.message_id LIMIT ?",
        TODO.replace("outcome", "i.outcome")
    ))
    .bind(id)
    .bind(i64::from(next.messages))
    .fetch_all(&mut *tx)
    .await?;
    if candidates.is_empty() {
        let in_flight: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM replay_job_items WHERE job_id = ? AND outcome = 'sending')",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        if in_flight {
            // The last step is still being published: nothing more to hand out yet.
            tx.commit().await?;
            return Ok(JobStep::Publish(Vec::new()));
        }
        complete(&mut tx, id).await?;
        tx.commit().await?;
        return Ok(JobStep::Stop(JobState::Completed));
    }
    let step = step_from_rows(&candidates, job.include_replayed, next.bytes)?;
    let now = now();
    for (ids, outcome, detail, column) in step.settled() {
        if ids.is_empty() {
            continue;
        }
        sqlx::query(
            "UPDATE replay_job_items SET outcome = ?, detail = ?, finished_at = ? \
             WHERE job_id = ? AND message_id IN (SELECT value FROM json_each(?))",
        )
        .bind(outcome)
        .bind(detail)
        .bind(now)
        .bind(id)
        .bind(serde_json::to_string(ids).expect("ids serialize"))
        .execute(&mut *tx)
        .await?;
        if outcome == "failed" {
            sqlx::query(
                "UPDATE messages SET status = 'replay_failed' WHERE id IN (SELECT value FROM json_each(?))",
            )
            .bind(serde_json::to_string(ids).expect("ids serialize"))
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(&format!(
            "UPDATE replay_jobs SET {column} = {column} + ? WHERE id = ?"
        ))
        .bind(ids.len() as i64)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    let send_json = serde_json::to_string(&step.send).expect("ids serialize");
    sqlx::query(
        "UPDATE replay_job_items SET outcome = 'sending', attempts = attempts + 1 \
         WHERE job_id = ? AND message_id IN (SELECT value FROM json_each(?))",
    )
    .bind(id)
    .bind(&send_json)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(
        "SELECT i.message_id, i.target_exchange, i.target_routing_key, m.properties, m.headers, b.body \
         FROM replay_job_items i JOIN messages m ON m.id = i.message_id \
         JOIN message_bodies b ON b.message_id = i.message_id \
         WHERE i.job_id = ? AND i.message_id IN (SELECT value FROM json_each(?)) ORDER BY i.message_id",
    )
    .bind(id)
    .bind(&send_json)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let messages = rows
        .iter()
        .map(outgoing_from_row)
        .collect::<Result<Vec<_>, ArchiveError>>()?;
    Ok(JobStep::Publish(messages))
}

/// Nothing is left to publish: the job is complete, with its counts in the audit log.
async fn complete(tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<(), ArchiveError> {
    sqlx::query(
        "UPDATE replay_jobs SET state = 'completed', finished_at = ?, lease_owner = NULL, lease_until = NULL, \
         detail = NULL WHERE id = ?",
    )
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    let job = job_in(tx, id).await?;
    let summary = complete_summary(&job);
    audit(
        tx,
        &Actor::system("lazarus"),
        "job_complete",
        Some(id),
        None,
        &summary,
    )
    .await?;
    Ok(())
}

pub async fn release_job(
    pool: &SqlitePool,
    id: i64,
    owner: &str,
    state: JobState,
    detail: Option<&str>,
    canary_done: bool,
) -> Result<(), ArchiveError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let released = sqlx::query(
        "UPDATE replay_jobs SET state = ?, detail = ?, lease_owner = NULL, lease_until = NULL, \
         canary_done = canary_done OR ? WHERE id = ? AND lease_owner = ? AND state = 'running'",
    )
    .bind(state.as_str())
    .bind(detail)
    .bind(canary_done)
    .bind(id)
    .bind(owner)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if released == 1 && state == JobState::Paused {
        let summary = pause_summary(id, detail);
        audit(
            &mut tx,
            &Actor::system("lazarus"),
            "job_pause",
            Some(id),
            None,
            &summary,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub async fn note_job(
    pool: &SqlitePool,
    id: i64,
    owner: &str,
    lease_ms: u64,
    detail: Option<&str>,
    canary_done: bool,
) -> Result<bool, ArchiveError> {
    let noted = sqlx::query(
        "UPDATE replay_jobs SET detail = ?, lease_until = ?, canary_done = canary_done OR ? \
         WHERE id = ? AND lease_owner = ? AND state = 'running'",
    )
    .bind(detail)
    .bind(now() + lease_ms as i64)
    .bind(canary_done)
    .bind(id)
    .bind(owner)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(noted == 1)
}

/// Whether the job's canary has been judged (passed, or paused the job once).
pub async fn canary_done(pool: &SqlitePool, id: i64) -> Result<bool, ArchiveError> {
    Ok(
        sqlx::query_scalar("SELECT canary_done FROM replay_jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .unwrap_or(true),
    )
}

pub async fn canary_deaths(
    pool: &SqlitePool,
    id: i64,
    since: OffsetDateTime,
) -> Result<i64, ArchiveError> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE archived_at >= ? AND replay_of IN \
         (SELECT message_id FROM replay_job_items WHERE job_id = ? AND outcome = 'published')",
    )
    .bind(millis(since))
    .bind(id)
    .fetch_one(pool)
    .await?)
}

//! Replay jobs on PostgreSQL: the SQLite module's statements in PostgreSQL's dialect, with
//! row locks where SQLite relied on `BEGIN IMMEDIATE`, because several instances share the
//! database and run its jobs. Row decoding, plans, summaries and constants come from
//! [`super::sqlite_jobs`]; only the SQL and the locking are here.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, QueryBuilder, Row, Transaction};
use time::OffsetDateTime;

use super::postgres::{lift_bounds, push_selection};
use super::postgres_audit::audit;
use super::sqlite::millis;
use super::sqlite_jobs::{
    complete_summary, control_summary, create_summary, item_from_row, job_from_row, next_state,
    now, outcome_effects, outgoing_from_row, pause_summary, plan_from_rows, sort_outcomes,
    step_from_rows, ALREADY_REPLAYED, DISMISSED, IN_OTHER_JOB, JOB_COLUMNS, NOT_ALLOWED, NO_TARGET,
    TODO,
};
use super::{
    Actor, ArchiveError, Canary, ChunkLimit, ItemOutcome, JobAction, JobItem, JobSpec, JobState,
    JobStep, Plan, ReplayJob,
};

/// The status of an item's message (kept apart from the message, see `message_status`).
const STATUS_OF_ITEM: &str =
    "(SELECT status FROM message_status WHERE message_status.id = replay_job_items.message_id)";

/// Jobs of this many messages or more refresh the items' statistics when they are made.
const ANALYZE_AT: u64 = 10_000;

/// The advisory lock that job selections are frozen and checked under (any fixed number
/// would do; this one spells "lazjob").
const SELECTION_LOCK: i64 = 0x6c61_7a6a_6f62;

/// Items still to do in another unfinished job than the item's own: SQLite's `ELSEWHERE`,
/// with the unfinished jobs' ids computed once up front, so that every probe of another job's
/// items has an index condition on `job_id`. Written as a join, the planner probes by
/// `message_id` alone and picks the partial `replay_job_items_todo` index, whose leading
/// column is `job_id`: each probe then reads the whole index (every item still to do,
/// including the new job's own), which took seconds for a 20,000-message job on a new
/// database and more than a quarter of an hour once a finished job had been analysed.
const ELSEWHERE: &str = "EXISTS (SELECT 1 FROM replay_job_items other \
     WHERE other.job_id = ANY (ARRAY(SELECT id FROM replay_jobs WHERE state IN ('queued', 'running', 'paused'))) \
     AND other.job_id != replay_job_items.job_id AND other.message_id = replay_job_items.message_id \
     AND (other.outcome IS NULL OR other.outcome = 'sending'))";

/// Serializes, across instances, the transactions that decide which messages unfinished jobs
/// hold: two jobs made (or started) at once would each miss the other's uncommitted items and
/// both publish a message. Held until the transaction ends; take it after the job's own row.
pub(super) async fn lock_selections(tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SELECTION_LOCK)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Recomputes a job's counts from its items (after bulk changes outside the runner), in one
/// pass over them.
pub(super) async fn recount(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE replay_jobs SET (published, unroutable, nacked, failed, skipped, cancelled, total) = \
         (SELECT count(*) FILTER (WHERE outcome = 'published'), \
                 count(*) FILTER (WHERE outcome = 'unroutable'), \
                 count(*) FILTER (WHERE outcome = 'nacked'), \
                 count(*) FILTER (WHERE outcome = 'failed'), \
                 count(*) FILTER (WHERE outcome = 'skipped'), \
                 count(*) FILTER (WHERE outcome = 'cancelled'), \
                 count(*) \
          FROM replay_job_items WHERE job_id = $1) \
         WHERE id = $1",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub async fn job(pool: &PgPool, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(job_from_row).transpose()
}

async fn job_in(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<ReplayJob, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(ArchiveError::UnknownJob(id))?;
    job_from_row(&row)
}

/// The job, its row locked until the transaction ends: whatever is decided from it holds
/// while users, its runner and other instances' claims wait.
async fn lock_job(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<ReplayJob, ArchiveError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(ArchiveError::UnknownJob(id))?;
    job_from_row(&row)
}

pub async fn jobs(pool: &PgPool, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
    let rows = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs ORDER BY id DESC LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.iter().map(job_from_row).collect()
}

/// Marks items still to do as skipped for `reason` where `condition` (on the item) holds.
async fn skip_where(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    condition: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "UPDATE replay_job_items SET outcome = 'skipped', detail = $1, finished_at = $2 \
         WHERE job_id = $3 AND outcome IS NULL AND {condition}"
    ))
    .bind(reason)
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub async fn create_job(pool: &PgPool, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
    let mut tx = pool.begin().await?;
    lift_bounds(&mut tx).await?;
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
    // The same key from another instance at once waits here for that insert to commit.
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO replay_jobs (request_key, actor, created_at, selection, target_exchange, target_routing_key, \
         rate_per_sec, include_replayed, canary_count, canary_wait_ms, canary_max_deaths, plan, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, '{}', $12) \
         ON CONFLICT (request_key) DO NOTHING RETURNING id",
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
        let existing: i64 = sqlx::query_scalar("SELECT id FROM replay_jobs WHERE request_key = $1")
            .bind(spec.request_key)
            .fetch_one(&mut *tx)
            .await?;
        let job = job_in(&mut tx, existing).await?;
        tx.commit().await?;
        return Ok(job);
    };

    // Freeze the selection: these items are the job, whatever is archived later. Straight
    // from the selection, so the ids never leave the database. The messages are locked in id
    // order, as purges and dismissals lock them: one being purged meanwhile is waited for
    // and then left out (as if the purge came first), where the foreign key would fail.
    let mut q = QueryBuilder::<Postgres>::new(
        "INSERT INTO replay_job_items (job_id, message_id, target_exchange, target_routing_key) SELECT ",
    );
    q.push_bind(id)
        .push(", messages.id, coalesce(")
        .push_bind(spec.target.map(|t| t.exchange.clone()))
        .push(", messages.replay_exchange), coalesce(")
        .push_bind(spec.target.map(|t| t.routing_key.clone()))
        .push(", messages.replay_routing_key)");
    push_selection(&mut q, spec.selection);
    q.push(" ORDER BY messages.id FOR KEY SHARE OF messages");
    let frozen = q.build().execute(&mut *tx).await?.rows_affected();
    // The planner's statistics must know a large job's items: planned as if the table held
    // none (as autovacuum's last look may say), each step read and sorted every item still to
    // do instead of the next few in index order — half of a 100,000-message job's time
    // (BENCHMARKS.md). A sample, so it costs the same whatever the table's size; our own
    // uncommitted items count. A small job's steps are cheap either way.
    if frozen >= ANALYZE_AT {
        sqlx::query("ANALYZE replay_job_items")
            .execute(&mut *tx)
            .await?;
    }

    skip_where(&mut tx, id, "target_exchange IS NULL", NO_TARGET).await?;
    if !spec.include_replayed {
        let replayed = format!("{STATUS_OF_ITEM} = 'replayed'");
        skip_where(&mut tx, id, &replayed, ALREADY_REPLAYED).await?;
        let dismissed = format!("{STATUS_OF_ITEM} = 'dismissed'");
        skip_where(&mut tx, id, &dismissed, DISMISSED).await?;
    }
    if !spec.policy.is_open() {
        let exchanges: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT target_exchange FROM replay_job_items WHERE job_id = $1 AND outcome IS NULL",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let refused: Vec<&String> = exchanges
            .iter()
            .filter(|e| !spec.policy.allows(e))
            .collect();
        if !refused.is_empty() {
            sqlx::query(
                "UPDATE replay_job_items SET outcome = 'skipped', detail = $1, finished_at = $2 \
                 WHERE job_id = $3 AND outcome IS NULL AND target_exchange = ANY($4)",
            )
            .bind(NOT_ALLOWED)
            .bind(now())
            .bind(id)
            .bind(refused)
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
/// stores the plan and the counts. Run when a job is made and again when a plan starts,
/// under [`lock_selections`] until the transaction commits.
async fn skip_elsewhere_and_plan(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
) -> Result<Plan, sqlx::Error> {
    lock_selections(tx).await?;
    skip_where(tx, id, ELSEWHERE, IN_OTHER_JOB).await?;
    let plan = plan_of(tx, id).await?;
    sqlx::query("UPDATE replay_jobs SET plan = $1 WHERE id = $2")
        .bind(serde_json::to_string(&plan).expect("plans serialize"))
        .bind(id)
        .execute(&mut **tx)
        .await?;
    recount(tx, id).await?;
    Ok(plan)
}

async fn plan_of(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<Plan, sqlx::Error> {
    // Ties in byte order, as SQLite sorts text, whatever the database's collation.
    let targets = sqlx::query(
        "SELECT target_exchange, target_routing_key, count(*) AS n FROM replay_job_items \
         WHERE job_id = $1 AND outcome IS NULL GROUP BY 1, 2 \
         ORDER BY n DESC, target_exchange COLLATE \"C\", target_routing_key COLLATE \"C\"",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let skipped = sqlx::query(
        "SELECT detail, count(*) AS n FROM replay_job_items WHERE job_id = $1 AND outcome = 'skipped' GROUP BY 1",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let refused = sqlx::query(
        "SELECT target_exchange, target_routing_key, count(*) AS n FROM replay_job_items \
         WHERE job_id = $1 AND outcome = 'skipped' AND detail = $2 GROUP BY 1, 2 \
         ORDER BY n DESC, target_exchange COLLATE \"C\", target_routing_key COLLATE \"C\"",
    )
    .bind(id)
    .bind(NOT_ALLOWED)
    .fetch_all(&mut **tx)
    .await?;
    plan_from_rows(&targets, &skipped, &refused)
}

pub async fn job_items(
    pool: &PgPool,
    id: i64,
    outcome: Option<&str>,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<JobItem>, ArchiveError> {
    let mut q = QueryBuilder::<Postgres>::new(
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
/// their confirms, then sees the cancel. The caller holds the job's row.
async fn cancel_items(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    runner_alive: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE replay_job_items SET outcome = 'cancelled', detail = 'the job was cancelled', finished_at = $1 \
         WHERE job_id = $2 AND outcome IS NULL",
    )
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    if !runner_alive {
        sqlx::query(
            "UPDATE replay_job_items SET outcome = 'cancelled', finished_at = $1, \
             detail = 'the job was cancelled; its last publish was never confirmed, so it may have been published' \
             WHERE job_id = $2 AND outcome = 'sending'",
        )
        .bind(now())
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    recount(tx, id).await
}

pub async fn control_job(
    pool: &PgPool,
    id: i64,
    action: JobAction,
    actor: &Actor,
) -> Result<ReplayJob, ArchiveError> {
    let mut tx = pool.begin().await?;
    lift_bounds(&mut tx).await?;
    // Locked before the state is judged: a runner's step or another user's action waits.
    let job = lock_job(&mut tx, id).await?;
    use JobState::*;
    let next = next_state(id, action, job.state)?;
    let lease_until: Option<i64> =
        sqlx::query_scalar("SELECT lease_until FROM replay_jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    let runner_alive = job.state == Running && lease_until.is_some_and(|t| t > now());
    sqlx::query(
        "UPDATE replay_jobs SET state = $1, detail = NULL, \
         finished_at = CASE WHEN $2 THEN $3 ELSE finished_at END WHERE id = $4",
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
    pool: &PgPool,
    owner: &str,
    instance: Option<&str>,
    lease_ms: u64,
    only: Option<i64>,
) -> Result<Option<ReplayJob>, ArchiveError> {
    let mut tx = pool.begin().await?;
    let now = now();
    // A lease ran out, or another runner of the claimant's instance name holds it: the
    // claimant holds the name alone, so that runner was an earlier life of this instance.
    let lease_gone = "(coalesce(lease_until, 0) < $1 \
                      OR (lease_instance = $2 AND lease_owner IS DISTINCT FROM $3))";
    // A cancelled job whose runner died before settling what it had handed to the broker.
    // One another instance is settling (or its runner is stepping) is left to it.
    let orphans: Vec<i64> = sqlx::query_scalar(&format!(
        "UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL \
         WHERE id IN (SELECT id FROM replay_jobs \
                      WHERE state = 'cancelled' AND lease_owner IS NOT NULL AND {lease_gone} \
                      FOR UPDATE SKIP LOCKED) \
         RETURNING id",
    ))
    .bind(now)
    .bind(instance)
    .bind(owner)
    .fetch_all(&mut *tx)
    .await?;
    for orphan in orphans {
        cancel_items(&mut tx, orphan, false).await?;
    }
    // SKIP LOCKED: a job another instance is claiming (or a user is changing) is not waited
    // for, and never claimed twice; the next candidate is taken instead.
    let claimed: Option<i64> = sqlx::query_scalar(&format!(
        "UPDATE replay_jobs SET state = 'running', lease_owner = $3, lease_instance = $2, \
         lease_until = $4, started_at = coalesce(started_at, $1), detail = NULL \
         WHERE id = (SELECT id FROM replay_jobs \
                     WHERE (state = 'queued' OR (state = 'running' AND {lease_gone})) \
                     AND ($5::bigint IS NULL OR id = $5) ORDER BY id LIMIT 1 \
                     FOR UPDATE SKIP LOCKED) \
         RETURNING id",
    ))
    .bind(now)
    .bind(instance)
    .bind(owner)
    .bind(now + lease_ms as i64)
    .bind(only)
    .fetch_optional(&mut *tx)
    .await?;
    let job = match claimed {
        Some(id) => {
            // Handed out by a runner that is gone: whether they reached the broker is
            // unknown, so they are published again (the documented window).
            sqlx::query(
                "UPDATE replay_job_items SET outcome = NULL WHERE job_id = $1 AND outcome = 'sending'",
            )
            .bind(id)
            .execute(&mut *tx)
            .await?;
            rewind(&mut tx, id, 0).await?;
            Some(job_in(&mut tx, id).await?)
        }
        None => None,
    };
    tx.commit().await?;
    Ok(job)
}

/// Renews the lease if `owner` still runs the job; otherwise the job's state now (and the
/// lease is let go).
async fn renew(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    owner: &str,
    lease_ms: u64,
) -> Result<Option<JobState>, ArchiveError> {
    let renewed = sqlx::query(
        "UPDATE replay_jobs SET lease_until = $1 WHERE id = $2 AND lease_owner = $3 AND state = 'running'",
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
    sqlx::query(
        "UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2",
    )
    .bind(id)
    .bind(owner)
    .execute(&mut **tx)
    .await?;
    let state: String = sqlx::query_scalar("SELECT state FROM replay_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
    Ok(Some(JobState::parse(&state).unwrap_or(JobState::Paused)))
}

/// Sets the status of these messages, locking them in id order as dismissals and purges do,
/// so that a runner's step and a dismissal of some of its messages never deadlock.
async fn set_status(
    tx: &mut Transaction<'_, Postgres>,
    status: &str,
    ids: &[i64],
) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE message_status SET status = $1 FROM \
         (SELECT id FROM messages WHERE id = ANY($2) ORDER BY id FOR NO KEY UPDATE) AS chosen \
         WHERE message_status.id = chosen.id",
    )
    .bind(status)
    .bind(ids)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Items from `message_id` on are to do again: the next step looks from there (see
/// [`next_items`]).
async fn rewind(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    message_id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE replay_jobs SET todo_from = LEAST(todo_from, $1) WHERE id = $2")
        .bind(message_id)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The next `limit` items still to do, in id order, with what a step needs of their messages.
///
/// Looked for from the job's `todo_from` on — below it every item is done or in flight — and
/// that mark is moved up to the first found: a step reads the next items only, at the end of a
/// 1,000,000-message job as at its start, whichever index the planner takes (looking from the
/// first item, each step stepped over every one already done: a 100,000-message job took half
/// as long again). The mark is moved back when items are to do again ([`rewind`]); should
/// none be found after it, the whole job is looked through once more before it can be
/// complete. The caller holds the job's row.
async fn next_items(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    limit: u32,
) -> Result<Vec<PgRow>, sqlx::Error> {
    let from: i64 = sqlx::query_scalar("SELECT todo_from FROM replay_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
    let mut rows = Vec::new();
    for from in [from, 0] {
        rows = sqlx::query(
            "SELECT i.message_id, i.attempts, m.body_size, s.status FROM \
             (SELECT message_id, attempts FROM replay_job_items \
              WHERE job_id = $1 AND outcome IS NULL AND message_id >= $2 \
              ORDER BY message_id LIMIT $3) AS i \
             JOIN messages m ON m.id = i.message_id \
             JOIN message_status s ON s.id = i.message_id ORDER BY i.message_id",
        )
        .bind(id)
        .bind(from)
        .bind(i64::from(limit))
        .fetch_all(&mut **tx)
        .await?;
        if !rows.is_empty() || from == 0 {
            break;
        }
    }
    if let Some(first) = rows.first() {
        sqlx::query("UPDATE replay_jobs SET todo_from = $1 WHERE id = $2")
            .bind(first.try_get::<i64, _>("message_id")?)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(rows)
}

/// Records final outcomes: one statement per distinct (outcome, detail), ids as an array.
async fn record_outcomes(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    outcomes: &[ItemOutcome],
) -> Result<(), sqlx::Error> {
    let (retry, groups) = sort_outcomes(outcomes);
    if !retry.is_empty() {
        sqlx::query(
            "UPDATE replay_job_items SET outcome = NULL \
             WHERE job_id = $1 AND outcome = 'sending' AND message_id = ANY($2)",
        )
        .bind(id)
        .bind(&retry)
        .execute(&mut **tx)
        .await?;
        rewind(tx, id, retry.iter().copied().min().unwrap_or(0)).await?;
    }
    let now = now();
    for ((outcome, detail), ids) in groups {
        let (status, column) = outcome_effects(outcome);
        // Only items still `sending` take the outcome (and count, and set their message's
        // status): one a cancel or another runner already settled keeps its first outcome.
        let settled: Vec<i64> = sqlx::query_scalar(
            "UPDATE replay_job_items SET outcome = $1, detail = $2, finished_at = $3 \
             WHERE job_id = $4 AND outcome = 'sending' AND message_id = ANY($5) RETURNING message_id",
        )
        .bind(outcome)
        .bind(detail)
        .bind(now)
        .bind(id)
        .bind(&ids)
        .fetch_all(&mut **tx)
        .await?;
        set_status(tx, status, &settled).await?;
        sqlx::query(&format!(
            "UPDATE replay_jobs SET {column} = {column} + $1 WHERE id = $2"
        ))
        .bind(settled.len() as i64)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

pub async fn advance_job(
    pool: &PgPool,
    id: i64,
    owner: &str,
    lease_ms: u64,
    outcomes: &[ItemOutcome],
    next: ChunkLimit,
) -> Result<JobStep, ArchiveError> {
    let mut tx = pool.begin().await?;
    // The job's row first, as every writer of its items takes it: a cancel, a claim by another
    // instance or a user's pause waits for this step (and this step for them), never half of it.
    sqlx::query("SELECT id FROM replay_jobs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
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
    let candidates = next_items(&mut tx, id, next.messages).await?;
    if candidates.is_empty() {
        let in_flight: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM replay_job_items WHERE job_id = $1 AND outcome = 'sending')",
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
            "UPDATE replay_job_items SET outcome = $1, detail = $2, finished_at = $3 \
             WHERE job_id = $4 AND message_id = ANY($5)",
        )
        .bind(outcome)
        .bind(detail)
        .bind(now)
        .bind(id)
        .bind(ids)
        .execute(&mut *tx)
        .await?;
        if outcome == "failed" {
            set_status(&mut tx, "replay_failed", ids).await?;
        }
        sqlx::query(&format!(
            "UPDATE replay_jobs SET {column} = {column} + $1 WHERE id = $2"
        ))
        .bind(ids.len() as i64)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "UPDATE replay_job_items SET outcome = 'sending', attempts = attempts + 1 \
         WHERE job_id = $1 AND message_id = ANY($2)",
    )
    .bind(id)
    .bind(&step.send)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(
        "SELECT i.message_id, i.target_exchange, i.target_routing_key, m.properties, m.headers, b.body \
         FROM replay_job_items i JOIN messages m ON m.id = i.message_id \
         JOIN message_bodies b ON b.message_id = i.message_id \
         WHERE i.job_id = $1 AND i.message_id = ANY($2) ORDER BY i.message_id",
    )
    .bind(id)
    .bind(&step.send)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let messages = rows
        .iter()
        .map(outgoing_from_row)
        .collect::<Result<Vec<_>, ArchiveError>>()?;
    Ok(JobStep::Publish(messages))
}

/// Nothing is left to publish: the job is complete, with its counts in the audit log. The
/// caller holds the job's row.
async fn complete(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<(), ArchiveError> {
    sqlx::query(
        "UPDATE replay_jobs SET state = 'completed', finished_at = $1, lease_owner = NULL, lease_until = NULL, \
         detail = NULL WHERE id = $2",
    )
    .bind(now())
    .bind(id)
    .execute(&mut **tx)
    .await?;
    let job = job_in(tx, id).await?;
    audit(
        tx,
        &Actor::system("lazarus"),
        "job_complete",
        Some(id),
        None,
        &complete_summary(&job),
    )
    .await?;
    Ok(())
}

pub async fn release_job(
    pool: &PgPool,
    id: i64,
    owner: &str,
    state: JobState,
    detail: Option<&str>,
    canary_done: bool,
) -> Result<(), ArchiveError> {
    let mut tx = pool.begin().await?;
    // One statement decides and writes (the row is locked and its condition checked again
    // if another transaction changed it meanwhile).
    let released = sqlx::query(
        "UPDATE replay_jobs SET state = $1, detail = $2, lease_owner = NULL, lease_until = NULL, \
         canary_done = canary_done OR $3 WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
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
        audit(
            &mut tx,
            &Actor::system("lazarus"),
            "job_pause",
            Some(id),
            None,
            &pause_summary(id, detail),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub async fn note_job(
    pool: &PgPool,
    id: i64,
    owner: &str,
    lease_ms: u64,
    detail: Option<&str>,
    canary_done: bool,
) -> Result<bool, ArchiveError> {
    let noted = sqlx::query(
        "UPDATE replay_jobs SET detail = $1, lease_until = $2, canary_done = canary_done OR $3 \
         WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
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
pub async fn canary_done(pool: &PgPool, id: i64) -> Result<bool, ArchiveError> {
    Ok(
        sqlx::query_scalar("SELECT canary_done FROM replay_jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .unwrap_or(true),
    )
}

pub async fn canary_deaths(
    pool: &PgPool,
    id: i64,
    since: OffsetDateTime,
) -> Result<i64, ArchiveError> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE archived_at >= $1 AND replay_of IN \
         (SELECT message_id FROM replay_job_items WHERE job_id = $2 AND outcome = 'published')",
    )
    .bind(millis(since))
    .bind(id)
    .fetch_one(pool)
    .await?)
}

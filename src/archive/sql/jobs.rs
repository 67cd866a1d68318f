//! Replay jobs as users make and control them, one algorithm for both backends: a selection
//! frozen into items in one transaction (the backend finds the messages, see
//! [`SqlArchive::freeze_selection`]), its plan, start, pause, resume and cancel. Where
//! PostgreSQL's instances share the database, the job's row is locked before anything is
//! decided from it; SQLite's `BEGIN IMMEDIATE` holds the whole database instead.

use async_trait::async_trait;

use super::columns::{JOB_COLUMNS, TODO};
use super::rows::{item_from_row, job_from_row, plan_from_rows};
use super::{args, audit, now, ArchiveRow, Arg, Conn, Dialect, Row, SqlArchive};
use crate::archive::audit_text::{control_summary, create_summary};
use crate::archive::jobs::{
    next_state, plan_brokers, ALREADY_REPLAYED, DISMISSED, IN_OTHER_JOB, NOT_ALLOWED, NO_TARGET,
};
use crate::archive::{
    Actor, ArchiveError, Canary, CopyCounts, JobAction, JobItem, JobSpec, JobState, JobStore,
    MessageStatus, Plan, ReplayJob,
};

/// Jobs of this many messages or more refresh PostgreSQL's statistics of the items when they
/// are made. Planned as if the table held none (as autovacuum's last look may say), each step
/// read and sorted every item still to do instead of the next few in index order — half of a
/// 100,000-message job's time (docs/lab-notebook.md). A sample, so it costs the same whatever the
/// table's size; a small job's steps are cheap either way.
const ANALYZE_AT: u64 = 10_000;

/// Items still to do in another unfinished job than the item's own.
fn elsewhere(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "EXISTS (SELECT 1 FROM replay_job_items other JOIN replay_jobs j ON j.id = other.job_id \
             WHERE other.message_id = replay_job_items.message_id AND other.job_id != replay_job_items.job_id \
             AND j.state IN ('queued', 'running', 'paused') AND (other.outcome IS NULL OR other.outcome = 'sending'))"
        }
        // The unfinished jobs' ids computed once up front, so that every probe of another
        // job's items has an index condition on `job_id`. Written as a join, PostgreSQL's
        // planner probes by `message_id` alone and picks the partial `replay_job_items_todo`
        // index, whose leading column is `job_id`: each probe then reads the whole index
        // (every item still to do, including the new job's own), which took seconds for a
        // 20,000-message job on a new database and more than a quarter of an hour once a
        // finished job had been analysed.
        Dialect::Postgres => {
            "EXISTS (SELECT 1 FROM replay_job_items other \
             WHERE other.job_id = ANY (ARRAY(SELECT id FROM replay_jobs WHERE state IN ('queued', 'running', 'paused'))) \
             AND other.job_id != replay_job_items.job_id AND other.message_id = replay_job_items.message_id \
             AND (other.outcome IS NULL OR other.outcome = 'sending'))"
        }
    }
}

/// The status of an item's message.
fn status_of_item(dialect: Dialect) -> String {
    let table = dialect.status_table();
    format!("(SELECT status FROM {table} WHERE {table}.id = replay_job_items.message_id)")
}

/// The job as it is now (within the transaction).
pub(super) async fn job_in(conn: &mut Conn<'_>, id: i64) -> Result<ReplayJob, ArchiveError> {
    let row = conn
        .fetch_optional(
            &format!("SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1"),
            args![id],
        )
        .await?
        .ok_or(ArchiveError::UnknownJob(id))?;
    let mut job = job_from_row(&row)?;
    let waiting = conn.fetch_all(WAITING_FOR, args![now(), Some(id)]).await?;
    waiting_for(std::slice::from_mut(&mut job), &waiting)?;
    Ok(job)
}

/// Of each queued or running job (`$2`: this one; NULL: every one), the brokers its plan
/// publishes to (but the default) that no live runner can publish to (`$1`: now). A runner
/// is live while its word lasts (`live_until`, renewed as it looks for jobs) and while it
/// holds a job's lease (it does not look meanwhile).
const WAITING_FOR: &str = "SELECT b.job_id, b.broker FROM replay_job_brokers b \
     JOIN replay_jobs j ON j.id = b.job_id \
     WHERE j.state IN ('queued', 'running') AND (CAST($2 AS BIGINT) IS NULL OR b.job_id = $2) \
     AND NOT EXISTS (SELECT 1 FROM replay_runners r WHERE r.broker = b.broker \
         AND (r.live_until > $1 OR EXISTS (SELECT 1 FROM replay_jobs l \
              WHERE l.lease_owner = r.owner AND l.state = 'running' AND l.lease_until > $1))) \
     ORDER BY b.job_id, b.broker";

/// Gives each of `jobs` the brokers [`WAITING_FOR`]'s `rows` say it waits for.
fn waiting_for(jobs: &mut [ReplayJob], rows: &[Row]) -> Result<(), ArchiveError> {
    for row in rows {
        let id: i64 = row.column("job_id")?;
        if let Some(job) = jobs.iter_mut().find(|j| j.id == id) {
            job.waiting_for_brokers.push(row.column("broker")?);
        }
    }
    Ok(())
}

/// Records the brokers other than the default that `plan` publishes to: only a runner that
/// can publish to each claims the job ([`crate::archive::JobLease::claim_job`]).
async fn record_brokers(conn: &mut Conn<'_>, id: i64, plan: &Plan) -> Result<(), sqlx::Error> {
    conn.execute(
        "DELETE FROM replay_job_brokers WHERE job_id = $1",
        args![id],
    )
    .await?;
    for broker in plan_brokers(plan) {
        conn.execute(
            "INSERT INTO replay_job_brokers (job_id, broker) VALUES ($1, $2)",
            args![id, broker],
        )
        .await?;
    }
    Ok(())
}

/// The job, its row locked until the transaction ends on PostgreSQL: whatever is decided
/// from it holds while users, its runner and other instances' claims wait.
async fn lock_job(conn: &mut Conn<'_>, id: i64) -> Result<ReplayJob, ArchiveError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1{}",
        conn.dialect().for_update()
    );
    let row = conn
        .fetch_optional(&sql, args![id])
        .await?
        .ok_or(ArchiveError::UnknownJob(id))?;
    job_from_row(&row)
}

/// Recomputes a job's counts from its items (after bulk changes outside the runner), in one
/// pass over them.
pub async fn recount(conn: &mut Conn<'_>, id: i64) -> Result<(), sqlx::Error> {
    conn.execute(
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
        args![id],
    )
    .await?;
    Ok(())
}

/// Marks items still to do as skipped for `reason` where `condition` (on the item) holds.
async fn skip_where(
    conn: &mut Conn<'_>,
    id: i64,
    condition: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    conn.execute(
        &format!(
            "UPDATE replay_job_items SET outcome = 'skipped', detail = $1, finished_at = $2 \
             WHERE job_id = $3 AND outcome IS NULL AND {condition}"
        ),
        args![reason, now(), id],
    )
    .await?;
    Ok(())
}

/// Skips what waits in another unfinished job (so two jobs never publish one message), then
/// stores the plan and the counts. Run when a job is made and again when a plan starts,
/// under [`Conn::lock_selections`] until the transaction commits.
async fn skip_elsewhere_and_plan(conn: &mut Conn<'_>, id: i64) -> Result<Plan, sqlx::Error> {
    conn.lock_selections().await?;
    let elsewhere = elsewhere(conn.dialect());
    skip_where(conn, id, elsewhere, IN_OTHER_JOB).await?;
    let plan = plan_of(conn, id).await?;
    conn.execute(
        "UPDATE replay_jobs SET plan = $1 WHERE id = $2",
        args![
            serde_json::to_string(&plan)
                .expect("plans serialize")
                .as_str(),
            id
        ],
    )
    .await?;
    recount(conn, id).await?;
    record_brokers(conn, id, &plan).await?;
    Ok(plan)
}

async fn plan_of(conn: &mut Conn<'_>, id: i64) -> Result<Plan, sqlx::Error> {
    let d = conn.dialect();
    // Ties in byte order, whatever the database's collation.
    let order = format!(
        "n DESC, {}, {}, {}, {}",
        d.byte_order("coalesce(m.broker, 'default')"),
        d.byte_order("coalesce(m.vhost, '')"),
        d.byte_order("target_exchange"),
        d.byte_order("target_routing_key")
    );
    // Each target is in the vhost of its messages (a message retention took: the home one).
    // A target its messages' framework convention gave is said with the header(s) it came
    // from, one row per source.
    let targets_of = "SELECT coalesce(m.vhost, '') AS vhost, \
                      coalesce(m.broker, 'default') AS broker, i.target_exchange, \
                      i.target_routing_key, \
                      CASE WHEN i.target_exchange = m.replay_exchange \
                      AND i.target_routing_key = m.replay_routing_key \
                      AND m.replay_target_from IS NOT NULL THEN m.convention END AS convention, \
                      CASE WHEN i.target_exchange = m.replay_exchange \
                      AND i.target_routing_key = m.replay_routing_key \
                      THEN m.replay_target_from END AS target_from, \
                      count(*) AS n FROM replay_job_items i \
                      LEFT JOIN messages m ON m.id = i.message_id WHERE i.job_id = $1";
    let order = format!("{order}, 5, 6");
    let targets = conn
        .fetch_all(
            &format!(
                "{targets_of} AND i.outcome IS NULL GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY {order}"
            ),
            args![id],
        )
        .await?;
    let skipped = conn
        .fetch_all(
            "SELECT detail, count(*) AS n FROM replay_job_items \
             WHERE job_id = $1 AND outcome = 'skipped' GROUP BY 1",
            args![id],
        )
        .await?;
    let refused = conn
        .fetch_all(
            &format!(
                "{targets_of} AND i.outcome = 'skipped' AND i.detail = $2 GROUP BY 1, 2, 3, 4, 5, 6 \
                 ORDER BY {order}"
            ),
            args![id, NOT_ALLOWED],
        )
        .await?;
    plan_from_rows(&targets, &skipped, &refused)
}

/// Cancels what is still to do. Items handed to a live runner are left to it: it records
/// their confirms, then sees the cancel. The caller holds the job's row.
pub(super) async fn cancel_items(
    conn: &mut Conn<'_>,
    id: i64,
    runner_alive: bool,
) -> Result<(), sqlx::Error> {
    conn.execute(
        "UPDATE replay_job_items SET outcome = 'cancelled', detail = 'the job was cancelled', \
         finished_at = $1 WHERE job_id = $2 AND outcome IS NULL",
        args![now(), id],
    )
    .await?;
    if !runner_alive {
        conn.execute(
            "UPDATE replay_job_items SET outcome = 'cancelled', finished_at = $1, \
             detail = 'the job was cancelled; its last publish was never confirmed, so it may have been published' \
             WHERE job_id = $2 AND outcome = 'sending'",
            args![now(), id],
        )
        .await?;
    }
    recount(conn, id).await
}

#[async_trait]
impl<T: SqlArchive> JobStore for T {
    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let d = conn.dialect();
        conn.lift_bounds().await?;
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
        let inserted = conn
            .fetch_optional(
                "INSERT INTO replay_jobs (request_key, actor, created_at, selection, target_exchange, \
                 target_routing_key, rate_per_sec, include_replayed, canary_count, canary_wait_ms, \
                 canary_max_deaths, plan, state, to_first_death_queue) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, '{}', $12, $13) \
                 ON CONFLICT (request_key) DO NOTHING RETURNING id",
                args![
                    spec.request_key,
                    &spec.actor.name,
                    now(),
                    spec.selection_text,
                    spec.target.map(|t| t.exchange.as_str()),
                    spec.target.map(|t| t.routing_key.as_str()),
                    spec.rate_per_sec.map(i64::from),
                    spec.include_replayed,
                    i64::from(canary.count),
                    i64::from(canary.wait_secs) * 1000,
                    i64::from(canary.max_deaths),
                    state.as_str(),
                    spec.to_first_death_queue,
                ],
            )
            .await?;
        let Some(inserted) = inserted else {
            // The same request again: the job it made the first time.
            let existing = conn
                .fetch_one(
                    "SELECT id FROM replay_jobs WHERE request_key = $1",
                    args![spec.request_key],
                )
                .await?;
            let job = job_in(&mut conn, super::ArchiveRow::column(&existing, "id")?).await?;
            tx.commit().await?;
            return Ok(job);
        };
        let id: i64 = super::ArchiveRow::column(&inserted, "id")?;

        // Freeze the selection: these items are the job, whatever is archived later.
        let frozen = self.freeze_selection(&mut conn, id, spec).await?;
        if d == Dialect::Postgres && frozen >= ANALYZE_AT {
            conn.execute("ANALYZE replay_job_items", args![]).await?;
        }
        skip_where(&mut conn, id, "target_exchange IS NULL", NO_TARGET).await?;
        if !spec.include_replayed {
            let status = status_of_item(d);
            skip_where(
                &mut conn,
                id,
                &format!("{status} IN ('replayed', 'settled', 'died_again')"),
                ALREADY_REPLAYED,
            )
            .await?;
            skip_where(&mut conn, id, &format!("{status} = 'dismissed'"), DISMISSED).await?;
        }
        if !spec.policy.is_open() {
            let rows = conn
                .fetch_all(
                    "SELECT DISTINCT target_exchange FROM replay_job_items \
                     WHERE job_id = $1 AND outcome IS NULL",
                    args![id],
                )
                .await?;
            for row in rows {
                let exchange: String = super::ArchiveRow::column(&row, "target_exchange")?;
                if spec.policy.allows(&exchange) {
                    continue;
                }
                conn.execute(
                    "UPDATE replay_job_items SET outcome = 'skipped', detail = $1, finished_at = $2 \
                     WHERE job_id = $3 AND outcome IS NULL AND target_exchange = $4",
                    args![NOT_ALLOWED, now(), id, exchange.as_str()],
                )
                .await?;
            }
        }
        let plan = skip_elsewhere_and_plan(&mut conn, id).await?;
        let (action, summary) = create_summary(spec, id, &plan);
        audit(&mut conn, spec.actor, action, Some(id), None, &summary).await?;
        let job = job_in(&mut conn, id).await?;
        tx.commit().await?;
        Ok(job)
    }

    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                &format!("SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = $1"),
                args![id],
            )
            .await?;
        let Some(mut job) = row.as_ref().map(job_from_row).transpose()? else {
            return Ok(None);
        };
        let waiting = self
            .db()
            .fetch_all(WAITING_FOR, args![now(), Some(id)])
            .await?;
        waiting_for(std::slice::from_mut(&mut job), &waiting)?;
        Ok(Some(job))
    }

    async fn job_copies(&self, id: i64) -> Result<CopyCounts, ArchiveError> {
        let db = self.db();
        let table = db.dialect().status_table();
        let rows = db
            .fetch_all(
                &format!(
                    "SELECT s.status, count(*) AS n FROM replay_job_items i \
                     JOIN {table} s ON s.id = i.message_id \
                     WHERE i.job_id = $1 AND i.outcome = 'published' GROUP BY s.status"
                ),
                args![id],
            )
            .await?;
        let mut counts = CopyCounts::default();
        for row in &rows {
            let status: String = super::ArchiveRow::column(row, "status")?;
            let n: i64 = super::ArchiveRow::column(row, "n")?;
            match MessageStatus::parse(&status) {
                Some(MessageStatus::Replayed) => counts.settling += n,
                Some(MessageStatus::Settled) => counts.settled += n,
                Some(MessageStatus::DiedAgain) => counts.died_again += n,
                _ => counts.changed_since += n,
            }
        }
        Ok(counts)
    }

    async fn jobs(&self, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!("SELECT {JOB_COLUMNS} FROM replay_jobs ORDER BY id DESC LIMIT $1"),
                args![i64::from(limit)],
            )
            .await?;
        let mut jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let waiting = self
            .db()
            .fetch_all(WAITING_FOR, args![now(), None::<i64>])
            .await?;
        waiting_for(&mut jobs, &waiting)?;
        Ok(jobs)
    }

    async fn job_items(
        &self,
        id: i64,
        outcome: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobItem>, ArchiveError> {
        let mut sql = String::from(
            "SELECT message_id, target_exchange, target_routing_key, outcome, detail, attempts \
             FROM replay_job_items WHERE job_id = $1",
        );
        let mut args: Vec<Arg<'_>> = vec![id.into()];
        match outcome {
            Some("pending") => sql.push_str(&format!(" AND {TODO}")),
            Some(outcome) => {
                args.push(outcome.into());
                sql.push_str(&format!(" AND outcome = ${}", args.len()));
            }
            None => {}
        }
        if let Some(after) = after {
            args.push(after.into());
            sql.push_str(&format!(" AND message_id > ${}", args.len()));
        }
        args.push(i64::from(limit).into());
        sql.push_str(&format!(" ORDER BY message_id LIMIT ${}", args.len()));
        let rows = self.db().fetch_all(&sql, &args).await?;
        rows.iter().map(item_from_row).collect()
    }

    async fn control_job(
        &self,
        id: i64,
        action: JobAction,
        actor: &Actor,
    ) -> Result<ReplayJob, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        conn.lift_bounds().await?;
        // Locked before the state is judged: a runner's step or another user's action waits.
        let job = lock_job(&mut conn, id).await?;
        let next = next_state(id, action, job.state)?;
        let lease = conn
            .fetch_one(
                "SELECT lease_until FROM replay_jobs WHERE id = $1",
                args![id],
            )
            .await?;
        let lease_until: Option<i64> = super::ArchiveRow::column(&lease, "lease_until")?;
        let runner_alive = job.state == JobState::Running && lease_until.is_some_and(|t| t > now());
        let cancelled = next == JobState::Cancelled;
        conn.execute(
            "UPDATE replay_jobs SET state = $1, detail = NULL, \
             finished_at = CASE WHEN $2 THEN $3 ELSE finished_at END WHERE id = $4",
            args![next.as_str(), cancelled, now(), id],
        )
        .await?;
        if cancelled {
            cancel_items(&mut conn, id, runner_alive).await?;
        }
        match action {
            // Another job may have taken some of these messages since the plan was made.
            JobAction::Start => {
                skip_elsewhere_and_plan(&mut conn, id).await?;
            }
            // Its brokers again: a job carried from another archive (`lazarus migrate`)
            // comes without them.
            JobAction::Resume => record_brokers(&mut conn, id, &job.plan).await?,
            JobAction::Pause | JobAction::Cancel => {}
        }
        let job = job_in(&mut conn, id).await?;
        let summary = control_summary(action, &job);
        let action = format!("job_{}", action.as_str());
        audit(&mut conn, actor, &action, Some(id), None, &summary).await?;
        tx.commit().await?;
        Ok(job)
    }
}

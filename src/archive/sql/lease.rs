//! What only the job runner does, one algorithm for both backends: claim a job under a lease
//! (passing over jobs another PostgreSQL instance is claiming), record a step's outcomes and
//! hand out the next step in one transaction, let the job go.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::bodies::CHUNK_BYTES;
use super::jobs::{cancel_items, job_in};
use super::rows::{outgoing_from_row, step_from_rows};
use super::{args, audit, lifecycle, millis, now, ArchiveRow, Conn, Row, SqlArchive};
use crate::archive::audit_text::{complete_summary, pause_summary};
use crate::archive::jobs::{count_column, sort_outcomes, Settled};
use crate::archive::{
    Actor, ArchiveError, ChunkLimit, ItemOutcome, JobLease, JobState, JobStep, Outcome, ReplayJob,
};

/// Whether a job's lease is free to take, with `$1` now, `$2` the claiming runner's instance
/// name (NULL without one) and `$3` its owner name. Free when it ran out, or when another
/// runner of the claimant's instance name holds it: a claimant with a name holds it alone, so
/// that runner was an earlier life of this instance and is gone.
const LEASE_GONE: &str = "(coalesce(lease_until, 0) < $1 \
     OR (lease_instance = $2 AND lease_owner IS DISTINCT FROM $3))";

/// Whether the claiming runner (`$3`) can publish to every broker the job's plan does (but the
/// default, which every runner can): it said so ([`JobLease::announce_runner`]). A runner
/// without them passes the job over, leaving it to one with them, instead of claiming it
/// only to pause it.
const HAS_ITS_BROKERS: &str = "NOT EXISTS (SELECT 1 FROM replay_job_brokers b \
     WHERE b.job_id = replay_jobs.id AND NOT EXISTS (SELECT 1 FROM replay_runners r \
     WHERE r.owner = $3 AND r.broker = b.broker))";

/// How long a runner's word is remembered once it ran out: an hour, then it is deleted
/// (unless that runner holds a job's lease).
const FORGET_RUNNERS_MS: i64 = 3_600_000;

/// Renews the lease if `owner` still runs the job; otherwise the job's state now.
async fn renew(
    conn: &mut Conn<'_>,
    id: i64,
    owner: &str,
    lease_ms: u64,
) -> Result<Option<JobState>, ArchiveError> {
    let renewed = conn
        .execute(
            "UPDATE replay_jobs SET lease_until = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'running'",
            args![now() + lease_ms as i64, id, owner],
        )
        .await?;
    if renewed == 1 {
        return Ok(None);
    }
    let row = conn
        .fetch_one("SELECT state FROM replay_jobs WHERE id = $1", args![id])
        .await?;
    let state: String = row.column("state")?;
    Ok(Some(JobState::parse(&state).unwrap_or(JobState::Paused)))
}

/// Items from `message_id` on are to do again: the next step looks from there (see
/// [`next_items`]).
async fn rewind(conn: &mut Conn<'_>, id: i64, message_id: i64) -> Result<(), sqlx::Error> {
    conn.execute(
        "UPDATE replay_jobs SET todo_from = CASE WHEN $1 < todo_from THEN $1 ELSE todo_from END \
         WHERE id = $2",
        args![message_id, id],
    )
    .await?;
    Ok(())
}

/// The next `limit` items still to do, in id order, with what a step needs of their messages.
///
/// Looked for from the job's `todo_from` on — below it every item is done or in flight — and
/// that mark is moved up to the first found: a step reads the next items only, at the end of a
/// 1,000,000-message job as at its start, whichever index the planner takes (looking from the
/// first item, each step stepped over every one already done: a 100,000-message job took half
/// as long again on PostgreSQL). The mark is moved back when items are to do again
/// ([`rewind`]); should none be found after it, the whole job is looked through once more
/// before it can be complete. The caller holds the job's row.
async fn next_items(conn: &mut Conn<'_>, id: i64, limit: u32) -> Result<Vec<Row>, sqlx::Error> {
    let from: i64 = conn
        .fetch_one("SELECT todo_from FROM replay_jobs WHERE id = $1", args![id])
        .await?
        .column("todo_from")?;
    let status = conn.dialect().status_table();
    let mut rows = Vec::new();
    for from in [from, 0] {
        rows = conn
            .fetch_all(
                &format!(
                    "SELECT i.message_id, i.attempts, m.body_size, s.status FROM \
                     (SELECT message_id, attempts FROM replay_job_items \
                      WHERE job_id = $1 AND outcome IS NULL AND message_id >= $2 \
                      ORDER BY message_id LIMIT $3) AS i \
                     JOIN messages m ON m.id = i.message_id \
                     JOIN {status} s ON s.id = i.message_id ORDER BY i.message_id"
                ),
                args![id, from, i64::from(limit)],
            )
            .await?;
        if !rows.is_empty() || from == 0 {
            break;
        }
    }
    if let Some(first) = rows.first() {
        let first: i64 = first.column("message_id")?;
        conn.execute(
            "UPDATE replay_jobs SET todo_from = $1 WHERE id = $2",
            args![first, id],
        )
        .await?;
    }
    Ok(rows)
}

/// Records final outcomes: one statement per distinct (outcome, detail).
async fn record_outcomes(
    conn: &mut Conn<'_>,
    id: i64,
    outcomes: &[ItemOutcome],
) -> Result<(), sqlx::Error> {
    let d = conn.dialect();
    let (retry, groups) = sort_outcomes(outcomes);
    if !retry.is_empty() {
        conn.execute(
            &format!(
                "UPDATE replay_job_items SET outcome = NULL \
                 WHERE job_id = $1 AND outcome = 'sending' AND {}",
                d.in_ids("message_id", 2)
            ),
            args![id, &retry],
        )
        .await?;
        rewind(conn, id, retry.iter().copied().min().unwrap_or(0)).await?;
    }
    let now = now();
    // When the earliest of them was handed out (see `advance_job`): a copy archived since then
    // is of this replay.
    let since: Option<i64> = conn
        .fetch_one(
            "SELECT min(finished_at) AS since FROM replay_job_items \
             WHERE job_id = $1 AND outcome = 'sending'",
            args![id],
        )
        .await?
        .column("since")?;
    for ((outcome, detail), ids) in groups {
        let column = count_column(outcome);
        // Only items still `sending` take the outcome (and count, and set their message's
        // status): one a cancel or another runner already settled keeps its first outcome.
        let settled: Vec<i64> = conn
            .fetch_all(
                &format!(
                    "UPDATE replay_job_items SET outcome = $1, detail = $2, finished_at = $3 \
                     WHERE job_id = $4 AND outcome = 'sending' AND {} RETURNING message_id",
                    d.in_ids("message_id", 5)
                ),
                args![outcome.as_str(), detail, now, id, &ids],
            )
            .await?
            .iter()
            .map(|row| row.column("message_id"))
            .collect::<Result<_, _>>()?;
        let published = outcome == Outcome::Published;
        lifecycle::replayed(conn, &settled, published, since.unwrap_or(now), now).await?;
        conn.execute(
            &format!("UPDATE replay_jobs SET {column} = {column} + $1 WHERE id = $2"),
            args![settled.len() as i64, id],
        )
        .await?;
    }
    Ok(())
}

/// Nothing is left to publish: the job is complete, with its counts in the audit log. The
/// caller holds the job's row.
async fn complete(conn: &mut Conn<'_>, id: i64) -> Result<(), ArchiveError> {
    conn.execute(
        "UPDATE replay_jobs SET state = 'completed', finished_at = $1, lease_owner = NULL, \
         lease_until = NULL, detail = NULL WHERE id = $2",
        args![now(), id],
    )
    .await?;
    let job = job_in(conn, id).await?;
    let summary = complete_summary(&job);
    let lazarus = Actor::system("lazarus");
    audit(conn, &lazarus, "job_complete", Some(id), None, &summary).await?;
    Ok(())
}

#[async_trait]
impl<T: SqlArchive> JobLease for T {
    async fn claim_job(
        &self,
        owner: &str,
        instance: Option<&str>,
        lease_ms: u64,
        only: Option<i64>,
    ) -> Result<Option<ReplayJob>, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let skip_locked = conn.dialect().skip_locked();
        let now = now();
        // A cancelled job whose runner died before settling what it had handed to the broker.
        // One another instance is settling (or its runner is stepping) is left to it.
        let orphans: Vec<i64> = conn
            .fetch_all(
                &format!(
                    "UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL \
                     WHERE id IN (SELECT id FROM replay_jobs \
                                  WHERE state = 'cancelled' AND lease_owner IS NOT NULL AND {LEASE_GONE}\
                                  {skip_locked}) \
                     RETURNING id"
                ),
                args![now, instance, owner],
            )
            .await?
            .iter()
            .map(|row| row.column("id"))
            .collect::<Result<_, _>>()?;
        for orphan in orphans {
            cancel_items(&mut conn, orphan, false).await?;
        }
        // A job another instance is claiming (or a user is changing) is not waited for, and
        // never claimed twice: the next candidate is taken instead.
        let claimed = conn
            .fetch_optional(
                &format!(
                    "UPDATE replay_jobs SET state = 'running', lease_owner = $3, lease_instance = $2, \
                     lease_until = $4, started_at = coalesce(started_at, $1), detail = NULL \
                     WHERE id = (SELECT id FROM replay_jobs \
                                 WHERE (state = 'queued' OR (state = 'running' AND {LEASE_GONE})) \
                                 AND (CAST($5 AS BIGINT) IS NULL OR id = $5) AND {HAS_ITS_BROKERS} \
                                 ORDER BY id LIMIT 1{skip_locked}) \
                     RETURNING id"
                ),
                args![now, instance, owner, now + lease_ms as i64, only],
            )
            .await?;
        let job = match claimed {
            Some(row) => {
                let id: i64 = row.column("id")?;
                // Handed out by a runner that is gone: whether they reached the broker is
                // unknown, so they are published again (the documented window).
                conn.execute(
                    "UPDATE replay_job_items SET outcome = NULL WHERE job_id = $1 AND outcome = 'sending'",
                    args![id],
                )
                .await?;
                rewind(&mut conn, id, 0).await?;
                Some(job_in(&mut conn, id).await?)
            }
            None => None,
        };
        tx.commit().await?;
        Ok(job)
    }

    async fn advance_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        outcomes: &[ItemOutcome],
        next: ChunkLimit,
    ) -> Result<JobStep, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let d = conn.dialect();
        // The job's row first, as every writer of its items takes it: a cancel, a claim by
        // another instance or a user's pause waits for this step (and this step for them),
        // never half of it.
        conn.fetch_optional(
            &format!("SELECT id FROM replay_jobs WHERE id = $1{}", d.for_update()),
            args![id],
        )
        .await?;
        record_outcomes(&mut conn, id, outcomes).await?;
        if let Some(state) = renew(&mut conn, id, owner, lease_ms).await? {
            // Asking for more means a step is still in flight: after a cancel, the runner
            // settles it next, asking for nothing more; then what is left is cancelled.
            let step_out = state == JobState::Cancelled && next.messages > 0;
            if state == JobState::Cancelled {
                cancel_items(&mut conn, id, step_out).await?;
            }
            // Until then it keeps the lease: should it die first, the lease runs out and the
            // next claim settles what it had out (an owner let go would be passed over).
            let (sql, lease_until) = match step_out {
                true => (
                    "UPDATE replay_jobs SET lease_until = $1 WHERE id = $2 AND lease_owner = $3",
                    Some(now() + lease_ms as i64),
                ),
                false => (
                    "UPDATE replay_jobs SET lease_owner = NULL, lease_until = $1 \
                     WHERE id = $2 AND lease_owner = $3",
                    None,
                ),
            };
            conn.execute(sql, args![lease_until, id, owner]).await?;
            tx.commit().await?;
            return Ok(JobStep::Stop(state));
        }
        if next.messages == 0 {
            tx.commit().await?;
            return Ok(JobStep::Publish(Vec::new()));
        }
        let job = job_in(&mut conn, id).await?;

        // The next messages still to do, cut at the byte limit (one at least).
        let candidates = next_items(&mut conn, id, next.messages).await?;
        if candidates.is_empty() {
            let in_flight: bool = conn
                .fetch_one(
                    "SELECT EXISTS (SELECT 1 FROM replay_job_items \
                     WHERE job_id = $1 AND outcome = 'sending') AS in_flight",
                    args![id],
                )
                .await?
                .column("in_flight")?;
            if in_flight {
                // The last step is still being published: nothing more to hand out yet.
                tx.commit().await?;
                return Ok(JobStep::Publish(Vec::new()));
            }
            complete(&mut conn, id).await?;
            tx.commit().await?;
            return Ok(JobStep::Stop(JobState::Completed));
        }
        let step = step_from_rows(&candidates, job.include_replayed, next.bytes)?;
        let now = now();
        for Settled {
            ids,
            outcome,
            detail,
            status,
        } in step.settled()
        {
            if ids.is_empty() {
                continue;
            }
            conn.execute(
                &format!(
                    "UPDATE replay_job_items SET outcome = $1, detail = $2, finished_at = $3 \
                     WHERE job_id = $4 AND {}",
                    d.in_ids("message_id", 5)
                ),
                args![outcome, detail, now, id, ids],
            )
            .await?;
            if let Some(status) = status {
                lifecycle::set_status(&mut conn, ids, status, lifecycle::any, None).await?;
            }
            // The outcome is the job's count column too.
            conn.execute(
                &format!("UPDATE replay_jobs SET {outcome} = {outcome} + $1 WHERE id = $2"),
                args![ids.len() as i64, id],
            )
            .await?;
        }
        conn.execute(
            &format!(
                "UPDATE replay_job_items SET outcome = 'sending', attempts = attempts + 1, \
                 finished_at = $3 WHERE job_id = $1 AND {}",
                d.in_ids("message_id", 2)
            ),
            args![id, &step.send, now],
        )
        .await?;
        // A body over a MiB is not read here: the runner reads it as it publishes it.
        let rows = conn
            .fetch_all(
                &format!(
                    "SELECT i.message_id, m.vhost, m.broker, i.target_exchange, i.target_routing_key, m.properties, \
                     m.headers, m.convention, m.body_size, CASE WHEN m.body_size <= {CHUNK_BYTES} THEN b.body END AS body \
                     FROM replay_job_items i JOIN messages m ON m.id = i.message_id \
                     JOIN message_bodies b ON b.message_id = i.message_id \
                     WHERE i.job_id = $1 AND {} ORDER BY i.message_id",
                    d.in_ids("i.message_id", 2)
                ),
                args![id, &step.send],
            )
            .await?;
        tx.commit().await?;
        let messages = rows
            .iter()
            .map(outgoing_from_row)
            .collect::<Result<Vec<_>, ArchiveError>>()?;
        Ok(JobStep::Publish(messages))
    }

    async fn release_job(
        &self,
        id: i64,
        owner: &str,
        state: JobState,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<(), ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        // One statement decides and writes (on PostgreSQL the row is locked and its condition
        // checked again if another transaction changed it meanwhile).
        let released = conn
            .execute(
                "UPDATE replay_jobs SET state = $1, detail = $2, lease_owner = NULL, \
                 lease_until = NULL, canary_done = canary_done OR $3 \
                 WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
                args![state.as_str(), detail, canary_done, id, owner],
            )
            .await?;
        if released == 1 && state == JobState::Paused {
            let summary = pause_summary(id, detail);
            let lazarus = Actor::system("lazarus");
            audit(&mut conn, &lazarus, "job_pause", Some(id), None, &summary).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn note_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, ArchiveError> {
        let noted = self
            .db()
            .execute(
                "UPDATE replay_jobs SET detail = $1, lease_until = $2, \
                 canary_done = canary_done OR $3 \
                 WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
                args![detail, now() + lease_ms as i64, canary_done, id, owner],
            )
            .await?;
        Ok(noted == 1)
    }

    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                "SELECT canary_done FROM replay_jobs WHERE id = $1",
                args![id],
            )
            .await?;
        Ok(match row {
            Some(row) => row.column("canary_done")?,
            None => true,
        })
    }

    async fn announce_runner(
        &self,
        owner: &str,
        brokers: &[&str],
        live_ms: u64,
    ) -> Result<(), ArchiveError> {
        let now = now();
        let db = self.db();
        for broker in brokers {
            // Written once half of the last word's time is gone, not at every look.
            db.execute(
                "INSERT INTO replay_runners (owner, broker, live_until) VALUES ($1, $2, $3) \
                 ON CONFLICT (owner, broker) DO UPDATE SET live_until = excluded.live_until \
                 WHERE replay_runners.live_until < $4",
                args![
                    owner,
                    *broker,
                    now + live_ms as i64,
                    now + live_ms as i64 / 2
                ],
            )
            .await?;
        }
        db.execute(
            "DELETE FROM replay_runners WHERE live_until < $1 AND owner NOT IN \
             (SELECT lease_owner FROM replay_jobs WHERE lease_owner IS NOT NULL)",
            args![now - FORGET_RUNNERS_MS],
        )
        .await?;
        Ok(())
    }

    async fn retire_runner(&self, owner: &str) -> Result<(), ArchiveError> {
        self.db()
            .execute("DELETE FROM replay_runners WHERE owner = $1", args![owner])
            .await?;
        Ok(())
    }

    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                "SELECT count(*) AS n FROM messages WHERE archived_at >= $1 AND replay_of IN \
                 (SELECT message_id FROM replay_job_items WHERE job_id = $2 AND outcome = 'published')",
                args![millis(since), id],
            )
            .await?;
        Ok(match row {
            Some(row) => row.column("n")?,
            None => 0,
        })
    }
}

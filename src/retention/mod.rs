//! Retention: deleting what the policy (`--retention`) no longer keeps. A pass plans, per DLQ,
//! what each rule makes due (ages first, then the caps on what they leave), then deletes it
//! in small transactions through the archive's purge, recorded and audited as one run; the
//! background loop of `lazarus serve` runs a pass every `--retention-interval-secs`, and
//! `lazarus retention [--dry-run]` runs (or only shows) one now.

pub mod policy;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

pub use policy::{Policy, RetentionSpec, Rule, Rules};

use crate::archive::{Archive, ArchiveError, QueueTotals, Retention, RetentionRun, Scan};
use crate::runtime::metrics::Metrics;

/// Messages deleted per transaction: short, so that ingest and requests wait little.
pub const BATCH: usize = 500;
/// Messages a pass plans per DLQ; the rest is left to the next pass, which follows at once.
pub const PASS_LIMIT: usize = 50_000;
/// Rows a scan reads at a time.
const SCAN_PAGE: u32 = 1_000;
/// A run not heard of for this long was interrupted (its process died): another may start.
pub const STALE: Duration = Duration::from_secs(600);
/// The shortest pause between two deleting transactions; a pause is never shorter than the
/// transaction before it, so that retention takes at most half the database's time from
/// ingest and requests.
const BREATHER: Duration = Duration::from_millis(10);

/// What a pass would delete from one DLQ under one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub queue: String,
    pub rule: Rule,
    pub ids: Vec<i64>,
    /// Their body bytes.
    pub bytes: i64,
}

/// What a pass deletes, by DLQ and rule, and what the DLQs hold before it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub due: Vec<Due>,
    pub totals: Vec<QueueTotals>,
    /// A DLQ had more due than one pass takes ([`PASS_LIMIT`]).
    pub more: bool,
}

impl Plan {
    pub fn messages(&self) -> usize {
        self.due.iter().map(|d| d.ids.len()).sum()
    }
}

/// Whether one rule of one DLQ takes one more message, given the messages and body bytes it
/// took so far.
type Wants = dyn Fn(usize, i64) -> bool + Send + Sync;

/// Reads `scan` of `queue` page by page, taking each message not `taken` already while
/// `wants` says so and the pass has room; whether the pass's room ran out.
async fn collect(
    archive: &dyn Retention,
    queue: &str,
    scan: Scan,
    wants: &Wants,
    taken: &mut HashSet<i64>,
    due: &mut Due,
) -> Result<bool, ArchiveError> {
    let mut after = 0;
    loop {
        let page = archive
            .retention_scan(queue, scan, after, SCAN_PAGE)
            .await?;
        for &(id, size) in &page {
            after = id;
            if taken.contains(&id) {
                continue;
            }
            if !wants(due.ids.len(), due.bytes) {
                return Ok(false);
            }
            if taken.len() >= PASS_LIMIT {
                return Ok(true);
            }
            taken.insert(id);
            due.ids.push(id);
            due.bytes += size;
        }
        if page.len() < SCAN_PAGE as usize {
            return Ok(false);
        }
    }
}

/// What a pass would delete now under `policy`: every message an age rule makes due, then
/// the oldest beyond each cap of what is left. Messages an unfinished job holds are not due
/// (they count towards the caps, so the next oldest go instead).
pub async fn plan(
    archive: &dyn Retention,
    policy: &Policy,
    now: OffsetDateTime,
) -> Result<Plan, ArchiveError> {
    let mut plan = Plan {
        totals: archive.queue_totals().await?,
        ..Plan::default()
    };
    let day = |days: u32| {
        let t = now - time::Duration::days(i64::from(days));
        (t.unix_timestamp_nanos() / 1_000_000) as i64
    };
    for totals in &plan.totals {
        let mut taken = HashSet::new();
        let (mut gone, mut gone_bytes) = (0i64, 0i64);
        for rule in policy.for_queue(&totals.queue).list() {
            let mut due = Due {
                queue: totals.queue.clone(),
                rule,
                ids: Vec::new(),
                bytes: 0,
            };
            let cap = |limit: u64| limit.min(i64::MAX as u64) as i64;
            let (scan, wants, go): (Scan, Box<Wants>, bool) = match rule {
                Rule::Days(days) => (Scan::ArchivedBefore(day(days)), Box::new(|_, _| true), true),
                Rule::ResolvedDays(days) => {
                    (Scan::ResolvedBefore(day(days)), Box::new(|_, _| true), true)
                }
                Rule::Messages(limit) => {
                    let excess = totals.messages - gone - cap(limit);
                    let wants = move |n: usize, _| (n as i64) < excess;
                    (Scan::Oldest, Box::new(wants), excess > 0)
                }
                Rule::Size(limit) => {
                    let excess = totals.bytes - gone_bytes - cap(limit);
                    let wants = move |_, bytes: i64| bytes < excess;
                    (Scan::Oldest, Box::new(wants), excess > 0)
                }
            };
            let full = go
                && collect(
                    archive,
                    &totals.queue,
                    scan,
                    wants.as_ref(),
                    &mut taken,
                    &mut due,
                )
                .await?;
            gone += due.ids.len() as i64;
            gone_bytes += due.bytes;
            plan.more |= full;
            if !due.ids.is_empty() {
                plan.due.push(due);
            }
            if full {
                break;
            }
        }
    }
    Ok(plan)
}

/// One pass ended: its run, and whether more is due at once.
#[derive(Debug, Clone)]
pub struct Pass {
    pub run: RetentionRun,
    pub more: bool,
}

/// Runs one pass as `owner`, judging ages as of `now`, unless another instance is running
/// one (`None`), and asks for the next `every` from now (at once when this one left some
/// due). Stopped by `shutdown` between two transactions, the run still ends, audited.
pub async fn run_pass(
    archive: &dyn Archive,
    policy: &Policy,
    owner: &str,
    every: Duration,
    shutdown: &CancellationToken,
    now: OffsetDateTime,
) -> Result<Option<Pass>, ArchiveError> {
    let Some(run) = archive
        .begin_retention(owner, STALE.as_millis() as i64)
        .await?
    else {
        return Ok(None);
    };
    let deleted = delete(archive, run, policy, shutdown, now).await;
    let more = match &deleted {
        Ok(more) => *more,
        Err(_) => false,
    };
    let next = OffsetDateTime::now_utc() + if more { Duration::from_secs(1) } else { every };
    // Ended whatever happened, so that what it did is audited now rather than by a later run.
    let ended = archive.finish_retention(run, next).await;
    deleted?;
    let run = ended?;
    if run.deleted > 0 {
        let pages = archive.reclaim_space().await?;
        tracing::debug!(pages, "space of deleted messages given back");
    }
    Ok(Some(Pass { run, more }))
}

/// Plans and deletes; whether more is due than this pass took.
async fn delete(
    archive: &dyn Archive,
    run: i64,
    policy: &Policy,
    shutdown: &CancellationToken,
    now: OffsetDateTime,
) -> Result<bool, ArchiveError> {
    let plan = plan(archive, policy, now).await?;
    for due in &plan.due {
        let rule = due.rule.to_string();
        for chunk in due.ids.chunks(BATCH) {
            if shutdown.is_cancelled() {
                return Ok(false);
            }
            let started = std::time::Instant::now();
            archive.expire(run, &due.queue, &rule, chunk).await?;
            tokio::time::sleep(started.elapsed().max(BREATHER)).await;
        }
    }
    Ok(plan.more)
}

/// `lazarus serve`'s retention: a pass every `every` (the first at start), one instance at a
/// time across those sharing the archive. A failing database is waited out.
pub async fn keep(
    archive: Arc<dyn Archive>,
    policy: Policy,
    every: Duration,
    owner: String,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    tracing::info!(policy = %policy.describe(), every_secs = every.as_secs(), "retention is on");
    loop {
        let now = OffsetDateTime::now_utc();
        let pause = match run_pass(archive.as_ref(), &policy, &owner, every, &shutdown, now).await {
            Ok(Some(pass)) => {
                metrics.retention_deleted(pass.run.deleted as u64);
                if pass.run.deleted > 0 {
                    tracing::info!(
                        deleted = pass.run.deleted,
                        run = pass.run.id,
                        "retention pass"
                    );
                }
                if pass.more {
                    Duration::from_secs(1)
                } else {
                    every
                }
            }
            Ok(None) => {
                tracing::debug!("another instance is running retention");
                every
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention pass failed; trying again in 60 s");
                Duration::from_secs(60).min(every)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

//! The replay job runner: claims a queued job through the database (a lease, so one runner
//! at a time and another takes over when it dies) — one whose brokers it has, having said
//! which those are — publishes the job's frozen messages at
//! its rate with a window of outstanding confirms, records every outcome, judges a canary,
//! and lets go when the job is paused, cancelled or the process shuts down.
//!
//! Crash safety: messages are recorded as `sending` before they are published and get their
//! outcome in the transaction that hands out the step after next (handing out overlaps
//! publishing, so the confirm window never waits for the database). After a crash,
//! `sending` messages are published again: at most two steps (2 × `window` messages) can
//! reach the broker twice; a message whose confirm was recorded is never published again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::archive::{Archive, ArchiveError};
use crate::replay::runner::Runner;
pub use crate::replay::settings::{runner_name, runner_name_for, RunnerSettings};
use crate::support::backoff::Backoff;

/// Runs jobs until `shutdown`: claims one, runs it, looks for the next.
pub async fn run(
    archive: Arc<dyn Archive>,
    settings: RunnerSettings,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    while !shutdown.is_cancelled() {
        let claimed = async {
            announce(&*archive, &settings).await?;
            archive
                .claim_job(
                    &settings.owner,
                    settings.instance(),
                    settings.lease_ms(),
                    None,
                )
                .await
        };
        match claimed.await {
            Ok(Some(job)) => {
                backoff.reset();
                Runner::new(&*archive, &settings, &shutdown).run(job).await;
            }
            Ok(None) => {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(settings.poll) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for replay jobs; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
        }
    }
    // Its word taken back: a job only it could run says at once that it waits, not once the
    // word runs out.
    if let Err(e) = archive.retire_runner(&settings.owner).await {
        tracing::warn!(error = %e, "could not take back this runner's word; it runs out by itself");
    }
}

/// Says in the archive that this runner runs and which brokers it can publish to, before it
/// claims: it claims only jobs whose brokers it has. Its word lasts two leases: renewed at
/// each look for a job, and while it runs one its lease says it runs.
async fn announce(archive: &dyn Archive, settings: &RunnerSettings) -> Result<(), ArchiveError> {
    let brokers: Vec<&str> = settings
        .brokers
        .names()
        .filter(|b| *b != crate::message::dlq::DEFAULT_BROKER)
        .collect();
    match brokers.is_empty() {
        // The default broker goes without saying: a runner of it alone writes nothing.
        true => Ok(()),
        false => {
            archive
                .announce_runner(&settings.owner, &brokers, 2 * settings.lease_ms())
                .await
        }
    }
}

/// Claims job `id` if no other runner holds it (and this one has its brokers), and runs it;
/// returns once it is no longer running here (the CLI's way of running its own job).
pub async fn run_one(
    archive: &dyn Archive,
    settings: &RunnerSettings,
    id: i64,
    shutdown: &CancellationToken,
) -> Result<bool, ArchiveError> {
    announce(archive, settings).await?;
    match archive
        .claim_job(
            &settings.owner,
            settings.instance(),
            settings.lease_ms(),
            Some(id),
        )
        .await?
    {
        Some(job) => {
            Runner::new(archive, settings, shutdown).run(job).await;
            Ok(true)
        }
        None => Ok(false),
    }
}

//! The replay job runner: claims a queued job through the database (a lease, so one runner
//! at a time and another takes over when it dies), publishes the job's frozen messages at
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
        match archive
            .claim_job(
                &settings.owner,
                settings.instance(),
                settings.lease_ms(),
                None,
            )
            .await
        {
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
}

/// Claims job `id` if no other runner holds it, and runs it; returns once it is no longer
/// running here (the CLI's way of running its own job).
pub async fn run_one(
    archive: &dyn Archive,
    settings: &RunnerSettings,
    id: i64,
    shutdown: &CancellationToken,
) -> Result<bool, ArchiveError> {
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

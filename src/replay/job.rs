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

use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::amqp::connection::Backoff;
use crate::amqp::publisher::PublishOutcome;
use crate::archive::{Archive, ArchiveError, Canary, ItemOutcome, JobState, Outcome};
use crate::instance::Identity;
use crate::metrics::Metrics;
use crate::replay::policy::ExchangePolicy;
use crate::replay::runner::Runner;

/// How a runner works.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub amqp_url: String,
    /// This runner's name in the lease (unique per process).
    pub owner: String,
    /// The instance name this runner claims jobs under while the process holds it: it then
    /// takes back at once a job an earlier life of the instance held (`None` for
    /// `lazarus replay`, whose process has no name to outlive it).
    pub identity: Option<Arc<Identity>>,
    /// How long a claim lasts without renewal; another runner takes over after it.
    pub lease: Duration,
    /// Publishes awaiting a confirm at most, and messages handed out per step.
    pub window: usize,
    /// Stored body bytes handed out per step at most.
    pub step_bytes: u64,
    /// How often an idle runner looks for a job (a local request wakes it at once).
    pub poll: Duration,
    /// Where publish outcomes are counted.
    pub metrics: Arc<Metrics>,
    /// What a job becomes when this process stops mid-job: `Queued` for another instance
    /// (or the restart) to take up, `Paused` to wait for a person (the CLI).
    pub on_shutdown: JobState,
    /// Where it may publish: a message bound elsewhere fails without being published,
    /// whatever the plan said (it may have been made under other settings).
    pub policy: Arc<ExchangePolicy>,
}

impl RunnerSettings {
    pub fn new(amqp_url: &str) -> Self {
        RunnerSettings {
            amqp_url: amqp_url.to_owned(),
            owner: runner_name(),
            identity: None,
            lease: Duration::from_secs(15),
            window: 2000,
            step_bytes: 8 * 1024 * 1024,
            poll: Duration::from_secs(1),
            metrics: Arc::new(Metrics::default()),
            on_shutdown: JobState::Queued,
            policy: Arc::new(ExchangePolicy::default()),
        }
    }

    /// Runs as `identity`: claims under its name while it holds it, owner `name:pid:nanos`.
    pub fn as_instance(mut self, identity: Arc<Identity>) -> Self {
        self.owner = runner_name_for(identity.name());
        self.identity = Some(identity);
        self
    }

    pub(super) fn lease_ms(&self) -> u64 {
        self.lease.as_millis() as u64
    }

    /// The instance name to claim with: this process's, while it holds it.
    fn instance(&self) -> Option<&str> {
        self.identity.as_deref().and_then(Identity::held)
    }
}

/// `host:pid:nanos`: unique per process, readable in the database.
pub fn runner_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "lazarus".into());
    runner_name_for(&host)
}

/// `name:pid:nanos`: unique per process, and says which instance it is.
pub fn runner_name_for(name: &str) -> String {
    format!(
        "{name}:{}:{}",
        std::process::id(),
        OffsetDateTime::now_utc().unix_timestamp_nanos() % 1_000_000_000
    )
}

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

/// How many messages a step hands out: a fifth of a second's worth at the job's rate (so
/// pacing is smooth and a cancel is seen quickly), at most the confirm window.
pub fn step_size(rate_per_sec: Option<u32>, window: usize) -> u32 {
    let window = window.max(1) as u32;
    match rate_per_sec {
        Some(rate) if rate > 0 => (rate / 5).clamp(1, window),
        _ => window,
    }
}

/// What a publish outcome is recorded as; a failure before any confirm is published again.
pub fn item_outcome(message_id: i64, outcome: PublishOutcome) -> ItemOutcome {
    let (outcome, detail, retry) = match outcome {
        PublishOutcome::Published => (Outcome::Published, None, false),
        PublishOutcome::Unroutable { reply } => (Outcome::Unroutable, Some(reply), false),
        PublishOutcome::Nacked => (
            Outcome::Nacked,
            Some("the broker nacked the publish".into()),
            false,
        ),
        PublishOutcome::Failed(e) => (Outcome::Failed, Some(e), true),
    };
    ItemOutcome {
        message_id,
        outcome,
        detail,
        retry,
    }
}

/// A handed-out message whose record could not be read: failed for good, not retried.
pub(super) fn unreadable(message_id: i64, why: String) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome: Outcome::Failed,
        detail: Some(why),
        retry: false,
    }
}

/// A handed-out message that was never sent: it goes back to be done.
pub(super) fn not_sent(message_id: i64) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome: Outcome::Failed,
        detail: Some("not sent before the runner stopped".into()),
        retry: true,
    }
}

/// The canary's verdict: `Some(reason)` to pause the job.
pub fn canary_verdict(canary: &Canary, deaths: i64) -> Option<String> {
    (deaths > i64::from(canary.max_deaths)).then(|| {
        format!(
            "canary: {deaths} of the first {} replayed copies died again within {} s \
             (at most {} allowed), so the rest was not published. Fix the consumer, then \
             resume, or cancel the job.",
            canary.count, canary.wait_secs, canary.max_deaths
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_a_fifth_of_a_second_at_the_rate_within_the_window() {
        assert_eq!(step_size(None, 500), 500);
        assert_eq!(step_size(Some(0), 500), 500);
        assert_eq!(step_size(Some(100), 500), 20);
        assert_eq!(step_size(Some(3), 500), 1);
        assert_eq!(step_size(Some(100_000), 500), 500);
    }

    #[test]
    fn only_a_missing_confirm_is_published_again() {
        assert!(!item_outcome(1, PublishOutcome::Published).retry);
        assert!(!item_outcome(1, PublishOutcome::Nacked).retry);
        let unroutable = item_outcome(
            1,
            PublishOutcome::Unroutable {
                reply: "312 NO_ROUTE".into(),
            },
        );
        assert_eq!(unroutable.outcome, Outcome::Unroutable);
        assert_eq!(unroutable.detail.as_deref(), Some("312 NO_ROUTE"));
        assert!(item_outcome(1, PublishOutcome::Failed("closed".into())).retry);
    }

    #[test]
    fn canary_pauses_only_above_its_threshold() {
        let canary = Canary {
            count: 10,
            wait_secs: 30,
            max_deaths: 1,
        };
        assert_eq!(canary_verdict(&canary, 0), None);
        assert_eq!(canary_verdict(&canary, 1), None);
        let reason = canary_verdict(&canary, 2).unwrap();
        assert!(reason.contains("2 of the first 10"), "{reason}");
    }
}

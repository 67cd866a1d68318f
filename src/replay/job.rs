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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::amqp::connection::{connect, Backoff};
use crate::amqp::publisher::{PublishOutcome, Publisher, ReplayMessage};
use crate::archive::{
    Archive, ArchiveError, Canary, ChunkLimit, ItemOutcome, JobState, JobStep, Outcome,
    OutgoingMessage, ReplayJob,
};
use crate::instance::Identity;
use crate::metrics::Metrics;
use crate::replay::policy::ExchangePolicy;

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
            window: 500,
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

    fn lease_ms(&self) -> u64 {
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
fn unreadable(message_id: i64, why: String) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome: Outcome::Failed,
        detail: Some(why),
        retry: false,
    }
}

/// A handed-out message that was never sent: it goes back to be done.
fn not_sent(message_id: i64) -> ItemOutcome {
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

/// Why a runner stopped working on a job.
enum Stop {
    /// The job is not running here any more (completed, paused, cancelled, taken over).
    Left,
    /// The process is shutting down: hand the job back.
    Shutdown,
}

struct Runner<'a> {
    archive: &'a dyn Archive,
    settings: &'a RunnerSettings,
    shutdown: &'a CancellationToken,
    publisher: Option<Publisher>,
}

impl<'a> Runner<'a> {
    fn new(
        archive: &'a dyn Archive,
        settings: &'a RunnerSettings,
        shutdown: &'a CancellationToken,
    ) -> Self {
        Runner {
            archive,
            settings,
            shutdown,
            publisher: None,
        }
    }

    async fn run(mut self, job: ReplayJob) {
        let id = job.id;
        tracing::info!(job = id, owner = %self.settings.owner, "running replay job");
        let stop = self.publish(&job).await;
        if let Some(publisher) = self.publisher.take() {
            publisher.close().await;
        }
        if let Stop::Shutdown = stop {
            let detail = (self.settings.on_shutdown == JobState::Paused)
                .then_some("interrupted: resume it to go on");
            let _ = self
                .archive
                .release_job(
                    id,
                    &self.settings.owner,
                    self.settings.on_shutdown,
                    detail,
                    false,
                )
                .await;
        }
        tracing::info!(job = id, "replay job left this runner");
    }

    /// Waits `delay`, renewing the lease with `detail`; `Err` when the job stopped here.
    async fn wait(&self, id: i64, delay: Duration, detail: Option<&str>) -> Result<(), Stop> {
        let until = Instant::now() + delay;
        loop {
            let noted = self
                .archive
                .note_job(
                    id,
                    &self.settings.owner,
                    self.settings.lease_ms(),
                    detail,
                    false,
                )
                .await;
            if let Ok(false) = noted {
                return Err(Stop::Left);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            let slice = (until - now).min(Duration::from_millis(250));
            tokio::select! {
                _ = tokio::time::sleep(slice) => {}
                _ = self.shutdown.cancelled() => return Err(Stop::Shutdown),
            }
        }
    }

    /// A publisher on a live connection, reconnecting with backoff while the broker is away.
    async fn publisher(&mut self, id: i64) -> Result<&Publisher, Stop> {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        while self.publisher.is_none() {
            let opened = match connect(&self.settings.amqp_url, "lazarus replay job").await {
                Ok(connection) => Publisher::open(connection).await,
                Err(e) => Err(e),
            };
            match opened {
                Ok(publisher) => self.publisher = Some(publisher),
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "replay job waits for RabbitMQ");
                    let detail = format!("waiting for RabbitMQ: {e}");
                    self.wait(id, backoff.next_delay(), Some(&detail)).await?;
                }
            }
        }
        Ok(self.publisher.as_ref().expect("just opened"))
    }

    /// Checks every target exchange of the job exists; pauses the job when one does not.
    async fn check_exchanges(&mut self, job: &ReplayJob) -> Result<(), Stop> {
        let exchanges: std::collections::BTreeSet<&str> = job
            .plan
            .targets
            .iter()
            .map(|t| t.exchange.as_str())
            .filter(|e| self.settings.policy.allows(e))
            .collect();
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let mut pending: Vec<&str> = exchanges.into_iter().collect();
        while let Some(&exchange) = pending.first() {
            let exists = self
                .publisher(job.id)
                .await?
                .exchange_exists(exchange)
                .await;
            match exists {
                Ok(true) => {
                    pending.remove(0);
                }
                Ok(false) => {
                    let reason = format!(
                        "exchange {exchange:?} does not exist, so nothing more was published. \
                         Create it (or replay to another target), then resume, or cancel the job."
                    );
                    let _ = self
                        .archive
                        .release_job(
                            job.id,
                            &self.settings.owner,
                            JobState::Paused,
                            Some(&reason),
                            false,
                        )
                        .await;
                    return Err(Stop::Left);
                }
                Err(e) => {
                    // The broker went away mid-check: check the same exchange again.
                    self.publisher = None;
                    let detail = format!("waiting for RabbitMQ: {e}");
                    self.wait(job.id, backoff.next_delay(), Some(&detail))
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Marks the messages bound for an exchange the policy does not allow: they fail
    /// unpublished, with the reason.
    fn refuse_outside_policy(&self, mut messages: Vec<OutgoingMessage>) -> Vec<OutgoingMessage> {
        for m in &mut messages {
            if let Err(why) = self.settings.policy.check(&m.target.exchange) {
                m.unreadable.get_or_insert(why);
            }
        }
        messages
    }

    /// Hands out, publishes and records until the job is done or stops here.
    async fn publish(&mut self, job: &ReplayJob) -> Stop {
        match self.publish_steps(job).await {
            Ok(()) => Stop::Left,
            Err(stop) => stop,
        }
    }

    async fn publish_steps(&mut self, job: &ReplayJob) -> Result<(), Stop> {
        let id = job.id;
        self.check_exchanges(job).await?;
        let canary = match job.canary {
            Some(c) if !self.archive.canary_done(id).await.unwrap_or(true) => Some(c),
            _ => None,
        };
        let attempted = job.counts.published + job.counts.problems();
        let mut canary_left = canary.map(|c| (i64::from(c.count) - attempted).max(0));
        // Copies that die again are counted from the job's start; the wait runs from when
        // this runner finished publishing the canary (in full after a takeover).
        let canary_since = job.started_at.unwrap_or_else(OffsetDateTime::now_utc);
        let mut canary_published = Instant::now();
        let step = step_size(job.rate_per_sec, self.settings.window);
        let mut started = Instant::now();
        let mut sent: u64 = 0;
        // Outcomes of the last published step, not yet recorded.
        let mut outcomes: Vec<ItemOutcome> = Vec::new();
        // Handed out (recorded as `sending`) while the last step was published; not yet sent.
        let mut in_hand: Vec<OutgoingMessage> = Vec::new();
        loop {
            if self.shutdown.is_cancelled() {
                // What was handed out but never sent goes back to be done.
                outcomes.extend(in_hand.drain(..).map(|m| not_sent(m.message_id)));
                self.advance(id, &outcomes, 0).await?;
                return Err(Stop::Shutdown);
            }
            if canary_left == Some(0) && in_hand.is_empty() {
                self.advance(id, &outcomes, 0).await?;
                outcomes.clear();
                let canary = canary.expect("a canary is set");
                let wait = Duration::from_secs(u64::from(canary.wait_secs))
                    .saturating_sub(canary_published.elapsed());
                self.judge_canary(id, canary, canary_since, wait).await?;
                canary_left = None;
            }
            if in_hand.is_empty() {
                let limit = match canary_left {
                    Some(left) => step.min(left as u32),
                    None => step,
                };
                match self.advance(id, &outcomes, limit).await? {
                    JobStep::Publish(messages) => in_hand = self.refuse_outside_policy(messages),
                    JobStep::Stop(state) => {
                        tracing::info!(job = id, state = state.as_str(), "replay job stopped");
                        return Ok(());
                    }
                }
                outcomes.clear();
                if in_hand.is_empty() {
                    continue;
                }
            }
            if let Some(rate) = job.rate_per_sec.filter(|r| *r > 0) {
                let ahead = Duration::from_secs_f64(sent as f64 / f64::from(rate));
                // After a wait (a canary, a broker outage) the time lost is not made up
                // in a burst: at most a second's worth of backlog is kept.
                let now = Instant::now();
                if started + ahead + Duration::from_secs(1) < now {
                    started = now - ahead;
                }
                let due = started + ahead;
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = self.shutdown.cancelled() => {}
                }
            }
            let current = std::mem::take(&mut in_hand);
            sent += current.len() as u64;
            if let Some(left) = canary_left.as_mut() {
                *left = (*left - current.len() as i64).max(0);
            }
            // The next step is handed out (and the last one's outcomes recorded) while this
            // one is published: the confirm window never waits for the database.
            let next_limit = match canary_left {
                Some(left) => step.min(left as u32),
                None => step,
            };
            let window = self.settings.window;
            let job_tag = id.to_string();
            let batch: Vec<ReplayMessage<'_>> = current
                .iter()
                .filter(|m| m.unreadable.is_none())
                .map(|m| to_replay(m, &job_tag))
                .collect();
            self.publisher(id).await?;
            let (archive, settings) = (self.archive, self.settings);
            let mut publisher = self.publisher.take().expect("connected above");
            let mut blocked = publisher.blocked();
            let mut published: Vec<ItemOutcome> = current
                .iter()
                .filter_map(|m| Some(unreadable(m.message_id, m.unreadable.clone()?)))
                .collect();
            let publish = publisher.publish_all(batch, window, |message_id, o| {
                published.push(item_outcome(message_id, o))
            });
            let hand_out = async {
                let needed = next_limit > 0 || !outcomes.is_empty();
                match needed {
                    true => Some(self.advance(id, &outcomes, next_limit).await),
                    false => None,
                }
            };
            // A step can wait on the broker (a memory or disk alarm blocks publishers):
            // the lease is renewed meanwhile, so no other runner takes the job over, and
            // the job says what it waits for.
            let renew = async {
                loop {
                    let detail = blocked.borrow_and_update().as_ref().map(|reason| {
                        format!(
                            "waiting: RabbitMQ blocks publishing ({reason}); the job goes on \
                             once the broker's resource alarm clears"
                        )
                    });
                    let _ = archive
                        .note_job(
                            id,
                            &settings.owner,
                            settings.lease_ms(),
                            detail.as_deref(),
                            false,
                        )
                        .await;
                    tokio::select! {
                        _ = tokio::time::sleep(settings.lease / 3) => {}
                        _ = blocked.changed() => {}
                    }
                }
            };
            let next = tokio::select! {
                (_, next) = async { tokio::join!(publish, hand_out) } => next,
                _ = renew => unreachable!("renewing never ends"),
            };
            self.publisher = Some(publisher);
            outcomes = published;
            for o in outcomes.iter().filter(|o| !o.retry) {
                self.settings.metrics.replayed(o.outcome.as_str(), 1);
            }
            if canary_left.is_some() {
                canary_published = Instant::now();
            }
            match next {
                None => {}
                Some(Ok(JobStep::Publish(messages))) => {
                    in_hand = self.refuse_outside_policy(messages)
                }
                Some(Ok(JobStep::Stop(_)) | Err(Stop::Left)) => {
                    // Paused, cancelled or taken over: what was published is still recorded.
                    let _ = self.advance(id, &outcomes, 0).await;
                    tracing::info!(job = id, "replay job stopped");
                    return Ok(());
                }
                Some(Err(stop)) => return Err(stop),
            }
            if outcomes.iter().any(|o| o.retry) {
                // The channel or connection broke: those go out again on a new one.
                tracing::warn!(job = id, "replay publisher lost its channel; reconnecting");
                if let Some(publisher) = self.publisher.take() {
                    publisher.close().await;
                }
            }
        }
    }

    /// Records outcomes and takes the next messages, retrying while the database is away
    /// (the outcomes stay in hand).
    async fn advance(
        &self,
        id: i64,
        outcomes: &[ItemOutcome],
        messages: u32,
    ) -> Result<JobStep, Stop> {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let limit = ChunkLimit {
            messages,
            bytes: self.settings.step_bytes,
        };
        loop {
            match self
                .archive
                .advance_job(
                    id,
                    &self.settings.owner,
                    self.settings.lease_ms(),
                    outcomes,
                    limit,
                )
                .await
            {
                Ok(JobStep::Stop(_)) if messages == 0 => return Err(Stop::Left),
                Ok(step) => return Ok(step),
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "cannot record replay progress; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Waits the canary's time, then counts the copies that died again.
    async fn judge_canary(
        &mut self,
        id: i64,
        canary: Canary,
        since: OffsetDateTime,
        wait: Duration,
    ) -> Result<(), Stop> {
        let detail = format!(
            "canary: waiting {} s to see whether the first {} replayed copies die again",
            canary.wait_secs, canary.count
        );
        self.wait(id, wait, Some(&detail)).await?;
        let deaths = loop {
            match self.archive.canary_deaths(id, since).await {
                Ok(n) => break n,
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "cannot count canary deaths; retrying");
                    self.wait(id, Duration::from_secs(1), Some(&detail)).await?;
                }
            }
        };
        tracing::info!(job = id, deaths, "canary judged");
        match canary_verdict(&canary, deaths) {
            Some(reason) => {
                let _ = self
                    .archive
                    .release_job(
                        id,
                        &self.settings.owner,
                        JobState::Paused,
                        Some(&reason),
                        true,
                    )
                    .await;
                Err(Stop::Left)
            }
            None => {
                let noted = self
                    .archive
                    .note_job(
                        id,
                        &self.settings.owner,
                        self.settings.lease_ms(),
                        None,
                        true,
                    )
                    .await;
                match noted {
                    Ok(false) => Err(Stop::Left),
                    _ => Ok(()),
                }
            }
        }
    }
}

fn to_replay<'m>(m: &'m OutgoingMessage, job: &'m str) -> ReplayMessage<'m> {
    ReplayMessage {
        archive_id: m.message_id,
        properties: &m.properties,
        headers: m.headers.as_ref(),
        body: &m.body,
        target: &m.target,
        job: Some(job),
    }
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

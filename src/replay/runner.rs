//! One runner working one job: steps handed out by the archive and published on a confirm
//! channel, the next step fetched while the current one is in flight, outcomes recorded,
//! the rate kept, the canary judged, and the job let go when it is paused, cancelled, taken
//! over or the process shuts down. (Its crash safety is described in `job`.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bodies::{replay_body, ArchivedBodies};
use super::settings::RunnerSettings;
use super::step::{canary_verdict, item_outcome, not_sent, step_size, unreadable};
use crate::amqp::publisher::{Publisher, ReplayMessage};
use crate::amqp::wire::Connection;
use crate::archive::{
    Archive, Canary, ChunkLimit, ItemOutcome, JobState, JobStep, OutgoingMessage, ReplayJob,
};
use crate::support::backoff::Backoff;

/// Why a runner stopped working on a job.
enum Stop {
    /// The job is not running here any more (completed, paused, cancelled, taken over).
    Left,
    /// The process is shutting down: hand the job back.
    Shutdown,
    /// The broker refuses a vhost the job's messages go back into (it does not exist, or the
    /// user may not use it): the job is paused, saying so.
    Refused(String),
}

pub(super) struct Runner<'a> {
    archive: &'a dyn Archive,
    settings: &'a RunnerSettings,
    shutdown: &'a CancellationToken,
    /// A publisher per broker and vhost the job's messages came from (empty vhost: the
    /// broker URL's).
    publishers: BTreeMap<(String, String), Publisher>,
    /// Whether the job's `detail` says it waits for something (as this runner last noted).
    detail_shown: AtomicBool,
}

impl<'a> Runner<'a> {
    pub(super) fn new(
        archive: &'a dyn Archive,
        settings: &'a RunnerSettings,
        shutdown: &'a CancellationToken,
    ) -> Self {
        Runner {
            archive,
            settings,
            shutdown,
            publishers: BTreeMap::new(),
            detail_shown: AtomicBool::new(false),
        }
    }

    pub(super) async fn run(mut self, job: ReplayJob) {
        let id = job.id;
        tracing::info!(job = id, owner = %self.settings.owner, "running replay job");
        let stop = self.publish(&job).await;
        self.close_publishers().await;
        let (state, detail) = match &stop {
            Stop::Left => (None, None),
            Stop::Shutdown => (
                Some(self.settings.on_shutdown),
                (self.settings.on_shutdown == JobState::Paused)
                    .then_some("interrupted: resume it to go on"),
            ),
            Stop::Refused(reason) => (Some(JobState::Paused), Some(reason.as_str())),
        };
        if let Some(state) = state {
            let _ = self
                .archive
                .release_job(id, &self.settings.owner, state, detail, false)
                .await;
        }
        tracing::info!(job = id, "replay job left this runner");
    }

    /// Renews the lease and sets the job's `detail` (what it waits for, `None`: nothing);
    /// `Ok(false)` when the job is no longer this runner's.
    async fn note(
        &self,
        id: i64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, crate::archive::ArchiveError> {
        let noted = self
            .archive
            .note_job(
                id,
                &self.settings.owner,
                self.settings.lease_ms(),
                detail,
                canary_done,
            )
            .await;
        if noted.is_ok() {
            self.detail_shown.store(detail.is_some(), Ordering::Relaxed);
        }
        noted
    }

    /// Waits `delay`, renewing the lease with `detail`; `Err` when the job stopped here.
    async fn wait(&self, id: i64, delay: Duration, detail: Option<&str>) -> Result<(), Stop> {
        let until = Instant::now() + delay;
        loop {
            let noted = self.note(id, detail, false).await;
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

    /// A publisher into `vhost` on a live connection, reconnecting with backoff while the
    /// broker is away.
    async fn publisher(
        &mut self,
        id: i64,
        broker: &str,
        vhost: &str,
    ) -> Result<&mut Publisher, Stop> {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let key = (broker.to_owned(), vhost.to_owned());
        let Some(url) = self.settings.brokers.url(broker) else {
            return Err(Stop::Refused(format!(
                "the messages came from the broker {broker:?}, which this instance has no \
                 --broker for, so nothing more was published. Start it with \
                 --broker {broker}=AMQP_URL, then resume, or cancel the job."
            )));
        };
        let url = url.to_owned();
        while !self.publishers.contains_key(&key) {
            let opened = match Connection::open_in(&url, vhost, "lazarus replay job").await {
                Ok(connection) => Publisher::open(connection).await,
                Err(e) => Err(e),
            };
            let place = crate::message::dlq::in_vhost(vhost);
            match opened {
                Ok(publisher) => {
                    tracing::info!(
                        job = id,
                        broker,
                        vhost,
                        node = publisher.node(),
                        "replay job publishing"
                    );
                    self.publishers.insert(key.clone(), publisher);
                }
                // NOT_ALLOWED: no such vhost, or no access to it. Waiting would not mend it.
                Err(e) if e.vhost_refused() => {
                    tracing::warn!(job = id, vhost, error = %e, "replay job refused a vhost");
                    return Err(Stop::Refused(format!(
                        "{} ({e}), so nothing more was published. Create it or give the user \
                         access, then resume, or cancel the job.",
                        crate::message::dlq::refused(vhost)
                    )));
                }
                Err(e) => {
                    tracing::warn!(job = id, vhost, error = %e, "replay job waits for RabbitMQ");
                    let detail = format!("waiting for RabbitMQ{place}: {e}");
                    self.wait(id, backoff.next_delay(), Some(&detail)).await?;
                }
            }
        }
        Ok(self.publishers.get_mut(&key).expect("just opened"))
    }

    async fn close_publishers(&mut self) {
        for (_, publisher) in std::mem::take(&mut self.publishers) {
            publisher.close().await;
        }
    }

    /// Checks every target exchange of the job exists; pauses the job when one does not.
    async fn check_exchanges(&mut self, job: &ReplayJob) -> Result<(), Stop> {
        let exchanges: BTreeSet<(&str, &str, &str)> = job
            .plan
            .targets
            .iter()
            .map(|t| (t.broker.as_str(), t.vhost.as_str(), t.exchange.as_str()))
            .filter(|(_, _, e)| self.settings.policy.allows(e))
            .collect();
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let mut pending: Vec<(&str, &str, &str)> = exchanges.into_iter().collect();
        while let Some(&(broker, vhost, exchange)) = pending.first() {
            let exists = self
                .publisher(job.id, broker, vhost)
                .await?
                .exchange_exists(exchange)
                .await;
            match exists {
                Ok(true) => {
                    pending.remove(0);
                }
                Ok(false) => {
                    let place = crate::message::dlq::in_vhost(vhost);
                    let reason = format!(
                        "exchange {exchange:?}{place} does not exist, so nothing more was \
                         published. Create it (or replay to another target), then resume, or \
                         cancel the job."
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
                    self.publishers
                        .remove(&(broker.to_owned(), vhost.to_owned()));
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

    /// The job's loop: a step is handed out, published while the next is handed out, its
    /// outcomes recorded with that next hand-out; the canary is judged once it is out.
    async fn publish_steps(&mut self, job: &ReplayJob) -> Result<(), Stop> {
        let id = job.id;
        self.check_exchanges(job).await?;
        let mut canary = match job.canary {
            Some(c) if !self.archive.canary_done(id).await.unwrap_or(true) => {
                Some(CanaryLeft::new(c, job))
            }
            _ => None,
        };
        let step = step_size(job.rate_per_sec, self.settings.window);
        let mut pace = Pace::new(job.rate_per_sec);
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
            if canary.as_ref().is_some_and(|c| c.left == 0) && in_hand.is_empty() {
                self.advance(id, &outcomes, 0).await?;
                outcomes.clear();
                let out = canary.take().expect("a canary is set");
                self.judge_canary(id, out.canary, out.since, out.wait_left())
                    .await?;
            }
            if in_hand.is_empty() {
                match self.advance(id, &outcomes, limit(step, &canary)).await? {
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
            pace.wait_turn(self.shutdown).await;
            let current = std::mem::take(&mut in_hand);
            pace.sent(current.len());
            if let Some(c) = canary.as_mut() {
                c.left = (c.left - current.len() as i64).max(0);
            }
            let next = self
                .publish_step(id, &current, &mut outcomes, limit(step, &canary))
                .await?;
            if let Some(c) = canary.as_mut() {
                c.published = Instant::now();
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
                self.close_publishers().await;
            }
        }
    }

    /// Publishes `current`, each message into the vhost it came from on that vhost's
    /// connection, while the last step's `outcomes` are recorded and the next step (of
    /// `next_limit` messages) is handed out, the lease renewed meanwhile. On return
    /// `outcomes` are this step's, and the answer is the next hand-out (none if not needed).
    async fn publish_step(
        &mut self,
        id: i64,
        current: &[OutgoingMessage],
        outcomes: &mut Vec<ItemOutcome>,
        next_limit: u32,
    ) -> Result<Option<Result<JobStep, Stop>>, Stop> {
        let job_tag = id.to_string();
        let bodies = ArchivedBodies(self.archive);
        let batches = by_vhost(current, &job_tag, &bodies);
        for (broker, vhost) in batches.keys() {
            if let Err(stop) = self.publisher(id, broker, vhost).await {
                // Nothing of this step went out: it is to be done again, not reported as
                // possibly published.
                outcomes.extend(current.iter().map(|m| not_sent(m.message_id)));
                let _ = self.advance(id, outcomes, 0).await;
                return Err(stop);
            }
        }
        let settings = self.settings;
        let mut publishers = std::mem::take(&mut self.publishers);
        // A resource alarm blocks every connection to the node alike: one tells.
        let first = batches.keys().next().expect("one batch at least");
        let first = (first.0.to_owned(), first.1.to_owned());
        let mut blocked = publishers[&first].blocked();
        let mut published: Vec<ItemOutcome> = current
            .iter()
            .filter_map(|m| Some(unreadable(m.message_id, m.unreadable.clone()?)))
            .collect();
        let publish = async {
            for ((broker, vhost), batch) in batches {
                let key = (broker.to_owned(), vhost.to_owned());
                let publisher = publishers.get_mut(&key).expect("opened above");
                publisher
                    .publish_all(batch, settings.window, |message_id, o| {
                        published.push(item_outcome(message_id, o))
                    })
                    .await;
            }
        };
        let hand_out = async {
            let needed = next_limit > 0 || !outcomes.is_empty();
            match needed {
                true => Some(self.advance(id, outcomes, next_limit).await),
                false => None,
            }
        };
        // A step can wait on the broker (a memory or disk alarm blocks publishers): the
        // lease is renewed meanwhile, so no other runner takes the job over, and the job says
        // what it waits for. Handing this step out renewed it just now: the first note is due
        // a third of a lease later (or at once to say the broker blocks, or that a wait is
        // over), not at every step, where it would queue behind the step's own transaction.
        let renew = async {
            let mut due = self.detail_shown.load(Ordering::Relaxed);
            loop {
                let detail = blocked.borrow_and_update().as_ref().map(|reason| {
                    format!(
                        "waiting: RabbitMQ blocks publishing ({reason}); the job goes on \
                         once the broker's resource alarm clears"
                    )
                });
                if due || detail.is_some() {
                    let _ = self.note(id, detail.as_deref(), false).await;
                }
                due = true;
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
        self.publishers = publishers;
        *outcomes = published;
        for o in outcomes.iter().filter(|o| !o.retry) {
            self.settings.metrics.replayed(o.outcome.as_str(), 1);
        }
        Ok(next)
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
                self.settings.metrics.canary_paused();
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
                let noted = self.note(id, None, true).await;
                match noted {
                    Ok(false) => Err(Stop::Left),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// The canary a runner has still to publish: how many copies are left, since when copies
/// that die again count (the job's start), and when the last of them went out.
struct CanaryLeft {
    canary: Canary,
    left: i64,
    since: OffsetDateTime,
    published: Instant,
}

impl CanaryLeft {
    /// What is left of `canary` after what `job` already published (in full after a takeover).
    fn new(canary: Canary, job: &ReplayJob) -> Self {
        let attempted = job.counts.published + job.counts.problems();
        CanaryLeft {
            canary,
            left: (i64::from(canary.count) - attempted).max(0),
            since: job.started_at.unwrap_or_else(OffsetDateTime::now_utc),
            published: Instant::now(),
        }
    }

    /// The canary's wait, run from when its last copy went out.
    fn wait_left(&self) -> Duration {
        Duration::from_secs(u64::from(self.canary.wait_secs))
            .saturating_sub(self.published.elapsed())
    }
}

/// How many messages the next step takes: a step, or what is left of the canary.
fn limit(step: u32, canary: &Option<CanaryLeft>) -> u32 {
    match canary {
        Some(c) => step.min(c.left as u32),
        None => step,
    }
}

/// The job's rate: steps go out when the messages sent so far are due.
struct Pace {
    rate: Option<u32>,
    started: Instant,
    sent: u64,
}

impl Pace {
    fn new(rate: Option<u32>) -> Self {
        Pace {
            rate: rate.filter(|r| *r > 0),
            started: Instant::now(),
            sent: 0,
        }
    }

    /// Waits until what was sent so far is due at the rate (at once without one, or on
    /// shutdown).
    async fn wait_turn(&mut self, shutdown: &CancellationToken) {
        let Some(rate) = self.rate else { return };
        let ahead = Duration::from_secs_f64(self.sent as f64 / f64::from(rate));
        // After a wait (a canary, a broker outage) the time lost is not made up in a burst:
        // at most a second's worth of backlog is kept.
        let now = Instant::now();
        if self.started + ahead + Duration::from_secs(1) < now {
            self.started = now - ahead;
        }
        let due = self.started + ahead;
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = shutdown.cancelled() => {}
        }
    }

    fn sent(&mut self, messages: usize) {
        self.sent += messages as u64;
    }
}

/// A step's readable messages by the broker and vhost they came from (at least one entry: a
/// step of only unreadable records still goes through the default broker's check).
#[allow(clippy::type_complexity)]
fn by_vhost<'m>(
    current: &'m [OutgoingMessage],
    job: &'m str,
    bodies: &'m ArchivedBodies<'m>,
) -> BTreeMap<(&'m str, &'m str), Vec<ReplayMessage<'m>>> {
    let mut batches: BTreeMap<(&str, &str), Vec<ReplayMessage<'_>>> = BTreeMap::new();
    for m in current.iter().filter(|m| m.unreadable.is_none()) {
        batches
            .entry((m.broker.as_str(), m.vhost.as_str()))
            .or_default()
            .push(to_replay(m, job, bodies));
    }
    if batches.is_empty() {
        batches.insert((crate::message::dlq::DEFAULT_BROKER, ""), Vec::new());
    }
    batches
}

fn to_replay<'m>(
    m: &'m OutgoingMessage,
    job: &'m str,
    bodies: &'m ArchivedBodies<'m>,
) -> ReplayMessage<'m> {
    ReplayMessage {
        archive_id: m.message_id,
        properties: &m.properties,
        headers: m.headers.as_ref(),
        body: replay_body(&m.body, bodies),
        target: &m.target,
        job: Some(job),
        convention: m.convention,
    }
}

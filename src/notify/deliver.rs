//! Getting each event to each webhook: a queue and a task per URL (a dead receiver holds up
//! only its own), at most `--webhook-max-posts` POSTs in any `--webhook-max-posts-secs`
//! (failure groups beyond folded into a digest, see `pace`), every POST retried with a
//! doubling backoff (or the receiver's `Retry-After`) until it is taken, refused for good (a
//! 4xx other than 408 and 429) or out of attempts. Telling never waits: what finds its URL's
//! queue full is dropped and counted (failure groups are only ever counted into a digest).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::event::{Event, Format};
use super::pace::{Backlog, Pace, Rate};
use super::NotifyStatus;
use crate::runtime::metrics::Metrics;
use crate::support::http::{post_json, Target};

/// Looks' worth of events waiting for one URL's task to take them, at most; and the events
/// its backlog keeps (failure groups beyond are counted for a digest, others dropped).
const QUEUE: usize = 1_000;
/// Tries of one POST, at most (about four minutes with the backoff below).
const ATTEMPTS: u32 = 10;
/// The first wait between two tries; it doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The longest `Retry-After` obeyed.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// One try, connecting included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The configured webhooks, each fed by its own task.
pub struct Webhooks {
    queues: Vec<(Target, mpsc::Sender<Arc<[Event]>>)>,
    metrics: Arc<Metrics>,
    status: NotifyStatus,
}

impl Webhooks {
    /// Starts a task per URL on `tracker`; they stop at `shutdown` (what is still waiting is
    /// logged and dropped).
    pub fn start(
        targets: &[Target],
        public_url: Option<String>,
        rate: Rate,
        metrics: Arc<Metrics>,
        status: NotifyStatus,
        shutdown: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Self {
        let queues = targets
            .iter()
            .map(|target| {
                let (tx, rx) = mpsc::channel(QUEUE);
                let inbox = Inbox {
                    target: target.clone(),
                    queue: rx,
                    open: true,
                    backlog: Backlog::new(QUEUE),
                    metrics: metrics.clone(),
                    status: status.clone(),
                    shown_waiting: 0,
                };
                let sender = Sender {
                    public_url: public_url.clone(),
                    format: Format::of(target),
                    pace: Pace::new(rate),
                };
                tracker.spawn(deliver(inbox, sender, shutdown.clone()));
                (target.clone(), tx)
            })
            .collect();
        Webhooks {
            queues,
            metrics,
            status,
        }
    }

    /// Queues what one look found for every URL, together (so a flood found at once is
    /// folded at once); returns at once.
    pub fn tell(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        for event in &events {
            tracing::info!(event = event.name(), text = %event.text(), "telling the webhooks");
        }
        let events: Arc<[Event]> = events.into();
        for (target, queue) in &self.queues {
            if queue.try_send(events.clone()).is_err() {
                tracing::warn!(
                    webhook = %target.redacted(),
                    events = events.len(),
                    "webhook queue full (the receiver is failing or slow): events dropped"
                );
                self.metrics.webhook("dropped", events.len() as u64);
                self.status.lost(format!(
                    "{}: its queue was full (the receiver is failing or slow)",
                    target.redacted()
                ));
            }
        }
    }
}

/// One URL's side: what comes in, and what waits.
struct Inbox {
    target: Target,
    queue: mpsc::Receiver<Arc<[Event]>>,
    /// Until every sender is gone.
    open: bool,
    backlog: Backlog,
    metrics: Arc<Metrics>,
    status: NotifyStatus,
    /// What the waiting gauge holds of this URL's.
    shown_waiting: u64,
}

impl Inbox {
    fn add(&mut self, events: &[Event]) {
        for event in events {
            if !self.backlog.push(event.clone()) {
                tracing::warn!(
                    webhook = %self.target.redacted(),
                    event = event.name(),
                    "webhook backlog full (the receiver is failing or slow): event dropped"
                );
                self.metrics.webhook("dropped", 1);
                self.status.lost(format!(
                    "{}: its queue was full (the receiver is failing or slow)",
                    self.target.redacted()
                ));
            }
        }
        self.show_waiting();
    }

    /// Takes in what was already queued (and notes when every sender is gone).
    fn take_queued(&mut self) {
        while self.open {
            match self.queue.try_recv() {
                Ok(events) => self.add(&events),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.open = false,
            }
        }
    }

    /// Waits `wait`, taking in what comes meanwhile; false at shutdown.
    async fn pause(&mut self, wait: Duration, shutdown: &CancellationToken) -> bool {
        let until = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                _ = shutdown.cancelled() => return false,
                next = self.queue.recv(), if self.open => match next {
                    Some(events) => self.add(&events),
                    None => self.open = false,
                },
            }
        }
    }

    fn show_waiting(&mut self) {
        let now = self.backlog.len();
        self.metrics
            .webhook_waiting(now as i64 - self.shown_waiting as i64);
        self.shown_waiting = now;
    }
}

/// How one URL is POSTed to.
struct Sender {
    public_url: Option<String>,
    format: Format,
    pace: Pace,
}

impl Sender {
    /// Waits until the rate lets one more POST go (taking in what comes meanwhile), and
    /// counts it as gone; false at shutdown.
    async fn slot(&mut self, inbox: &mut Inbox, shutdown: &CancellationToken) -> bool {
        loop {
            let wait = self.pace.wait(Instant::now());
            if wait.is_zero() {
                return true;
            }
            if !inbox.pause(wait, shutdown).await {
                return false;
            }
        }
    }
}

/// What became of one POST's try.
#[derive(Debug, PartialEq, Eq)]
enum Try {
    Taken,
    /// Refused for good: trying again would get the same answer.
    Refused(StatusCode),
    /// Try again after this long.
    Again(Duration, Miss),
}

/// Why a try is to be made again.
#[derive(Debug, PartialEq, Eq)]
enum Miss {
    /// The webhook answered this (a server error, 408 or 429).
    Answered(StatusCode),
    /// No answer came; why, naming the webhook (redacted).
    Unreached(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Answered(status) => write!(f, "answered {status}"),
            Miss::Unreached(why) => f.write_str(why),
        }
    }
}

fn judge(
    answer: Result<crate::support::http::Answer, crate::support::http::HttpError>,
    backoff: Duration,
) -> Try {
    match answer {
        Ok(a) if a.status.is_success() => Try::Taken,
        Ok(a)
            if a.status.is_client_error()
                && a.status != StatusCode::REQUEST_TIMEOUT
                && a.status != StatusCode::TOO_MANY_REQUESTS =>
        {
            Try::Refused(a.status)
        }
        Ok(a) => Try::Again(
            a.retry_after.unwrap_or(backoff).min(MAX_RETRY_AFTER),
            Miss::Answered(a.status),
        ),
        Err(e) => Try::Again(backoff, Miss::Unreached(e.to_string())),
    }
}

async fn deliver(mut inbox: Inbox, mut sender: Sender, shutdown: CancellationToken) {
    let target = inbox.target.clone();
    // An event taken from the backlog when shutdown comes.
    let mut held = 0;
    'events: loop {
        inbox.take_queued();
        if inbox.backlog.is_empty() {
            if !inbox.open {
                return;
            }
            tokio::select! {
                next = inbox.queue.recv() => match next {
                    Some(events) => inbox.add(&events),
                    None => inbox.open = false,
                },
                _ = shutdown.cancelled() => break,
            }
            continue;
        }
        if !sender.slot(&mut inbox, &shutdown).await {
            break;
        }
        let free = sender.pace.free(Instant::now());
        let Some(next) = inbox.backlog.take(free) else {
            continue;
        };
        inbox.show_waiting();
        if next.folded > 0 {
            tracing::info!(webhook = %target.redacted(), groups = next.folded, "more new failure groups than the webhook's rate allows: told as one digest");
        }
        let event = next.event;
        let text = event.text();
        let body = hyper::body::Bytes::from(
            event
                .payload(sender.public_url.as_deref(), sender.format)
                .to_string(),
        );
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            if attempt > 1 && !sender.slot(&mut inbox, &shutdown).await {
                held = 1;
                break 'events;
            }
            sender.pace.sent(Instant::now());
            match judge(post_json(&target, body.clone(), TIMEOUT).await, backoff) {
                Try::Taken => {
                    inbox.metrics.webhook("sent", 1);
                    inbox.metrics.webhook("digested", next.folded);
                    inbox.status.told(&text);
                    continue 'events;
                }
                Try::Refused(status) => {
                    tracing::error!(webhook = %target.redacted(), %status, "the webhook refused an event; not trying again");
                    inbox.metrics.webhook("failed", 1);
                    inbox
                        .status
                        .lost(format!("{} refused it: {status}", target.redacted()));
                    continue 'events;
                }
                Try::Again(wait, why) if attempt < ATTEMPTS => {
                    tracing::warn!(webhook = %target.redacted(), attempt, error = %why, "webhook not reached; trying again in {wait:?}");
                    if !inbox.pause(wait, &shutdown).await {
                        held = 1;
                        break 'events;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Try::Again(_, why) => {
                    tracing::error!(webhook = %target.redacted(), attempts = ATTEMPTS, error = %why, "webhook not reached; event dropped");
                    inbox.metrics.webhook("failed", 1);
                    // An answer is said with the webhook it came from; an error names it.
                    let why = match why {
                        Miss::Answered(_) => format!("{} {why}", target.redacted()),
                        Miss::Unreached(why) => why,
                    };
                    inbox
                        .status
                        .lost(format!("not reached after {ATTEMPTS} tries ({why})"));
                }
            }
        }
    }
    inbox.queue.close();
    while let Ok(events) = inbox.queue.try_recv() {
        held += events.len() as u64;
    }
    let left = held + inbox.backlog.len();
    inbox.backlog = Backlog::new(0);
    inbox.show_waiting();
    if left > 0 {
        tracing::warn!(webhook = %target.redacted(), events = left, "shutting down with events not yet told");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::http::{Answer, HttpError};

    fn answer(status: u16, retry_after: Option<u64>) -> Result<Answer, HttpError> {
        Ok(Answer {
            status: StatusCode::from_u16(status).unwrap(),
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    #[test]
    fn answers_decide_whether_to_try_again() {
        let b = Duration::from_secs(4);
        assert_eq!(judge(answer(200, None), b), Try::Taken);
        assert_eq!(judge(answer(204, None), b), Try::Taken);
        assert_eq!(
            judge(answer(404, None), b),
            Try::Refused(StatusCode::NOT_FOUND)
        );
        assert_eq!(
            judge(answer(500, None), b),
            Try::Again(b, Miss::Answered(StatusCode::INTERNAL_SERVER_ERROR))
        );
        assert!(matches!(judge(answer(408, None), b), Try::Again(d, _) if d == b));
        assert!(
            matches!(judge(answer(429, Some(30)), b), Try::Again(d, _) if d == Duration::from_secs(30))
        );
        assert!(
            matches!(judge(answer(503, Some(86_400)), b), Try::Again(d, _) if d == MAX_RETRY_AFTER)
        );
        let refused = Err(HttpError::Unconnected {
            target: "http://h/".into(),
            reason: "refused".into(),
        });
        assert!(matches!(judge(refused, b), Try::Again(d, _) if d == b));
    }
}

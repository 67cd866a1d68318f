//! Getting each event to each webhook: a queue and a task per URL (a dead receiver holds up
//! only its own), every POST retried with a doubling backoff (or the receiver's `Retry-After`)
//! until it is taken, refused for good (a 4xx other than 408 and 429) or out of attempts.
//! Telling never waits: an event that finds its URL's queue full is dropped and counted.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use hyper::StatusCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::event::Event;
use super::NotifyStatus;
use crate::http::{post_json, Target};
use crate::metrics::Metrics;

/// Events waiting for one URL, at most.
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

/// An event on its way to one URL: what it says (for the overview) and the body POSTed.
struct Outgoing {
    text: String,
    body: Bytes,
}

/// The configured webhooks, each fed by its own task.
pub struct Webhooks {
    queues: Vec<(Target, mpsc::Sender<Outgoing>)>,
    public_url: Option<String>,
    metrics: Arc<Metrics>,
    status: NotifyStatus,
}

impl Webhooks {
    /// Starts a task per URL on `tracker`; they stop at `shutdown` (what is still queued is
    /// logged and dropped).
    pub fn start(
        targets: &[Target],
        public_url: Option<String>,
        metrics: Arc<Metrics>,
        status: NotifyStatus,
        shutdown: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Self {
        let queues = targets
            .iter()
            .map(|target| {
                let (tx, rx) = mpsc::channel(QUEUE);
                let told = Told {
                    metrics: metrics.clone(),
                    status: status.clone(),
                };
                tracker.spawn(deliver(target.clone(), rx, told, shutdown.clone()));
                (target.clone(), tx)
            })
            .collect();
        Webhooks {
            queues,
            public_url,
            metrics,
            status,
        }
    }

    /// Queues `event` for every URL; returns at once.
    pub fn tell(&self, event: &Event) {
        tracing::info!(event = event.name(), text = %event.text(), "telling the webhooks");
        for (target, queue) in &self.queues {
            let outgoing = Outgoing {
                text: event.text(),
                body: event.body_for(target, self.public_url.as_deref()),
            };
            if queue.try_send(outgoing).is_err() {
                tracing::warn!(
                    webhook = %target.redacted(),
                    event = event.name(),
                    "webhook queue full (the receiver is failing or slow): event dropped"
                );
                self.metrics.webhook("dropped");
                self.status.lost(format!(
                    "{}: its queue was full (the receiver is failing or slow)",
                    target.redacted()
                ));
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
    Again(Duration, String),
}

fn judge(answer: Result<crate::http::Answer, crate::http::HttpError>, backoff: Duration) -> Try {
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
            format!("answered {}", a.status),
        ),
        Err(e) => Try::Again(backoff, e.to_string()),
    }
}

/// Where a delivery task says what became of each event.
struct Told {
    metrics: Arc<Metrics>,
    status: NotifyStatus,
}

async fn deliver(
    target: Target,
    mut queue: mpsc::Receiver<Outgoing>,
    told: Told,
    shutdown: CancellationToken,
) {
    // An event between two tries when shutdown comes.
    let mut held = 0;
    'events: loop {
        let event = tokio::select! {
            next = queue.recv() => match next {
                Some(event) => event,
                None => return,
            },
            _ = shutdown.cancelled() => break,
        };
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            match judge(
                post_json(&target, event.body.clone(), TIMEOUT).await,
                backoff,
            ) {
                Try::Taken => {
                    told.metrics.webhook("sent");
                    told.status.told(&event.text);
                    continue 'events;
                }
                Try::Refused(status) => {
                    tracing::error!(webhook = %target.redacted(), %status, "the webhook refused an event; not trying again");
                    told.metrics.webhook("failed");
                    told.status
                        .lost(format!("{} refused it: {status}", target.redacted()));
                    continue 'events;
                }
                Try::Again(wait, why) if attempt < ATTEMPTS => {
                    tracing::warn!(webhook = %target.redacted(), attempt, error = %why, "webhook not reached; trying again in {wait:?}");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => {
                            held = 1;
                            break 'events;
                        }
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Try::Again(_, why) => {
                    tracing::error!(webhook = %target.redacted(), attempts = ATTEMPTS, error = %why, "webhook not reached; event dropped");
                    told.metrics.webhook("failed");
                    told.status.lost(format!(
                        "not reached after {ATTEMPTS} tries ({})",
                        if why.starts_with("answered") {
                            format!("{} {why}", target.redacted())
                        } else {
                            why
                        }
                    ));
                }
            }
        }
    }
    queue.close();
    let mut left = held;
    while queue.try_recv().is_ok() {
        left += 1;
    }
    if left > 0 {
        tracing::warn!(webhook = %target.redacted(), events = left, "shutting down with events not yet told");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Answer, HttpError};

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
            Try::Again(b, "answered 500 Internal Server Error".into())
        );
        assert!(matches!(judge(answer(408, None), b), Try::Again(d, _) if d == b));
        assert!(
            matches!(judge(answer(429, Some(30)), b), Try::Again(d, _) if d == Duration::from_secs(30))
        );
        assert!(
            matches!(judge(answer(503, Some(86_400)), b), Try::Again(d, _) if d == MAX_RETRY_AFTER)
        );
        let refused = Err(HttpError::Unreachable {
            target: "http://h/".into(),
            reason: "connecting: refused".into(),
        });
        assert!(matches!(judge(refused, b), Try::Again(d, _) if d == b));
    }
}

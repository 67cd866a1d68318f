//! Notifications (`--webhook`): `serve` looks at the archive every few seconds for what
//! changed — a failure group first seen, a DLQ's open messages passing a threshold or falling
//! back under it, a replay job completed, cancelled or paused — and tells the webhooks. Each
//! change is written to `notifications` first: of several instances sharing an archive, the
//! one whose write changed the row tells, so each change is told once. Looking never touches
//! ingest's path; a change is written only when this instance sees one.

mod deliver;
pub mod event;
mod line;
mod pace;
mod status;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

pub use deliver::Webhooks;
pub use event::Event;
pub use line::Line;
pub use pace::Rate;
pub use status::{Latest, NotifyStatus};

use crate::archive::{Archive, ArchiveError, JobState, Noted};

/// How far back a failure group or a finished job may lie and still be told (after a restart,
/// or the first time webhooks are configured: older ones are not news).
const RECENT: Duration = Duration::from_secs(15 * 60);
/// The replay jobs looked at, newest first.
const JOBS: u32 = 100;

/// `[QUEUE:]N`: tell the webhooks when a DLQ (every DLQ, without a queue) holds more than N
/// open messages, and again when it is back at N or under.
#[derive(Clone, PartialEq, Eq)]
pub struct ThresholdSpec {
    pub queue: Option<String>,
    pub open: u64,
}

impl std::fmt::Display for ThresholdSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.queue {
            Some(queue) => write!(f, "{queue}:{}", self.open),
            None => write!(f, "{}", self.open),
        }
    }
}

impl std::fmt::Debug for ThresholdSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl FromStr for ThresholdSpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let (queue, n) = match spec.rsplit_once(':') {
            Some((queue, n)) if !queue.is_empty() => (Some(queue.to_owned()), n),
            Some((_, n)) => (None, n),
            None => (None, spec),
        };
        let open = n
            .trim()
            .replace('_', "")
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0);
        let open = open.ok_or_else(|| {
            format!("{spec:?}: expected [QUEUE:]N, N a number of open messages above 0")
        })?;
        Ok(ThresholdSpec { queue, open })
    }
}

/// The thresholds of each DLQ: its own when it has some, else those for every DLQ.
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    every: Vec<u64>,
    own: HashMap<String, Vec<u64>>,
}

impl Thresholds {
    /// The thresholds, each queue read as `--queue` reads it (`name` in the AMQP URL's vhost
    /// `home`, `vhost/name` in another, `/name` for a home queue whose name holds `/`), so
    /// that it names the DLQ by the archive's key for it.
    pub fn new(specs: &[ThresholdSpec], home: &str) -> Result<Self, String> {
        let mut thresholds = Thresholds::default();
        for spec in specs {
            match &spec.queue {
                Some(queue) => {
                    let key = crate::message::dlq::Dlq::parse(queue, home)
                        .map_err(|e| format!("--webhook-threshold {spec}: {e}"))?
                        .key();
                    thresholds.own.entry(key).or_default().push(spec.open)
                }
                None => thresholds.every.push(spec.open),
            }
        }
        Ok(thresholds)
    }

    fn of(&self, queue: &str) -> &[u64] {
        self.own.get(queue).unwrap_or(&self.every)
    }
}

/// What `serve` needs to tell the webhooks.
pub struct Settings {
    pub thresholds: Thresholds,
    pub every: Duration,
}

/// Something the archive holds, in the state this look found it, and what to tell if the
/// row in `notifications` changes to that state.
struct Seen {
    key: String,
    state: String,
    /// Told when the row is new or changed...
    on_change: Option<Event>,
    /// ...and only when it changed (not on its first sighting).
    only_when_changed: bool,
}

/// Looks at the archive every `settings.every` and tells `webhooks` what changed, until
/// `shutdown`; a database that fails is tried again at the next look.
pub async fn watch(
    archive: Arc<dyn Archive>,
    settings: Settings,
    webhooks: Webhooks,
    shutdown: CancellationToken,
) {
    // The state this instance last wrote or found for each key: a key is written only when
    // a look finds it otherwise.
    let mut known: HashMap<String, String> = HashMap::new();
    loop {
        match look(archive.as_ref(), &settings.thresholds).await {
            Ok(seen) => {
                let mut now_known = HashMap::with_capacity(seen.len());
                let mut news = Vec::new();
                for s in seen {
                    if known.get(&s.key) != Some(&s.state) {
                        match archive.note_state(&s.key, &s.state).await {
                            Ok(noted) => {
                                let tell = match noted {
                                    Noted::New => !s.only_when_changed,
                                    Noted::Changed => true,
                                    Noted::Same => false,
                                };
                                if let (true, Some(event)) = (tell, s.on_change) {
                                    news.push(event);
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "noting a change for the webhooks failed; trying again");
                                continue;
                            }
                        }
                    }
                    now_known.insert(s.key, s.state);
                }
                known = now_known;
                webhooks.tell(news);
            }
            Err(e) => tracing::warn!(error = %e, "looking for what to tell the webhooks failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Everything watched, as the archive holds it now.
async fn look(archive: &dyn Archive, thresholds: &Thresholds) -> Result<Vec<Seen>, ArchiveError> {
    let recent = OffsetDateTime::now_utc() - RECENT;
    let mut seen = Vec::new();
    for group in archive.failure_groups_since(recent).await? {
        seen.push(Seen {
            // A cause group: its DLQ, failing queue, reason and cause.
            key: format!(
                "group\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
                group.queue.as_deref().unwrap_or_default(),
                group.first_death_queue.as_deref().unwrap_or_default(),
                group.reason.as_deref().unwrap_or_default(),
                group.cause()
            ),
            // A group deleted (purge, retention) and seen anew is new again.
            state: (group.first_seen.unix_timestamp_nanos() / 1_000_000).to_string(),
            on_change: Some(Event::NewFailureGroup(group)),
            only_when_changed: false,
        });
    }

    let mut open: HashMap<String, i64> = thresholds.own.keys().map(|q| (q.clone(), 0)).collect();
    if !thresholds.every.is_empty() || !thresholds.own.is_empty() {
        for count in archive.counts().await? {
            *open.entry(count.queue).or_default() += count.open;
        }
    }
    for (queue, open) in open {
        for &threshold in thresholds.of(&queue) {
            let over = open > i64::try_from(threshold).unwrap_or(i64::MAX);
            seen.push(Seen {
                key: format!("threshold\u{1f}{queue}\u{1f}{threshold}"),
                state: if over { "over" } else { "under" }.to_owned(),
                on_change: Some(if over {
                    Event::OverThreshold {
                        queue: queue.clone(),
                        open,
                        threshold,
                    }
                } else {
                    Event::BackUnder {
                        queue: queue.clone(),
                        open,
                        threshold,
                    }
                }),
                // Under a threshold is news only after being over it.
                only_when_changed: !over,
            });
        }
    }

    for job in archive.jobs(JOBS).await? {
        if job.state.is_final() && job.finished_at.is_none_or(|at| at < recent) {
            continue;
        }
        let told = matches!(
            job.state,
            JobState::Completed | JobState::Cancelled | JobState::Paused
        );
        // Paused again after a resume is a change: the state names how far it had got.
        let state = match job.state {
            JobState::Paused => format!("paused {}", job.done()),
            JobState::Completed | JobState::Cancelled => job.state.as_str().to_owned(),
            _ => "active".to_owned(),
        };
        seen.push(Seen {
            key: format!("job\u{1f}{}", job.id),
            state,
            on_change: told.then(|| Event::Job(Box::new(job))),
            only_when_changed: false,
        });
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_read_per_queue_or_for_every_dlq() {
        let specs: Vec<ThresholdSpec> = ["1000", "orders:q.dlq:50", "orders:q.dlq:5_000", ":7"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            specs[1],
            ThresholdSpec {
                queue: Some("orders:q.dlq".into()),
                open: 50
            }
        );
        let t = Thresholds::new(&specs, "shop").unwrap();
        assert_eq!(t.of("orders:q.dlq"), [50, 5000]);
        assert_eq!(t.of("other"), [1000, 7]);
        // Queues are named as --queue names them: by the archive's key for the DLQ.
        let named: Vec<ThresholdSpec> = ["shop/q:1", "%2Fa/b:2", "/x/y:3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let t = Thresholds::new(&named, "shop").unwrap();
        assert_eq!(
            t.of("q"),
            [1],
            "the home vhost spelled out is the home vhost"
        );
        assert_eq!(t.of("%2Fa/b"), [2]);
        assert_eq!(t.of("/x/y"), [3], "a home queue whose name holds /");
        assert!(t.of("x/y").is_empty(), "not vhost x's queue y");
        for wrong in ["", "q:", "q:0", "q:-1", "q:many", "1.5"] {
            let e = wrong.parse::<ThresholdSpec>().unwrap_err();
            assert!(e.contains("[QUEUE:]N"), "{wrong}: {e}");
        }
    }
}

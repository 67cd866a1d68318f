//! How a replay runner works (its settings, [`RunnerSettings`]), and the names runners claim
//! jobs under.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use crate::archive::JobState;
use crate::message::exchange_policy::ExchangePolicy;
use crate::runtime::instance::Identity;
use crate::runtime::metrics::Metrics;

/// How a runner works.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Every broker by name: each message goes back to its own.
    pub brokers: crate::message::brokers::Brokers,
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
            brokers: crate::message::brokers::Brokers::single(amqp_url),
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
    pub(super) fn instance(&self) -> Option<&str> {
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

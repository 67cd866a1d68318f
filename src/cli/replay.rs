//! `lazarus replay`: the command-line twin of the replay pages. Freezes a selection into a
//! job in the archive, prints its plan, runs it here (or follows the instance that claimed
//! it) with a progress line, and tells by its exit code whether everything was published.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::archive::selection::ListParams;
use crate::archive::BusinessField;
use crate::archive::{self, Actor, Archive, Canary, JobState, ReplayJob, TargetCount};
use crate::config::ConnectionArgs;
use crate::message::death::ReplayTarget;
use crate::message::exchange_policy::ExchangePolicy;
use crate::replay::job::{run_one, RunnerSettings};
use crate::replay::plan::{self, human_duration, IdValue, JobRequest, SelectionRequest};
use crate::support::format::thousands;
use crate::support::secret_url::redact_url;

#[derive(Debug, Clone, Args)]
pub struct ReplayConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    #[command(flatten)]
    pub filter: ListParams,
    /// Replay these archive ids instead of a filter (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<i64>,
    /// Select every archived message (no filter): required to replay without one.
    #[arg(long)]
    pub all: bool,
    /// Business fields the search may use, as with `serve` (name=/json/pointer).
    #[arg(long = "field", env = "LAZARUS_FIELD", value_delimiter = ',')]
    pub fields: Vec<BusinessField>,

    /// Send every message to EXCHANGE/ROUTING_KEY instead of its own replay target
    /// (`/orders` is the default exchange with routing key `orders`).
    #[arg(long)]
    pub target: Option<String>,

    /// Send each message only to the queue it first died in (the default exchange, the
    /// queue's name as routing key), not to its original exchange and key, which reach every
    /// queue bound to the key.
    #[arg(long, conflicts_with = "target")]
    pub to_first_death_queue: bool,
    /// At most this many messages per second.
    #[arg(long)]
    pub rate: Option<u32>,
    /// Print the plan and publish nothing (the plan stays visible on the Replays page).
    #[arg(long)]
    pub dry_run: bool,
    /// Replay this many messages first, wait --canary-wait seconds, and go on only if at
    /// most --canary-max-deaths of them died again.
    #[arg(long)]
    pub canary: Option<u32>,
    #[arg(long, default_value_t = 30)]
    pub canary_wait: u32,
    #[arg(long, default_value_t = 0)]
    pub canary_max_deaths: u32,
    /// Also replay messages that were replayed or dismissed before.
    #[arg(long)]
    pub include_replayed: bool,
    /// Exchanges replays may publish to, as with `serve`.
    #[arg(
        long = "replay-exchange",
        env = "LAZARUS_REPLAY_EXCHANGE",
        value_delimiter = ','
    )]
    pub replay_exchanges: Vec<String>,
}

/// How `lazarus replay` ended, as its exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Everything meant to be published was (or a dry run).
    Clean = 0,
    /// Some messages were unroutable, nacked or failed; or the job was paused or cancelled.
    Problems = 1,
    /// Ctrl-C: the job was paused.
    Interrupted = 130,
}

/// `EXCHANGE/ROUTING_KEY`; `/key` is the default exchange.
pub fn parse_target(s: &str) -> anyhow::Result<ReplayTarget> {
    let (exchange, routing_key) = s.split_once('/').with_context(|| {
        format!("--target must be EXCHANGE/ROUTING_KEY (\"/queue\" for the default exchange), not {s:?}")
    })?;
    Ok(ReplayTarget {
        exchange: exchange.to_owned(),
        routing_key: routing_key.to_owned(),
    })
}

impl ReplayConfig {
    /// The same request the API takes.
    pub fn request(&self) -> anyhow::Result<JobRequest> {
        let filter = self.filter.filters_only();
        let selection = match (self.ids.is_empty(), filter == ListParams::default()) {
            (false, true) => SelectionRequest {
                ids: Some(self.ids.iter().map(|id| IdValue::Number(*id)).collect()),
                ..Default::default()
            },
            (true, false) => SelectionRequest {
                filter: Some(filter),
                ..Default::default()
            },
            (true, true) if self.all => SelectionRequest {
                filter: Some(filter),
                all: true,
                ..Default::default()
            },
            (true, true) => anyhow::bail!(
                "select messages with filters (--queue, --reason, --q, ...) or --id; \
                 --all replays the whole archive"
            ),
            (false, false) => anyhow::bail!("give either --id or filters, not both"),
        };
        Ok(JobRequest {
            selection,
            target: self.target.as_deref().map(parse_target).transpose()?,
            to_first_death_queue: self.to_first_death_queue,
            rate_per_sec: self.rate,
            dry_run: self.dry_run,
            include_replayed: self.include_replayed,
            canary: self.canary.map(|count| Canary {
                count,
                wait_secs: self.canary_wait,
                max_deaths: self.canary_max_deaths,
            }),
            request_key: None,
        })
    }
}

/// The command line's actor in the audit log: `cli:` and the OS user.
pub fn cli_actor() -> Actor {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    Actor::system(&format!("cli:{user}"))
}

/// The plan, as printed before anything is published.
/// A plan's target in words: `orders → order.created`, in its vhost, and where it came from
/// when a framework's convention gave it.
fn target_line(t: &TargetCount) -> String {
    let target = ReplayTarget {
        exchange: t.exchange.clone(),
        routing_key: t.routing_key.clone(),
    };
    let from = t
        .target_from
        .as_ref()
        .map_or_else(String::new, |from| format!(" (target from {from})"));
    let on = match t.broker.as_str() {
        crate::message::dlq::DEFAULT_BROKER => String::new(),
        broker => format!(" on broker {broker:?}"),
    };
    format!(
        "{}{}{on}{from}",
        target.label(),
        crate::message::dlq::in_vhost(&t.vhost)
    )
}

pub fn plan_text(job: &ReplayJob) -> String {
    let p = &job.plan;
    let mut out = format!(
        "Replay job {}: {} messages selected, {} to publish\n",
        job.id, p.messages, p.to_publish
    );
    for t in &p.targets {
        out.push_str(&format!("  {:>8}  to {}\n", t.messages, target_line(t)));
    }
    for t in &p.refused_targets {
        out.push_str(&format!(
            "  {:>8}  NOT to {}: not an exchange --replay-exchange allows\n",
            t.messages,
            target_line(t)
        ));
    }
    out.push_str(&format!(
        "  skipped: {} without a known target, {} already replayed, {} dismissed, {} in another job, {} to an exchange not allowed\n",
        p.no_target, p.already_replayed, p.dismissed, p.in_other_jobs, p.not_allowed
    ));
    if let Some(s) = job.estimated_seconds {
        out.push_str(&format!(
            "  at {}/s: about {}\n",
            job.rate_per_sec.unwrap_or_default(),
            human_duration(s)
        ));
    }
    out
}

/// One progress line ("done": messages with an outcome; what became of their copies is
/// the job page's).
pub fn progress_text(job: &ReplayJob) -> String {
    let c = &job.counts;
    format!(
        "{}: {}/{} done · published {} · unroutable {} · nacked {} · failed {} · skipped {} · cancelled {}{}{}",
        job.state.as_str(),
        thousands(job.done()),
        thousands(job.total),
        thousands(c.published),
        thousands(c.unroutable),
        thousands(c.nacked),
        thousands(c.failed),
        thousands(c.skipped),
        thousands(c.cancelled),
        job.detail
            .as_deref()
            .map(|d| format!(" · {d}"))
            .unwrap_or_default(),
        match job.waiting_for_brokers.as_slice() {
            [] => String::new(),
            brokers => format!(
                " · waiting for an instance with --broker {} (none running has it)",
                brokers.join(", --broker ")
            ),
        }
    )
}

/// Runs `lazarus replay`.
pub async fn run(config: ReplayConfig, shutdown: CancellationToken) -> anyhow::Result<Ending> {
    let request = config.request()?;
    let fields: Vec<String> = config.fields.iter().map(|f| f.name.clone()).collect();
    // Mistakes are told before the archive is even opened.
    request.check()?;
    let home_vhost = crate::message::dlq::home_vhost(&config.connection.amqp_url);
    request.selection.resolve(&fields, &home_vhost)?;
    let url = &config.connection.database_url;
    let archive: Arc<dyn Archive> = archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))?;
    let policy = ExchangePolicy::new(&config.replay_exchanges);
    let job = plan::create_job(
        &*archive,
        &request,
        &cli_actor(),
        &fields,
        &home_vhost,
        &policy,
    )
    .await?;
    print!("{}", plan_text(&job));
    if request.dry_run {
        println!("Dry run: nothing was published. The plan is on the Replays page.");
        return Ok(Ending::Clean);
    }
    let settings = RunnerSettings {
        on_shutdown: JobState::Paused,
        policy: Arc::new(policy),
        brokers: config
            .connection
            .brokers()
            .map_err(anyhow::Error::msg)
            .context("--broker")?,
        ..RunnerSettings::new(&config.connection.amqp_url)
    };
    let printer = tokio::spawn(print_progress(archive.clone(), job.id));
    let ending = follow(&*archive, &settings, job.id, &shutdown).await;
    printer.abort();
    let job = archive.job(job.id).await?.context("the job disappeared")?;
    println!("{}", progress_text(&job));
    ending
}

/// Runs the job here whenever no other instance holds it, until it is over or paused.
async fn follow(
    archive: &dyn Archive,
    settings: &RunnerSettings,
    id: i64,
    shutdown: &CancellationToken,
) -> anyhow::Result<Ending> {
    loop {
        let job = archive.job(id).await?.context("the job disappeared")?;
        match job.state {
            JobState::Completed if job.counts.problems() == 0 => return Ok(Ending::Clean),
            JobState::Completed | JobState::Cancelled => return Ok(Ending::Problems),
            JobState::Paused if !shutdown.is_cancelled() => return Ok(Ending::Problems),
            _ if shutdown.is_cancelled() => {
                eprintln!("{}", interrupted_text(&job));
                return Ok(Ending::Interrupted);
            }
            _ => {}
        }
        if !run_one(archive, settings, id, shutdown).await? {
            // Another instance runs it: follow from the database.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}

/// What Ctrl-C leaves of the job, as `lazarus replay` says it: paused when it ran here (the
/// runner pauses it on shutdown); still running or queued when another instance holds it or
/// none may run it yet — Ctrl-C stops only the following.
fn interrupted_text(job: &ReplayJob) -> String {
    let id = job.id;
    match job.state {
        JobState::Paused => format!(
            "Interrupted: job {id} is paused; resume it on the Replays page, with \
             POST /api/replays/{id}/resume, or cancel it."
        ),
        JobState::Running => format!(
            "Interrupted: job {id} goes on in another instance; follow it on the Replays page, \
             or pause or cancel it there (POST /api/replays/{id}/pause, /cancel)."
        ),
        _ => format!(
            "Interrupted: job {id} stays {}, for an instance to run{}; follow it on the \
             Replays page, or cancel it there (POST /api/replays/{id}/cancel).",
            job.state.as_str(),
            match job.waiting_for_brokers.as_slice() {
                [] => String::new(),
                brokers => format!(" (one with --broker {})", brokers.join(", --broker ")),
            }
        ),
    }
}

async fn print_progress(archive: Arc<dyn Archive>, id: i64) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Ok(Some(job)) = archive.job(id).await {
            eprintln!("{}", progress_text(&job));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn config(args: &[&str]) -> ReplayConfig {
        let mut all = vec!["lazarus", "replay"];
        all.extend_from_slice(args);
        match Cli::parse_from(all).command {
            Command::Replay(c) => *c,
            _ => unreachable!(),
        }
    }

    #[test]
    fn targets_split_at_the_first_slash() {
        let t = parse_target("orders/eu/created").unwrap();
        assert_eq!(
            (t.exchange.as_str(), t.routing_key.as_str()),
            ("orders", "eu/created")
        );
        let t = parse_target("/invoices").unwrap();
        assert_eq!(
            (t.exchange.as_str(), t.routing_key.as_str()),
            ("", "invoices")
        );
        assert!(parse_target("orders").is_err());
    }

    #[test]
    fn a_target_a_framework_gave_says_so() {
        let mut t = TargetCount {
            vhost: "shop".into(),
            broker: "default".into(),
            exchange: String::new(),
            routing_key: "submit-order".into(),
            messages: 3,
            target_from: Some("MassTransit's MT-Fault-InputAddress".into()),
        };
        assert_eq!(
            target_line(&t),
            "(AMQP default) → submit-order in vhost \"shop\" \
             (target from MassTransit's MT-Fault-InputAddress)"
        );
        t.target_from = None;
        assert_eq!(
            target_line(&t),
            "(AMQP default) → submit-order in vhost \"shop\""
        );
    }

    #[test]
    fn a_selection_is_required_and_one_kind_only() {
        let err = config(&[]).request().unwrap_err().to_string();
        assert!(err.contains("--all replays the whole archive"), "{err}");
        assert!(config(&["--all"]).request().is_ok());
        let err = config(&["--id", "3", "--queue", "q"])
            .request()
            .unwrap_err();
        assert!(err.to_string().contains("not both"));
        let r = config(&[
            "--queue",
            "billing.dlq",
            "--rate",
            "50",
            "--canary",
            "5",
            "--dry-run",
        ])
        .request()
        .unwrap();
        assert_eq!(
            r.selection.filter.unwrap().queue.as_deref(),
            Some("billing.dlq")
        );
        assert_eq!(r.canary.unwrap().wait_secs, 30);
        assert!(r.dry_run);
    }

    #[test]
    fn ctrl_c_says_what_became_of_the_job() {
        let mut job = ReplayJob {
            id: 9,
            state: JobState::Paused,
            detail: None,
            actor: "cli".into(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            started_at: None,
            finished_at: None,
            selection: serde_json::json!({}),
            target: None,
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: false,
            canary: None,
            plan: Default::default(),
            counts: Default::default(),
            total: 5,
            estimated_seconds: None,
            waiting_for_brokers: Vec::new(),
        };
        // Run here: the runner paused it on the way out.
        assert!(interrupted_text(&job).contains("job 9 is paused; resume it"));
        // Held by another instance: it goes on there, nothing was paused.
        job.state = JobState::Running;
        let running = interrupted_text(&job);
        assert!(running.contains("goes on in another instance"), "{running}");
        assert!(!running.contains("paused;"), "{running}");
        // Queued for an instance with a broker this one lacks.
        job.state = JobState::Queued;
        job.waiting_for_brokers = vec!["us".into()];
        let queued = interrupted_text(&job);
        assert!(
            queued.contains("stays queued, for an instance to run (one with --broker us)"),
            "{queued}"
        );
    }
}

//! Builds the application from its config and runs the DLQ consumers, the replay job
//! runner and the web server side by side until shutdown, then drains: in-flight batches are stored and acked, or
//! left unacked for the broker to keep.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::amqp::adopt;
use crate::amqp::consumer::{self, ConsumerContext};
use crate::amqp::managements::Managements;
use crate::archive::{self, Archive};
use crate::config::ServeConfig;
use crate::message::broker_nodes::BrokerNodes;
use crate::message::dlq::Dlq;
use crate::replay::job;
use crate::runtime::instance;
use crate::runtime::status::ConsumerState;
use crate::support::secret_url::redact_url;
use crate::web::serve::{self, ServeSettings};
use crate::web::{self, AppState};

/// Business fields per archive: each is a list column and an index entry per message.
pub const MAX_BUSINESS_FIELDS: usize = 20;

pub struct Application {
    config: ServeConfig,
    listener: TcpListener,
    /// The web's state; its archive is the one for requests.
    state: AppState,
    /// The archive, as the consumers and the job runner use it (`background`) and as HTTP
    /// requests reach it (`requests`; the web's state holds its `Console` side).
    archive: archive::ServedArchive,
    /// Each broker's management API that `--management-url` names.
    managements: Arc<Managements>,
    /// The DLQs `--queue` names.
    dlqs: Vec<Dlq>,
}

impl Application {
    /// Opens the archive (running migrations) and binds the listener; `--listen` with port 0
    /// picks a free port, which [`Application::local_addr`] tells.
    pub async fn build(config: ServeConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            config.fields.len() <= MAX_BUSINESS_FIELDS,
            "at most {MAX_BUSINESS_FIELDS} --field are supported, not {}",
            config.fields.len()
        );
        let retention = config
            .retention
            .policy(&config.connection.amqp_url)
            .map_err(anyhow::Error::msg)
            .context("--retention")?;
        // A broker given as several addresses is read once here, to refuse a broken list.
        BrokerNodes::parse(&config.connection.amqp_url)
            .map_err(anyhow::Error::msg)
            .context("--amqp-url")?;
        let archive = archive::open_served(&config.connection.database_url)
            .await
            .with_context(|| {
                format!(
                    "opening the archive {}",
                    redact_url(&config.connection.database_url)
                )
            })?;
        let brokers = config
            .connection
            .brokers()
            .map_err(anyhow::Error::msg)
            .context("--broker")?;
        let managements = Arc::new(
            crate::config::managements(&config.management_urls, &brokers)
                .map_err(anyhow::Error::msg)?,
        );
        anyhow::ensure!(
            !config.discover.discover || !managements.is_empty(),
            "--discover finds DLQs through RabbitMQ's management API: give --management-url"
        );
        let schemas = config.schemas().map_err(anyhow::Error::msg)?;
        let home = crate::message::dlq::home_vhost(&config.connection.amqp_url);
        let dlqs = brokers
            .parse_queues(&config.queues)
            .map_err(|e| anyhow::anyhow!("--queue {e}"))?;
        // Checked here, so that a threshold naming no DLQ stops Lazarus with the reason.
        crate::notify::Thresholds::new(&config.webhooks.thresholds, &home)
            .map_err(anyhow::Error::msg)?;
        // An archive whose default-broker DLQs are keyed as another broker's is refused before
        // anything is consumed into it (a database not answering yet: once it does).
        if archive.is_prepared() {
            refuse_key_clashes(&*archive.requests, &brokers).await?;
        }
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let auth = config.auth_settings().map_err(anyhow::Error::msg)?;
        let no_users = matches!(archive.requests.users().await, Ok(users) if users.is_empty());
        if auth.mode == crate::auth::AuthMode::Users && no_users {
            tracing::warn!(
                "--auth users and no user yet: add one with `lazarus user add NAME --role admin`"
            );
        }
        let mut state = AppState::new(
            archive.requests.clone(),
            config.fields.iter().map(|f| f.name.clone()).collect(),
            &config.connection.amqp_url,
        );
        state.auth = Arc::new(auth);
        state.brokers = Arc::new(brokers);
        state.masking = Arc::new(web::masking::Masking::new(&config.masks, &config.fields));
        state.schemas = schemas;
        state.replay_policy = Arc::new(config.replay_policy());
        state.settle = Duration::from_secs(config.settle_secs);
        state.managements = managements.clone();
        state.retention = (!retention.is_empty()).then(|| Arc::from(retention.describe()));
        state.notifications = crate::notify::NotifyStatus::new(
            config
                .webhooks
                .webhooks
                .iter()
                .map(|w| w.redacted())
                .collect(),
            config
                .webhooks
                .thresholds
                .iter()
                .map(|t| t.to_string())
                .collect(),
        );
        if state.replay_policy.is_open() && !config.queues.is_empty() {
            tracing::info!(
                "no --replay-exchange: replays publish to whatever exchange a message's x-death names"
            );
        }
        Ok(Application {
            config,
            listener,
            state,
            archive,
            managements,
            dlqs,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn amqp_url(&self) -> String {
        self.config.connection.amqp_url.expose().to_owned()
    }

    pub fn archive(&self) -> Arc<dyn Archive> {
        self.archive.requests.clone()
    }

    /// Runs until `shutdown` resolves, then stops taking deliveries and requests, and
    /// returns once every consumer has stored and acked (or given back) what it held. The web
    /// serves at once; everything that writes the archive starts once it takes a write
    /// ([`start_work`]).
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        let addr = self.local_addr();
        let Application {
            config,
            listener,
            state,
            archive,
            managements,
            dlqs,
        } = self;
        let refused = Arc::new(std::sync::OnceLock::new());
        // Not ready until each DLQ is consumed: none is before the archive takes writes.
        for dlq in &dlqs {
            state.status.set(dlq, ConsumerState::Connecting);
        }
        let work = Work {
            config: config.clone(),
            state: state.clone(),
            archive,
            managements,
            dlqs,
            addr,
            refused: refused.clone(),
        };
        tracker.spawn(start_work(work, token.clone(), tracker.clone()));
        tracker.close();

        let trigger = token.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down: finishing in-flight batches");
            trigger.cancel();
        });
        let rabbitmq = BrokerNodes::parse(&config.connection.amqp_url)
            .map(|b| b.addresses())
            .unwrap_or_default();
        tracing::info!(address = %addr, queues = ?config.queues, rabbitmq, "lazarus is serving");
        let settings = ServeSettings {
            header_timeout: Duration::from_secs(config.header_timeout_secs.max(1)),
            max_connections: config
                .max_connections
                .unwrap_or_else(serve::default_max_connections),
        };
        tracing::debug!(?settings, "web server limits");
        serve::serve(listener, web::router(state), settings, token.clone()).await;
        // Whatever stopped the server also stops the consumers.
        token.cancel();
        tracker.wait().await;
        match refused.get() {
            Some(why) => Err(anyhow::anyhow!("{why}")),
            None => Ok(()),
        }
    }
}

/// What the background work of a running application needs.
struct Work {
    config: ServeConfig,
    state: AppState,
    archive: archive::ServedArchive,
    managements: Arc<Managements>,
    dlqs: Vec<Dlq>,
    addr: SocketAddr,
    /// Why the archive was refused once the database answered (it did not at start-up).
    refused: Arc<std::sync::OnceLock<String>>,
}

/// Waits until the archive takes a write ([`archive::ServedArchive::prepare`]: created and
/// migrated if start-up could not, a batch's write probed), then starts everything that
/// writes it: the DLQ consumers and the indexer that follows them, discovery, the instance
/// name, reindexing, settling, retention, webhooks and the replay job runner. Until then no
/// delivery is taken, so no restart of a process that cannot store spends a delivery of a
/// quorum DLQ.
async fn start_work(work: Work, token: CancellationToken, tracker: TaskTracker) {
    let checked = work.archive.is_prepared();
    if !archive_ready(&work, &token).await {
        return;
    }
    let Work {
        config,
        state,
        archive,
        managements,
        dlqs,
        addr,
        refused,
    } = work;
    if !checked {
        if let Err(e) = refuse_key_clashes(&*archive.background, &state.brokers).await {
            tracing::error!("{e:#}");
            let _ = refused.set(format!("{e:#}"));
            token.cancel();
            return;
        }
    }
    let background = archive.background;
    let ctx = ConsumerContext {
        amqp_url: config.connection.amqp_url.expose().to_owned(),
        archive: background.clone(),
        settings: config.batch_settings(),
        rules: config.ingest_rules(state.schemas.clone()),
        status: state.status.clone(),
        metrics: state.metrics.clone(),
        management: None,
        index: Arc::new(crate::runtime::indexer::IndexWake::default()),
        shutdown: token.clone(),
    };
    // Each DLQ is consumed from its own broker, its delivery limit read through that broker's
    // management API (`--management-url NAME=…`) where one is given.
    let on_broker = |name: &str| ConsumerContext {
        amqp_url: state
            .brokers
            .url(name)
            .expect("DLQs are only of brokers --broker gives")
            .to_owned(),
        management: managements.get(name).cloned(),
        ..ctx.clone()
    };
    for dlq in &dlqs {
        tracker.spawn(consumer::supervise(dlq.clone(), on_broker(&dlq.broker)));
    }
    if config.discover.discover {
        let args = &config.discover;
        for management in managements.iter() {
            tracker.spawn(adopt::discover(
                management.clone(),
                on_broker(management.broker()),
                adopt::Settings {
                    patterns: adopt::Patterns::from(&args.patterns),
                    every: Duration::from_secs(args.discover_interval_secs),
                    configured: dlqs.clone(),
                    brokers: state.brokers.clone(),
                },
                tracker.clone(),
            ));
        }
        let missing = managements.missing(&state.brokers);
        if !missing.is_empty() {
            tracing::info!(
                brokers = ?missing,
                "--discover: no --management-url NAME=… for these brokers; only their --queue DLQs are archived"
            );
        }
    } else if config.queues.is_empty() {
        tracing::warn!("no --queue given: serving the archive without consuming anything");
    }
    let name = match &config.instance_name {
        Some(name) => name.clone(),
        None => instance::default_name(addr),
    };
    let identity = instance::hold(
        background.clone(),
        name,
        state.jobs_wake.clone(),
        token.clone(),
        &tracker,
    )
    .await;
    tracker.spawn(crate::runtime::indexer::run(
        background.clone(),
        ctx.rules.clone(),
        ctx.index.clone(),
        token.clone(),
    ));
    tracker.spawn(crate::runtime::statistics::run(
        background.clone(),
        token.clone(),
    ));
    tracker.spawn(reindex_search(
        background.clone(),
        ctx.rules.clone(),
        token.clone(),
    ));
    tracker.spawn(settle_replays(
        background.clone(),
        Duration::from_secs(config.settle_secs),
        token.clone(),
    ));
    let retention = config
        .retention
        .policy(&config.connection.amqp_url)
        .unwrap_or_default();
    if !retention.is_empty() {
        tracker.spawn(crate::retention::keep(
            background.clone(),
            retention,
            Duration::from_secs(config.retention.retention_interval_secs),
            format!("{} (pid {})", identity.name(), std::process::id()),
            state.metrics.clone(),
            token.clone(),
        ));
    }
    if !config.webhooks.webhooks.is_empty() {
        let args = &config.webhooks;
        let webhooks = crate::notify::Webhooks::start(
            &args.webhooks,
            args.public_url.clone(),
            args.rate(),
            state.metrics.clone(),
            state.notifications.clone(),
            &token,
            &tracker,
        );
        tracker.spawn(crate::notify::watch(
            background.clone(),
            crate::notify::Settings {
                thresholds: crate::notify::Thresholds::new(
                    &args.thresholds,
                    &crate::message::dlq::home_vhost(&config.connection.amqp_url),
                )
                .expect("checked at start-up"),
                every: Duration::from_secs(args.webhook_interval_secs),
            },
            webhooks,
            token.clone(),
        ));
    } else if !config.webhooks.thresholds.is_empty() {
        tracing::warn!("--webhook-threshold without --webhook: nobody to tell");
    }
    tracker.spawn(job::run(
        background.clone(),
        config
            .runner_settings(state.metrics.clone())
            .as_instance(identity),
        state.jobs_wake.clone(),
        token,
    ));
}

/// Refuses an archive that holds messages of a default-broker DLQ keyed as another broker's
/// (`us:orders.dlq` of the default broker beside `--broker us`): archived before that broker
/// was named (or imported), they would be taken for its, in counts, rights, retention and
/// replays. Read from a small index of the default broker's keys holding `:`.
async fn refuse_key_clashes(
    archive: &dyn Archive,
    brokers: &crate::message::brokers::Brokers,
) -> anyhow::Result<()> {
    if !brokers.several() {
        return Ok(());
    }
    let keys = archive
        .default_keys_with_colon()
        .await
        .context("reading the archive's DLQ keys")?;
    match key_clash(&keys, brokers) {
        None => Ok(()),
        Some(why) => Err(anyhow::anyhow!(why)),
    }
}

/// What is wrong with default-broker DLQ `keys` beside `brokers`, in words (pure).
fn key_clash(keys: &[String], brokers: &crate::message::brokers::Brokers) -> Option<String> {
    let clashes: Vec<(&str, &str)> = keys
        .iter()
        .filter_map(|k| brokers.clashing(k).map(|b| (k.as_str(), b)))
        .collect();
    let (key, broker) = *clashes.first()?;
    let more = match clashes.len() {
        1 => String::new(),
        n => format!(" (and {} more such queues)", n - 1),
    };
    Some(format!(
        "the archive holds messages of the default broker's queue {key:?}{more}, whose key \
         starts with \"{broker}:\" as those of --broker {broker} do: they would be taken for \
         broker {broker}'s. Give that broker another name (--broker OTHER=…), or, started \
         without --broker {broker}, export and purge that queue's messages first \
         (POST /api/admin/purge)"
    ))
}

/// Tries [`archive::ServedArchive::prepare`] until it succeeds (`true`) or shutdown comes
/// (`false`). Meanwhile each DLQ reads `database_unavailable` on `/readyz`, with the reason.
async fn archive_ready(work: &Work, token: &CancellationToken) -> bool {
    let mut backoff =
        crate::support::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut warned = false;
    loop {
        match work.archive.prepare().await {
            Ok(()) => {
                if warned {
                    tracing::info!("the archive takes writes: consuming");
                }
                return true;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        error = %e,
                        "the archive does not take writes: consuming nothing until it does"
                    );
                    warned = true;
                }
                for dlq in &work.dlqs {
                    work.state
                        .status
                        .set(dlq, ConsumerState::DatabaseUnavailable(e.to_string()));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = token.cancelled() => return false,
        }
    }
}

/// What the background catch-up brings up to date in messages archived by an earlier version.
#[derive(Clone, Copy)]
enum CatchUp {
    /// Their failure groups, keyed on causes.
    Groups,
    /// Their search index.
    Search,
}

impl CatchUp {
    async fn batch(
        self,
        archive: &dyn Archive,
        rules: &archive::IngestRules,
        limit: u32,
    ) -> Result<Option<archive::ReindexProgress>, archive::ArchiveError> {
        match self {
            CatchUp::Groups => archive.regroup_batch(rules, limit).await,
            CatchUp::Search => archive.reindex_batch(rules, limit).await,
        }
    }

    fn doing(self) -> &'static str {
        match self {
            CatchUp::Groups => {
                "regrouping failures by cause of messages archived by an earlier version"
            }
            CatchUp::Search => {
                "reindexing the search entries of messages archived by an earlier version"
            }
        }
    }

    fn done(self) -> &'static str {
        match self {
            CatchUp::Groups => "failure groups up to date",
            CatchUp::Search => "search index up to date",
        }
    }
}

/// Brings the failure groups, then the search index, of messages archived by an earlier
/// version up to date, a batch at a time beside ingest and requests, until nothing is left
/// (at once, on an archive that is up to date). A failing database is waited out.
async fn reindex_search(
    archive: Arc<dyn Archive>,
    rules: archive::IngestRules,
    shutdown: CancellationToken,
) {
    for step in [CatchUp::Groups, CatchUp::Search] {
        if !catch_up(&*archive, &rules, step, &shutdown).await {
            return;
        }
    }
}

/// Runs `step` until it is done (`true`) or shutdown comes (`false`).
async fn catch_up(
    archive: &dyn Archive,
    rules: &archive::IngestRules,
    step: CatchUp,
    shutdown: &CancellationToken,
) -> bool {
    const BATCH: u32 = 500;
    let (mut rewritten, mut worked, mut reported) = (0u64, false, std::time::Instant::now());
    while !shutdown.is_cancelled() {
        let pause = match step.batch(archive, rules, BATCH).await {
            Ok(None) => {
                if worked {
                    tracing::info!(rewritten, "{}", step.done());
                }
                return true;
            }
            Ok(Some(progress)) => {
                worked = true;
                rewritten += progress.rewritten;
                if reported.elapsed() >= Duration::from_secs(10) {
                    tracing::info!(
                        done_through = progress.done_through,
                        last_id = progress.last_id,
                        rewritten,
                        "{}",
                        step.doing()
                    );
                    reported = std::time::Instant::now();
                }
                // Leaves the database to ingest and requests between batches.
                Duration::from_millis(5)
            }
            Err(e) => {
                tracing::warn!(error = %e, "{} failed; trying again in 30 s", step.doing());
                Duration::from_secs(30)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return false,
        }
    }
    false
}

/// Resolves replayed messages whose copy has not died again within `settle`, checking every
/// tenth of it (between 1 and 30 seconds), and forgets old per-minute counts. A failing
/// database is waited out.
async fn settle_replays(archive: Arc<dyn Archive>, settle: Duration, shutdown: CancellationToken) {
    const BATCH: u32 = 1_000;
    let every = (settle / 10).clamp(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        let before = time::OffsetDateTime::now_utc() - settle;
        if let Err(e) = archive.prune_minutes().await {
            tracing::warn!(error = %e, "forgetting old per-minute counts failed");
        }
        let pause = loop {
            match archive.settle(before, BATCH).await {
                Ok(n) if n == u64::from(BATCH) => continue,
                Ok(n) => {
                    if n > 0 {
                        tracing::debug!(settled = n, "replayed messages resolved");
                    }
                    break every;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "settling replayed messages failed; trying again in 30 s");
                    break Duration::from_secs(30);
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_key_another_broker_would_share_is_named_with_its_broker() {
        let brokers =
            crate::message::brokers::Brokers::new("amqp://a", &[("us".into(), "amqp://b".into())])
                .unwrap();
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(
            key_clash(&keys(&["eu:x", "a:b:c", "tenant/us:x"]), &brokers),
            None
        );
        let why = key_clash(&keys(&["eu:x", "us:orders.dlq"]), &brokers).unwrap();
        assert!(
            why.contains("queue \"us:orders.dlq\",") && why.contains("--broker us do"),
            "{why}"
        );
        let why = key_clash(&keys(&["us:a", "us:b"]), &brokers).unwrap();
        assert!(why.contains("(and 1 more such queues)"), "{why}");
        assert_eq!(key_clash(&[], &brokers), None);
    }
}

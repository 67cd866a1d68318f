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
use crate::amqp::dlq::Dlq;
use crate::amqp::management::Management;
use crate::archive::{self, Archive};
use crate::config::{redact_url, ServeConfig};
use crate::instance;
use crate::replay::job;
use crate::web::serve::{self, ServeSettings};
use crate::web::{self, AppState};

/// Business fields per archive: each is a list column and an index entry per message.
pub const MAX_BUSINESS_FIELDS: usize = 20;

pub struct Application {
    config: ServeConfig,
    listener: TcpListener,
    /// The web's state; its archive is the one for requests.
    state: AppState,
    /// The archive as the consumers and the job runner use it.
    background: Arc<dyn Archive>,
    /// The archive as HTTP requests reach it (the web's state holds its `Console` side).
    requests: Arc<dyn Archive>,
    /// RabbitMQ's management API, when `--management-url` names it.
    management: Option<Arc<Management>>,
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
        let archive = archive::open_served(&config.connection.database_url)
            .await
            .with_context(|| {
                format!(
                    "opening the archive {}",
                    redact_url(&config.connection.database_url)
                )
            })?;
        let management = config
            .management_url
            .as_deref()
            .map(|url| Management::new(url, &config.connection.amqp_url).map(Arc::new))
            .transpose()?;
        anyhow::ensure!(
            !config.discover.discover || management.is_some(),
            "--discover finds DLQs through RabbitMQ's management API: give --management-url"
        );
        let schemas = config.schemas().map_err(anyhow::Error::msg)?;
        let home = crate::amqp::dlq::home_vhost(&config.connection.amqp_url);
        let dlqs = crate::amqp::dlq::parse_all(&config.queues, &home)
            .map_err(|e| anyhow::anyhow!("--queue {e}"))?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let auth = config.auth_settings().map_err(anyhow::Error::msg)?;
        if auth.mode == crate::auth::AuthMode::Users && archive.requests.users().await?.is_empty() {
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
        state.masking = Arc::new(web::masking::Masking::new(&config.masks, &config.fields));
        state.schemas = schemas;
        state.replay_policy = Arc::new(config.replay_policy());
        state.settle = Duration::from_secs(config.settle_secs);
        state.management = management.clone();
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
            background: archive.background,
            requests: archive.requests,
            management,
            dlqs,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn amqp_url(&self) -> String {
        self.config.connection.amqp_url.clone()
    }

    pub fn archive(&self) -> Arc<dyn Archive> {
        self.requests.clone()
    }

    /// Runs until `shutdown` resolves, then stops taking deliveries and requests, and
    /// returns once every consumer has stored and acked (or given back) what it held.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        let ctx = ConsumerContext {
            amqp_url: self.config.connection.amqp_url.clone(),
            archive: self.background.clone(),
            settings: self.config.batch_settings(),
            rules: self.config.ingest_rules(self.state.schemas.clone()),
            status: self.state.status.clone(),
            metrics: self.state.metrics.clone(),
            management: self.management.clone(),
            shutdown: token.clone(),
        };
        for dlq in &self.dlqs {
            tracker.spawn(consumer::supervise(dlq.clone(), ctx.clone()));
        }
        match &self.management {
            Some(management) if self.config.discover.discover => {
                let args = &self.config.discover;
                tracker.spawn(adopt::discover(
                    management.clone(),
                    ctx.clone(),
                    adopt::Settings {
                        patterns: adopt::Patterns::from(&args.patterns),
                        every: Duration::from_secs(args.discover_interval_secs),
                        configured: self.dlqs.clone(),
                    },
                    tracker.clone(),
                ));
            }
            _ if self.config.queues.is_empty() => {
                tracing::warn!("no --queue given: serving the archive without consuming anything");
            }
            _ => {}
        }
        let name = match &self.config.instance_name {
            Some(name) => name.clone(),
            None => instance::default_name(self.local_addr()),
        };
        let identity = instance::hold(
            self.background.clone(),
            name,
            self.state.jobs_wake.clone(),
            token.clone(),
            &tracker,
        )
        .await;
        tracker.spawn(reindex_search(
            self.background.clone(),
            ctx.rules.clone(),
            token.clone(),
        ));
        tracker.spawn(settle_replays(
            self.background.clone(),
            Duration::from_secs(self.config.settle_secs),
            token.clone(),
        ));
        let retention = self
            .config
            .retention
            .policy(&self.config.connection.amqp_url)
            .unwrap_or_default();
        if !retention.is_empty() {
            tracker.spawn(crate::retention::keep(
                self.background.clone(),
                retention,
                Duration::from_secs(self.config.retention.retention_interval_secs),
                format!("{} (pid {})", identity.name(), std::process::id()),
                self.state.metrics.clone(),
                token.clone(),
            ));
        }
        if !self.config.webhooks.webhooks.is_empty() {
            let args = &self.config.webhooks;
            let webhooks = crate::notify::Webhooks::start(
                &args.webhooks,
                args.public_url.clone(),
                self.state.metrics.clone(),
                self.state.notifications.clone(),
                &token,
                &tracker,
            );
            tracker.spawn(crate::notify::watch(
                self.background.clone(),
                crate::notify::Settings {
                    thresholds: crate::notify::Thresholds::new(&args.thresholds),
                    every: Duration::from_secs(args.webhook_interval_secs),
                },
                webhooks,
                token.clone(),
            ));
        } else if !self.config.webhooks.thresholds.is_empty() {
            tracing::warn!("--webhook-threshold without --webhook: nobody to tell");
        }
        tracker.spawn(job::run(
            self.background.clone(),
            self.config
                .runner_settings(self.state.metrics.clone())
                .as_instance(identity),
            self.state.jobs_wake.clone(),
            token.clone(),
        ));
        tracker.close();

        let trigger = token.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down: finishing in-flight batches");
            trigger.cancel();
        });
        tracing::info!(address = %self.local_addr(), queues = ?self.config.queues, "lazarus is serving");
        let settings = ServeSettings {
            header_timeout: Duration::from_secs(self.config.header_timeout_secs.max(1)),
            max_connections: self
                .config
                .max_connections
                .unwrap_or_else(serve::default_max_connections),
        };
        tracing::debug!(?settings, "web server limits");
        serve::serve(
            self.listener,
            web::router(self.state),
            settings,
            token.clone(),
        )
        .await;
        // Whatever stopped the server also stops the consumers.
        token.cancel();
        tracker.wait().await;
        Ok(())
    }
}

/// Brings the search index of messages archived by an earlier version up to date, a batch at
/// a time beside ingest and requests, until nothing is left (at once, on an archive that is
/// up to date). A failing database is waited out.
async fn reindex_search(
    archive: Arc<dyn Archive>,
    rules: archive::IngestRules,
    shutdown: CancellationToken,
) {
    const BATCH: u32 = 500;
    let (mut rewritten, mut worked, mut reported) = (0u64, false, std::time::Instant::now());
    while !shutdown.is_cancelled() {
        let pause = match archive.reindex_batch(&rules, BATCH).await {
            Ok(None) => {
                if worked {
                    tracing::info!(rewritten, "search index up to date");
                }
                return;
            }
            Ok(Some(progress)) => {
                worked = true;
                rewritten += progress.rewritten;
                if reported.elapsed() >= Duration::from_secs(10) {
                    tracing::info!(
                        done_through = progress.done_through,
                        last_id = progress.last_id,
                        rewritten,
                        "reindexing the search entries of messages archived by an earlier version"
                    );
                    reported = std::time::Instant::now();
                }
                // Leaves the database to ingest and requests between batches.
                Duration::from_millis(5)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reindexing search failed; trying again in 30 s");
                Duration::from_secs(30)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return,
        }
    }
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

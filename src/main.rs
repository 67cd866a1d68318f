//! The `lazarus` binary: parse the command line, start logging, run the chosen command.
#![forbid(unsafe_code)]

use clap::Parser;
use lazarus::cli::{Cli, Command};
use lazarus::config::{DemoConfig, ServeConfig};
use lazarus::startup::{shutdown_signal, Application};

fn main() -> anyhow::Result<()> {
    // Before any thread exists: it may replace the process with itself (see `memory`).
    lazarus::support::memory::fix_mmap_threshold();
    run()
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    lazarus::support::telemetry::init();
    match cli.command {
        Command::Serve(config) => {
            tracing::debug!(?config, "starting");
            Application::build(config)
                .await?
                .run_until(shutdown_signal())
                .await
        }
        Command::Demo(demo) => run_demo(demo).await,
        Command::User(command) => lazarus::cli::accounts::user(command).await,
        Command::Token(command) => lazarus::cli::accounts::token(command).await,
        Command::Migrate(migrate) => lazarus::cli::migrate::run(migrate).await,
        Command::Import(import) => lazarus::cli::import::run(import).await,
        Command::Export(export) => lazarus::cli::export::run(export).await,
        Command::Retention(retention) => lazarus::cli::retention::run(retention).await,
        Command::Discover(discover) => lazarus::cli::discover::run(discover).await,
        Command::WebhookTest(args) => {
            let told = lazarus::cli::webhook_test::run(&args).await;
            std::process::exit(if told { 0 } else { 1 })
        }
        Command::Health(health) => {
            let healthy = lazarus::cli::health::health(health).await;
            std::process::exit(if healthy { 0 } else { 1 })
        }
        Command::Replay(replay) => {
            let token = tokio_util::sync::CancellationToken::new();
            let trigger = token.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                trigger.cancel();
            });
            let ending = lazarus::cli::replay::run(*replay, token).await?;
            std::process::exit(ending as i32)
        }
    }
}

/// The demo: its own vhost and archive file, its topology and failing traffic, then `serve`.
async fn run_demo(demo: DemoConfig) -> anyhow::Result<()> {
    let mut config = demo.serve;
    if config.connection.database_url == ServeConfig::defaults().connection.database_url {
        config.connection.database_url = "sqlite://lazarus-demo.db".into();
    }
    config.connection.amqp_url =
        lazarus::cli::demo::demo_vhost_url(&config.connection.amqp_url).into();
    config.queues = lazarus::cli::demo::DEMO_QUEUES.map(String::from).to_vec();
    if config.fields.is_empty() {
        config.fields = lazarus::cli::demo::DEMO_FIELDS
            .iter()
            .map(|f| f.parse().expect("demo fields are valid"))
            .collect();
    }
    let app = Application::build(config).await?;
    let _workers = lazarus::cli::demo::run(&app.amqp_url(), demo.messages).await?;
    println!(
        "Lazarus demo: open http://{} (Ctrl-C to stop)",
        app.local_addr()
    );
    app.run_until(shutdown_signal()).await
}

//! The `lazarus` binary: parse the command line, start logging, run the chosen command.
#![forbid(unsafe_code)]

use clap::Parser;
use lazarus::config::{Cli, Command};
use lazarus::startup::{shutdown_signal, Application};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    lazarus::telemetry::init();
    match cli.command {
        Command::Serve(config) => {
            tracing::debug!(?config, "starting");
            Application::build(config)
                .await?
                .run_until(shutdown_signal())
                .await
        }
    }
}

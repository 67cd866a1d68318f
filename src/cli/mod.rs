//! The command line: `lazarus <command>`, one file per subcommand owning its arguments and
//! its run (`serve` is the application itself: `config` and `startup`; `demo` runs it beside
//! failing traffic of its own).

pub mod accounts;
pub mod demo;
pub mod discover;
pub mod export;
pub mod health;
pub mod import;
pub mod migrate;
pub mod replay;
pub mod retention;
pub mod webhook_test;

use clap::{Parser, Subcommand};

use crate::config::{DemoConfig, ServeConfig, WebhookArgs};
use accounts::{TokenCommand, UserCommand};
use discover::DiscoverConfig;
use export::ExportConfig;
use health::HealthConfig;
use import::ImportConfig;
use migrate::MigrateConfig;
use replay::ReplayConfig;
use retention::RetentionConfig;

#[derive(Debug, Parser)]
#[command(
    name = "lazarus",
    version,
    about = "Archive RabbitMQ dead-letter queues, search them, replay their messages"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Consume the DLQs into the archive and serve the dashboard and API.
    Serve(ServeConfig),
    /// Declare a demo topology (modelled on the seed articles) in a vhost of its own, push a
    /// few hundred failing messages through it, and serve the dashboard over its DLQs.
    Demo(DemoConfig),
    /// Replay archived messages from the command line: select them with the list's filters
    /// (or ids), print the plan, then publish here with progress. Exits non-zero when a
    /// message could not be published, a canary paused the job, or it was interrupted.
    Replay(Box<ReplayConfig>),
    /// Manage the users who sign in with `--auth users` (or whose role the proxy uses).
    #[command(subcommand)]
    User(UserCommand),
    /// Manage API tokens for automation.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Ask the `lazarus serve` on this machine whether it answers (`/healthz`; with --ready,
    /// `/readyz`: database and every consumer up). Exits 0 if so, 1 if not: a container
    /// health check (the image has no curl).
    Health(HealthConfig),
    /// Apply the retention policy now (`--retention`, as `serve` reads it): delete what it no
    /// longer keeps, in small audited transactions. With --dry-run, only show what would go.
    Retention(RetentionConfig),
    /// Write archived messages whole — body bytes, typed headers and properties, status,
    /// notes, replays — as NDJSON, one message a line: those the list's filters (or --id)
    /// select, every message without any.
    Export(ExportConfig),
    /// Read what `lazarus export` wrote back into an archive (either backend): messages
    /// already in it are left alone, so importing twice adds nothing. Ingest derives search,
    /// groups and fields with the same flags as `serve`.
    Import(ImportConfig),
    /// Copy one archive into another (SQLite into PostgreSQL, or back) — messages, users, API
    /// tokens, replay jobs, the audit log — with progress, then check both hold the same; run
    /// it again after an interruption to add only what is missing.
    Migrate(MigrateConfig),
    /// Show the dead-letter queues the management API finds, and which `serve --discover`
    /// would archive (with the same --queue, --discover-include and --discover-exclude) or
    /// leave alone, and why. Nothing is consumed.
    Discover(DiscoverConfig),
    /// Send a test notification to each --webhook, as `serve` would send its events, and say
    /// what each answered. Exits 0 when every one took it, 1 if not.
    WebhookTest(WebhookArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The manual's flag table (docs/configuration.md), one row per flag: the flag, its
    /// environment variable and the default the table gives (code spans; prose when none).
    fn manual_rows() -> Vec<(String, String, Vec<String>)> {
        let manual = include_str!("../../docs/configuration.md");
        let spans = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        let mut rows = Vec::new();
        for line in manual.lines().filter(|l| l.starts_with("| `--")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let starting = |cell: &str, with: &str| -> Vec<String> {
                spans(cell)
                    .into_iter()
                    .filter(|s| s.starts_with(with))
                    .collect()
            };
            let (flags, envs) = (starting(cells[0], "--"), starting(cells[1], "LAZARUS_"));
            let defaults = spans(cells[2]);
            assert_eq!(flags.len(), envs.len(), "one variable per flag: {line}");
            let defaults = if flags.len() == 1 {
                defaults
            } else {
                Vec::new()
            };
            for (flag, env) in flags.into_iter().zip(envs) {
                rows.push((flag, env, defaults.clone()));
            }
        }
        rows
    }

    #[test]
    fn the_manuals_flag_table_is_the_command_lines() {
        let rows = manual_rows();
        assert!(rows.len() > 30, "the table is read: {} rows", rows.len());
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        let args: Vec<_> = serve
            .get_arguments()
            .filter(|a| a.get_long().is_some_and(|l| l != "help" && l != "version"))
            .collect();
        assert!(args.len() > 30, "serve's flags are read");
        let mut wrong = Vec::new();
        for arg in &args {
            let flag = format!("--{}", arg.get_long().unwrap());
            let Some((_, env, default)) = rows.iter().find(|(f, _, _)| *f == flag) else {
                wrong.push(format!("{flag}: not in the table"));
                continue;
            };
            let real_env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            if real_env.as_deref() != Some(env.as_str()) {
                wrong.push(format!("{flag}: the table says {env}, clap {real_env:?}"));
            }
            let real_default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            // A default clap applies is written in the table as code; where clap has none,
            // the table says in words what happens (off, none, derived).
            if !real_default.is_empty() && real_default != *default {
                wrong.push(format!(
                    "{flag}: the table's default is {default:?}, clap's {real_default:?}"
                ));
            }
        }
        for (flag, _, _) in &rows {
            if !args
                .iter()
                .any(|a| format!("--{}", a.get_long().unwrap()) == *flag)
            {
                wrong.push(format!("{flag}: in the table, not a flag of serve"));
            }
        }
        assert!(
            wrong.is_empty(),
            "docs/configuration.md against `lazarus serve`:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn replay_window_help_tells_how_much_a_crash_can_publish_twice() {
        let mut cli = Cli::command();
        let serve = cli.find_subcommand_mut("serve").expect("serve");
        let window = serve
            .get_arguments()
            .find(|a| a.get_id() == "replay_window")
            .expect("--replay-window");
        let help = window.get_help().expect("a help text").to_string();
        // The step being published and the one before it: two windows, as the README says.
        assert!(help.contains("at most twice this many"), "{help}");
    }

    fn serve_args(args: &[&str]) -> Command {
        Cli::parse_from(args).command
    }

    #[test]
    fn demo_takes_the_serve_flags() {
        let Command::Demo(d) = serve_args(&[
            "lazarus",
            "demo",
            "--messages",
            "50",
            "--listen",
            "127.0.0.1:9000",
        ]) else {
            unreachable!()
        };
        assert_eq!(d.messages, 50);
        assert_eq!(d.serve.listen.port(), 9000);
    }

    #[test]
    fn fields_are_parsed_and_checked() {
        let Command::Serve(c) = serve_args(&[
            "lazarus",
            "serve",
            "--field",
            "invoice=/invoice_id",
            "--field",
            "customer=/customer/id",
        ]) else {
            unreachable!()
        };
        assert_eq!(c.ingest_rules(None).fields[1].pointer, "/customer/id");
        assert!(Cli::try_parse_from(["lazarus", "serve", "--field", "invoice"]).is_err());
    }

    #[test]
    fn queue_is_repeatable() {
        let Command::Serve(c) = serve_args(&[
            "lazarus",
            "serve",
            "--queue",
            "invoices.dlq",
            "--queue",
            "processing_dlq",
        ]) else {
            unreachable!()
        };
        assert_eq!(c.queues, ["invoices.dlq", "processing_dlq"]);
    }
}

//! `lazarus retention [--dry-run]`: one retention pass now, from the command line, or with
//! --dry-run what it would delete, by DLQ and rule.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::{ConnectionArgs, RetentionArgs};
use crate::retention::{plan, run_pass, Plan};
use crate::support::format::human_bytes as bytes_text;
use crate::support::format::thousands;
use crate::support::secret_url::redact_url;

#[derive(Debug, Clone, Args)]
pub struct RetentionConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Show what a pass would delete, by DLQ and rule, and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `12,345`.
fn grouped(n: i64) -> String {
    thousands(n.max(0) as u64)
}

/// The dry run's table: every DLQ with what it holds, and what each rule would delete.
pub fn plan_text(plan: &Plan) -> String {
    let mut out = String::from("DLQ\tholds\trule\twould delete\n");
    for totals in &plan.totals {
        let holds = format!(
            "{} ({})",
            grouped(totals.messages),
            bytes_text(totals.bytes)
        );
        let due: Vec<_> = plan
            .due
            .iter()
            .filter(|d| d.queue == totals.queue)
            .collect();
        if due.is_empty() {
            out.push_str(&format!("{}\t{holds}\t-\tnothing\n", totals.queue));
        }
        for d in due {
            out.push_str(&format!(
                "{}\t{holds}\t{}\t{} ({})\n",
                totals.queue,
                d.rule,
                grouped(d.ids.len() as i64),
                bytes_text(d.bytes)
            ));
        }
    }
    out.push_str(&format!(
        "{} messages would be deleted{}\n",
        grouped(plan.messages() as i64),
        match plan.more {
            true => format!(
                " in this pass; more are due (a pass takes at most {} per DLQ)",
                grouped(crate::retention::PASS_LIMIT as i64)
            ),
            false => String::new(),
        }
    ));
    out
}

/// Runs the command; an error when the policy is wrong, the database fails, or another
/// instance is running a pass.
pub async fn run(config: RetentionConfig) -> anyhow::Result<()> {
    let policy = config
        .retention
        .policy(&config.connection.amqp_url)
        .map_err(anyhow::Error::msg)?;
    if policy.is_empty() {
        println!("no --retention (LAZARUS_RETENTION) given: everything is kept");
        return Ok(());
    }
    let url = &config.connection.database_url;
    let archive = crate::archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))?;
    println!("retention: {}", policy.describe());
    if config.dry_run {
        let plan = plan(archive.as_ref(), &policy, time::OffsetDateTime::now_utc()).await?;
        print!("{}", plan_text(&plan));
        return Ok(());
    }
    let owner = format!("lazarus retention (pid {})", std::process::id());
    let every = Duration::from_secs(config.retention.retention_interval_secs);
    let now = time::OffsetDateTime::now_utc();
    let pass = run_pass(
        archive.as_ref(),
        &policy,
        &owner,
        every,
        &CancellationToken::new(),
        now,
    )
    .await?
    .context("another instance is running a retention pass; try again later")?;
    for c in &pass.run.counts {
        println!(
            "{}\t{}\tdeleted {} ({})",
            c.queue,
            c.rule,
            grouped(c.messages),
            bytes_text(c.bytes)
        );
    }
    println!(
        "deleted {} messages (retention run {}){}",
        grouped(pass.run.deleted),
        pass.run.id,
        match pass.more {
            true => "; more are due: run it again",
            false => "",
        }
    );
    Ok(())
}

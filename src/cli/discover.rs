//! `lazarus discover`: what `serve --discover` would archive, printed; nothing is consumed.

use std::collections::HashSet;

use clap::Args;

use crate::amqp::adopt::{choose, qualify_always, Patterns};
use crate::amqp::management::Management;
use crate::config::{ConnectionArgs, DiscoverPatterns};
use crate::message::dlq::{self, Dlq};
use crate::support::secret_url::SecretUrl;

/// `lazarus discover`: what `serve --discover` would archive, shown and nothing done.
#[derive(Debug, Clone, Args)]
pub struct DiscoverConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// RabbitMQ's management API, as `serve` takes it.
    #[arg(long, env = "LAZARUS_MANAGEMENT_URL", hide_env_values = true)]
    pub management_url: SecretUrl,
    /// The DLQs `serve --queue` names (archived already).
    #[arg(long = "queue", env = "LAZARUS_QUEUE", value_delimiter = ',')]
    pub queues: Vec<String>,
    #[command(flatten)]
    pub patterns: DiscoverPatterns,
}

/// `lazarus discover`: every DLQ found, and what `serve --discover` would do with it, one line
/// each (its risks beneath); nothing is consumed.
pub async fn run(config: DiscoverConfig) -> anyhow::Result<()> {
    let management = Management::new(&config.management_url, &config.connection.amqp_url)?;
    let home = management.vhost().to_owned();
    let queues =
        dlq::parse_all(&config.queues, &home).map_err(|e| anyhow::anyhow!("--queue {e}"))?;
    let found = management.discover(&queues).await?;
    let configured: HashSet<Dlq> = queues.into_iter().collect();
    let mut dlqs = found.dlqs.clone();
    dlqs.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let choice = choose(
        found.dlqs,
        management.vhost(),
        &configured,
        &Patterns::from(&config.patterns),
    );
    let adopted: HashSet<Dlq> = choice.adopt.iter().map(|d| d.identity(&home)).collect();
    if dlqs.is_empty() {
        println!("no dead-letter queues found");
    }
    for dlq in &dlqs {
        let key = qualify_always(&dlq.vhost, &dlq.name);
        let decision = match choice.left.get(&dlq.identity(&home)) {
            Some(why) => format!("leave: {why}"),
            None if adopted.contains(&dlq.identity(&home)) => "archive".to_owned(),
            None => "archived already (--queue)".to_owned(),
        };
        println!("{key}\t{decision}\tfed by {}", dlq.sources.join(", "));
        for risk in &dlq.warnings {
            println!("  risk: {risk}");
        }
    }
    Ok(())
}

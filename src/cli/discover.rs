//! `lazarus discover`: what `serve --discover` would archive, printed; nothing is consumed.

use std::collections::HashSet;

use clap::Args;

use crate::amqp::adopt::{choose, qualify_always, Patterns};
use crate::config::{ConnectionArgs, DiscoverPatterns, ManagementArg};
use crate::message::dlq::Dlq;

/// `lazarus discover`: what `serve --discover` would archive, shown and nothing done.
#[derive(Debug, Clone, Args)]
pub struct DiscoverConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// RabbitMQ's management API, as `serve` takes it: `[NAME=]URL`, one per broker.
    #[arg(
        long = "management-url",
        env = "LAZARUS_MANAGEMENT_URL",
        value_name = "[NAME=]URL",
        value_delimiter = ' ',
        hide_env_values = true,
        required = true
    )]
    pub management_urls: Vec<ManagementArg>,
    /// The DLQs `serve --queue` names (archived already).
    #[arg(long = "queue", env = "LAZARUS_QUEUE", value_delimiter = ',')]
    pub queues: Vec<String>,
    #[command(flatten)]
    pub patterns: DiscoverPatterns,
}

/// `lazarus discover`: every DLQ found on each broker with a management API, and what `serve
/// --discover` would do with it, one line each (its risks beneath) — a DLQ of another broker
/// than the default one prefixed `NAME:`, as its key is; nothing is consumed. A broker whose
/// management API does not answer is said on stderr, the others listed, and the exit is a
/// failure.
pub async fn run(config: DiscoverConfig) -> anyhow::Result<()> {
    let brokers = config
        .connection
        .brokers()
        .map_err(|e| anyhow::anyhow!("--broker {e}"))?;
    let managements = crate::config::managements(&config.management_urls, &brokers)
        .map_err(anyhow::Error::msg)?;
    let queues = brokers
        .parse_queues(&config.queues)
        .map_err(|e| anyhow::anyhow!("--queue {e}"))?;
    let configured: HashSet<Dlq> = queues.iter().cloned().collect();
    let (mut listed, mut failed) = (0, Vec::new());
    for management in managements.iter() {
        let broker = management.broker();
        let found = match management.discover(&queues, &brokers).await {
            Ok(found) => found,
            Err(e) if brokers.several() => {
                eprintln!("broker {broker}: {e}");
                failed.push(broker.to_owned());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let home = management.vhost();
        let mut dlqs = found.dlqs.clone();
        dlqs.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        let choice = choose(
            found.dlqs,
            home,
            &configured,
            &Patterns::from(&config.patterns),
        );
        let adopted: HashSet<Dlq> = choice.adopt.iter().map(|d| d.identity(home)).collect();
        let prefix = match management.broker() {
            crate::message::dlq::DEFAULT_BROKER => String::new(),
            broker => format!("{broker}:"),
        };
        for dlq in &dlqs {
            let key = qualify_always(&dlq.vhost, &dlq.name);
            let decision = match choice.left.get(&dlq.identity(home)) {
                Some(why) => format!("leave: {why}"),
                None if adopted.contains(&dlq.identity(home)) => "archive".to_owned(),
                None => "archived already (--queue)".to_owned(),
            };
            println!(
                "{prefix}{key}\t{decision}\tfed by {}",
                dlq.sources.join(", ")
            );
            for risk in &dlq.warnings {
                println!("  risk: {risk}");
            }
        }
        listed += dlqs.len();
    }
    if listed == 0 {
        println!("no dead-letter queues found");
    }
    for broker in managements.missing(&brokers) {
        eprintln!(
            "broker {broker}: no {} given, its DLQs are not listed",
            crate::amqp::managements::management_flag(broker)
        );
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(anyhow::anyhow!(
            "the management API of broker {} did not answer",
            failed.join(", ")
        )),
    }
}

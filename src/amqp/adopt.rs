//! `--discover`: the DLQs discovery finds in the AMQP URL's vhost are archived as if named with
//! `--queue`, looked for again every `--discover-interval-secs`, so a DLQ made after Lazarus
//! started is archived too. Which (pure, [`choose`]): those `--discover-include` names (all,
//! without it) and `--discover-exclude` does not, and not a retry or delay queue (one with a
//! dead-letter exchange of its own: its messages move on). Lazarus still declares nothing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use super::consumer::{self, ConsumerContext};
use super::discovery::DiscoveredDlq;
use super::management::Management;
use crate::archive::Actor;
use crate::replay::policy::glob;

/// Which discovered DLQs to archive, by name (`*` matches any run of characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patterns {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl From<&crate::config::DiscoverPatterns> for Patterns {
    fn from(p: &crate::config::DiscoverPatterns) -> Self {
        Patterns {
            include: p.include.clone(),
            exclude: p.exclude.clone(),
        }
    }
}

impl Patterns {
    fn admits(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| glob(p, name)))
            && !self.exclude.iter().any(|p| glob(p, name))
    }
}

/// What one look decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// DLQs to archive from now on (not archived here yet).
    pub adopt: Vec<DiscoveredDlq>,
    /// `vhost/name` of DLQs left alone, and why.
    pub left: BTreeMap<String, String>,
}

/// Of the DLQs found, those to start archiving (`vhost`: the AMQP URL's; `archived`: the
/// queues this instance consumes already).
pub fn choose(
    found: Vec<DiscoveredDlq>,
    vhost: &str,
    archived: &HashSet<String>,
    patterns: &Patterns,
) -> Choice {
    let mut choice = Choice::default();
    for dlq in found {
        let why = if archived.contains(&dlq.name) && dlq.vhost == vhost {
            continue;
        } else if dlq.vhost != vhost {
            format!(
                "in vhost {:?}: this instance archives its AMQP URL's vhost {vhost:?} only",
                dlq.vhost
            )
        } else if dlq.dead_letters_again {
            "it dead-letters again (a retry or delay queue): name it with --queue to archive it"
                .to_owned()
        } else if !patterns.admits(&dlq.name) {
            "--discover-include/--discover-exclude leave it out".to_owned()
        } else {
            choice.adopt.push(dlq);
            continue;
        };
        choice
            .left
            .insert(format!("{}/{}", dlq.vhost, dlq.name), why);
    }
    choice
}

/// What `--discover` runs with.
pub struct Settings {
    pub patterns: Patterns,
    pub every: Duration,
    /// The queues `--queue` names: consumed already.
    pub configured: Vec<String>,
}

/// Looks for DLQs every `settings.every` and starts a consumer (on `tracker`) for each new
/// one chosen, until `shutdown`; each start is logged and audited. A management API that does
/// not answer is asked again at the next look.
pub async fn discover(
    management: Arc<Management>,
    ctx: ConsumerContext,
    settings: Settings,
    tracker: TaskTracker,
) {
    let mut archived: HashSet<String> = settings.configured.iter().cloned().collect();
    let mut told: HashSet<String> = HashSet::new();
    let shutdown = ctx.shutdown.clone();
    loop {
        let consumed: Vec<String> = archived.iter().cloned().collect();
        match management.discover(&consumed).await {
            Ok(found) => {
                let choice = choose(
                    found.dlqs,
                    management.vhost(),
                    &archived,
                    &settings.patterns,
                );
                for (dlq, why) in choice.left {
                    if told.insert(dlq.clone()) {
                        tracing::info!(dlq, "--discover leaves this DLQ alone: {why}");
                    }
                }
                for dlq in choice.adopt {
                    let summary = format!(
                        "archiving {}, found as the dead-letter queue of {}",
                        dlq.name,
                        dlq.sources.join(", ")
                    );
                    tracing::info!(queue = dlq.name, "--discover: {summary}");
                    if let Err(e) = ctx
                        .archive
                        .record(&Actor::system("discovery"), "discover", &summary)
                        .await
                    {
                        tracing::warn!(error = %e, "auditing a discovered DLQ failed");
                    }
                    archived.insert(dlq.name.clone());
                    tracker.spawn(consumer::supervise(dlq.name, ctx.clone()));
                }
            }
            Err(e) => tracing::warn!(error = %e, "--discover: the management API did not answer"),
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// `lazarus discover`: every DLQ found, and what `serve --discover` would do with it, one line
/// each (its risks beneath); nothing is consumed.
pub async fn preview(config: crate::config::DiscoverConfig) -> anyhow::Result<()> {
    let management = Management::new(&config.management_url, &config.connection.amqp_url)?;
    let found = management.discover(&config.queues).await?;
    let configured: HashSet<String> = config.queues.iter().cloned().collect();
    let mut dlqs = found.dlqs.clone();
    dlqs.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let choice = choose(
        found.dlqs,
        management.vhost(),
        &configured,
        &Patterns::from(&config.patterns),
    );
    let adopted: HashSet<&str> = choice.adopt.iter().map(|d| d.name.as_str()).collect();
    if dlqs.is_empty() {
        println!("no dead-letter queues found");
    }
    for dlq in &dlqs {
        let key = format!("{}/{}", dlq.vhost, dlq.name);
        let decision = match choice.left.get(&key) {
            Some(why) => format!("leave: {why}"),
            None if dlq.vhost == management.vhost() && adopted.contains(dlq.name.as_str()) => {
                "archive".to_owned()
            }
            None => "archived already (--queue)".to_owned(),
        };
        println!("{key}\t{decision}\tfed by {}", dlq.sources.join(", "));
        for risk in &dlq.warnings {
            println!("  risk: {risk}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dlq(vhost: &str, name: &str, dead_letters_again: bool) -> DiscoveredDlq {
        DiscoveredDlq {
            vhost: vhost.into(),
            name: name.into(),
            kind: "classic".into(),
            sources: vec!["work".into()],
            archived: false,
            warnings: Vec::new(),
            dead_letters_again,
        }
    }

    #[test]
    fn new_terminal_dlqs_of_the_vhost_are_chosen_as_the_patterns_say() {
        let found = vec![
            dlq("/", "orders.dlq", false),
            dlq("/", "mail.dlq", false),
            dlq("/", "audit.dlq", false),
            dlq("/", "orders.retry", true),
            dlq("billing", "invoices.dlq", false),
            dlq("/", "already.dlq", false),
        ];
        let archived = HashSet::from(["already.dlq".to_owned()]);
        let patterns = Patterns {
            include: vec!["*.dlq".into()],
            exclude: vec!["audit.*".into()],
        };
        let choice = choose(found, "/", &archived, &patterns);
        let adopted: Vec<&str> = choice.adopt.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(adopted, ["orders.dlq", "mail.dlq"]);
        let left: Vec<&str> = choice.left.keys().map(String::as_str).collect();
        assert_eq!(
            left,
            ["//audit.dlq", "//orders.retry", "billing/invoices.dlq"]
        );
        assert!(choice.left["//orders.retry"].contains("retry or delay queue"));
        assert!(choice.left["billing/invoices.dlq"].contains("vhost \"billing\""));
        assert!(choice.left["//audit.dlq"].contains("--discover-exclude"));
    }

    #[test]
    fn without_include_every_name_is_admitted() {
        let patterns = Patterns::default();
        assert!(patterns.admits("anything"));
        let patterns = Patterns {
            include: Vec::new(),
            exclude: vec!["tmp.*".into()],
        };
        assert!(patterns.admits("orders.dlq") && !patterns.admits("tmp.dlq"));
    }
}

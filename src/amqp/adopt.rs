//! `--discover`: the DLQs discovery finds are archived as if named with `--queue`, looked for
//! again every `--discover-interval-secs`, so a DLQ made after Lazarus started is archived
//! too. Which (pure, [`choose`]): those `--discover-include` admits (without it, every DLQ of
//! the AMQP URL's vhost; a pattern with `/` reaches other vhosts, as `vhost/name`) and
//! `--discover-exclude` does not, and not a retry or delay queue (one with a dead-letter
//! exchange of its own: its messages move on). Lazarus still declares nothing. Each broker
//! with a management API is looked at on its own, its DLQs adopted under its keys (`NAME:…`);
//! a DLQ of the default broker whose key would be another broker's is never adopted.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use super::consumer::{self, ConsumerContext};
use super::discovery::DiscoveredDlq;
use super::management::Management;
use crate::archive::Actor;
use crate::message::dlq::{pattern_matches, Dlq};

/// Which discovered DLQs to archive, by patterns read as
/// [`pattern_matches`](crate::message::dlq::pattern_matches) reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patterns {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Patterns {
    /// Whether `dlq` is to be archived; `home` is the AMQP URL's vhost.
    fn admits(&self, dlq: &Dlq, home: &str) -> bool {
        let matches = |p: &String| pattern_matches(p, dlq, home);
        let included = match self.include.is_empty() {
            true => dlq.vhost.is_empty(),
            false => self.include.iter().any(matches),
        };
        included && !self.exclude.iter().any(matches)
    }
}

/// `vhost/name` as a pattern with `/` is matched against (the vhost named and escaped as
/// in a `--queue`, the home one too), for showing a DLQ of any vhost on one line.
pub(crate) fn qualify_always(vhost: &str, name: &str) -> String {
    format!("{}/{name}", crate::message::dlq::escape(vhost))
}

/// What one look decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// DLQs to archive from now on (not archived here yet).
    pub adopt: Vec<DiscoveredDlq>,
    /// DLQs left alone, and why.
    pub left: BTreeMap<Dlq, String>,
}

/// Of the DLQs found on one broker, those to start archiving (`home`: that broker's AMQP URL's
/// vhost; `archived`: the queues this instance consumes already).
pub fn choose(
    found: Vec<DiscoveredDlq>,
    home: &str,
    archived: &HashSet<Dlq>,
    patterns: &Patterns,
) -> Choice {
    let mut choice = Choice::default();
    for dlq in found {
        let id = dlq.identity(home);
        let why = if archived.contains(&id) {
            continue;
        } else if let Some(refused) = &dlq.refused {
            refused.clone()
        } else if dlq.dead_letters_again {
            "it dead-letters again (a retry or delay queue): name it with --queue to archive it"
                .to_owned()
        } else if !patterns.admits(&id, home) {
            left_out(&id, &dlq.vhost, home, patterns)
        } else {
            choice.adopt.push(dlq);
            continue;
        };
        choice.left.insert(id, why);
    }
    choice
}

/// Why `patterns` leave out the DLQ `id` (in the vhost `vhost`, its broker's home being `home`).
fn left_out(id: &Dlq, vhost: &str, home: &str, patterns: &Patterns) -> String {
    // Patterns name another broker's DLQs as `NAME:…`.
    let (prefix, whose) = match id.is_default_broker() {
        true => (String::new(), "the AMQP URL's".to_owned()),
        false => (format!("{}:", id.broker), format!("broker {}'s", id.broker)),
    };
    let names_broker = |p: &String| id.is_default_broker() || p.starts_with(&prefix);
    let reaches_vhosts = patterns
        .include
        .iter()
        .any(|p| names_broker(p) && p.contains('/'));
    if !id.vhost.is_empty() && !reaches_vhosts {
        return format!(
            "in vhost {vhost:?}: --discover archives {whose} vhost {home:?} only, unless a \
             --discover-include with / names it (such as {prefix}{}/*)",
            crate::message::dlq::escape(vhost)
        );
    }
    if !patterns.include.is_empty() && !patterns.include.iter().any(names_broker) {
        return format!(
            "no --discover-include names broker {}'s DLQs (a pattern names them as \
             {prefix}PATTERN)",
            id.broker
        );
    }
    "--discover-include/--discover-exclude leave it out".to_owned()
}

/// What `--discover` runs with.
pub struct Settings {
    pub patterns: Patterns,
    pub every: Duration,
    /// The queues `--queue` names: consumed already.
    pub configured: Vec<Dlq>,
    /// Every broker: a DLQ of the default one keyed as another's is left alone.
    pub brokers: Arc<crate::message::brokers::Brokers>,
}

/// Looks for DLQs on `management`'s broker every `settings.every` and starts a consumer (on
/// `tracker`; `ctx` is that broker's) for each new one chosen, until `shutdown`; each start is
/// logged and audited. A management API that does not answer is asked again at the next look.
pub async fn discover(
    management: Arc<Management>,
    ctx: ConsumerContext,
    settings: Settings,
    tracker: TaskTracker,
) {
    let mut archived: HashSet<Dlq> = settings.configured.iter().cloned().collect();
    let mut told: HashSet<Dlq> = HashSet::new();
    let shutdown = ctx.shutdown.clone();
    loop {
        let consumed: Vec<Dlq> = archived.iter().cloned().collect();
        match management.discover(&consumed, &settings.brokers).await {
            Ok(found) => {
                let refused: HashSet<Dlq> = found
                    .dlqs
                    .iter()
                    .filter(|d| d.refused.is_some())
                    .map(|d| d.identity(management.vhost()))
                    .collect();
                let choice = choose(
                    found.dlqs,
                    management.vhost(),
                    &archived,
                    &settings.patterns,
                );
                for (dlq, why) in choice.left {
                    let queue = dlq.key();
                    let refused = refused.contains(&dlq);
                    if !told.insert(dlq) {
                        continue;
                    }
                    match refused {
                        true => tracing::warn!(queue, "--discover cannot archive this DLQ: {why}"),
                        false => tracing::info!(queue, "--discover leaves this DLQ alone: {why}"),
                    }
                }
                for dlq in choice.adopt {
                    let id = dlq.identity(management.vhost());
                    let summary = format!(
                        "archiving {id}, found as the dead-letter queue of {}",
                        dlq.sources.join(", ")
                    );
                    tracing::info!(queue = %id, "--discover: {summary}");
                    if let Err(e) = ctx
                        .archive
                        .record(&Actor::system("discovery"), "discover", &summary)
                        .await
                    {
                        tracing::warn!(error = %e, "auditing a discovered DLQ failed");
                    }
                    archived.insert(id.clone());
                    tracker.spawn(consumer::supervise(id, ctx.clone()));
                }
            }
            Err(e) => tracing::warn!(
                error = %e,
                broker = management.broker(),
                "--discover: the management API did not answer"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dlq(vhost: &str, name: &str, dead_letters_again: bool) -> DiscoveredDlq {
        DiscoveredDlq {
            broker: "default".into(),
            key: String::new(),
            refused: None,
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
        let archived = HashSet::from([Dlq::home("already.dlq")]);
        let patterns = Patterns {
            include: vec!["*.dlq".into()],
            exclude: vec!["audit.*".into()],
        };
        let choice = choose(found, "/", &archived, &patterns);
        let adopted: Vec<&str> = choice.adopt.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(adopted, ["orders.dlq", "mail.dlq"]);
        let left: Vec<String> = choice.left.keys().map(Dlq::key).collect();
        assert_eq!(left, ["audit.dlq", "orders.retry", "billing/invoices.dlq"]);
        let why = |spec: &str| &choice.left[&Dlq::parse(spec, "/").unwrap()];
        assert!(why("orders.retry").contains("retry or delay queue"));
        assert!(why("billing/invoices.dlq").contains("vhost \"billing\""));
        assert!(why("audit.dlq").contains("--discover-exclude"));
    }

    #[test]
    fn another_brokers_dlqs_are_chosen_under_its_keys() {
        let on_us = |vhost: &str, name: &str| DiscoveredDlq {
            broker: "us".into(),
            ..dlq(vhost, name, false)
        };
        let found = || {
            vec![
                on_us("shop", "orders.dlq"),
                on_us("shop", "mail.dlq"),
                on_us("billing", "invoices.dlq"),
            ]
        };
        // Without patterns: us's home vhost (its URL's, `shop`), adopted as us's.
        let choice = choose(found(), "shop", &HashSet::new(), &Patterns::default());
        let adopted: Vec<String> = choice
            .adopt
            .iter()
            .map(|d| d.identity("shop").key())
            .collect();
        assert_eq!(adopted, ["us:orders.dlq", "us:mail.dlq"]);
        let why = &choice.left[&Dlq::parse("billing/invoices.dlq", "shop").unwrap().on("us")];
        assert!(
            why.contains("broker us's vhost \"shop\"") && why.contains("us:billing/*"),
            "{why}"
        );
        // One already archived (`--queue us:orders.dlq`) is not adopted again; the default
        // broker's same-named DLQ is not it.
        let archived = HashSet::from([Dlq::home("orders.dlq").on("us"), Dlq::home("mail.dlq")]);
        let choice = choose(found(), "shop", &archived, &Patterns::default());
        let adopted: Vec<&str> = choice.adopt.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(adopted, ["mail.dlq"]);
        // Patterns name us's DLQs as `us:…`; a pattern without it names none of them.
        let default_only = Patterns {
            include: vec!["*.dlq".into()],
            exclude: Vec::new(),
        };
        let choice = choose(found(), "shop", &HashSet::new(), &default_only);
        assert!(choice.adopt.is_empty());
        let why = &choice.left[&Dlq::home("orders.dlq").on("us")];
        assert!(why.contains("us:PATTERN"), "{why}");
        let named = Patterns {
            include: vec!["us:orders.*".into(), "us:billing/*".into()],
            exclude: vec!["us:*/invoices.*".into()],
        };
        let choice = choose(found(), "shop", &HashSet::new(), &named);
        let adopted: Vec<&str> = choice.adopt.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(adopted, ["orders.dlq"]);
        assert_eq!(choice.left.len(), 2);
    }

    #[test]
    fn a_refused_dlq_is_never_adopted() {
        let refused = DiscoveredDlq {
            refused: Some("its key \"us:x\" starts with \"us:\"".into()),
            ..dlq("/", "us:x", false)
        };
        let every = Patterns {
            include: vec!["*".into(), "*/*".into()],
            exclude: Vec::new(),
        };
        let choice = choose(vec![refused], "/", &HashSet::new(), &every);
        assert!(choice.adopt.is_empty());
        assert!(choice.left[&Dlq::home("us:x")].contains("starts with \"us:\""));
    }

    #[test]
    fn without_include_every_name_of_the_home_vhost_is_admitted() {
        let admits = |p: &Patterns, spec: &str| p.admits(&Dlq::parse(spec, "/").unwrap(), "/");
        let patterns = Patterns::default();
        assert!(admits(&patterns, "anything"));
        assert!(!admits(&patterns, "billing/anything"));
        let patterns = Patterns {
            include: Vec::new(),
            exclude: vec!["tmp.*".into()],
        };
        assert!(admits(&patterns, "orders.dlq") && !admits(&patterns, "tmp.dlq"));
    }

    #[test]
    fn patterns_with_a_slash_reach_other_vhosts() {
        let admits = |p: &Patterns, spec: &str| p.admits(&Dlq::parse(spec, "/").unwrap(), "/");
        let every_vhost = Patterns {
            include: vec!["*/*.dlq".into()],
            exclude: vec!["billing/audit.*".into()],
        };
        assert!(admits(&every_vhost, "billing/invoices.dlq"));
        assert!(
            admits(&every_vhost, "orders.dlq"),
            "the home vhost is one of them"
        );
        assert!(!admits(&every_vhost, "billing/audit.dlq"));
        assert!(!admits(&every_vhost, "billing/invoices.retry"));
        let one_vhost = Patterns {
            include: vec!["shop/*".into(), "*.dlq".into()],
            exclude: Vec::new(),
        };
        assert!(admits(&one_vhost, "shop/anything") && admits(&one_vhost, "orders.dlq"));
        assert!(!admits(&one_vhost, "billing/invoices.dlq"));
        let default_vhost = Patterns {
            include: vec!["%2F/*".into()],
            exclude: Vec::new(),
        };
        assert!(admits(&default_vhost, "orders.dlq"));
        assert!(!admits(&default_vhost, "shop/orders.dlq"));
    }

    #[test]
    fn a_home_name_holding_a_slash_is_no_other_vhosts_queue() {
        let admits = |p: &Patterns, spec: &str| p.admits(&Dlq::parse(spec, "/").unwrap(), "/");
        let any_orders = Patterns {
            include: vec!["*/orders.dlq".into()],
            exclude: Vec::new(),
        };
        assert!(admits(&any_orders, "shop/orders.dlq"));
        assert!(admits(&any_orders, "orders.dlq"));
        assert!(
            !admits(&any_orders, "/shop/orders.dlq"),
            "home queue shop/orders.dlq"
        );
        let shop = Patterns {
            include: vec!["shop/*".into()],
            exclude: Vec::new(),
        };
        assert!(!admits(&shop, "/shop/orders.dlq"));
    }

    #[test]
    fn both_dlqs_one_name_could_be_confused_with_are_adopted_in_either_order() {
        let every = Patterns {
            include: vec!["*/*".into()],
            exclude: Vec::new(),
        };
        let pair = [
            dlq("/", "secdisc2/orders.dlq", false),
            dlq("secdisc2", "orders.dlq", false),
        ];
        for order in [pair.to_vec(), pair.iter().rev().cloned().collect()] {
            let choice = choose(order, "/", &HashSet::new(), &every);
            let mut adopted: Vec<String> =
                choice.adopt.iter().map(|d| d.identity("/").key()).collect();
            adopted.sort();
            assert_eq!(adopted, ["/secdisc2/orders.dlq", "secdisc2/orders.dlq"]);
            assert!(choice.left.is_empty(), "{:?}", choice.left);
        }
    }
}

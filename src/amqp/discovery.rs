//! Which queues on the broker are dead-letter targets, found from what the management API
//! reports (pure): a queue whose arguments or policy name a dead-letter exchange sends its
//! dead letters to every queue bound to that exchange (or, through the default exchange, to the
//! queue its dead-letter routing key names). Each DLQ found says which queues feed it, whether
//! Lazarus archives it, and what its own settings put at risk; queues whose dead letters reach
//! no queue at all are named too.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::queue_info::{DeliveryLimit, QueueInfo};
use crate::message::brokers::Brokers;
use crate::message::dlq::Dlq;

/// A dead-letter queue found on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DiscoveredDlq {
    /// The broker it is on: `default` (`--amqp-url`) or a `--broker` name.
    pub broker: String,
    pub vhost: String,
    pub name: String,
    /// The DLQ as `--queue` names it and the archive keys it (`us:orders.dlq` on broker us).
    pub key: String,
    /// `classic`, `quorum` or `stream`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The queues that dead-letter into it, by name (same vhost).
    pub sources: Vec<String>,
    /// Whether this instance archives it.
    pub archived: bool,
    /// Why Lazarus will not archive it, whatever `--queue` or `--discover` say: a DLQ of the
    /// default broker whose key would be another broker's (`us:…` beside `--broker us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// What its settings put at risk (in words, in JSON).
    #[serde(serialize_with = "as_words")]
    #[schema(value_type = Vec<String>)]
    pub warnings: Vec<Risk>,
    /// It has a dead-letter exchange of its own: a retry or delay queue whose messages move
    /// on, not the end of the line (`--discover` leaves it alone).
    #[serde(skip)]
    pub dead_letters_again: bool,
}

impl DiscoveredDlq {
    /// The DLQ as `--queue` and the archive know it (`home`: its broker's AMQP URL's vhost).
    pub fn identity(&self, home: &str) -> Dlq {
        Dlq {
            broker: self.broker.clone(),
            vhost: crate::message::dlq::stored_vhost(&self.vhost, home),
            name: self.name.clone(),
        }
    }
}

/// The broker a management API answers for, and its AMQP URL's vhost (where its DLQs are keyed
/// by name alone).
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub broker: &'a str,
    pub home: &'a str,
}

/// Marks the DLQs of the default broker whose key another broker's `NAME:` prefix begins
/// ([`Brokers::clash`]): their messages would be taken for that broker's, so Lazarus leaves
/// them alone and says why.
pub fn refuse_clashes(dlqs: &mut [DiscoveredDlq], here: Place<'_>, brokers: &Brokers) {
    for d in dlqs {
        if let Some(broker) = brokers.clash(&d.identity(here.home)) {
            d.refused = Some(clash_reason(&d.key, broker));
        }
    }
}

/// Why the default broker's DLQ keyed `key` is not archived beside `--broker broker`.
pub fn clash_reason(key: &str, broker: &str) -> String {
    format!(
        "its key {key:?} starts with \"{broker}:\", as broker {broker}'s DLQs are keyed: its \
         messages would be taken for broker {broker}'s; rename the queue, or give that broker \
         another name than {broker:?}"
    )
}

fn as_words<S: serde::Serializer>(risks: &[Risk], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(risks.iter().map(ToString::to_string))
}

/// A queue's setting from its arguments (`x-NAME`) or its effective policy (`NAME`): the
/// argument wins, as it does in RabbitMQ for the dead-letter settings.
fn setting<'a>(queue: &'a Value, name: &str) -> Option<&'a Value> {
    queue
        .get("arguments")
        .and_then(|a| a.get(format!("x-{name}")))
        .or_else(|| {
            queue
                .get("effective_policy_definition")
                .and_then(|p| p.get(name))
        })
}

/// The lower of the argument and the policy, as RabbitMQ applies limits set both ways.
fn limit(queue: &Value, name: &str) -> Option<i64> {
    let argument = queue
        .get("arguments")
        .and_then(|a| a.get(format!("x-{name}")))
        .and_then(Value::as_i64);
    let policy = queue
        .get("effective_policy_definition")
        .and_then(|p| p.get(name))
        .and_then(Value::as_i64);
    argument.into_iter().chain(policy).min()
}

fn text<'a>(queue: &'a Value, field: &str) -> &'a str {
    queue.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The queues by (vhost, name).
fn by_name(queues: &[Value]) -> BTreeMap<(&str, &str), &Value> {
    queues
        .iter()
        .map(|q| ((text(q, "vhost"), text(q, "name")), q))
        .collect()
}

/// Whether a queue dead-letters at most once although it could do better: a quorum queue
/// without `dead-letter-strategy: at-least-once`, or with it but an `overflow` other than
/// `reject-publish` (RabbitMQ then falls back to at-most-once). Classic queues always
/// dead-letter at most once and have no choice; streams do not dead-letter.
fn dead_letters_at_most_once(queue: &Value) -> bool {
    let setting_text = |name| setting(queue, name).and_then(Value::as_str);
    text(queue, "type") == "quorum"
        && (setting_text("dead-letter-strategy") != Some("at-least-once")
            || setting_text("overflow") != Some("reject-publish"))
}

/// Where a queue dead-letters: (exchange, routing key if one is set).
pub fn dead_letter_target(queue: &Value) -> Option<(String, Option<String>)> {
    let exchange = setting(queue, "dead-letter-exchange")?.as_str()?.to_owned();
    let key = setting(queue, "dead-letter-routing-key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some((exchange, key))
}

/// A setting of a DLQ through which it can lose dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Risk {
    /// A stream keeps messages only as long as its retention (said, where it is set).
    Stream { retention: Vec<String> },
    /// A quorum queue drops (or dead-letters again) a message returned this many times.
    DeliveryLimit(i64),
    /// Messages expire after this many milliseconds.
    MessageTtl(i64),
    /// At most this many messages (or bytes) are kept; past it, dead letters are dropped.
    MaxLength { limit: i64, unit: &'static str },
    /// The queue itself is deleted after this many milliseconds unused.
    Expires(i64),
    /// Quorum queues feeding it dead-letter at most once (their `dead-letter-strategy` is not
    /// `at-least-once`, or their `overflow` is not `reject-publish`, which at-least-once
    /// needs): a dead letter the DLQ cannot take at that moment is dropped, unconfirmed.
    AtMostOnceSources(Vec<String>),
}

impl std::fmt::Display for Risk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Risk::Stream { retention } => {
                let retention = match retention.is_empty() {
                    true => "its retention".to_owned(),
                    false => retention.join(", "),
                };
                write!(
                    f,
                    "a stream: it keeps dead letters only as long as {retention}, whether read or not"
                )
            }
            Risk::DeliveryLimit(n) => write!(
                f,
                "a quorum queue with a delivery limit of {n}: a message returned {n} times is \
                 dropped (or dead-lettered again); set the policy key delivery-limit to -1 for a DLQ"
            ),
            Risk::MessageTtl(ms) => write!(
                f,
                "a message TTL of {ms} ms: dead letters not archived by then expire"
            ),
            Risk::MaxLength { limit, unit } => write!(
                f,
                "a length limit of {limit} {unit}: past it, dead letters are dropped"
            ),
            Risk::Expires(ms) => write!(
                f,
                "expires after {ms} ms unused: the queue and its dead letters are deleted"
            ),
            Risk::AtMostOnceSources(queues) => write!(
                f,
                "fed at most once by quorum queue{} {}: a dead letter this queue cannot take \
                 when it is dead-lettered (down, full, a node lost) is dropped; set \
                 dead-letter-strategy: at-least-once and overflow: reject-publish on {}",
                if queues.len() == 1 { "" } else { "s" },
                queues.join(", "),
                if queues.len() == 1 { "it" } else { "them" },
            ),
        }
    }
}

/// What a DLQ's own settings put at risk (`broker_major`: the broker's major version, which
/// decides a quorum queue's default delivery limit).
pub fn risks(queue: &Value, broker_major: u32) -> Vec<Risk> {
    let mut risks = Vec::new();
    let stream = text(queue, "type") == "stream";
    if stream {
        let mut retention = Vec::new();
        if let Some(age) = setting(queue, "max-age").and_then(Value::as_str) {
            retention.push(format!("max-age {age}"));
        }
        if let Some(bytes) = limit(queue, "max-length-bytes") {
            retention.push(format!("max-length-bytes {bytes}"));
        }
        risks.push(Risk::Stream { retention });
    }
    if let DeliveryLimit::Finite(n) =
        QueueInfo::from_json(queue.clone()).delivery_limit(broker_major)
    {
        risks.push(Risk::DeliveryLimit(n));
    }
    if let Some(ms) = limit(queue, "message-ttl") {
        risks.push(Risk::MessageTtl(ms));
    }
    for (name, unit) in [("max-length", "messages"), ("max-length-bytes", "bytes")] {
        match limit(queue, name) {
            Some(limit) if !stream => risks.push(Risk::MaxLength { limit, unit }),
            _ => {}
        }
    }
    if let Some(ms) = limit(queue, "expires") {
        risks.push(Risk::Expires(ms));
    }
    risks
}

/// What discovery found on the broker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Discovered {
    pub dlqs: Vec<DiscoveredDlq>,
    pub dead_ends: Vec<DeadEnd>,
}

/// What is bound to a dead-letter exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DlxBindings {
    /// The exchange does not exist: what is dead-lettered to it is dropped.
    Missing,
    /// The queues bound to it, and whether it is bound to other exchanges too (whose queues
    /// discovery does not follow).
    Bound {
        queues: Vec<String>,
        to_exchanges: bool,
    },
}

/// The dead-letter exchanges of a vhost, by (vhost, exchange).
pub type Bindings = BTreeMap<(String, String), DlxBindings>;

/// A queue whose dead letters reach no queue at all: the broker drops them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DeadEnd {
    /// The broker it is on: `default` (`--amqp-url`) or a `--broker` name.
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    /// Its dead-letter exchange (`""`: the default exchange).
    pub exchange: String,
    pub reason: String,
}

/// The queues among `queues` whose dead letters go nowhere: their dead-letter exchange does
/// not exist, has nothing bound to it, or (the default exchange) their dead-letter routing key
/// names no queue. Bindings that route by key are not judged: a queue bound at all counts.
/// `broker`: whose queues they are.
pub fn dead_ends(queues: &[Value], bindings: &Bindings, broker: &str) -> Vec<DeadEnd> {
    let by_name = by_name(queues);
    let mut out = Vec::new();
    for source in queues {
        let Some((exchange, key)) = dead_letter_target(source) else {
            continue;
        };
        let vhost = text(source, "vhost");
        let reason = match (exchange.as_str(), key) {
            ("", Some(key)) => (!by_name.contains_key(&(vhost, key.as_str()))).then(|| {
                format!(
                    "its dead-letter routing key names queue {key:?}, which does not exist: \
                         its dead letters are dropped"
                )
            }),
            // The default exchange with the original routing keys: not judged.
            ("", None) => None,
            (_, _) => match bindings.get(&(vhost.to_owned(), exchange.clone())) {
                Some(DlxBindings::Missing) => Some(format!(
                    "its dead-letter exchange {exchange:?} does not exist: its dead letters are \
                     dropped"
                )),
                Some(DlxBindings::Bound {
                    queues,
                    to_exchanges: false,
                }) if queues.is_empty() => Some(format!(
                    "nothing is bound to its dead-letter exchange {exchange:?}: its dead letters \
                     are dropped"
                )),
                _ => None,
            },
        };
        if let Some(reason) = reason {
            out.push(DeadEnd {
                broker: broker.to_owned(),
                vhost: vhost.to_owned(),
                queue: text(source, "name").to_owned(),
                exchange,
                reason,
            });
        }
    }
    out.sort_by(|a, b| (&a.vhost, &a.queue).cmp(&(&b.vhost, &b.queue)));
    out
}

/// The DLQs among `queues` (the management API's `/api/queues` entries of the broker `here`),
/// given what is bound to each dead-letter exchange and the DLQs this instance archives.
/// Sorted by vhost and name.
pub fn find_dlqs(
    queues: &[Value],
    bindings: &Bindings,
    here: Place<'_>,
    archived: &[&Dlq],
    broker_major: u32,
) -> Vec<DiscoveredDlq> {
    let by_name = by_name(queues);
    // DLQ → the queues feeding it.
    let mut fed: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for source in queues {
        let Some((exchange, key)) = dead_letter_target(source) else {
            continue;
        };
        let vhost = text(source, "vhost").to_owned();
        let targets: Vec<String> = match (exchange.is_empty(), key) {
            // The default exchange routes by queue name.
            (true, Some(key)) => vec![key],
            (true, None) => Vec::new(),
            (false, _) => match bindings.get(&(vhost.clone(), exchange)) {
                Some(DlxBindings::Bound { queues, .. }) => queues.clone(),
                Some(DlxBindings::Missing) | None => Vec::new(),
            },
        };
        for target in targets {
            fed.entry((vhost.clone(), target))
                .or_default()
                .push(text(source, "name").to_owned());
        }
    }
    fed.into_iter()
        .filter_map(|((vhost, name), mut sources)| {
            let queue = by_name.get(&(vhost.as_str(), name.as_str()))?;
            sources.sort();
            sources.dedup();
            // A queue that dead-letters into itself is a retry loop, not a DLQ.
            sources.retain(|s| *s != name);
            if sources.is_empty() {
                return None;
            }
            let mut warnings = risks(queue, broker_major);
            let at_most_once: Vec<String> = sources
                .iter()
                .filter(|s| {
                    by_name
                        .get(&(vhost.as_str(), s.as_str()))
                        .is_some_and(|q| dead_letters_at_most_once(q))
                })
                .cloned()
                .collect();
            if !at_most_once.is_empty() {
                warnings.push(Risk::AtMostOnceSources(at_most_once));
            }
            let id = Dlq {
                broker: here.broker.to_owned(),
                vhost: crate::message::dlq::stored_vhost(&vhost, here.home),
                name: name.clone(),
            };
            Some(DiscoveredDlq {
                broker: id.broker.clone(),
                key: id.key(),
                archived: archived.contains(&&id),
                refused: None,
                kind: text(queue, "type").to_owned(),
                warnings,
                dead_letters_again: dead_letter_target(queue).is_some(),
                vhost,
                name,
                sources,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bound(bindings: &[(&str, &str, &[&str])]) -> Bindings {
        bindings
            .iter()
            .map(|(v, e, qs)| {
                let bound = DlxBindings::Bound {
                    queues: qs.iter().map(|q| q.to_string()).collect(),
                    to_exchanges: false,
                };
                ((v.to_string(), e.to_string()), bound)
            })
            .collect()
    }

    const HOME: Place<'static> = Place {
        broker: "default",
        home: "/",
    };

    fn found(queues: &[Value], bindings: &[(&str, &str, &[&str])]) -> Vec<DiscoveredDlq> {
        let archived = [&Dlq::home("orders.dlq")];
        find_dlqs(queues, &bound(bindings), HOME, &archived, 4)
    }

    #[test]
    fn dead_letters_that_reach_no_queue_are_named() {
        let dlx = |name: &str, exchange: &str| {
            json!({"vhost": "/", "name": name, "type": "classic",
                   "arguments": {"x-dead-letter-exchange": exchange}})
        };
        let queues = [
            dlx("gone", "missing-dlx"),
            dlx("unbound", "empty-dlx"),
            dlx("onward", "to-exchange-dlx"),
            dlx("fine", "dlx"),
            json!({"vhost": "/", "name": "typo", "type": "classic",
                   "arguments": {"x-dead-letter-exchange": "",
                                 "x-dead-letter-routing-key": "no.such.queue"}}),
            json!({"vhost": "/", "name": "dlq", "type": "classic", "arguments": {}}),
        ];
        let mut bindings = bound(&[("/", "dlx", &["dlq"]), ("/", "empty-dlx", &[])]);
        bindings.insert(("/".into(), "missing-dlx".into()), DlxBindings::Missing);
        bindings.insert(
            ("/".into(), "to-exchange-dlx".into()),
            DlxBindings::Bound {
                queues: Vec::new(),
                to_exchanges: true,
            },
        );
        let ends = dead_ends(&queues, &bindings, "default");
        let named: Vec<(&str, &str)> = ends
            .iter()
            .map(|e| (e.queue.as_str(), e.exchange.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("gone", "missing-dlx"),
                ("typo", ""),
                ("unbound", "empty-dlx")
            ]
        );
        assert!(ends[0].reason.contains("does not exist"), "{ends:?}");
        assert!(ends[1].reason.contains("\"no.such.queue\""), "{ends:?}");
        assert!(ends[2].reason.contains("nothing is bound"), "{ends:?}");
    }

    #[test]
    fn targets_come_from_arguments_policies_and_the_default_exchange() {
        let queues = [
            json!({"vhost": "/", "name": "orders", "type": "classic", "policy": null,
                   "arguments": {"x-dead-letter-exchange": "dlx"}}),
            json!({"vhost": "/", "name": "orders.dlq", "type": "classic", "arguments": {}}),
            // Through a policy, in another vhost.
            json!({"vhost": "shop", "name": "mail", "type": "quorum", "policy": "dl",
                   "arguments": {}, "effective_policy_definition":
                       {"dead-letter-exchange": "dlx", "delivery-limit": 5}}),
            json!({"vhost": "shop", "name": "mail.dlq", "type": "classic", "arguments": {}}),
            // Through the default exchange and a routing key.
            json!({"vhost": "shop", "name": "pay", "type": "classic",
                   "arguments": {"x-dead-letter-exchange": "",
                                 "x-dead-letter-routing-key": "pay.dlq"}}),
            json!({"vhost": "shop", "name": "pay.dlq", "type": "stream",
                   "arguments": {"x-max-age": "7D"}}),
        ];
        let dlqs = found(
            &queues,
            &[
                ("/", "dlx", &["orders.dlq"]),
                ("shop", "dlx", &["mail.dlq"]),
            ],
        );
        let names: Vec<(&str, &str, bool)> = dlqs
            .iter()
            .map(|d| (d.vhost.as_str(), d.name.as_str(), d.archived))
            .collect();
        assert_eq!(
            names,
            [
                ("/", "orders.dlq", true),
                ("shop", "mail.dlq", false),
                ("shop", "pay.dlq", false)
            ]
        );
        assert_eq!(dlqs[1].sources, ["mail"]);
        let keys: Vec<&str> = dlqs.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["orders.dlq", "shop/mail.dlq", "shop/pay.dlq"]);
        assert!(dlqs[0].warnings.is_empty(), "{:?}", dlqs[0].warnings);
        assert_eq!(dlqs[2].kind, "stream");
        assert_eq!(
            dlqs[2].warnings,
            [Risk::Stream {
                retention: vec!["max-age 7D".into()]
            }]
        );
        // A quorum source dead-letters at most once unless set otherwise.
        assert_eq!(
            dlqs[1].warnings,
            [Risk::AtMostOnceSources(vec!["mail".into()])]
        );
    }

    #[test]
    fn a_dlqs_own_settings_that_lose_dead_letters_are_named() {
        let quorum = json!({"vhost": "/", "name": "d", "type": "quorum", "policy": null,
                            "arguments": {}});
        assert_eq!(risks(&quorum, 4), [Risk::DeliveryLimit(20)]);
        assert!(risks(&quorum, 4)[0]
            .to_string()
            .contains("delivery limit of 20"));
        assert!(risks(&quorum, 3).is_empty());
        let unlimited = json!({"type": "quorum", "policy": "p", "arguments": {},
                               "effective_policy_definition": {"delivery-limit": -1}});
        assert!(risks(&unlimited, 4).is_empty());
        let limited = json!({"type": "classic", "policy": "p",
            "arguments": {"x-message-ttl": 60000, "x-max-length": 1000},
            "effective_policy_definition": {"max-length": 500, "expires": 3600000}});
        assert_eq!(
            risks(&limited, 4),
            [
                Risk::MessageTtl(60000),
                Risk::MaxLength {
                    limit: 500,
                    unit: "messages"
                },
                Risk::Expires(3600000)
            ]
        );
    }

    #[test]
    fn quorum_sources_that_dead_letter_at_most_once_are_named() {
        let source = |name: &str, settings: Value| {
            let mut arguments = json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"});
            arguments
                .as_object_mut()
                .unwrap()
                .extend(settings.as_object().unwrap().clone());
            json!({"vhost": "/", "name": name, "type": "quorum", "policy": null,
                   "arguments": arguments})
        };
        let queues = [
            source("default", json!({})),
            source(
                "safe",
                json!({"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}),
            ),
            // At-least-once without reject-publish falls back to at-most-once.
            source(
                "fallback",
                json!({"x-dead-letter-strategy": "at-least-once", "x-overflow": "drop-head"}),
            ),
            json!({"vhost": "/", "name": "classic", "type": "classic",
                   "arguments": {"x-dead-letter-exchange": "dlx"}}),
            json!({"vhost": "/", "name": "orders.dlq", "type": "classic", "arguments": {}}),
        ];
        let dlqs = found(&queues, &[("/", "dlx", &["orders.dlq"])]);
        assert_eq!(dlqs.len(), 1, "{dlqs:?}");
        assert_eq!(
            dlqs[0].warnings,
            [Risk::AtMostOnceSources(vec![
                "default".into(),
                "fallback".into()
            ])]
        );
        let said = dlqs[0].warnings[0].to_string();
        assert!(said.contains("quorum queues default, fallback"), "{said}");
        assert!(said.contains("at-least-once and overflow: reject-publish on them"));
        // Set by a policy, as operators usually do.
        let by_policy = json!({"vhost": "/", "name": "p", "type": "quorum", "policy": "dl",
            "arguments": {}, "effective_policy_definition": {"dead-letter-exchange": "dlx",
            "dead-letter-strategy": "at-least-once", "overflow": "reject-publish"}});
        assert!(!dead_letters_at_most_once(&by_policy));
    }

    #[test]
    fn each_broker_finds_its_own_dlqs_keyed_and_archived_as_its_own() {
        let queues = [
            json!({"vhost": "shop", "name": "orders", "type": "classic",
                   "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"}}),
            json!({"vhost": "shop", "name": "orders.dlq", "type": "quorum", "arguments": {}}),
        ];
        let us = Place {
            broker: "us",
            home: "shop",
        };
        // The default broker's `orders.dlq` is not us's.
        let default_one = Dlq::home("orders.dlq");
        let dlqs = find_dlqs(&queues, &Bindings::new(), us, &[&default_one], 4);
        assert_eq!(dlqs.len(), 1, "{dlqs:?}");
        assert_eq!(
            (
                dlqs[0].broker.as_str(),
                dlqs[0].key.as_str(),
                dlqs[0].archived
            ),
            ("us", "us:orders.dlq", false)
        );
        assert_eq!(dlqs[0].identity("shop"), Dlq::home("orders.dlq").on("us"));
        let ours = Dlq::home("orders.dlq").on("us");
        let dlqs = find_dlqs(&queues, &Bindings::new(), us, &[&ours], 4);
        assert!(dlqs[0].archived, "{dlqs:?}");
        let lost = [json!({"vhost": "shop", "name": "lost", "type": "classic",
            "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "none"}})];
        assert_eq!(dead_ends(&lost, &Bindings::new(), "us")[0].broker, "us");
    }

    #[test]
    fn a_default_dlq_keyed_as_another_brokers_is_refused() {
        let brokers =
            Brokers::new("amqp://a/%2f", &[("us".into(), "amqp://b/%2f".into())]).unwrap();
        let dlq = |vhost: &str, name: &str| json!({"vhost": vhost, "name": name, "type": "classic", "arguments": {}});
        let source = |vhost: &str, to: &str| {
            json!({"vhost": vhost, "name": format!("{to}.work"), "type": "classic",
                   "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": to}})
        };
        let queues = [
            dlq("/", "us:orders.dlq"),
            source("/", "us:orders.dlq"),
            dlq("/", "eu:orders.dlq"),
            source("/", "eu:orders.dlq"),
            dlq("/", "orders.dlq"),
            source("/", "orders.dlq"),
        ];
        let mut dlqs = find_dlqs(&queues, &Bindings::new(), HOME, &[], 4);
        refuse_clashes(&mut dlqs, HOME, &brokers);
        let refused: Vec<(&str, bool)> = dlqs
            .iter()
            .map(|d| (d.key.as_str(), d.refused.is_some()))
            .collect();
        assert_eq!(
            refused,
            [
                ("eu:orders.dlq", false),
                ("orders.dlq", false),
                ("us:orders.dlq", true)
            ]
        );
        let why = dlqs[2].refused.as_deref().unwrap();
        assert!(
            why.contains("\"us:orders.dlq\"") && why.contains("broker us's"),
            "{why}"
        );
        // On broker us itself the same name is its own.
        let us = Place {
            broker: "us",
            home: "/",
        };
        let mut dlqs = find_dlqs(&queues, &Bindings::new(), us, &[], 4);
        refuse_clashes(&mut dlqs, us, &brokers);
        assert!(dlqs.iter().all(|d| d.refused.is_none()), "{dlqs:?}");
        assert_eq!(dlqs.len(), 3);
    }

    #[test]
    fn a_queue_that_dead_letters_into_itself_is_not_a_dlq() {
        let queues = [json!({"vhost": "/", "name": "retry", "type": "classic",
            "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"}})];
        assert!(found(&queues, &[]).is_empty());
    }
}

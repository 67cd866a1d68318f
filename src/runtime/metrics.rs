//! Prometheus metrics: what ingest counts as it goes, and the archive totals read at scrape time.
//! Every series of a DLQ names it by two labels, `broker` (`default`: `--amqp-url`'s) and
//! `queue` (its key on that broker, [`Dlq::key_on_broker`]), so that a fleet's series can be
//! summed or selected by broker. Every label value is from a bounded set: DLQs this process
//! consumes (an operator's choice), outcomes and kinds Lazarus names, and, for what messages
//! say, [`reason_label`] and [`QUEUE_LABELS`] — a producer cannot add series.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::archive::QueueReasonCount;
use crate::message::dlq::{off_broker, Dlq, DEFAULT_BROKER};

/// A consumed DLQ's series: its `broker` and `queue` ([`Dlq::key_on_broker`]), one per DLQ.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueLabels {
    pub broker: String,
    pub queue: String,
}

impl QueueLabels {
    pub fn of(dlq: &Dlq) -> Self {
        QueueLabels {
            broker: dlq.broker.clone(),
            queue: dlq.key_on_broker(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueReasonLabels {
    pub broker: String,
    pub queue: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct IngestErrorLabels {
    pub broker: String,
    pub queue: String,
    /// `broker`, `queue_missing`, `database` or `crash`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct OutcomeLabels {
    /// `published`, `unroutable`, `nacked` or `failed`.
    pub outcome: String,
}

/// A label value written as the text exposition format requires: backslash, double quote
/// and line feed escaped (`\\`, `\"`, `\n`). prometheus-client 0.24 writes label values as
/// they are, and queue names and death reasons come from the broker and from whoever
/// published the message: a quote or a line break in one made the whole scrape unreadable,
/// or wrote a series of its own. (Text format only: Lazarus has no protobuf exposition.)
struct Escaped<'a>(&'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let mut rest = self.0;
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..i])?;
            encoder.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        encoder.write_str(rest)
    }
}

impl EncodeLabelSet for QueueLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [
            ("broker", Escaped(&self.broker)),
            ("queue", Escaped(&self.queue)),
        ]
        .encode(encoder)
    }
}

impl EncodeLabelSet for QueueReasonLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [
            ("broker", Escaped(&self.broker)),
            ("queue", Escaped(&self.queue)),
            ("reason", Escaped(&self.reason)),
        ]
        .encode(encoder)
    }
}

impl EncodeLabelSet for IngestErrorLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [
            ("broker", Escaped(&self.broker)),
            ("queue", Escaped(&self.queue)),
            ("kind", Escaped(&self.kind)),
        ]
        .encode(encoder)
    }
}

impl EncodeLabelSet for OutcomeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [("outcome", Escaped(&self.outcome))].encode(encoder)
    }
}

/// The death reasons RabbitMQ gives (and `none`, a message without death history): each is
/// a `reason` label of its own; any other (a forged or future one) counts as `other`.
pub const KNOWN_REASONS: [&str; 5] = ["rejected", "expired", "maxlen", "delivery_limit", "none"];

/// The `reason` label of a first-death reason: itself when RabbitMQ gives it, else `other`.
/// The reason is the publisher's to write (`x-death`, `x-first-death-reason`), so its values
/// cannot each be a series.
pub fn reason_label(reason: &str) -> &'static str {
    KNOWN_REASONS
        .into_iter()
        .find(|known| *known == reason)
        .unwrap_or("other")
}

/// At most this many DLQs (`broker` and `queue` labels) of the archive totals besides the
/// DLQs this process consumes: the DLQs with most messages. The archive may hold DLQs nobody
/// consumes (an imported file's, a DLQ no longer named); past the bound they are summed
/// under [`OTHER_QUEUES`] of their broker.
pub const QUEUE_LABELS: usize = 50;

/// The `queue` label of the archive totals of the DLQs past [`QUEUE_LABELS`].
pub const OTHER_QUEUES: &str = "(other queues)";

/// The `broker` label of the archive totals past [`QUEUE_LABELS`] whose broker names no
/// other series (an imported file's brokers are as many as it says): their totals are
/// summed here, so that brokers cannot add series either.
pub const OTHER_BROKERS: &str = "(other brokers)";

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    archived: Family<QueueReasonLabels, Gauge>,
    pub ingested: Family<QueueLabels, Counter>,
    pub duplicates: Family<QueueLabels, Counter>,
    pub batch_commit_seconds: Histogram,
    pub consumer_connected: Family<QueueLabels, Gauge>,
    pub ingest_errors: Family<IngestErrorLabels, Counter>,
    replayed: Family<OutcomeLabels, Counter>,
    canary_pauses: Counter,
    retention_deleted: Counter,
    webhooks: Family<OutcomeLabels, Counter>,
    webhooks_waiting: Gauge,
    database_up: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("lazarus");
        let archived = Family::<QueueReasonLabels, Gauge>::default();
        let ingested = Family::<QueueLabels, Counter>::default();
        let duplicates = Family::<QueueLabels, Counter>::default();
        let batch_commit_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let consumer_connected = Family::<QueueLabels, Gauge>::default();
        let ingest_errors = Family::<IngestErrorLabels, Counter>::default();
        let replayed = Family::<OutcomeLabels, Counter>::default();
        let canary_pauses = Counter::default();
        let retention_deleted = Counter::default();
        let webhooks = Family::<OutcomeLabels, Counter>::default();
        let webhooks_waiting = Gauge::default();
        let database_up = Gauge::default();
        registry.register(
            "archived_messages",
            "Messages in the archive, by DLQ and first-death reason",
            archived.clone(),
        );
        registry.register(
            "ingested_messages",
            "Messages this process archived since it started",
            ingested.clone(),
        );
        registry.register(
            "duplicate_deliveries",
            "Redeliveries of messages that were already archived (skipped)",
            duplicates.clone(),
        );
        registry.register(
            "batch_commit_seconds",
            "Time to commit one ingest batch durably",
            batch_commit_seconds.clone(),
        );
        registry.register(
            "consumer_connected",
            "1 while the consumer of a DLQ is consuming, 0 otherwise",
            consumer_connected.clone(),
        );
        registry.register(
            "ingest_errors",
            "Ingest failures by DLQ and kind (broker, queue_missing, database, crash)",
            ingest_errors.clone(),
        );
        registry.register(
            "replayed_messages",
            "Replay outcomes this process reported (single replays and jobs), by outcome",
            replayed.clone(),
        );
        registry.register(
            "replay_canary_pauses",
            "Replay jobs this process paused because too many of their canary copies died again",
            canary_pauses.clone(),
        );
        registry.register(
            "retention_deleted_messages",
            "Messages this process deleted under the retention policy",
            retention_deleted.clone(),
        );
        registry.register(
            "webhook_notifications",
            "Webhook notifications of this process, by outcome (sent: POSTs taken; failed after \
             its tries; dropped because the URL's queue was full; digested: new failure groups \
             told in a digest sent, beyond the webhook's rate)",
            webhooks.clone(),
        );
        registry.register(
            "webhook_waiting_events",
            "Events waiting for a webhook (its rate limit, or a receiver failing), all webhooks",
            webhooks_waiting.clone(),
        );
        registry.register(
            "database_up",
            "1 when the archive database answered this scrape, 0 when it did not",
            database_up.clone(),
        );
        Metrics {
            registry,
            replayed,
            canary_pauses,
            retention_deleted,
            webhooks,
            webhooks_waiting,
            database_up,
            archived,
            ingested,
            duplicates,
            batch_commit_seconds,
            consumer_connected,
            ingest_errors,
        }
    }
}

impl Metrics {
    /// `kind`: `broker`, `queue_missing`, `database` or `crash`.
    pub fn ingest_error(&self, dlq: &Dlq, kind: &'static str) {
        self.ingest_errors
            .get_or_create(&IngestErrorLabels {
                broker: dlq.broker.clone(),
                queue: dlq.key_on_broker(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// `outcome`: an [`crate::archive::Outcome`]'s name.
    pub fn replayed(&self, outcome: &'static str, n: u64) {
        self.replayed
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc_by(n);
    }

    pub fn set_connected(&self, dlq: &Dlq, connected: bool) {
        self.consumer_connected
            .get_or_create(&QueueLabels::of(dlq))
            .set(i64::from(connected));
    }

    pub fn canary_paused(&self) {
        self.canary_pauses.inc();
    }

    /// `n` webhook notifications had `outcome`.
    pub fn webhook(&self, outcome: &'static str, n: u64) {
        if n > 0 {
            self.webhooks
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// The events waiting for the webhooks changed by `delta`.
    pub fn webhook_waiting(&self, delta: i64) {
        self.webhooks_waiting.inc_by(delta);
    }

    pub fn retention_deleted(&self, n: u64) {
        self.retention_deleted.inc_by(n);
    }

    /// The Prometheus text exposition, with archive totals as of now (`None`: the database
    /// did not answer; `database_up` says so and the totals are left out). `consumed`: the
    /// DLQs this process consumes, each named by its labels whatever the bound.
    pub fn render(&self, counts: Option<&[QueueReasonCount]>, consumed: &[Dlq]) -> String {
        self.database_up.set(i64::from(counts.is_some()));
        // Totals that no longer exist (purged) must not linger at their last value.
        self.archived.clear();
        for ((broker, queue, reason), messages) in
            bounded_totals(counts.unwrap_or_default(), consumed)
        {
            self.archived
                .get_or_create(&QueueReasonLabels {
                    broker,
                    queue,
                    reason: reason.to_owned(),
                })
                .set(messages);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The archive totals by bounded labels, keyed (broker, queue, reason): reasons past
/// [`KNOWN_REASONS`] as `other`; DLQs neither consumed nor among the [`QUEUE_LABELS`] largest
/// as [`OTHER_QUEUES`] of their broker, or of [`OTHER_BROKERS`] when their broker names no
/// other series (the default broker always does); summed.
fn bounded_totals(
    counts: &[QueueReasonCount],
    consumed: &[Dlq],
) -> BTreeMap<(String, String, &'static str), i64> {
    // A DLQ by (broker, key): the key alone would do, but the broker is what is labelled.
    let mut by_dlq: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for c in counts {
        *by_dlq
            .entry((c.broker.as_str(), c.queue.as_str()))
            .or_default() += c.messages;
    }
    let consumed: Vec<(&str, String)> = consumed
        .iter()
        .map(|d| (d.broker.as_str(), d.key()))
        .collect();
    let is_consumed =
        |broker: &str, key: &str| consumed.iter().any(|(b, k)| *b == broker && k == key);
    let mut others: Vec<((&str, &str), i64)> = by_dlq
        .into_iter()
        .filter(|((b, k), _)| !is_consumed(b, k))
        .collect();
    // Largest first, then by key: every instance on one archive names the same ones.
    others.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then(a.0 .1.cmp(b.0 .1))
            .then(a.0 .0.cmp(b.0 .0))
    });
    let named: HashSet<(&str, &str)> = others
        .iter()
        .take(QUEUE_LABELS)
        .map(|(dlq, _)| *dlq)
        .chain(consumed.iter().map(|(b, k)| (*b, k.as_str())))
        .collect();
    let brokers: HashSet<&str> = named
        .iter()
        .map(|(b, _)| *b)
        .chain([DEFAULT_BROKER])
        .collect();
    let mut out = BTreeMap::new();
    for c in counts {
        let (broker, queue) = (c.broker.as_str(), c.queue.as_str());
        let labels = match (named.contains(&(broker, queue)), brokers.contains(broker)) {
            (true, _) => (broker.to_owned(), off_broker(broker, queue).to_owned()),
            (false, true) => (broker.to_owned(), OTHER_QUEUES.to_owned()),
            (false, false) => (OTHER_BROKERS.to_owned(), OTHER_QUEUES.to_owned()),
        };
        *out.entry((labels.0, labels.1, reason_label(&c.reason)))
            .or_default() += c.messages;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The totals of `key` (a [`Dlq::key`]) of the default broker.
    fn count(key: &str, reason: &str, messages: i64) -> QueueReasonCount {
        count_on(DEFAULT_BROKER, key, reason, messages)
    }

    fn count_on(broker: &str, key: &str, reason: &str, messages: i64) -> QueueReasonCount {
        QueueReasonCount {
            queue: key.into(),
            broker: broker.into(),
            reason: reason.into(),
            messages,
            open: messages,
            oldest: time::OffsetDateTime::UNIX_EPOCH,
            newest: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    type Totals = BTreeMap<(String, String, &'static str), i64>;

    fn total(totals: &Totals, broker: &str, queue: &str, reason: &'static str) -> Option<i64> {
        totals
            .get(&(broker.to_owned(), queue.to_owned(), reason))
            .copied()
    }

    #[test]
    fn forged_reasons_and_queues_past_the_bound_share_a_series() {
        let mut counts: Vec<QueueReasonCount> = (0..200)
            .map(|i| count("orders.dlq", &format!("forged-{i}"), 1))
            .collect();
        counts.push(count("orders.dlq", "rejected", 7));
        counts.push(count("orders.dlq", "delivery_limit", 2));
        for i in 0..QUEUE_LABELS + 10 {
            counts.push(count(
                &format!("imported-{i:03}"),
                "expired",
                100 + i as i64,
            ));
        }
        counts.push(count("consumed.dlq", "maxlen", 1));
        let totals = bounded_totals(&counts, &[Dlq::home("consumed.dlq")]);
        let reason = |q: &str, r: &'static str| total(&totals, "default", q, r);
        assert_eq!(reason("orders.dlq", "other"), Some(200));
        assert_eq!(reason("orders.dlq", "rejected"), Some(7));
        assert_eq!(reason("orders.dlq", "delivery_limit"), Some(2));
        assert_eq!(
            reason("consumed.dlq", "maxlen"),
            Some(1),
            "consumed: always named"
        );
        // The smallest imported queues (000..=010, with orders.dlq's 209 among the named).
        assert_eq!(reason(OTHER_QUEUES, "expired"), Some((100..111).sum()));
        assert_eq!(reason("imported-059", "expired"), Some(159));
        assert_eq!(reason("imported-010", "expired"), None);
        let queues: HashSet<&str> = totals.keys().map(|(_, q, _)| q.as_str()).collect();
        assert_eq!(queues.len(), QUEUE_LABELS + 2, "{queues:?}");
        assert!(totals.keys().all(|(b, _, _)| b == "default"), "{totals:?}");
        assert_eq!(reason_label("rejected"), "rejected");
        assert_eq!(reason_label("Rejected"), "other");
    }

    #[test]
    fn each_broker_is_a_label_and_its_queues_are_keyed_there() {
        let us = Dlq::home("orders.dlq").on("us");
        let mut counts = vec![
            count("orders.dlq", "rejected", 3),
            count_on("us", "us:orders.dlq", "expired", 2),
            count_on("us", "us:tenant%2Fa/orders.dlq", "expired", 1),
            // A default-broker queue whose name holds `:` is keyed as it is.
            count("eu:x", "expired", 4),
        ];
        // Past the bound: the smallest DLQs, of a broker named elsewhere and of one not.
        for i in 0..QUEUE_LABELS {
            counts.push(count(&format!("big-{i:03}"), "expired", 1000));
        }
        counts.push(count_on("us", "us:small.dlq", "maxlen", 1));
        counts.push(count_on("imported", "imported:small.dlq", "maxlen", 1));
        counts.push(count_on("imported2", "imported2:small.dlq", "maxlen", 1));
        let totals = bounded_totals(&counts, &[us.clone(), Dlq::home("orders.dlq")]);
        assert_eq!(total(&totals, "us", "orders.dlq", "expired"), Some(2));
        assert_eq!(total(&totals, "default", "orders.dlq", "rejected"), Some(3));
        assert_eq!(total(&totals, "us", OTHER_QUEUES, "expired"), Some(1));
        assert_eq!(total(&totals, "us", OTHER_QUEUES, "maxlen"), Some(1));
        assert_eq!(total(&totals, "default", OTHER_QUEUES, "expired"), Some(4));
        assert_eq!(
            total(&totals, OTHER_BROKERS, OTHER_QUEUES, "maxlen"),
            Some(2),
            "brokers that name no series are summed"
        );
        let brokers: HashSet<&str> = totals.keys().map(|(b, _, _)| b.as_str()).collect();
        assert_eq!(
            brokers,
            HashSet::from(["default", "us", OTHER_BROKERS]),
            "{totals:?}"
        );

        let metrics = Metrics::default();
        metrics.set_connected(&us, true);
        metrics.ingest_error(&us, "broker");
        metrics
            .ingested
            .get_or_create(&QueueLabels::of(
                &Dlq::parse("shop/x", "/").unwrap().on("us"),
            ))
            .inc();
        let text = metrics.render(Some(&counts[..2]), &[us]);
        for series in [
            r#"lazarus_consumer_connected{broker="us",queue="orders.dlq"} 1"#,
            r#"lazarus_ingest_errors_total{broker="us",queue="orders.dlq",kind="broker"} 1"#,
            r#"lazarus_ingested_messages_total{broker="us",queue="shop/x"} 1"#,
            r#"lazarus_archived_messages{broker="us",queue="orders.dlq",reason="expired"} 2"#,
            r#"lazarus_archived_messages{broker="default",queue="orders.dlq",reason="rejected"} 3"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
    }

    #[test]
    fn label_values_are_escaped_as_the_text_format_requires() {
        let metrics = Metrics::default();
        metrics.ingest_error(&Dlq::home("a\\b\"c\nd"), "database");
        let text = metrics.render(Some(&[]), &[]);
        assert!(
            text.contains(
                r#"lazarus_ingest_errors_total{broker="default",queue="a\\b\"c\nd",kind="database"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_scrape_says_whether_the_database_answered() {
        let metrics = Metrics::default();
        let count = count("orders.dlq", "rejected", 3);
        let up = metrics.render(Some(std::slice::from_ref(&count)), &[]);
        assert!(up.contains("lazarus_database_up 1"), "{up}");
        assert!(up.contains(
            r#"lazarus_archived_messages{broker="default",queue="orders.dlq",reason="rejected"} 3"#
        ));
        let down = metrics.render(None, &[]);
        assert!(down.contains("lazarus_database_up 0"), "{down}");
        assert!(!down.contains("lazarus_archived_messages{"), "{down}");
        metrics.canary_paused();
        assert!(metrics
            .render(None, &[])
            .contains("lazarus_replay_canary_pauses_total 1"));
        metrics.retention_deleted(7);
        assert!(metrics
            .render(None, &[])
            .contains("lazarus_retention_deleted_messages_total 7"));
    }
}

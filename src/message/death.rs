//! `x-death` and `x-first-death-*` headers → death records, the first death and the
//! replay target (pure; tolerant of malformed input, which is flagged, never fatal).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::message::headers::{AmqpValue, Bytes, Table};

/// One entry of `x-death`: the deaths of a message in one queue for one reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeathRecord {
    pub queue: String,
    pub reason: String,
    pub count: i64,
    pub exchange: String,
    pub routing_keys: Vec<String>,
    /// The first death for this queue and reason (the broker never updates it).
    #[serde(with = "time::serde::rfc3339::option")]
    pub time: Option<OffsetDateTime>,
    pub original_expiration: Option<String>,
}

/// Where and why the message died the first time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FirstDeath {
    pub queue: String,
    pub reason: String,
    pub exchange: String,
}

/// Where a replay sends the message: the exchange and routing key it was first published with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayTarget {
    pub exchange: String,
    pub routing_key: String,
}

impl ReplayTarget {
    /// `exchange → routing key`, with the default exchange and the empty key named.
    pub fn label(&self) -> String {
        let exchange = if self.exchange.is_empty() {
            "(AMQP default)"
        } else {
            &self.exchange
        };
        let key = if self.routing_key.is_empty() {
            "(empty key)"
        } else {
            &self.routing_key
        };
        format!("{exchange} → {key}")
    }
}

/// Everything decoded from a message's death headers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeathHistory {
    /// In broker order: newest first.
    pub deaths: Vec<DeathRecord>,
    pub first_death: Option<FirstDeath>,
    pub replay_target: Option<ReplayTarget>,
    /// What could not be decoded; empty for a well-formed history.
    pub problems: Vec<String>,
}

impl DeathHistory {
    /// Applies `clean` to every text of the history (the archive keeps derived text free
    /// of NUL; the headers keep the exact values).
    pub fn sanitize(&mut self, clean: impl Fn(&str) -> std::borrow::Cow<'_, str>) {
        let fix = |s: &mut String| {
            if let std::borrow::Cow::Owned(c) = clean(s) {
                *s = c;
            }
        };
        for d in &mut self.deaths {
            fix(&mut d.queue);
            fix(&mut d.reason);
            fix(&mut d.exchange);
            d.routing_keys.iter_mut().for_each(fix);
            if let Some(e) = d.original_expiration.as_mut() {
                fix(e);
            }
        }
        if let Some(f) = self.first_death.as_mut() {
            fix(&mut f.queue);
            fix(&mut f.reason);
            fix(&mut f.exchange);
        }
        self.problems.iter_mut().for_each(fix);
    }
}

/// 9999-12-31T23:59:59Z, the last second RFC 3339 can express.
const MAX_RFC3339_SECS: i64 = 253_402_300_799;

/// Headers in which a quorum queue counts the deliveries of a message (`x-acquired-count`
/// from RabbitMQ 4.3 on): the broker's bookkeeping, not part of the message.
pub const DELIVERY_COUNTERS: [&str; 2] = ["x-delivery-count", "x-acquired-count"];

/// Headers a replay strips so that the consumer's retry counting starts fresh: the death
/// history and the broker's delivery counters.
pub fn is_death_header(name: &Bytes) -> bool {
    let Some(name) = name.as_str() else {
        return false;
    };
    name == "x-death"
        || DELIVERY_COUNTERS.contains(&name)
        || name.starts_with("x-first-death-")
        || name.starts_with("x-last-death-")
}

/// How often the broker has delivered the message, by its delivery counters (quorum
/// queues only; `None` elsewhere).
pub fn delivery_attempts(headers: Option<&Table>) -> Option<i64> {
    let headers = headers?;
    DELIVERY_COUNTERS
        .iter()
        .filter_map(|name| headers.get(name)?.as_i64())
        .max()
}

/// Decodes the death history of a message from its headers (`None`: no header table).
pub fn decode(headers: Option<&Table>) -> DeathHistory {
    let mut history = DeathHistory::default();
    let Some(headers) = headers else {
        return history;
    };
    match headers.get("x-death") {
        None => {}
        Some(AmqpValue::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                match entry {
                    AmqpValue::Table(t) => {
                        history
                            .deaths
                            .push(decode_entry(i, t, &mut history.problems))
                    }
                    other => history.problems.push(format!(
                        "x-death[{i}] is a {}, not a table; skipped",
                        other.type_name()
                    )),
                }
            }
        }
        Some(other) => history.problems.push(format!(
            "x-death is a {}, not an array; ignored",
            other.type_name()
        )),
    }
    history.first_death = first_death(headers, &history.deaths, &mut history.problems);
    history.replay_target = replay_target(
        history.first_death.as_ref(),
        &history.deaths,
        &mut history.problems,
    );
    history
}

fn decode_entry(i: usize, t: &Table, problems: &mut Vec<String>) -> DeathRecord {
    let mut text = |field: &str| -> String {
        match t.get(field) {
            Some(v) => v.as_str().map(str::to_owned).unwrap_or_else(|| {
                problems.push(format!(
                    "x-death[{i}].{field} is a {}, not a string",
                    v.type_name()
                ));
                String::new()
            }),
            None => {
                problems.push(format!("x-death[{i}] has no {field}"));
                String::new()
            }
        }
    };
    let queue = text("queue");
    let reason = text("reason");
    let exchange = text("exchange");
    let count = match t.get("count") {
        Some(v) => v.as_i64().unwrap_or_else(|| {
            problems.push(format!(
                "x-death[{i}].count is a {}, not an integer",
                v.type_name()
            ));
            0
        }),
        None => {
            problems.push(format!("x-death[{i}] has no count"));
            0
        }
    };
    let routing_keys = match t.get("routing-keys") {
        Some(AmqpValue::Array(keys)) => keys
            .iter()
            .filter_map(|k| {
                let key = k.as_str().map(str::to_owned);
                if key.is_none() {
                    problems.push(format!(
                        "x-death[{i}].routing-keys holds a {}",
                        k.type_name()
                    ));
                }
                key
            })
            .collect(),
        Some(other) => {
            problems.push(format!(
                "x-death[{i}].routing-keys is a {}, not an array",
                other.type_name()
            ));
            Vec::new()
        }
        None => {
            problems.push(format!("x-death[{i}] has no routing-keys"));
            Vec::new()
        }
    };
    let time = match t.get("time") {
        Some(v) => {
            // Only years 1970..=9999: RFC 3339 cannot write anything else.
            let time = v
                .as_i64()
                .filter(|secs| (0..=MAX_RFC3339_SECS).contains(secs))
                .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok());
            if time.is_none() {
                problems.push(format!("x-death[{i}].time is not a timestamp"));
            }
            time
        }
        None => {
            problems.push(format!("x-death[{i}] has no time"));
            None
        }
    };
    let original_expiration = t
        .get("original-expiration")
        .and_then(|v| v.as_str().map(str::to_owned));
    DeathRecord {
        queue,
        reason,
        count,
        exchange,
        routing_keys,
        time,
        original_expiration,
    }
}

fn first_death(
    headers: &Table,
    deaths: &[DeathRecord],
    problems: &mut Vec<String>,
) -> Option<FirstDeath> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(AmqpValue::as_str)
            .map(str::to_owned)
    };
    match (
        header("x-first-death-queue"),
        header("x-first-death-reason"),
        header("x-first-death-exchange"),
    ) {
        (Some(queue), Some(reason), Some(exchange)) => Some(FirstDeath {
            queue,
            reason,
            exchange,
        }),
        _ => {
            // An entry's time is its first death there, and entries move to the front when
            // they repeat, so the first death is the entry with the earliest time (the last
            // entry only when times are missing).
            let oldest = deaths
                .iter()
                .rev()
                .min_by_key(|d| d.time.map_or(i64::MAX, OffsetDateTime::unix_timestamp))?;
            problems.push(
                "x-first-death-* headers missing; first death taken from the oldest x-death entry"
                    .into(),
            );
            Some(FirstDeath {
                queue: oldest.queue.clone(),
                reason: oldest.reason.clone(),
                exchange: oldest.exchange.clone(),
            })
        }
    }
}

fn replay_target(
    first: Option<&FirstDeath>,
    deaths: &[DeathRecord],
    problems: &mut Vec<String>,
) -> Option<ReplayTarget> {
    let first = first?;
    if deaths.is_empty() {
        problems.push("x-first-death-* headers without x-death: routing key unknown".into());
        return None;
    }
    let Some(entry) = first_death_entry(first, deaths) else {
        problems.push(format!(
            "no x-death entry for the first-death queue {:?}",
            first.queue
        ));
        return None;
    };
    // CC keys follow the publish routing key (see `dropped_cc_keys`).
    let Some(routing_key) = entry.routing_keys.first() else {
        problems.push(format!(
            "x-death entry for {:?} has no routing keys",
            first.queue
        ));
        return None;
    };
    if first.exchange.contains('\0') || routing_key.contains('\0') {
        // Neither a form nor the archive's text columns can carry it exactly.
        problems.push("the original exchange or routing key contains NUL: choose a target".into());
        return None;
    }
    Some(ReplayTarget {
        exchange: first.exchange.clone(),
        routing_key: routing_key.clone(),
    })
}

/// The `x-death` entry of the first death: its routing keys are the original publish's.
fn first_death_entry<'d>(first: &FirstDeath, deaths: &'d [DeathRecord]) -> Option<&'d DeathRecord> {
    deaths
        .iter()
        .find(|d| d.queue == first.queue && d.reason == first.reason)
        .or_else(|| deaths.iter().find(|d| d.queue == first.queue))
}

/// The `CC` keys of the original publish that the broker dropped when it dead-lettered the
/// message (it does when the queue sets `x-dead-letter-routing-key`; `x-death` still lists
/// them after the routing key). `Some` only for a copy sent to its original target that
/// carries no `CC` header of its own.
pub fn dropped_cc_keys(headers: &Table, target: &ReplayTarget) -> Option<Vec<String>> {
    if headers.get("CC").is_some() {
        return None;
    }
    let history = decode(Some(headers));
    if history.replay_target.as_ref() != Some(target) {
        return None;
    }
    let entry = first_death_entry(history.first_death.as_ref()?, &history.deaths)?;
    let cc: Vec<String> = entry.routing_keys.iter().skip(1).cloned().collect();
    (!cc.is_empty()).then_some(cc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::headers::Bytes;

    fn s(v: &str) -> AmqpValue {
        AmqpValue::LongString(Bytes(v.as_bytes().to_vec()))
    }

    fn entry(queue: &str, reason: &str, count: i64, exchange: &str, keys: &[&str]) -> AmqpValue {
        let mut t = Table::new();
        t.insert("queue", s(queue));
        t.insert("reason", s(reason));
        t.insert("count", AmqpValue::LongLongInt(count));
        t.insert("exchange", s(exchange));
        t.insert(
            "routing-keys",
            AmqpValue::Array(keys.iter().map(|k| s(k)).collect()),
        );
        t.insert("time", AmqpValue::Timestamp(1_764_000_000));
        AmqpValue::Table(t)
    }

    fn headers(deaths: Vec<AmqpValue>, first: Option<(&str, &str, &str)>) -> Table {
        let mut h = Table::new();
        h.insert("x-death", AmqpValue::Array(deaths));
        if let Some((q, r, e)) = first {
            h.insert("x-first-death-queue", s(q));
            h.insert("x-first-death-reason", s(r));
            h.insert("x-first-death-exchange", s(e));
        }
        h
    }

    #[test]
    fn dropped_cc_keys_come_back_only_for_the_original_target() {
        let h = headers(
            vec![entry(
                "billing",
                "rejected",
                1,
                "shop",
                &["invoice.created", "billing"],
            )],
            Some(("billing", "rejected", "shop")),
        );
        let original = ReplayTarget {
            exchange: "shop".into(),
            routing_key: "invoice.created".into(),
        };
        assert_eq!(dropped_cc_keys(&h, &original), Some(vec!["billing".into()]));
        let chosen = ReplayTarget {
            exchange: "".into(),
            routing_key: "billing".into(),
        };
        assert_eq!(
            dropped_cc_keys(&h, &chosen),
            None,
            "a chosen target gets none"
        );
        let mut kept = h.clone();
        kept.insert("CC", AmqpValue::Array(vec![s("billing")]));
        assert_eq!(
            dropped_cc_keys(&kept, &original),
            None,
            "the broker kept CC"
        );
        let single = headers(
            vec![entry("q", "rejected", 1, "shop", &["k"])],
            Some(("q", "rejected", "shop")),
        );
        let target = decode(Some(&single)).replay_target.unwrap();
        assert_eq!(dropped_cc_keys(&single, &target), None);
    }

    #[test]
    fn a_target_with_nul_is_not_guessed() {
        let h = headers(
            vec![entry("q", "rejected", 1, "shop", &["k\0ey"])],
            Some(("q", "rejected", "shop")),
        );
        let d = decode(Some(&h));
        assert_eq!(d.replay_target, None);
        assert!(
            d.problems.iter().any(|p| p.contains("NUL")),
            "{:?}",
            d.problems
        );
    }

    #[test]
    fn no_headers_means_no_history_and_no_target() {
        assert_eq!(decode(None), DeathHistory::default());
        let h = Table::new();
        let d = decode(Some(&h));
        assert!(d.deaths.is_empty() && d.first_death.is_none() && d.replay_target.is_none());
        assert!(d.problems.is_empty());
    }

    #[test]
    fn single_rejection_targets_original_exchange_and_key() {
        let h = headers(
            vec![entry(
                "invoices.process",
                "rejected",
                1,
                "billing.topic",
                &["invoice.created"],
            )],
            Some(("invoices.process", "rejected", "billing.topic")),
        );
        let d = decode(Some(&h));
        assert_eq!(d.deaths.len(), 1);
        assert_eq!(d.deaths[0].count, 1);
        assert_eq!(d.deaths[0].time.unwrap().unix_timestamp(), 1_764_000_000);
        assert_eq!(
            d.replay_target,
            Some(ReplayTarget {
                exchange: "billing.topic".into(),
                routing_key: "invoice.created".into()
            })
        );
        assert!(d.problems.is_empty(), "{:?}", d.problems);
    }

    #[test]
    fn retry_loop_targets_first_death_not_newest_entry() {
        // Newest first: the retry queue expired it last, the work queue rejected it first.
        let h = headers(
            vec![
                entry("work.retry", "expired", 3, "work.dlx", &["work.retry"]),
                entry("work", "rejected", 3, "", &["work"]),
            ],
            Some(("work", "rejected", "")),
        );
        let d = decode(Some(&h));
        assert_eq!(d.deaths[0].queue, "work.retry");
        assert_eq!(
            d.replay_target,
            Some(ReplayTarget {
                exchange: "".into(),
                routing_key: "work".into()
            })
        );
    }

    #[test]
    fn fanout_with_empty_key_is_a_valid_target() {
        let h = headers(
            vec![entry(
                "normal_queue",
                "expired",
                1,
                "normal_exchange",
                &[""],
            )],
            Some(("normal_queue", "expired", "normal_exchange")),
        );
        assert_eq!(
            decode(Some(&h)).replay_target,
            Some(ReplayTarget {
                exchange: "normal_exchange".into(),
                routing_key: "".into()
            })
        );
    }

    #[test]
    fn cc_keys_do_not_become_the_target() {
        let h = headers(
            vec![entry("q", "rejected", 1, "ex", &["main.key", "cc.key"])],
            Some(("q", "rejected", "ex")),
        );
        assert_eq!(
            decode(Some(&h)).replay_target.unwrap().routing_key,
            "main.key"
        );
    }

    #[test]
    fn same_queue_two_reasons_picks_first_death_reason() {
        let h = headers(
            vec![
                entry("q", "expired", 1, "ex2", &["k2"]),
                entry("q", "rejected", 2, "ex", &["k1"]),
            ],
            Some(("q", "rejected", "ex")),
        );
        assert_eq!(decode(Some(&h)).replay_target.unwrap().routing_key, "k1");
    }

    #[test]
    fn missing_first_death_headers_fall_back_to_oldest_entry() {
        let h = headers(
            vec![
                entry("retry", "expired", 1, "dlx", &["r"]),
                entry("work", "rejected", 1, "orders", &["order.created"]),
            ],
            None,
        );
        let d = decode(Some(&h));
        assert_eq!(d.first_death.unwrap().queue, "work");
        assert_eq!(d.replay_target.unwrap().exchange, "orders");
        assert_eq!(d.problems.len(), 1);
    }

    #[test]
    fn missing_first_death_headers_use_the_earliest_time_not_the_last_entry() {
        // work died at t=10, retry at t=20; work died again later and moved to the front.
        let mut work = entry("work", "rejected", 2, "orders", &["order.created"]);
        let mut retry = entry("retry", "expired", 1, "dlx", &["r"]);
        if let (AmqpValue::Table(w), AmqpValue::Table(r)) = (&mut work, &mut retry) {
            w.insert("time", AmqpValue::Timestamp(10));
            r.insert("time", AmqpValue::Timestamp(20));
        }
        let d = decode(Some(&headers(vec![work, retry], None)));
        assert_eq!(d.first_death.unwrap().queue, "work");
        assert_eq!(d.replay_target.unwrap().routing_key, "order.created");
    }

    #[test]
    fn times_outside_rfc3339_are_flagged_and_still_serialise() {
        for secs in [-100_000_000_000_i64, -1, 300_000_000_000] {
            let mut t = match entry("q", "rejected", 1, "ex", &["k"]) {
                AmqpValue::Table(t) => t,
                _ => unreachable!(),
            };
            t.insert("time", AmqpValue::LongLongInt(secs));
            let d = decode(Some(&headers(
                vec![AmqpValue::Table(t)],
                Some(("q", "rejected", "ex")),
            )));
            assert_eq!(d.deaths[0].time, None, "{secs}");
            assert!(d.problems[0].contains("time is not a timestamp"));
            serde_json::to_string(&d).unwrap();
        }
    }

    #[test]
    fn malformed_entries_are_flagged_not_fatal() {
        let mut bad = Table::new();
        bad.insert("queue", AmqpValue::LongInt(5));
        bad.insert("count", s("three"));
        bad.insert("routing-keys", s("not-an-array"));
        let h = headers(
            vec![AmqpValue::Table(bad), AmqpValue::Boolean(true)],
            Some(("q", "rejected", "ex")),
        );
        let d = decode(Some(&h));
        assert_eq!(d.deaths.len(), 1);
        assert_eq!(d.deaths[0].count, 0);
        assert!(d.replay_target.is_none());
        let all = d.problems.join("\n");
        for expected in [
            "queue is a long-int",
            "count is a long-string",
            "routing-keys is a long-string",
            "x-death[1] is a boolean",
            "no reason",
            "no time",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in {all}");
        }
    }

    #[test]
    fn x_death_of_the_wrong_type_is_flagged() {
        let mut h = Table::new();
        h.insert("x-death", s("oops"));
        let d = decode(Some(&h));
        assert!(d.deaths.is_empty());
        assert_eq!(
            d.problems,
            vec!["x-death is a long-string, not an array; ignored"]
        );
    }

    #[test]
    fn first_death_headers_without_x_death_give_no_target() {
        let h = headers(vec![], Some(("q", "rejected", "ex")));
        let d = decode(Some(&h));
        assert!(d.first_death.is_some());
        assert!(d.replay_target.is_none());
        assert_eq!(d.problems.len(), 1);
    }

    #[test]
    fn death_headers_are_recognised() {
        for h in [
            "x-death",
            "x-first-death-queue",
            "x-last-death-reason",
            "x-delivery-count",
        ] {
            assert!(is_death_header(&Bytes::from(h)));
        }
        for h in ["x-exception-message", "retry-times", "x-deathly"] {
            assert!(!is_death_header(&Bytes::from(h)));
        }
    }

    #[test]
    fn short_strings_and_other_int_widths_are_accepted() {
        let mut t = Table::new();
        t.insert("queue", AmqpValue::text("q"));
        t.insert("reason", AmqpValue::text("maxlen"));
        t.insert("count", AmqpValue::LongInt(4));
        t.insert("exchange", AmqpValue::text(""));
        t.insert("routing-keys", AmqpValue::Array(vec![AmqpValue::text("q")]));
        t.insert("time", AmqpValue::Timestamp(0));
        t.insert("original-expiration", s("500"));
        let h = headers(vec![AmqpValue::Table(t)], Some(("q", "maxlen", "")));
        let d = decode(Some(&h));
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!(d.deaths[0].count, 4);
        assert_eq!(d.deaths[0].original_expiration.as_deref(), Some("500"));
    }
}

//! `x-death` and `x-first-death-*` headers → death records, the first death and the
//! replay target (pure; tolerant of malformed input, which is flagged, never fatal).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amqp::headers::{AmqpValue, Table};

/// One entry of `x-death`: the deaths of a message in one queue for one reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstDeath {
    pub queue: String,
    pub reason: String,
    pub exchange: String,
}

/// Where a replay sends the message: the exchange and routing key it was first published with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// 9999-12-31T23:59:59Z, the last second RFC 3339 can express.
const MAX_RFC3339_SECS: i64 = 253_402_300_799;

/// Headers a replay strips so that the consumer's retry counting starts fresh.
pub fn is_death_header(name: &str) -> bool {
    name == "x-death"
        || name == "x-delivery-count"
        || name.starts_with("x-first-death-")
        || name.starts_with("x-last-death-")
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
    let entry = deaths
        .iter()
        .find(|d| d.queue == first.queue && d.reason == first.reason)
        .or_else(|| deaths.iter().find(|d| d.queue == first.queue));
    let Some(entry) = entry else {
        problems.push(format!(
            "no x-death entry for the first-death queue {:?}",
            first.queue
        ));
        return None;
    };
    // CC keys follow the publish routing key; the CC header travels with the message.
    let Some(routing_key) = entry.routing_keys.first() else {
        problems.push(format!(
            "x-death entry for {:?} has no routing keys",
            first.queue
        ));
        return None;
    };
    Some(ReplayTarget {
        exchange: first.exchange.clone(),
        routing_key: routing_key.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::headers::Bytes;

    fn s(v: &str) -> AmqpValue {
        AmqpValue::LongString(Bytes(v.as_bytes().to_vec()))
    }

    fn entry(queue: &str, reason: &str, count: i64, exchange: &str, keys: &[&str]) -> AmqpValue {
        let mut t = Table::new();
        t.insert("queue".into(), s(queue));
        t.insert("reason".into(), s(reason));
        t.insert("count".into(), AmqpValue::LongLongInt(count));
        t.insert("exchange".into(), s(exchange));
        t.insert(
            "routing-keys".into(),
            AmqpValue::Array(keys.iter().map(|k| s(k)).collect()),
        );
        t.insert("time".into(), AmqpValue::Timestamp(1_764_000_000));
        AmqpValue::Table(t)
    }

    fn headers(deaths: Vec<AmqpValue>, first: Option<(&str, &str, &str)>) -> Table {
        let mut h = Table::new();
        h.insert("x-death".into(), AmqpValue::Array(deaths));
        if let Some((q, r, e)) = first {
            h.insert("x-first-death-queue".into(), s(q));
            h.insert("x-first-death-reason".into(), s(r));
            h.insert("x-first-death-exchange".into(), s(e));
        }
        h
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
            w.insert("time".into(), AmqpValue::Timestamp(10));
            r.insert("time".into(), AmqpValue::Timestamp(20));
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
            t.insert("time".into(), AmqpValue::LongLongInt(secs));
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
        bad.insert("queue".into(), AmqpValue::LongInt(5));
        bad.insert("count".into(), s("three"));
        bad.insert("routing-keys".into(), s("not-an-array"));
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
        h.insert("x-death".into(), s("oops"));
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
            assert!(is_death_header(h));
        }
        for h in ["x-exception-message", "retry-times", "x-deathly"] {
            assert!(!is_death_header(h));
        }
    }

    #[test]
    fn short_strings_and_other_int_widths_are_accepted() {
        let mut t = Table::new();
        t.insert("queue".into(), AmqpValue::ShortString("q".into()));
        t.insert("reason".into(), AmqpValue::ShortString("maxlen".into()));
        t.insert("count".into(), AmqpValue::LongInt(4));
        t.insert("exchange".into(), AmqpValue::ShortString("".into()));
        t.insert(
            "routing-keys".into(),
            AmqpValue::Array(vec![AmqpValue::ShortString("q".into())]),
        );
        t.insert("time".into(), AmqpValue::Timestamp(0));
        t.insert("original-expiration".into(), s("500"));
        let h = headers(vec![AmqpValue::Table(t)], Some(("q", "maxlen", "")));
        let d = decode(Some(&h));
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!(d.deaths[0].count, 4);
        assert_eq!(d.deaths[0].original_expiration.as_deref(), Some("500"));
    }
}

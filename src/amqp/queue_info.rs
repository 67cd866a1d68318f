//! A queue as RabbitMQ's management API describes it (pure): what its settings put at
//! risk, such as the delivery limit at which a quorum queue drops a message.

use serde_json::Value;

/// A queue as `GET /api/queues/{vhost}/{name}` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    details: Value,
}

/// What a queue's delivery limit is, as far as its description tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryLimit {
    /// Messages may come back any number of times (not a quorum queue, or no limit).
    Unlimited,
    /// A message delivered more often is dropped (or dead-lettered, where the DLQ has a DLX).
    Finite(i64),
    /// The broker has not gathered the queue's policy yet (its statistics come every few
    /// seconds): ask again.
    NotYetKnown,
}

impl QueueInfo {
    pub fn from_json(details: Value) -> Self {
        QueueInfo { details }
    }

    /// The queue's delivery limit on a broker of this major version (pure). RabbitMQ 4.0 and
    /// later report it as `delivery_limit` (a number or `"unlimited"`); before that it follows
    /// from the `x-delivery-limit` argument and the policy's `delivery-limit` (the lower wins,
    /// a negative one turns it off), and from RabbitMQ 4's default of 20 when neither is set.
    pub fn delivery_limit(&self, broker_major: u32) -> DeliveryLimit {
        let d = &self.details;
        if d.get("type").and_then(Value::as_str) != Some("quorum") {
            return DeliveryLimit::Unlimited;
        }
        match d.get("delivery_limit") {
            Some(Value::Number(n)) => {
                return n
                    .as_i64()
                    .filter(|n| *n >= 0)
                    .map_or(DeliveryLimit::Unlimited, DeliveryLimit::Finite);
            }
            Some(Value::String(s)) if s == "unlimited" => return DeliveryLimit::Unlimited,
            _ => {}
        }
        // Without statistics yet, the policy is not known either.
        if d.get("policy").is_none() {
            return DeliveryLimit::NotYetKnown;
        }
        let argument = d
            .pointer("/arguments/x-delivery-limit")
            .and_then(Value::as_i64);
        let policy = d
            .pointer("/effective_policy_definition/delivery-limit")
            .and_then(Value::as_i64);
        let set: Vec<i64> = argument.into_iter().chain(policy).collect();
        if set.is_empty() {
            return if broker_major >= 4 {
                DeliveryLimit::Finite(20)
            } else {
                DeliveryLimit::Unlimited
            };
        }
        if set.iter().any(|n| *n < 0) {
            return DeliveryLimit::Unlimited;
        }
        DeliveryLimit::Finite(set.into_iter().min().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limit(details: Value, major: u32) -> DeliveryLimit {
        QueueInfo::from_json(details).delivery_limit(major)
    }

    #[test]
    fn classic_queues_and_streams_have_no_delivery_limit() {
        for kind in ["classic", "stream"] {
            let d = json!({"type": kind, "arguments": {}, "policy": null});
            assert_eq!(limit(d, 4), DeliveryLimit::Unlimited);
        }
    }

    #[test]
    fn the_reported_limit_is_taken_as_it_is() {
        let d = json!({"type": "quorum", "delivery_limit": 20, "policy": null});
        assert_eq!(limit(d, 4), DeliveryLimit::Finite(20));
        let d = json!({"type": "quorum", "delivery_limit": "unlimited", "policy": "p"});
        assert_eq!(limit(d, 4), DeliveryLimit::Unlimited);
    }

    #[test]
    fn without_a_report_arguments_policies_and_the_default_decide() {
        let quorum = |arguments: Value, policy: Value| {
            json!({"type": "quorum", "arguments": arguments, "policy": "p",
                   "effective_policy_definition": policy})
        };
        assert_eq!(
            limit(quorum(json!({}), json!({})), 4),
            DeliveryLimit::Finite(20)
        );
        assert_eq!(
            limit(quorum(json!({}), json!({})), 3),
            DeliveryLimit::Unlimited
        );
        let both = quorum(json!({"x-delivery-limit": 5}), json!({"delivery-limit": 9}));
        assert_eq!(limit(both, 3), DeliveryLimit::Finite(5));
        let off = quorum(
            json!({"x-delivery-limit": 5}),
            json!({"delivery-limit": -1}),
        );
        assert_eq!(limit(off, 4), DeliveryLimit::Unlimited);
    }

    #[test]
    fn a_queue_without_statistics_yet_is_asked_again() {
        let d = json!({"type": "quorum", "arguments": {"x-queue-type": "quorum"}});
        assert_eq!(limit(d, 4), DeliveryLimit::NotYetKnown);
    }
}

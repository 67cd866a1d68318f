//! Where a publish to an exchange with a routing key goes, as the broker routes it: from the
//! exchange's type and its bindings (read through the management API), so that a replay plan
//! can say which queues each target reaches before anything is published (pure).

use serde_json::Value;

/// A place a publish reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Queue(String),
    /// An exchange bound to it: what that one routes to is not followed here.
    Exchange(String),
    /// A headers exchange's binding: it depends on each message's headers.
    ByHeaders(String),
}

impl Destination {
    pub fn label(&self) -> String {
        match self {
            Destination::Queue(q) => q.clone(),
            Destination::Exchange(e) => format!("exchange {e} (and on)"),
            Destination::ByHeaders(q) => format!("{q} (if its headers match)"),
        }
    }
}

/// Whether a topic binding `pattern` matches `key`: words split on `.`, `*` one word, `#` zero
/// or more.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match (p.first(), k.first()) {
            (None, None) => true,
            (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
            (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
            (Some(w), Some(v)) if w == v => go(&p[1..], &k[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

/// The destinations of `bindings` (the management API's `bindings/source` of an exchange of
/// type `kind`) that a publish with `key` reaches, each once, in the order listed.
pub fn reached(kind: &str, bindings: &[Value], key: &str) -> Vec<Destination> {
    let mut out: Vec<Destination> = Vec::new();
    for b in bindings {
        let (Some(destination), Some(bound)) =
            (b["destination"].as_str(), b["routing_key"].as_str())
        else {
            continue;
        };
        let hit = match kind {
            "fanout" => true,
            "direct" => bound == key,
            "topic" => topic_matches(bound, key),
            "headers" => {
                let d = Destination::ByHeaders(destination.to_owned());
                if !out.contains(&d) {
                    out.push(d);
                }
                continue;
            }
            // Plugins' types (consistent hash, x-delayed-message...): not known here.
            _ => bound == key,
        };
        if !hit {
            continue;
        }
        let d = match b["destination_type"].as_str() {
            Some("exchange") => Destination::Exchange(destination.to_owned()),
            _ => Destination::Queue(destination.to_owned()),
        };
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn topic_patterns_match_as_the_broker_matches_them() {
        for (pattern, key, expected) in [
            ("order.*", "order.created", true),
            ("order.*", "order.created.eu", false),
            ("order.#", "order.created.eu", true),
            ("order.#", "order", true),
            ("#", "anything.at.all", true),
            ("#.eu", "order.created.eu", true),
            ("*.created", "order.created", true),
            ("*.created", "created", false),
            ("order.created", "order.created", true),
            ("a.#.z", "a.z", true),
            ("a.#.z", "a.b.c.z", true),
            ("a.#.z", "a.b.c", false),
        ] {
            assert_eq!(topic_matches(pattern, key), expected, "{pattern} ~ {key}");
        }
    }

    #[test]
    fn each_exchange_type_routes_its_own_way() {
        let bindings = [
            json!({"destination": "orders", "destination_type": "queue", "routing_key": "order.*"}),
            json!({"destination": "audit", "destination_type": "queue", "routing_key": "#"}),
            json!({"destination": "eu", "destination_type": "exchange", "routing_key": "order.created"}),
            json!({"destination": "orders", "destination_type": "queue", "routing_key": "order.created"}),
        ];
        let labels = |kind, key| -> Vec<String> {
            reached(kind, &bindings, key)
                .iter()
                .map(Destination::label)
                .collect()
        };
        assert_eq!(
            labels("topic", "order.created"),
            ["orders", "audit", "exchange eu (and on)"]
        );
        assert_eq!(labels("topic", "invoice.paid"), ["audit"]);
        assert_eq!(
            labels("direct", "order.created"),
            ["exchange eu (and on)", "orders"]
        );
        assert_eq!(labels("fanout", "x").len(), 3);
        assert_eq!(
            labels("headers", "x"),
            [
                "orders (if its headers match)",
                "audit (if its headers match)",
                "eu (if its headers match)"
            ]
        );
    }
}

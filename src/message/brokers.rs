//! The clusters one instance archives: `--amqp-url` (the broker named `default`) and each
//! `--broker NAME=AMQP_URL`, by name — which URL a DLQ is consumed from and a message of a
//! broker is replayed to, and how `--queue NAME:spec` names a DLQ of another broker.

use super::dlq::{check_broker_name, home_vhost, Dlq, DEFAULT_BROKER};

/// Every broker by name, the default first. URLs hold passwords: never log them.
#[derive(Clone, PartialEq, Eq)]
pub struct Brokers {
    list: Vec<(String, String)>,
}

impl std::fmt::Debug for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Brokers {
    /// `--amqp-url` as `default`, and each `NAME=URL` of `--broker`; `default` may be one of
    /// them, to name the default broker's URL there instead.
    pub fn new(amqp_url: &str, named: &[(String, String)]) -> Result<Self, String> {
        let mut list = vec![(DEFAULT_BROKER.to_owned(), amqp_url.to_owned())];
        let mut seen_default = false;
        for (name, url) in named {
            check_broker_name(name)?;
            super::broker_nodes::BrokerNodes::parse(url)
                .map_err(|e| format!("--broker {name}: {e}"))?;
            match list.iter().position(|(n, _)| n == name) {
                Some(0) if !seen_default => {
                    seen_default = true;
                    list[0].1 = url.clone();
                }
                Some(_) => return Err(format!("--broker names {name:?} twice")),
                None => list.push((name.clone(), url.clone())),
            }
        }
        Ok(Brokers { list })
    }

    /// One broker, `default`: an instance without `--broker`.
    pub fn single(amqp_url: &str) -> Self {
        Brokers {
            list: vec![(DEFAULT_BROKER.to_owned(), amqp_url.to_owned())],
        }
    }

    /// The brokers' names, `default` first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|(n, _)| n.as_str())
    }

    /// The AMQP URL of the broker `name` (empty: the default), if there is one so named.
    pub fn url(&self, name: &str) -> Option<&str> {
        let name = match name {
            "" => DEFAULT_BROKER,
            name => name,
        };
        self.list
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u.as_str())
    }

    /// The vhost the broker `name`'s URL names, where the archive keeps its messages' vhost
    /// empty; none (empty) for a broker this instance does not know.
    pub fn home(&self, name: &str) -> String {
        self.url(name).map(home_vhost).unwrap_or_default()
    }

    /// The default broker's AMQP URL.
    pub fn default_url(&self) -> &str {
        &self.list[0].1
    }

    /// Whether more than the default broker is named.
    pub fn several(&self) -> bool {
        self.list.len() > 1
    }

    /// A `--queue` spec: `NAME:spec` for a DLQ of the broker `NAME` (a `--broker`), else a
    /// spec of the default broker ([`Dlq::parse`], each against its own URL's vhost).
    pub fn parse_queue(&self, spec: &str) -> Result<Dlq, String> {
        if let Some((name, rest)) = spec.split_once(':') {
            if let Some((_, url)) = self.list[1..].iter().find(|(n, _)| n == name) {
                return Dlq::parse(rest, &home_vhost(url)).map(|d| d.on(name));
            }
        }
        Dlq::parse(spec, &home_vhost(self.default_url()))
    }

    /// The broker (not the default) whose keys the default broker's DLQ keyed `key` would
    /// share: `key` starts with `NAME:` for a `--broker NAME` (the default broker's queue
    /// `us:orders.dlq` beside `--broker us`, whose `orders.dlq` is keyed so too). Such a DLQ
    /// cannot be archived apart from that broker's.
    pub fn clashing(&self, key: &str) -> Option<&str> {
        let (prefix, _) = key.split_once(':')?;
        self.list[1..]
            .iter()
            .find(|(n, _)| n == prefix)
            .map(|(n, _)| n.as_str())
    }

    /// [`Brokers::clashing`] for a DLQ: of the default broker, and keyed as another's.
    pub fn clash(&self, dlq: &Dlq) -> Option<&str> {
        match dlq.is_default_broker() {
            true => self.clashing(&dlq.key()),
            false => None,
        }
    }

    /// Every `--queue`, each once; none of the default broker keyed as another broker's (the
    /// home queue `us:x` written `%2F/us:x` beside `--broker us`).
    pub fn parse_queues(&self, specs: &[String]) -> Result<Vec<Dlq>, String> {
        let mut dlqs: Vec<Dlq> = Vec::new();
        for spec in specs {
            let dlq = self.parse_queue(spec)?;
            if let Some(broker) = self.clash(&dlq) {
                return Err(format!(
                    "{spec:?} names the default broker's queue keyed {:?}, as broker {broker}'s \
                     DLQs are keyed: it cannot be archived apart from them (give that broker \
                     another name)",
                    dlq.key()
                ));
            }
            if dlqs.contains(&dlq) {
                return Err(format!("{spec:?} names the {} twice", dlq.describe()));
            }
            dlqs.push(dlq);
        }
        Ok(dlqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> Brokers {
        Brokers::new(
            "amqp://u:p@a:5672/%2f",
            &[("b".into(), "amqp://u:p@b:5690/shop".into())],
        )
        .unwrap()
    }

    #[test]
    fn a_queue_of_another_broker_is_prefixed_with_its_name() {
        let brokers = two();
        let a = brokers.parse_queue("orders.dlq").unwrap();
        let b = brokers.parse_queue("b:orders.dlq").unwrap();
        assert_eq!(a, Dlq::home("orders.dlq"));
        assert_eq!(b, Dlq::home("orders.dlq").on("b"));
        assert_eq!(a.key(), "orders.dlq");
        assert_eq!(b.key(), "b:orders.dlq");
        assert_eq!(Dlq::from_stored(&b.key(), "b", ""), b);
        // Its key on its own broker, as the metrics label it beside `broker="b"`.
        assert_eq!(b.key_on_broker(), "orders.dlq");
        assert_eq!(crate::message::dlq::off_broker("b", &b.key()), "orders.dlq");
        assert_eq!(crate::message::dlq::off_broker("default", "b:x"), "b:x");
        // b's own vhost is its home; another is keyed as at home, behind the prefix.
        assert_eq!(
            brokers.parse_queue("b:shop/x").unwrap(),
            Dlq::home("x").on("b")
        );
        let other = brokers.parse_queue("b:t/x").unwrap();
        assert_eq!(other.key(), "b:t/x");
        assert_eq!(other.key_on_broker(), "t/x");
        assert_eq!(Dlq::from_stored(&other.key(), "b", "t"), other);
        // A name with `:` of no broker is the default broker's.
        assert_eq!(brokers.parse_queue("c:x").unwrap(), Dlq::home("c:x"));
        let all = brokers
            .parse_queues(&["orders.dlq".into(), "b:orders.dlq".into()])
            .unwrap();
        assert_eq!(all.len(), 2);
        assert!(brokers
            .parse_queues(&["b:orders.dlq".into(), "b:%2Fshop/orders.dlq".into()])
            .is_ok());
    }

    #[test]
    fn a_default_queue_keyed_as_another_brokers_clashes() {
        let brokers = two();
        assert_eq!(brokers.clashing("b:orders.dlq"), Some("b"));
        assert_eq!(brokers.clashing("b:"), Some("b"));
        assert_eq!(brokers.clashing("c:orders.dlq"), None);
        assert_eq!(brokers.clashing("orders.dlq"), None);
        assert_eq!(brokers.clashing("bb:orders.dlq"), None);
        assert_eq!(
            brokers.clashing("default:x"),
            None,
            "the default has no prefix"
        );
        assert_eq!(
            brokers.clashing("shop/b:x"),
            None,
            "a vhost's key starts with it"
        );
        // A DLQ of the default broker named so (only discovery or an old archive has one:
        // `--queue b:x` is b's), in its home vhost or in a vhost named `b:…`.
        assert_eq!(brokers.clash(&Dlq::home("b:x")), Some("b"));
        let vhost = Dlq {
            vhost: "b:t".into(),
            ..Dlq::home("x")
        };
        assert_eq!(brokers.clash(&vhost), Some("b"));
        assert_eq!(brokers.clash(&Dlq::home("x").on("b")), None);
        assert_eq!(brokers.clash(&Dlq::home("b:x").on("b")), None);
        assert_eq!(Brokers::single("amqp://a").clashing("b:x"), None);
        // `--queue` cannot name one either: `b:x` is b's, and the home queue written with its
        // vhost is refused.
        assert_eq!(
            brokers.parse_queues(&["b:x".into()]).unwrap(),
            [Dlq::home("x").on("b")]
        );
        let refused = brokers.parse_queues(&["%2F/b:x".into()]).unwrap_err();
        assert!(
            refused.contains("\"b:x\"") && refused.contains("broker b's"),
            "{refused}"
        );
        assert!(brokers.parse_queues(&["shop/b:x".into()]).is_ok());
    }

    #[test]
    fn urls_are_by_name() {
        let brokers = two();
        assert_eq!(brokers.url("b"), Some("amqp://u:p@b:5690/shop"));
        assert_eq!(brokers.url("default"), Some("amqp://u:p@a:5672/%2f"));
        assert_eq!(brokers.url(""), Some("amqp://u:p@a:5672/%2f"));
        assert_eq!(brokers.url("c"), None);
        assert!(format!("{brokers:?}").contains("\"b\""));
        assert!(!format!("{brokers:?}").contains("u:p"));
    }

    #[test]
    fn bad_brokers_are_refused() {
        let dup = [
            ("b".to_owned(), "amqp://b".to_owned()),
            ("b".to_owned(), "amqp://c".to_owned()),
        ];
        assert!(Brokers::new("amqp://a", &dup)
            .unwrap_err()
            .contains("twice"));
        let bad = [("B:x".to_owned(), "amqp://b".to_owned())];
        assert!(Brokers::new("amqp://a", &bad).is_err());
        let url = [("b".to_owned(), "mq-b:5672".to_owned())];
        assert!(Brokers::new("amqp://a", &url).is_err());
        let default = [("default".to_owned(), "amqp://d".to_owned())];
        assert_eq!(
            Brokers::new("amqp://a", &default).unwrap().default_url(),
            "amqp://d"
        );
    }
}

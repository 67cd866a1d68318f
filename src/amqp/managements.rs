//! Each broker's management API by the broker's name (`--management-url [NAME=]URL`,
//! repeatable): which brokers' delivery limits, DLQs and reach Lazarus can read, each as the
//! user of its own URL or of that broker's AMQP URL.

use std::sync::Arc;

use super::management::Management;
use crate::message::brokers::Brokers;
use crate::message::dlq::DEFAULT_BROKER;

/// The management APIs given, at most one per broker, in the order the brokers are named.
#[derive(Debug, Clone, Default)]
pub struct Managements {
    list: Vec<Arc<Management>>,
}

impl Managements {
    /// One API per `(broker, url)`: the broker `None` is the default one; each a broker of
    /// `brokers`, named once, whose AMQP URL lends its user where the URL names none.
    pub fn new(specs: &[(Option<String>, String)], brokers: &Brokers) -> Result<Self, String> {
        let mut list: Vec<Arc<Management>> = Vec::new();
        for (name, url) in specs {
            let name = name.as_deref().unwrap_or(DEFAULT_BROKER);
            let Some(amqp_url) = brokers.url(name) else {
                return Err(format!(
                    "--management-url {name}=…: no --broker names {name:?} (the brokers are {})",
                    brokers.names().collect::<Vec<_>>().join(", ")
                ));
            };
            if list.iter().any(|m| m.broker() == name) {
                return Err(format!(
                    "--management-url gives broker {name:?} twice (a URL without NAME= is the \
                     default broker's)"
                ));
            }
            let management = Management::new(url, amqp_url)
                .map_err(|e| format!("--management-url for broker {name:?}: {e}"))?;
            list.push(Arc::new(management.of_broker(name)));
        }
        let order: Vec<&str> = brokers.names().collect();
        list.sort_by_key(|m| order.iter().position(|n| *n == m.broker()));
        Ok(Managements { list })
    }

    /// The default broker's API alone (`lazarus` before `--broker`, and tests).
    pub fn single(management: Management) -> Self {
        Managements {
            list: vec![Arc::new(management)],
        }
    }

    /// The API of the broker `name`, if one was given.
    pub fn get(&self, name: &str) -> Option<&Arc<Management>> {
        self.list.iter().find(|m| m.broker() == name)
    }

    /// Every API given, the default broker's first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Management>> {
        self.list.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The brokers of `brokers` no API was given for.
    pub fn missing<'a>(&self, brokers: &'a Brokers) -> Vec<&'a str> {
        brokers.names().filter(|n| self.get(n).is_none()).collect()
    }
}

/// The flag that gives the broker `name` its management API, as a user would write it.
pub fn management_flag(name: &str) -> String {
    match name {
        DEFAULT_BROKER => "--management-url URL".to_owned(),
        name => format!("--management-url {name}=URL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers() -> Brokers {
        Brokers::new(
            "amqp://app:pw@a:5672/%2f",
            &[("us".into(), "amqp://u:p@b:5690/shop".into())],
        )
        .unwrap()
    }

    fn spec(name: Option<&str>, url: &str) -> (Option<String>, String) {
        (name.map(str::to_owned), url.to_owned())
    }

    #[test]
    fn each_broker_has_its_own_api_with_its_own_vhost_and_user() {
        let brokers = brokers();
        let m = Managements::new(
            &[
                spec(Some("us"), "http://b:15690"),
                spec(None, "http://a:15672"),
            ],
            &brokers,
        )
        .unwrap();
        let names: Vec<&str> = m.iter().map(|m| m.broker()).collect();
        assert_eq!(names, ["default", "us"], "the default broker's first");
        assert_eq!(m.get("us").unwrap().vhost(), "shop");
        assert_eq!(m.get("default").unwrap().vhost(), "/");
        let us = format!("{:?}", m.get("us").unwrap());
        assert!(us.contains("\"us\"") && !us.contains(":p@"), "{us}");
        assert!(m.missing(&brokers).is_empty());
        let default_only = Managements::new(&[spec(None, "http://a:15672")], &brokers).unwrap();
        assert_eq!(default_only.missing(&brokers), ["us"]);
        assert!(default_only.get("us").is_none());
        // `default=` names the default broker too.
        let named = Managements::new(&[spec(Some("default"), "http://a:15672")], &brokers);
        assert!(named.unwrap().get("default").is_some());
        assert!(Managements::new(&[], &brokers).unwrap().is_empty());
    }

    #[test]
    fn a_broker_no_broker_flag_names_or_named_twice_is_refused() {
        let brokers = brokers();
        let unknown = Managements::new(&[spec(Some("eu"), "http://c:15672")], &brokers);
        let unknown = unknown.unwrap_err();
        assert!(
            unknown.contains("no --broker names \"eu\"") && unknown.contains("default, us"),
            "{unknown}"
        );
        let twice = Managements::new(
            &[
                spec(None, "http://a:15672"),
                spec(Some("default"), "http://a2:15672"),
            ],
            &brokers,
        );
        assert!(twice.unwrap_err().contains("twice"));
        let bad = Managements::new(&[spec(Some("us"), "ftp://b")], &brokers);
        assert!(bad.unwrap_err().contains("broker \"us\""));
    }
}

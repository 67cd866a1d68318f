//! RabbitMQ's management HTTP API, read only (`--management-url`): what a DLQ's own settings
//! put at risk, known before its messages are delivered again and again, and which queues a
//! replay's target reaches. Lazarus never changes anything through it.

use std::time::Duration;

use lapin::uri::AMQPUri;
use serde_json::Value;

use super::queue_info::QueueInfo;
use crate::support::http::Target;

/// How long one call to the management API may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a queue's details are a few KiB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ManagementError {
    #[error("the management URL {0:?} is not an http:// or https:// URL")]
    Url(String),
    #[error("the management API did not answer: {0}")]
    Unreachable(String),
    #[error("the management API answered {status} to {path}")]
    Status {
        status: hyper::StatusCode,
        path: String,
    },
    #[error("the management API's answer to {path} is not what RabbitMQ sends: {reason}")]
    Answer { path: String, reason: String },
}

/// A client of one broker's management API, as the user the URL (or the AMQP URL) names.
#[derive(Clone)]
pub struct Management {
    /// `http(s)://host:port[/path]`, with the user to ask as.
    target: Target,
    /// The vhost of the AMQP URL: the DLQs' own.
    vhost: String,
    /// The broker it is the API of: `default` (`--amqp-url`) or a `--broker` name.
    broker: String,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("broker", &self.broker)
            .field("target", &self.target)
            .field("vhost", &self.vhost)
            .finish_non_exhaustive()
    }
}

impl Management {
    /// `management_url` is `http(s)://[user:password@]host:port[/path]`; without credentials it
    /// uses the AMQP URL's user and password, and it always looks at the AMQP URL's vhost (a
    /// broker given as several addresses names them once for all its nodes; the management
    /// URL names the node whose API answers).
    pub fn new(management_url: &str, amqp_url: &str) -> Result<Self, ManagementError> {
        let target: Target = management_url.parse().map_err(|_| {
            ManagementError::Url(crate::support::secret_url::redact_url(management_url))
        })?;
        let amqp: AMQPUri = crate::message::broker_nodes::first_node_url(amqp_url)
            .parse()
            .map_err(|_| ManagementError::Url(crate::support::secret_url::redact_url(amqp_url)))?;
        let target = if target.has_credentials() {
            target
        } else {
            let user = &amqp.authority.userinfo;
            target.with_credentials(&user.username, &user.password)
        };
        Ok(Management {
            target,
            vhost: amqp.vhost,
            broker: crate::message::dlq::DEFAULT_BROKER.to_owned(),
        })
    }

    /// The same API as the broker `name`'s (`amqp_url` of [`Management::new`] being its URL).
    pub fn of_broker(mut self, name: &str) -> Self {
        self.broker = name.to_owned();
        self
    }

    /// The AMQP URL's vhost: the one this instance consumes.
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The broker it is the API of.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// What the broker says of a queue of `vhost`.
    pub async fn queue(&self, vhost: &str, name: &str) -> Result<QueueInfo, ManagementError> {
        let path = format!("/api/queues/{}/{}", path_segment(vhost), path_segment(name));
        let details = self.get(&path).await?;
        Ok(QueueInfo::from_json(details))
    }

    /// Where a publish to `exchange` with `key` goes in `vhost`: the default exchange to the
    /// queue named `key`, any other as its type and bindings route it.
    pub async fn reach(
        &self,
        vhost: &str,
        exchange: &str,
        key: &str,
    ) -> Result<Vec<crate::amqp::routing::Destination>, ManagementError> {
        use crate::amqp::routing::{reached, Destination};
        if exchange.is_empty() {
            return Ok(vec![Destination::Queue(key.to_owned())]);
        }
        let base = format!(
            "/api/exchanges/{}/{}",
            path_segment(vhost),
            path_segment(exchange)
        );
        let kind = self.get(&base).await?["type"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let bindings = self.get(&format!("{base}/bindings/source")).await?;
        Ok(reached(
            &kind,
            bindings.as_array().map_or(&[][..], Vec::as_slice),
            key,
        ))
    }

    /// The dead-letter queues in every vhost this user may see (`archived`: the queues this
    /// instance archives, of any broker; `brokers`: every broker, whose keys a DLQ of the
    /// default broker must not take).
    pub async fn discover(
        &self,
        archived: &[crate::message::dlq::Dlq],
        brokers: &crate::message::brokers::Brokers,
    ) -> Result<crate::amqp::discovery::Discovered, ManagementError> {
        use crate::amqp::discovery::{dead_ends, dead_letter_target, find_dlqs, Discovered};
        use crate::amqp::discovery::{Bindings, DlxBindings};
        let version = self.get("/api/overview").await?["rabbitmq_version"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(3);
        let queues = self
            .get(
                "/api/queues?columns=name,vhost,type,arguments,policy,\
                 effective_policy_definition,delivery_limit",
            )
            .await?;
        let queues = queues.as_array().map_or(&[][..], Vec::as_slice);
        let mut bindings = Bindings::new();
        for queue in queues {
            let Some((exchange, _)) = dead_letter_target(queue) else {
                continue;
            };
            let vhost = queue["vhost"].as_str().unwrap_or_default().to_owned();
            if exchange.is_empty() || bindings.contains_key(&(vhost.clone(), exchange.clone())) {
                continue;
            }
            let path = format!(
                "/api/exchanges/{}/{}",
                path_segment(&vhost),
                path_segment(&exchange)
            );
            // A dead-letter exchange that does not exist drops what reaches it (its bindings
            // would be listed as none: the exchange itself is asked first).
            let bound = match self.get(&path).await {
                Ok(_) => self.get(&format!("{path}/bindings/source")).await,
                Err(e) => Err(e),
            };
            let bound = match bound {
                Ok(bound) => {
                    let bound = bound.as_array().map_or(&[][..], Vec::as_slice);
                    DlxBindings::Bound {
                        queues: bound
                            .iter()
                            .filter(|b| b["destination_type"] == "queue")
                            .filter_map(|b| b["destination"].as_str().map(str::to_owned))
                            .collect(),
                        to_exchanges: bound.iter().any(|b| b["destination_type"] == "exchange"),
                    }
                }
                Err(ManagementError::Status { status, .. })
                    if status == hyper::StatusCode::NOT_FOUND =>
                {
                    DlxBindings::Missing
                }
                Err(e) => return Err(e),
            };
            bindings.insert((vhost, exchange), bound);
        }
        let here = crate::amqp::discovery::Place {
            broker: &self.broker,
            home: &self.vhost,
        };
        let archived: Vec<&crate::message::dlq::Dlq> = archived
            .iter()
            .filter(|q| q.broker == self.broker)
            .collect();
        let mut dlqs = find_dlqs(queues, &bindings, here, &archived, major);
        crate::amqp::discovery::refuse_clashes(&mut dlqs, here, brokers);
        Ok(Discovered {
            dlqs,
            dead_ends: dead_ends(queues, &bindings, &self.broker),
        })
    }

    async fn get(&self, path: &str) -> Result<Value, ManagementError> {
        let (answer, body) =
            crate::support::http::get(&self.target, path, MAX_ANSWER_BYTES, TIMEOUT)
                .await
                .map_err(|e| ManagementError::Unreachable(e.to_string()))?;
        if !answer.status.is_success() {
            return Err(ManagementError::Status {
                status: answer.status,
                path: path.to_owned(),
            });
        }
        serde_json::from_slice(&body).map_err(|e| ManagementError::Answer {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }
}

/// A vhost or queue name as one path segment of the management API.
fn path_segment(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn credentials_come_from_either_url_and_names_are_escaped() {
        let m = Management::new(
            "http://ops:s%3Acret@mq:15672/",
            "amqp://app:pw@mq:5672/prod%2fdlq",
        )
        .unwrap();
        assert_eq!(m.vhost, "prod/dlq");
        assert_eq!(
            m.target,
            "http://mq:15672/"
                .parse::<Target>()
                .unwrap()
                .with_credentials("ops", "s:cret")
        );
        let m = Management::new("https://mq:15671/rabbit", "amqp://app:pw@mq:5672/%2f").unwrap();
        assert_eq!(m.vhost, "/");
        assert_eq!(
            m.target,
            "https://mq:15671/rabbit"
                .parse::<Target>()
                .unwrap()
                .with_credentials("app", "pw")
        );
        assert!(!format!("{m:?}").contains("pw"), "{m:?}");
        // A broker given as several addresses: its one user and vhost.
        let m = Management::new("http://n2:15672", "amqp://app:pw@n1,n2:5673,n3/prod").unwrap();
        assert_eq!(m.vhost, "prod");
        assert_eq!(
            m.target,
            "http://n2:15672"
                .parse::<Target>()
                .unwrap()
                .with_credentials("app", "pw")
        );
        assert_eq!(path_segment("/"), "%2F");
        assert_eq!(path_segment("a dlq"), "a%20dlq");
        assert!(matches!(
            Management::new("ftp://mq:15671", "amqp://mq"),
            Err(ManagementError::Url(_))
        ));
    }
}

//! RabbitMQ's management HTTP API, read only (`--management-url`): what a DLQ's own settings
//! put at risk, known before its messages are delivered again and again, and which queues a
//! replay's target reaches. Lazarus never changes anything through it.

use std::time::Duration;

use lapin::uri::AMQPUri;
use serde_json::Value;

use crate::http::Target;

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
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("target", &self.target)
            .field("vhost", &self.vhost)
            .finish_non_exhaustive()
    }
}

impl Management {
    /// `management_url` is `http(s)://[user:password@]host:port[/path]`; without credentials it
    /// uses the AMQP URL's user and password, and it always looks at the AMQP URL's vhost.
    pub fn new(management_url: &str, amqp_url: &str) -> Result<Self, ManagementError> {
        let target: Target = management_url
            .parse()
            .map_err(|_| ManagementError::Url(crate::secret_url::redact_url(management_url)))?;
        let amqp: AMQPUri = amqp_url
            .parse()
            .map_err(|_| ManagementError::Url(crate::secret_url::redact_url(amqp_url)))?;
        let target = if target.has_credentials() {
            target
        } else {
            let user = &amqp.authority.userinfo;
            target.with_credentials(&user.username, &user.password)
        };
        Ok(Management {
            target,
            vhost: amqp.vhost,
        })
    }

    /// The AMQP URL's vhost: the one this instance consumes.
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// What the broker says of a queue of `vhost`.
    pub async fn queue(&self, vhost: &str, name: &str) -> Result<QueueInfo, ManagementError> {
        let path = format!("/api/queues/{}/{}", path_segment(vhost), path_segment(name));
        let details = self.get(&path).await?;
        Ok(QueueInfo { details })
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
    /// instance archives).
    pub async fn discover(
        &self,
        archived: &[super::dlq::Dlq],
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
        let archived: Vec<(String, String)> = archived
            .iter()
            .map(|q| (q.vhost_name(&self.vhost).to_owned(), q.name.clone()))
            .collect();
        Ok(Discovered {
            dlqs: find_dlqs(queues, &bindings, &archived, major),
            dead_ends: dead_ends(queues, &bindings),
        })
    }

    async fn get(&self, path: &str) -> Result<Value, ManagementError> {
        let (answer, body) = crate::http::get(&self.target, path, MAX_ANSWER_BYTES, TIMEOUT)
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

/// A vhost or queue name as one path segment of the management API.
fn path_segment(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
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
        assert_eq!(path_segment("/"), "%2F");
        assert_eq!(path_segment("a dlq"), "a%20dlq");
        assert!(matches!(
            Management::new("ftp://mq:15671", "amqp://mq"),
            Err(ManagementError::Url(_))
        ));
    }
}

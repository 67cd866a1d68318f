//! A delivery as ingest hands it to the archive, and its derived, ready-to-store form:
//! fingerprint, decoded death history, typed JSON (pure).

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::amqp::headers::{MessageProperties, Table};
use crate::death::{self, DeathHistory};

/// A message exactly as the broker delivered it from a DLQ.
#[derive(Debug, Clone, PartialEq)]
pub struct IncomingMessage {
    pub queue: String,
    pub exchange: String,
    pub routing_key: String,
    /// The broker's redelivered flag: `false` proves no consumer (so no archive) saw it before.
    pub redelivered: bool,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    pub body: Vec<u8>,
    pub received_at: OffsetDateTime,
}

/// An incoming message with everything the archive stores derived from it.
#[derive(Debug, Clone)]
pub struct PreparedMessage {
    pub message: IncomingMessage,
    pub fingerprint: [u8; 32],
    pub properties_json: String,
    pub headers_json: Option<String>,
    pub history: DeathHistory,
    pub deaths_json: String,
    pub problems_json: Option<String>,
}

impl PreparedMessage {
    pub fn new(message: IncomingMessage) -> Self {
        let properties_json = to_json(&message.properties);
        let headers_json = message.headers.as_ref().map(to_json);
        let history = death::decode(message.headers.as_ref());
        let deaths_json = to_json(&history.deaths);
        let problems_json = (!history.problems.is_empty()).then(|| to_json(&history.problems));
        let fingerprint = fingerprint(
            &message,
            &properties_json,
            headers_json.as_deref().unwrap_or(""),
        );
        PreparedMessage {
            message,
            fingerprint,
            properties_json,
            headers_json,
            history,
            deaths_json,
            problems_json,
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("typed AMQP values always serialise")
}

/// sha-256 over exactly what was delivered: source queue, exchange, routing key, properties,
/// headers (with their types) and body. Each field is length-prefixed so that no two
/// different deliveries can produce the same byte stream. The redelivered flag is left out:
/// it is the one thing a redelivery changes.
pub fn fingerprint(
    message: &IncomingMessage,
    properties_json: &str,
    headers_json: &str,
) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [
        message.queue.as_bytes(),
        message.exchange.as_bytes(),
        message.routing_key.as_bytes(),
        properties_json.as_bytes(),
        headers_json.as_bytes(),
        &message.body,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::headers::AmqpValue;

    fn message() -> IncomingMessage {
        IncomingMessage {
            queue: "dlq".into(),
            exchange: "dlx".into(),
            routing_key: "dead".into(),
            redelivered: false,
            properties: MessageProperties {
                message_id: Some("m-1".into()),
                ..Default::default()
            },
            headers: Some(Table::from([("k".into(), AmqpValue::LongInt(1))])),
            body: b"{}".to_vec(),
            received_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn redelivery_has_the_same_fingerprint() {
        let first = PreparedMessage::new(message());
        let again = PreparedMessage::new(IncomingMessage {
            redelivered: true,
            received_at: OffsetDateTime::now_utc(),
            ..message()
        });
        assert_eq!(first.fingerprint, again.fingerprint);
    }

    #[test]
    fn any_delivered_difference_changes_the_fingerprint() {
        let base = PreparedMessage::new(message()).fingerprint;
        let variants = [
            IncomingMessage {
                queue: "other".into(),
                ..message()
            },
            IncomingMessage {
                routing_key: "x".into(),
                ..message()
            },
            IncomingMessage {
                body: b"{ }".to_vec(),
                ..message()
            },
            IncomingMessage {
                headers: None,
                ..message()
            },
            IncomingMessage {
                headers: Some(Table::from([("k".into(), AmqpValue::LongLongInt(1))])),
                ..message()
            },
            IncomingMessage {
                properties: MessageProperties::default(),
                ..message()
            },
        ];
        for v in variants {
            assert_ne!(PreparedMessage::new(v).fingerprint, base);
        }
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let a = IncomingMessage {
            exchange: "ab".into(),
            routing_key: "c".into(),
            ..message()
        };
        let b = IncomingMessage {
            exchange: "a".into(),
            routing_key: "bc".into(),
            ..message()
        };
        assert_ne!(
            PreparedMessage::new(a).fingerprint,
            PreparedMessage::new(b).fingerprint
        );
    }
}

//! What a message must be to be archived, however it comes: from a DLQ over the wire
//! (ingest) or from a file (`lazarus import`). Ingest's deliveries are so by construction —
//! the codec reads short strings of at most 255 bytes and a content header of at most one
//! frame ([`MAX_INBOUND_FRAME`]), `--queue` names pass [`crate::message::dlq::check_name`], and
//! RabbitMQ delivers no body past its `max_message_size` ([`MAX_BODY_BYTES`] by default) —
//! and an import is held to the same by [`check`], which names the first field that is not.

use super::IncomingMessage;
use crate::message::codec::encode_content_header;
use crate::message::codec::MAX_INBOUND_FRAME;
use crate::message::dlq::{check_name, Dlq};

/// The largest body archived: RabbitMQ's default `max_message_size` (134,217,728 bytes on
/// 3.x; 4.x's default is 16 MiB), the largest a broker with default settings delivers or
/// takes back on replay.
pub const MAX_BODY_BYTES: usize = 128 << 20;

/// Why `m` could not have come from a DLQ, or `Ok`.
pub fn check(m: &IncomingMessage) -> Result<(), String> {
    crate::message::dlq::check_broker_name(&m.broker)?;
    if !m.vhost.is_empty() {
        check_name("vhost", &m.vhost)?;
    }
    let dlq = Dlq::from_stored(&m.queue, &m.broker, &m.vhost);
    check_name("queue", &dlq.name)?;
    if dlq.key() != m.queue {
        return Err(format!("queue key {:?} is not of its vhost", m.queue));
    }
    for (what, text) in [("exchange", &m.exchange), ("routing_key", &m.routing_key)] {
        if text.len() > usize::from(u8::MAX) {
            return Err(format!(
                "{what} is {} bytes; AMQP short strings hold at most 255",
                text.len()
            ));
        }
    }
    check_body("body", m.body.len())?;
    // Properties and headers as the wire carries them: every short string within 255 bytes,
    // every value of a type it has, the whole within one frame.
    let mut header = Vec::new();
    encode_content_header(
        &mut header,
        m.body.len() as u64,
        &m.properties,
        m.headers.as_ref(),
    )
    .map_err(|e| format!("properties and headers: {e}"))?;
    if header.len() > MAX_INBOUND_FRAME {
        return Err(format!(
            "properties and headers take {} bytes; a content header holds at most {MAX_INBOUND_FRAME}",
            header.len()
        ));
    }
    Ok(())
}

/// A body (or an edited one) of `len` bytes, within [`MAX_BODY_BYTES`].
pub fn check_body(what: &str, len: usize) -> Result<(), String> {
    match len > MAX_BODY_BYTES {
        true => Err(format!(
            "{what} of {len} bytes: at most {MAX_BODY_BYTES} are archived (RabbitMQ's default \
             max_message_size)"
        )),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::headers::{AmqpValue, Bytes, MessageProperties, Table};

    fn message() -> IncomingMessage {
        IncomingMessage {
            broker: "default".into(),
            vhost: "v".into(),
            queue: "v/q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            redelivered: false,
            properties: MessageProperties::default(),
            headers: None,
            body: b"{}".to_vec(),
            received_at: time::OffsetDateTime::UNIX_EPOCH,
            decode_problems: Vec::new(),
            stream_offset: None,
        }
    }

    #[test]
    fn what_ingest_could_archive_passes() {
        let mut m = message();
        assert_eq!(check(&m), Ok(()));
        // RabbitMQ takes `?` and markup in a vhost's name: so does the archive.
        m.vhost = "tenant?<b>a/1</b>".into();
        m.queue = Dlq {
            broker: crate::message::dlq::DEFAULT_BROKER.to_owned(),
            vhost: m.vhost.clone(),
            name: "orders.dlq".into(),
        }
        .key();
        assert_eq!(check(&m), Ok(()));
        m.vhost = String::new();
        m.queue = "/a/b".into();
        assert_eq!(check(&m), Ok(()));
    }

    #[test]
    fn what_the_wire_or_a_broker_never_brings_is_refused() {
        let base = message;
        let refused = |m: IncomingMessage| check(&m).unwrap_err();
        let mut m = base();
        m.vhost = "a\0b".into();
        m.queue = "a%00b/q".into();
        assert!(refused(m).contains("vhost"));
        let mut m = base();
        m.queue = "v/".into();
        assert!(refused(m).contains("queue"));
        let mut m = base();
        m.queue = "other/q".into();
        assert!(refused(m).contains("not of its vhost"));
        let mut m = base();
        m.routing_key = "k".repeat(256);
        assert!(refused(m).contains("routing_key is 256 bytes"));
        let mut m = base();
        m.properties.message_id = Some(Bytes(vec![b'i'; 300]));
        assert!(refused(m).contains("properties and headers"));
        let mut m = base();
        m.headers = Some(Table::from([("h".repeat(300), AmqpValue::Boolean(true))]));
        assert!(refused(m).contains("properties and headers"));
        assert!(check_body("body", MAX_BODY_BYTES + 1).is_err());
        assert!(check_body("body", MAX_BODY_BYTES).is_ok());
    }
}

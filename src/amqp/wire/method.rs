//! The AMQP 0-9-1 frames and methods Lazarus exchanges with RabbitMQ, to and from bytes
//! (pure). Only what a DLQ consumer and a confirming publisher need.

use crate::message::codec::{DecodeError, EncodeError, Reader, Writer};
use crate::message::headers::{Bytes, Table};

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
pub const FRAME_END: u8 = 0xCE;
/// Type, channel and size come before every payload; the end octet after it.
pub const FRAME_OVERHEAD: usize = 8;

/// Appends one frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, channel: u16, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
}

/// A method received from the broker.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    ConnectionStart {
        server_properties: Table,
        mechanisms: Bytes,
    },
    ConnectionTune {
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    },
    ConnectionOpenOk,
    /// The broker closes the connection (or a channel, for [`Incoming::ChannelClose`]).
    ConnectionClose(CloseReason),
    ConnectionCloseOk,
    ConnectionBlocked {
        reason: String,
    },
    ConnectionUnblocked,
    ChannelOpenOk,
    ChannelFlow {
        active: bool,
    },
    ChannelClose(CloseReason),
    ChannelCloseOk,
    ExchangeDeclareOk,
    QueueDeclareOk {
        messages: u32,
        consumers: u32,
    },
    BasicQosOk,
    BasicConsumeOk,
    /// The broker cancelled the consumer (its queue was deleted, a stream was truncated...).
    BasicCancel,
    BasicCancelOk,
    BasicDeliver {
        delivery_tag: u64,
        redelivered: bool,
        exchange: Bytes,
        routing_key: Bytes,
    },
    BasicReturn {
        reply_code: u16,
        reply_text: String,
        exchange: Bytes,
        routing_key: Bytes,
    },
    BasicAck {
        delivery_tag: u64,
        multiple: bool,
    },
    BasicNack {
        delivery_tag: u64,
        multiple: bool,
    },
    ConfirmSelectOk,
    /// A method Lazarus does not use; ignored.
    Other {
        class: u16,
        method: u16,
    },
}

impl Incoming {
    /// Whether it carries content (a header and body frames follow).
    pub fn has_content(&self) -> bool {
        matches!(
            self,
            Incoming::BasicDeliver { .. } | Incoming::BasicReturn { .. }
        )
    }

    /// Whether it answers a request of the client's (rather than arriving on its own).
    pub fn is_reply(&self) -> bool {
        matches!(
            self,
            Incoming::ChannelOpenOk
                | Incoming::ChannelCloseOk
                | Incoming::ExchangeDeclareOk
                | Incoming::QueueDeclareOk { .. }
                | Incoming::BasicQosOk
                | Incoming::BasicConsumeOk
                | Incoming::BasicCancelOk
                | Incoming::ConfirmSelectOk
        )
    }
}

/// Why the broker closed a channel or the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReason {
    pub code: u16,
    pub text: String,
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.text)
    }
}

fn text(b: Bytes) -> String {
    b.to_text().into_owned()
}

/// Parses a method frame's payload.
pub fn parse(payload: &[u8]) -> Result<Incoming, DecodeError> {
    let mut r = Reader::new(payload);
    let class = r.u16()?;
    let method = r.u16()?;
    let close = |r: &mut Reader<'_>| -> Result<CloseReason, DecodeError> {
        let code = r.u16()?;
        let text = text(r.short_string()?);
        Ok(CloseReason { code, text })
    };
    Ok(match (class, method) {
        (10, 10) => {
            let _major = r.u8()?;
            let _minor = r.u8()?;
            Incoming::ConnectionStart {
                server_properties: r.table()?,
                mechanisms: r.long_string()?,
            }
        }
        (10, 30) => Incoming::ConnectionTune {
            channel_max: r.u16()?,
            frame_max: r.u32()?,
            heartbeat: r.u16()?,
        },
        (10, 41) => Incoming::ConnectionOpenOk,
        (10, 50) => Incoming::ConnectionClose(close(&mut r)?),
        (10, 51) => Incoming::ConnectionCloseOk,
        (10, 60) => Incoming::ConnectionBlocked {
            reason: text(r.short_string()?),
        },
        (10, 61) => Incoming::ConnectionUnblocked,
        (20, 11) => Incoming::ChannelOpenOk,
        (20, 20) => Incoming::ChannelFlow {
            active: r.u8()? & 1 != 0,
        },
        (20, 40) => Incoming::ChannelClose(close(&mut r)?),
        (20, 41) => Incoming::ChannelCloseOk,
        (40, 11) => Incoming::ExchangeDeclareOk,
        (50, 11) => {
            let _queue = r.short_string()?;
            Incoming::QueueDeclareOk {
                messages: r.u32()?,
                consumers: r.u32()?,
            }
        }
        (60, 11) => Incoming::BasicQosOk,
        (60, 21) => Incoming::BasicConsumeOk,
        (60, 30) => Incoming::BasicCancel,
        (60, 31) => Incoming::BasicCancelOk,
        (60, 50) => Incoming::BasicReturn {
            reply_code: r.u16()?,
            reply_text: text(r.short_string()?),
            exchange: r.short_string()?,
            routing_key: r.short_string()?,
        },
        (60, 60) => {
            let _consumer_tag = r.short_string()?;
            Incoming::BasicDeliver {
                delivery_tag: r.u64()?,
                redelivered: r.u8()? & 1 != 0,
                exchange: r.short_string()?,
                routing_key: r.short_string()?,
            }
        }
        (60, 80) => Incoming::BasicAck {
            delivery_tag: r.u64()?,
            multiple: r.u8()? & 1 != 0,
        },
        (60, 120) => Incoming::BasicNack {
            delivery_tag: r.u64()?,
            multiple: r.u8()? & 1 != 0,
        },
        (85, 11) => Incoming::ConfirmSelectOk,
        (class, method) => Incoming::Other { class, method },
    })
}

/// A method frame's payload, built field by field.
pub struct Method(Vec<u8>);

impl Method {
    pub fn new(class: u16, method: u16) -> Self {
        let mut out = Vec::with_capacity(64);
        out.put_u16(class);
        out.put_u16(method);
        Method(out)
    }

    pub fn u8(mut self, v: u8) -> Self {
        self.0.put_u8(v);
        self
    }

    pub fn u16(mut self, v: u16) -> Self {
        self.0.put_u16(v);
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.0.put_u32(v);
        self
    }

    pub fn u64(mut self, v: u64) -> Self {
        self.0.put_u64(v);
        self
    }

    pub fn short_string(mut self, what: &str, v: &[u8]) -> Result<Self, EncodeError> {
        self.0.put_short_string(what, v)?;
        Ok(self)
    }

    pub fn long_string(mut self, v: &[u8]) -> Result<Self, EncodeError> {
        self.0.put_long_string(v)?;
        Ok(self)
    }

    pub fn table(mut self, t: &Table) -> Result<Self, EncodeError> {
        self.0.put_table(t)?;
        Ok(self)
    }

    /// Packs flags into octets, first flag in the lowest bit, as AMQP does.
    pub fn bits(self, flags: &[bool]) -> Self {
        let octet = flags
            .iter()
            .enumerate()
            .fold(0u8, |acc, (i, &f)| acc | (u8::from(f) << i));
        self.u8(octet)
    }

    pub fn payload(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::headers::AmqpValue;

    #[test]
    fn deliver_with_a_routing_key_that_is_not_utf8_parses() {
        let m = Method::new(60, 60)
            .short_string("tag", b"ctag")
            .unwrap()
            .u64(42)
            .bits(&[true])
            .short_string("exchange", b"dlx")
            .unwrap()
            .short_string("key", b"k\xff\0")
            .unwrap();
        assert_eq!(
            parse(m.payload()).unwrap(),
            Incoming::BasicDeliver {
                delivery_tag: 42,
                redelivered: true,
                exchange: Bytes::from("dlx"),
                routing_key: Bytes(b"k\xff\0".to_vec()),
            }
        );
    }

    #[test]
    fn start_tune_and_close_parse() {
        let props = Table::from([("version", AmqpValue::text("4.3.6"))]);
        let start = Method::new(10, 10)
            .u8(0)
            .u8(9)
            .table(&props)
            .unwrap()
            .long_string(b"PLAIN AMQPLAIN")
            .unwrap()
            .long_string(b"en_US")
            .unwrap();
        assert_eq!(
            parse(start.payload()).unwrap(),
            Incoming::ConnectionStart {
                server_properties: props,
                mechanisms: Bytes::from("PLAIN AMQPLAIN"),
            }
        );
        let close = Method::new(20, 40)
            .u16(404)
            .short_string("text", b"NOT_FOUND - no queue 'q'")
            .unwrap()
            .u16(50)
            .u16(10);
        assert_eq!(
            parse(close.payload()).unwrap(),
            Incoming::ChannelClose(CloseReason {
                code: 404,
                text: "NOT_FOUND - no queue 'q'".into()
            })
        );
        assert_eq!(
            parse(Method::new(70, 1).payload()).unwrap(),
            Incoming::Other {
                class: 70,
                method: 1
            }
        );
    }

    #[test]
    fn frames_are_framed() {
        let mut out = Vec::new();
        put_frame(&mut out, FRAME_HEARTBEAT, 0, &[]);
        assert_eq!(out, [8, 0, 0, 0, 0, 0, 0, 0xCE]);
    }
}

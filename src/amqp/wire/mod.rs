//! Lazarus' own AMQP 0-9-1 client, for the two things it does on the wire: read deliveries
//! from a DLQ and publish replays with confirms.
//!
//! Why not lapin's: a DLQ archive must take every frame the broker can deliver, and lapin
//! (amq-protocol 10) refuses a message-id, header name or content-type that is not UTF-8
//! (the connection drops and the message comes back, forever) and parses nested tables
//! recursively on a 2 MiB thread (a header nested ~2,000 deep aborts the process). Here
//! short strings are bytes, nesting is bounded ([`crate::message::headers::MAX_DEPTH`], deeper
//! parts kept encoded) and a replay writes back exactly the bytes that came. lapin still
//! opens the TCP/TLS stream and parses the URL, and the demo and tests use it as a producer.

mod connection;
pub mod method;
mod nodes;

pub use crate::message::codec::{ContentHeader, MAX_INBOUND_FRAME};
pub use connection::{
    Channel, Connection, Delivery, Event, Publishing, Returned, ServerInfo, WireError,
};

//! Everything that talks to the broker: Lazarus' own AMQP client (`wire`), the DLQ
//! consumers, the replay publisher, and the read-only management API client with what it
//! discovers and adopts. What a message is, the layer below (`crate::message`) says.

pub mod adopt;
pub mod consumer;
pub mod discovery;
pub mod lapin_types;
pub mod management;
pub mod managements;
pub mod publisher;
pub mod queue_info;
pub mod routing;
pub mod wire;

//! Everything that talks AMQP: connections with backoff, the DLQ consumers, the replay
//! publisher, the typed header representation shared with the archive, and the read-only
//! management API client with what it discovers.

pub mod adopt;
pub mod connection;
pub mod consumer;
pub mod discovery;
pub mod dlq;
pub mod headers;
pub mod lapin_types;
pub mod management;
pub mod publisher;
pub mod queue_info;
pub mod routing;
pub mod wire;

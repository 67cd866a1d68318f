//! Everything that talks AMQP: connections with backoff, the DLQ consumers, the replay
//! publisher, and the typed header representation shared with the archive.

pub mod connection;
pub mod consumer;
pub mod headers;
pub mod lapin_types;
pub mod publisher;
pub mod wire;

//! Replaying archived messages to where they came from. Today: one message at a time
//! (`single`); selections, plans and durable jobs build on the same publisher.

pub mod single;

//! Replaying archived messages to where they came from: one at a time (`single`), or a
//! selection frozen into a durable job that a runner publishes (`job`).

pub mod cli;
pub mod job;
pub mod single;

//! Replaying archived messages to where they came from: one at a time (`single`), or a
//! selection frozen into a durable job that a runner publishes (`job`) — each only to the
//! exchanges `--replay-exchange` allows (`crate::message::exchange_policy`), a large body
//! read from the archive as it is published (`bodies`). `plan` turns a request into a job,
//! for the web and the command line alike.

mod bodies;
pub mod job;
pub mod plan;
mod runner;
mod settings;
pub mod single;
pub mod step;

//! Lazarus: archives RabbitMQ dead-letter queues durably, decodes their `x-death` history,
//! and serves them through a web dashboard and a JSON API.
//!
//! The crate is built in layers; a module imports only the layers below its own, and
//! `tests/integration/layers.rs` holds the code to it (docs/code-map.md draws them):
//!
//! | layer | what it owns |
//! |---|---|
//! | `cli`, `config`, `startup` | the command line (which borrows nothing of `web`), the settings, putting the app together |
//! | `web` | pages, the JSON API, sign-in, assets |
//! | `replay`, `retention`, `notify`, `auth` | the services: each imports none of the others |
//! | `amqp` | the wire client, consumers, publisher, management API, discovery |
//! | `runtime` | this process's metrics, status and instance name |
//! | `archive` | storage: the capabilities and their SQLite and PostgreSQL backends |
//! | `message` | the dead letter itself, pure: headers, queue names, deaths, bodies, decoders, masking, search language, framework conventions |
//! | `support` | leaves: formatting, secrets in URLs, outgoing HTTP, backoff, logging, memory |
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod startup;

pub mod web;

pub mod auth;
pub mod notify;
pub mod replay;
pub mod retention;

pub mod amqp;

pub mod runtime;

pub mod archive;

pub mod message;

pub mod support;

#[cfg(test)]
mod proptests;

//! Lazarus: archives RabbitMQ dead-letter queues durably, decodes their `x-death` history,
//! and serves them through a web dashboard and a JSON API.
#![forbid(unsafe_code)]

pub mod amqp;
mod api_schemas;
pub mod archive;
pub mod auth;
pub mod body;
pub mod cause;
pub mod cjk;
pub mod cli;
pub mod config;
pub mod conventions;
pub mod death;
pub mod demo;
pub mod field_match;
pub mod http;
pub mod instance;
pub mod masking;
pub mod memory;
pub mod metrics;
pub mod notify;
pub mod numbers;
#[cfg(test)]
mod proptests;
pub mod replay;
pub mod retention;
pub mod search;
pub mod secret_url;
pub mod selection;
pub mod startup;
pub mod status;
pub mod structured;
pub mod telemetry;
pub mod web;

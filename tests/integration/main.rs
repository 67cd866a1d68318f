//! Integration tests against the real RabbitMQ and SQLite files: one binary, one module per area.

mod helpers;

mod api;
mod crash;
mod failures;
mod headers;
mod pages;
mod reconnect;
mod seeds;

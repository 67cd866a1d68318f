//! Integration tests against the real RabbitMQ and SQLite files: one binary, one module per area.

mod helpers;

mod api;
mod auth;
mod browser;
mod crash;
mod demo;
mod failures;
mod headers;
mod hostile;
mod instances;
mod jobs;
mod limits;
mod masks;
mod pages;
mod reconnect;
mod replay;
mod replay_policy;
mod seeds;
mod served;
mod signin;
mod streams;

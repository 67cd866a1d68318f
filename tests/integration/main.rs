//! Integration tests against the real RabbitMQ (3.10 and 4.x), PostgreSQL and SQLite files:
//! one binary, one module per area.

mod brokers;
mod helpers;

mod alarms;
mod api;
mod auth;
mod bounds;
mod broker_crash;
mod browser;
mod causes;
mod contract;
mod crash;
mod demo;
mod deploy;
mod discovery;
mod export;
mod failures;
mod field_search;
mod frameworks;
mod group_notes;
mod groups;
mod headers;
mod hostile;
mod incident;
mod ingest_bounds;
mod instances;
mod jobs;
mod limits;
mod lost_acks;
mod manual;
mod masks;
mod openapi;
mod overview_live;
mod pages;
mod producers;
mod reconnect;
mod replay;
mod replay_policy;
mod retention;
mod seeds;
mod served;
mod signin;
mod streams;
mod vhosts;
mod webhooks;

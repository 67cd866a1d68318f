//! What the benchmarks share: their settings from the environment, the local services'
//! URLs, the backends to measure, the median of a run's figures, and filling queues (a
//! confirm channel, confirmed publishing, the arguments that make the broker dead-letter).
//! Each bench uses a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use lazarus::amqp::headers::{AmqpValue, Bytes};

/// A numeric setting from the environment, or its default.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The local RabbitMQ (`LAZARUS_TEST_AMQP_URL`, as the tests).
pub fn amqp_url() -> String {
    std::env::var("LAZARUS_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// An AMQP long string header value.
pub fn text(s: &str) -> AmqpValue {
    AmqpValue::LongString(Bytes(s.as_bytes().to_vec()))
}

/// `BENCH_BACKENDS`: which archives to measure (`sqlite,postgres` by default).
pub fn backend_names() -> Vec<String> {
    let list = std::env::var("BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    let names: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in &names {
        assert!(
            name == "sqlite" || name == "postgres",
            "BENCH_BACKENDS: unknown backend {name:?} (sqlite, postgres)"
        );
    }
    names
}

/// The URL of `database` on the server `BENCH_POSTGRES_URL` names
/// (`postgres://postgres@127.0.0.1:5432/` by default; any database in it is replaced, its
/// query string kept).
pub fn postgres_url(database: &str) -> String {
    let server = std::env::var("BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/".into());
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b.to_owned(), format!("?{q}")),
        None => (server.clone(), String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{database}{query}", &base[..host_end])
}

/// The median (the mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// The arguments of a work queue whose messages expire at once and are dead-lettered into
/// `dlq` through the default exchange: how the benchmarks have the broker make real dead
/// letters (each with `x-death` and `x-first-death-*`).
pub fn expiring_into(dlq: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(0));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(dlq.into()),
    );
    args
}

/// Publishes every message to `exchange` with `key` on a confirm channel, at most 2,000
/// unconfirmed at a time, and returns once the broker confirmed them all.
pub async fn publish_all<B: AsRef<[u8]>>(
    channel: &Channel,
    exchange: &str,
    key: &str,
    messages: impl IntoIterator<Item = (B, BasicProperties)>,
) {
    let mut pending = Vec::new();
    for (body, props) in messages {
        pending.push(
            channel
                .basic_publish(
                    exchange.into(),
                    key.into(),
                    BasicPublishOptions::default(),
                    body.as_ref(),
                    props,
                )
                .await
                .unwrap(),
        );
        if pending.len() >= 2000 {
            for c in pending.drain(..) {
                c.await.unwrap();
            }
        }
    }
    for c in pending {
        c.await.unwrap();
    }
}

/// A connection to `url` and a channel on it in confirm mode.
pub async fn confirm_channel(url: &str) -> (Connection, Channel) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    (connection, channel)
}

/// The benchmarks' 1 KB JSON invoice body, the i-th.
pub fn invoice_body(i: usize) -> Vec<u8> {
    let mut body = format!(
        r#"{{"invoice_id":"INV-2026-{i:06}","customer":"c-{}","lines":["#,
        i % 977
    )
    .into_bytes();
    body.resize(1020, b' ');
    body.extend_from_slice(b"]}  ");
    body
}

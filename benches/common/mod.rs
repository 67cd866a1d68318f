//! What the benchmarks share: their settings from the environment, the local services'
//! URLs, the backends to measure, the median of a run's figures, and filling queues (a
//! confirm channel, confirmed publishing, the arguments that make the broker dead-letter,
//! broker-made dead letters of the 1 KB invoice body), an archive's count of a DLQ and of
//! what waits to be indexed, and page
//! clients that load a running Lazarus.
//! Each bench uses a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

pub mod page_clients;

use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use lazarus::message::headers::{AmqpValue, Bytes};

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

/// The SQLite file the pages bench fills with `rows` messages and keeps (`BENCH_DB`, else
/// `target/bench/pages-<rows>.db`); the ingest bench's `BENCH_FILLED` drains into it.
pub fn pages_archive_file(rows: usize) -> String {
    std::env::var("BENCH_DB").unwrap_or_else(|_| format!("target/bench/pages-{rows}.db"))
}

/// The URL of the PostgreSQL database the pages bench fills with `rows` messages and keeps.
pub fn pages_archive_url(rows: usize) -> String {
    postgres_url(&format!("lazarus_bench_pages_{rows}"))
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

/// Puts `n` broker-made dead letters into `dlq` (declared if missing) and waits until it
/// holds them.
pub async fn dead_letter(channel: &Channel, dlq: &str, n: usize, from: usize) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(dlq.into(), durable, FieldTable::default())
        .await
        .unwrap();
    let work = format!("{dlq}.work");
    channel
        .queue_declare(work.as_str().into(), durable, expiring_into(dlq))
        .await
        .unwrap();
    let messages = (from..from + n).map(|i| {
        let props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_message_id(format!("m-{i}").into());
        (invoice_body(i), props)
    });
    publish_all(channel, "", &work, messages).await;
    let start = Instant::now();
    loop {
        let ready = channel
            .queue_declare(
                dlq.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count() as usize;
        if ready >= n {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{dlq}: {ready} of {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Messages of `queue` in the archive at `url` (its kept totals; 0 before it exists).
pub async fn archived(url: &str, queue: &str) -> i64 {
    const SQL: &str = "SELECT CAST(COALESCE(SUM(messages), 0) AS BIGINT) FROM queue_reason_counts \
                       WHERE queue = $1";
    count_in(url, SQL, Some(queue)).await.unwrap_or(0)
}

/// Messages archived at `url` that the indexer has not made searchable yet (0 for an
/// archive from before append-then-index, which has no such table).
pub async fn waiting_to_index(url: &str) -> i64 {
    count_in(url, "SELECT count(*) FROM index_pending", None)
        .await
        .unwrap_or(0)
}

/// One count from the archive at `url` (`sql` with at most one text bind), read on a
/// connection of its own (read-only on SQLite); `None` when it cannot be read.
async fn count_in(url: &str, sql: &str, bind: Option<&str>) -> Option<i64> {
    use sqlx::{ConnectOptions, Connection};
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .connect()
            .await
            .ok()?;
        let mut q = sqlx::query_scalar::<_, i64>(sql);
        if let Some(b) = bind {
            q = q.bind(b);
        }
        let n = q.fetch_one(&mut c).await;
        let _ = c.close().await;
        n.ok()
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.ok()?;
        let mut q = sqlx::query_scalar::<_, i64>(sql);
        if let Some(b) = bind {
            q = q.bind(b);
        }
        let n = q.fetch_one(&mut c).await;
        let _ = c.close().await;
        n.ok()
    }
}

/// The release `lazarus serve` archiving `queues` into `url` (with `extra` arguments), its
/// web on a port of its own, no retention unless `extra` asks.
pub fn serve_process(url: &str, queues: &[&str], extra: &[&str]) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--database-url", url]);
    for q in queues {
        command.args(["--queue", q]);
    }
    command
        .args(extra)
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .env_remove("LAZARUS_RETENTION")
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Stops a process as an orchestrator would (SIGTERM) and waits for it.
pub async fn stop(mut child: tokio::process::Child) {
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    child.wait().await.unwrap();
}

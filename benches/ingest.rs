//! Ingest benchmark: drain a DLQ backlog into the archive with the real `lazarus` binary,
//! against a raw lapin consumer that only acks (same prefetch) in the same run, then again
//! with a few 16 MiB messages in the backlog to check the memory bound.
//!
//! `cargo bench --bench ingest` (env: BENCH_MESSAGES=100000, BENCH_BIG=3, BENCH_PREFETCH=1000,
//! LAZARUS_TEST_AMQP_URL). Needs the local RabbitMQ; prints a table of rates, ratio, peak RSS.

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::process::Command;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn amqp_url() -> String {
    std::env::var("LAZARUS_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Fills `queue` with `n` 1 KB JSON messages, with `big` 16 MiB ones spread among them.
async fn fill(channel: &Channel, queue: &str, n: usize, big: usize) {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let big_body = vec![0x5a_u8; 16 * 1024 * 1024];
    let every = n.checked_div(big).unwrap_or(usize::MAX).max(1);
    let mut pending = Vec::new();
    for i in 0..n {
        let mut body = format!(
            r#"{{"invoice_id":"INV-2026-{i:06}","customer":"c-{}","lines":["#,
            i % 977
        )
        .into_bytes();
        body.resize(1020, b' ');
        body.extend_from_slice(b"]}  ");
        let props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_message_id(format!("m-{i}").into());
        let payload: &[u8] = if i % every == every / 2 {
            &big_body
        } else {
            &body
        };
        pending.push(
            channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    payload,
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

/// The baseline: consume and ack each message, nothing else.
async fn raw_consumer(connection: &Connection, queue: &str, n: usize, prefetch: u16) -> Duration {
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let start = Instant::now();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for _ in 0..n {
        let delivery = consumer.next().await.unwrap().unwrap();
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let elapsed = start.elapsed();
    channel.close(200, "done".into()).await.unwrap();
    elapsed
}

async fn archived(db: &Path) -> i64 {
    use sqlx::ConnectOptions;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true);
    let Ok(mut conn) = options.connect().await else {
        return 0;
    };
    sqlx::query_scalar("SELECT COALESCE(SUM(messages), 0) FROM queue_reason_counts")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(0)
}

fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Runs the release binary until it has archived `n` messages: (time, peak RSS in MiB).
async fn lazarus(queue: &str, n: usize, prefetch: u16) -> (Duration, f64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bench.db");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args([
            "serve",
            "--queue",
            queue,
            "--listen",
            "127.0.0.1:0",
            "--prefetch",
            &prefetch.to_string(),
        ])
        .arg("--database-url")
        .arg(format!("sqlite://{}", db.display()))
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut peak: f64 = 0.0;
    while archived(&db).await < n as i64 {
        peak = peak.max(peak_rss_mib(pid).unwrap_or(0.0));
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "lazarus did not drain the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    peak = peak.max(peak_rss_mib(pid).unwrap_or(0.0));
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    child.wait().await.unwrap();
    (elapsed, peak)
}

#[tokio::main]
async fn main() {
    let n = env_or("BENCH_MESSAGES", 100_000);
    let big = env_or("BENCH_BIG", 3);
    let prefetch = env_or("BENCH_PREFETCH", 1000) as u16;
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let tag = std::process::id();
    let (raw_q, laz_q, big_q) = (
        format!("bench.{tag}.raw"),
        format!("bench.{tag}.lazarus"),
        format!("bench.{tag}.big"),
    );

    println!("filling {raw_q} and {laz_q} with {n} 1 KB messages each...");
    fill(&channel, &raw_q, n, 0).await;
    fill(&channel, &laz_q, n, 0).await;
    let raw = raw_consumer(&connection, &raw_q, n, prefetch).await;
    let (laz, laz_rss) = lazarus(&laz_q, n, prefetch).await;

    println!("filling {big_q} with {n} 1 KB messages and {big} of 16 MiB...");
    fill(&channel, &big_q, n, big).await;
    let (laz_big, big_rss) = lazarus(&big_q, n, prefetch).await;
    for q in [&raw_q, &laz_q, &big_q] {
        channel
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!();
    println!("| run (prefetch {prefetch}) | messages | seconds | msg/s | peak RSS |");
    println!("|---|---|---|---|---|");
    println!(
        "| raw lapin consumer, ack only | {n} | {:.2} | {:.0} | - |",
        raw.as_secs_f64(),
        rate(raw)
    );
    println!(
        "| lazarus → SQLite | {n} | {:.2} | {:.0} | {laz_rss:.0} MiB |",
        laz.as_secs_f64(),
        rate(laz)
    );
    println!(
        "| lazarus → SQLite, {big} × 16 MiB among them | {n} | {:.2} | {:.0} | {big_rss:.0} MiB |",
        laz_big.as_secs_f64(),
        rate(laz_big)
    );
    println!();
    println!(
        "ratio lazarus / raw: {:.2} (target ≥ 0.70); peak RSS target < 200 MiB",
        rate(laz) / rate(raw)
    );
}

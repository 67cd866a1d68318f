//! Export and import benchmark: BENCH_ROWS dead letters made by the broker (published to a
//! work queue with `x-message-ttl` 0 whose dead-letter target is the DLQ, so each carries
//! `x-death`) are archived by the release `lazarus serve`; then, in turns round after round,
//! a raw read of the archive's messages and bodies (one query, streamed, as a baseline),
//! `lazarus export -o FILE` of the whole archive, and `lazarus import FILE` into a fresh
//! archive of the same backend. Reports the rates and their ratios to the raw read.
//!
//! `cargo bench --bench export` (env: BENCH_ROWS=100000, BENCH_ROUNDS=3,
//! BENCH_BACKENDS=sqlite,postgres, BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/ —
//! fresh databases `lazarus_bench_export_<pid>_<n>`, dropped afterwards —,
//! LAZARUS_TEST_AMQP_URL). Needs the local RabbitMQ, and PostgreSQL for the postgres backend.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use lapin::options::QueueDeleteOptions;

mod common;
use common::{
    amqp_url, archived, backend_names, confirm_channel, dead_letter, env_or, median, postgres_url,
    serve_process, stop,
};

/// A fresh archive URL of `backend`, the n-th of this run.
fn fresh(backend: &str, dir: &std::path::Path, n: usize) -> String {
    match backend {
        "sqlite" => format!("sqlite://{}", dir.join(format!("archive-{n}.db")).display()),
        _ => postgres_url(&format!("lazarus_bench_export_{}_{n}", std::process::id())),
    }
}

/// The baseline: every message's row and body read in one streamed query; (rows, time).
async fn raw_read(url: &str) -> (u64, Duration) {
    use sqlx::{ConnectOptions, Connection};
    const SQL: &str = "SELECT m.id, m.queue, m.archived_at, m.exchange, m.routing_key, \
                       m.redelivered, m.properties, m.headers, m.status_note, b.body \
                       FROM messages m JOIN message_bodies b ON b.message_id = m.id ORDER BY m.id";
    let start = Instant::now();
    let mut rows = 0u64;
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .connect()
            .await
            .unwrap();
        let mut stream = sqlx::query(SQL).fetch(&mut c);
        while stream.try_next().await.unwrap().is_some() {
            rows += 1;
        }
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let mut stream = sqlx::query(SQL).fetch(&mut c);
        while stream.try_next().await.unwrap().is_some() {
            rows += 1;
        }
    }
    (rows, start.elapsed())
}

/// Runs `lazarus` with `args` on the archive at `url`, timed; its standard error.
async fn lazarus(args: &[&str], url: &str) -> (Duration, String) {
    let start = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args(args)
        .args(["--database-url", url])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let elapsed = start.elapsed();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "lazarus {args:?}: {said}");
    (elapsed, said)
}

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_ROWS", 100_000);
    let rounds = env_or("BENCH_ROUNDS", 3);
    let (_connection, channel) = confirm_channel(&amqp_url()).await;
    println!("export and import of {rows} dead letters, {rounds} rounds");
    println!("backend\tround\traw read msg/s\texport msg/s\tratio\timport msg/s\tratio");
    for backend in backend_names() {
        let dir = tempfile::tempdir().unwrap();
        let source = fresh(&backend, dir.path(), 0);
        let dlq = format!("bench.export.{}.{backend}", std::process::id());
        dead_letter(&channel, &dlq, rows, 0).await;
        let child = serve_process(&source, &[&dlq], &[]);
        let start = Instant::now();
        while archived(&source, &dlq).await < rows as i64 {
            assert!(start.elapsed() < Duration::from_secs(1800), "not archived");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop(child).await;
        let file = dir.path().join("export.ndjson");
        let file = file.to_str().unwrap();
        let (mut export_ratios, mut import_ratios) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (read, raw) = raw_read(&source).await;
            assert_eq!(read, rows as u64);
            let (export, said) = lazarus(&["export", "-o", file], &source).await;
            assert!(said.contains("exported"), "{said}");
            let target = fresh(&backend, dir.path(), round + 1);
            let (import, said) = lazarus(&["import", file], &target).await;
            assert!(said.contains("imported"), "{said}");
            assert_eq!(archived(&target, &dlq).await, rows as i64, "all imported");
            let rate = |d: Duration| rows as f64 / d.as_secs_f64();
            export_ratios.push(rate(export) / rate(raw));
            import_ratios.push(rate(import) / rate(raw));
            println!(
                "{backend}\t{round}\t{:.0}\t{:.0}\t{:.3}\t{:.0}\t{:.3}",
                rate(raw),
                rate(export),
                rate(export) / rate(raw),
                rate(import),
                rate(import) / rate(raw)
            );
            if backend != "sqlite" {
                use sqlx::migrate::MigrateDatabase;
                sqlx::Postgres::force_drop_database(&target).await.unwrap();
            }
        }
        println!(
            "{backend}\tmedian ratios\t\t\t{:.3}\t\t{:.3}",
            median(export_ratios),
            median(import_ratios)
        );
        if backend != "sqlite" {
            use sqlx::migrate::MigrateDatabase;
            sqlx::Postgres::force_drop_database(&source).await.unwrap();
        }
        for name in [format!("{dlq}.work"), dlq.clone()] {
            let _ = channel
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
}

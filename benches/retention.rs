//! Retention benchmark: how much a retention pass deleting a large, old DLQ slows ingest.
//! For each backend, the release `lazarus serve` archives BENCH_ROWS dead letters into an
//! "old" DLQ; then it drains a backlog of BENCH_MESSAGES dead letters from a "new" DLQ twice,
//! in turns round after round: once with no retention, once with `--retention
//! <old>:messages=1`, whose passes delete the old DLQ meanwhile. Every message is a dead
//! letter made by the broker (published to a work queue with `x-message-ttl` 0 whose
//! dead-letter target is the DLQ, so each carries `x-death`). Reports the drain rates, their
//! ratio (with retention / without), and how fast retention deleted.
//!
//! `cargo bench --bench retention` (env: BENCH_ROWS=200000 — the figure is
//! BENCH_ROWS=1000000 —, BENCH_MESSAGES=50000, BENCH_ROUNDS=2, BENCH_BACKENDS=sqlite,postgres,
//! BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/ — a fresh database
//! `lazarus_bench_retention_<pid>`, dropped afterwards —, LAZARUS_TEST_AMQP_URL). Needs the
//! local RabbitMQ, and PostgreSQL for the postgres backend.

use std::time::{Duration, Instant};

use lapin::options::*;

mod common;
use common::{
    amqp_url, archived, backend_names, confirm_channel, dead_letter, env_or, median, postgres_url,
    serve_process, stop,
};

/// What one run of the binary did: the new DLQ drained in `ingest`; the old one deleted down
/// to its cap in `deleted` (when it was).
struct Drain {
    ingest: Duration,
    deleted: Option<Duration>,
}

/// Runs `lazarus serve` on both DLQs (with `retention`, if any) until the archive holds
/// `until.1` messages of DLQ `until.0` — and, with retention, until `old` is down to one —
/// then stops it.
async fn serve(
    url: &str,
    (old, new): (&str, &str),
    until: (&str, i64),
    retention: Option<&str>,
) -> Drain {
    let mut args = Vec::new();
    if let Some(policy) = retention {
        args = vec!["--retention", policy, "--retention-interval-secs", "1"];
    }
    let start = Instant::now();
    let child = serve_process(url, &[old, new], &args);
    let (mut ingest, mut deleted) = (None, None);
    while ingest.is_none() || (retention.is_some() && deleted.is_none()) {
        if ingest.is_none() && archived(url, until.0).await >= until.1 {
            ingest = Some(start.elapsed());
        }
        if retention.is_some() && deleted.is_none() && archived(url, old).await == 1 {
            deleted = Some(start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "not done in 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop(child).await;
    Drain {
        ingest: ingest.unwrap(),
        deleted,
    }
}

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_ROWS", 200_000);
    let messages = env_or("BENCH_MESSAGES", 50_000);
    let rounds = env_or("BENCH_ROUNDS", 2);
    let (_connection, channel) = confirm_channel(&amqp_url()).await;
    println!(
        "retention of {rows} old dead letters while {messages} new ones are ingested, {rounds} rounds"
    );
    println!(
        "backend\tround\tingest alone msg/s\tingest during retention msg/s\tratio\tdeleted msg/s"
    );
    for backend in backend_names() {
        let dir = tempfile::tempdir().unwrap();
        let url = match backend.as_str() {
            "sqlite" => format!("sqlite://{}", dir.path().join("bench.db").display()),
            _ => postgres_url(&format!("lazarus_bench_retention_{}", std::process::id())),
        };
        let base = format!("bench.retention.{}.{backend}", std::process::id());
        let (old, new) = (format!("{base}.old"), format!("{base}.new"));
        let cap = format!("{old}:messages=1");
        let (mut alone, mut during, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut in_new = 0i64;
        let mut next_id = 0;
        for round in 0..rounds {
            // The old DLQ, archived: what the retention run deletes.
            let kept = archived(&url, &old).await;
            dead_letter(&channel, &old, rows, next_id).await;
            next_id += rows;
            serve(&url, (&old, &new), (&old, kept + rows as i64), None).await;
            // In turns: which drain goes first changes each round.
            let mut rate = |with: bool| {
                let (url, old, new, cap) = (url.clone(), old.clone(), new.clone(), cap.clone());
                let channel = channel.clone();
                let from = next_id;
                next_id += messages;
                in_new += messages as i64;
                let until = in_new;
                async move {
                    dead_letter(&channel, &new, messages, from).await;
                    let policy = with.then_some(cap.as_str());
                    let drain = serve(&url, (&old, &new), (&new, until), policy).await;
                    (messages as f64 / drain.ingest.as_secs_f64(), drain.deleted)
                }
            };
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut this = [0.0; 2];
            let mut deleted_rate = 0.0;
            for with in order {
                let (r, deleted) = rate(with).await;
                this[usize::from(with)] = r;
                if let Some(d) = deleted {
                    deleted_rate = (rows as f64 + kept as f64 - 1.0) / d.as_secs_f64();
                }
            }
            alone.push(this[0]);
            during.push(this[1]);
            ratios.push(this[1] / this[0]);
            println!(
                "{backend}\t{round}\t{:.0}\t{:.0}\t{:.2}\t{deleted_rate:.0}",
                this[0],
                this[1],
                this[1] / this[0]
            );
        }
        println!(
            "{backend}\tmedian\t{:.0}\t{:.0}\t{:.2}",
            median(alone),
            median(during),
            median(ratios)
        );
        if backend != "sqlite" {
            use sqlx::migrate::MigrateDatabase;
            sqlx::Postgres::force_drop_database(&url).await.unwrap();
        }
        for q in [&old, &new] {
            for name in [format!("{q}.work"), q.to_string()] {
                let _ = channel
                    .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
        }
    }
}

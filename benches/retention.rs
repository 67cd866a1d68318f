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
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use tokio::process::Command;

mod common;
use common::{
    amqp_url, backend_names, confirm_channel, env_or, expiring_into, invoice_body, median,
    postgres_url, publish_all,
};

/// Puts `n` broker-made dead letters into `dlq` (declared if missing) and waits until it
/// holds them.
async fn dead_letter(channel: &Channel, dlq: &str, n: usize, from: usize) {
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
async fn archived(url: &str, queue: &str) -> i64 {
    use sqlx::{ConnectOptions, Connection};
    const SQL: &str = "SELECT CAST(COALESCE(SUM(messages), 0) AS BIGINT) FROM queue_reason_counts \
                       WHERE queue = $1";
    if let Some(path) = url.strip_prefix("sqlite://") {
        let Ok(mut c) = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .connect()
            .await
        else {
            return 0;
        };
        let n = sqlx::query_scalar(SQL).bind(queue).fetch_one(&mut c).await;
        let _ = c.close().await;
        n.unwrap_or(0)
    } else {
        let Ok(mut c) = sqlx::PgConnection::connect(url).await else {
            return 0;
        };
        let n = sqlx::query_scalar(SQL).bind(queue).fetch_one(&mut c).await;
        let _ = c.close().await;
        n.unwrap_or(0)
    }
}

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
    let mut command = Command::new(env!("CARGO_BIN_EXE_lazarus"));
    command
        .args([
            "serve",
            "--queue",
            old,
            "--queue",
            new,
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--database-url", url])
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .env_remove("LAZARUS_RETENTION")
        .kill_on_drop(true);
    if let Some(policy) = retention {
        command.args(["--retention", policy, "--retention-interval-secs", "1"]);
    }
    let start = Instant::now();
    let mut child = command.spawn().unwrap();
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
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    child.wait().await.unwrap();
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

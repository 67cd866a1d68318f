//! Replay benchmark: bulk-replays N archived dead letters to their original exchange with a
//! Lazarus replay job (run in-process, as `lazarus replay` runs its own job), alternately
//! with a raw lapin publisher that has the same window of outstanding confirms, in the same
//! run; then times RabbitMQ's shovel "Move messages" of the same N messages between queues.
//!
//! `cargo bench --bench replay` (env: BENCH_MESSAGES=100000, BENCH_RUNS=3, BENCH_WINDOW=500,
//! BENCH_SHOVEL=1, BENCH_BACKEND=sqlite — or `postgres`: a fresh database
//! `lazarus_bench_replay_<pid>` on BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/,
//! dropped afterwards — LAZARUS_TEST_AMQP_URL). Needs the local RabbitMQ; the shovel part also
//! needs `rabbitmqctl` and `rabbitmq-plugins` on this machine (it enables `rabbitmq_shovel`
//! when it is disabled, and is skipped when they are missing or with BENCH_SHOVEL=0) and the
//! default vhost. Prints a table of rates and the ratios.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use lazarus::amqp::headers::{AmqpValue, MessageProperties, Table};
use lazarus::amqp::publisher::replay_headers;
use lazarus::archive::{
    open, Actor, Archive, IncomingMessage, JobSpec, JobState, MessageFilter, PreparedMessage,
    ReplayJob, Selection,
};
use lazarus::death::ReplayTarget;
use lazarus::replay::job::{run_one, RunnerSettings};
use time::OffsetDateTime;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

mod common;
use common::{amqp_url, env_or, median, postgres_url, text};

/// Archived messages stored per transaction while filling, as ingest's default batch.
const FILL_BATCH: usize = 500;
/// The routing key every message was first published with.
const KEY: &str = "work";

/// A 1 KB JSON body, as the ingest benchmark's.
fn body(i: usize) -> Vec<u8> {
    let mut body = format!(
        r#"{{"invoice_id":"INV-2026-{i:06}","customer":"c-{}","lines":["#,
        i % 977
    )
    .into_bytes();
    body.resize(1020, b' ');
    body.extend_from_slice(b"]}  ");
    body
}

fn properties(i: usize) -> MessageProperties {
    MessageProperties {
        content_type: Some("application/json".into()),
        delivery_mode: Some(2),
        message_id: Some(format!("m-{i}").into()),
        ..Default::default()
    }
}

/// The i-th dead letter as the broker delivers it from `<base>.dlq` after one rejection in
/// `<base>.work`, first published to exchange `<base>` with key `work`.
fn dead_letter(base: &str, i: usize) -> IncomingMessage {
    let work = format!("{base}.work");
    let now = OffsetDateTime::now_utc();
    let mut death = Table::new();
    death.insert("queue", text(&work));
    death.insert("reason", text("rejected"));
    death.insert("count", AmqpValue::LongLongInt(1));
    death.insert("exchange", text(base));
    death.insert("routing-keys", AmqpValue::Array(vec![text(KEY)]));
    death.insert("time", AmqpValue::Timestamp(now.unix_timestamp() as u64));
    let headers = Table::from([
        (
            "x-death".to_owned(),
            AmqpValue::Array(vec![AmqpValue::Table(death)]),
        ),
        ("x-first-death-queue".to_owned(), text(&work)),
        ("x-first-death-reason".to_owned(), text("rejected")),
        ("x-first-death-exchange".to_owned(), text(base)),
        ("tenant".to_owned(), text(&format!("tenant-{}", i % 40))),
        ("attempt".to_owned(), AmqpValue::LongInt(3)),
        (
            "x-exception-message".to_owned(),
            text("TimeoutException: tax service did not answer in 5s"),
        ),
    ]);
    IncomingMessage {
        queue: format!("{base}.dlq"),
        exchange: format!("{base}.dlx"),
        routing_key: KEY.into(),
        redelivered: false,
        properties: properties(i),
        headers: Some(headers),
        body: body(i),
        received_at: now,
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

/// Stores `n` dead letters through the archive, in ingest-sized transactions.
async fn fill_archive(archive: &dyn Archive, base: &str, n: usize) {
    for start in (0..n).step_by(FILL_BATCH) {
        let batch: Vec<PreparedMessage> = (start..(start + FILL_BATCH).min(n))
            .map(|i| PreparedMessage::new(dead_letter(base, i)))
            .collect();
        let stored = archive.store_batch(&batch).await.unwrap();
        assert_eq!(stored.inserted as usize, batch.len());
    }
}

async fn depth(channel: &Channel, queue: &str) -> u32 {
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .unwrap()
        .message_count()
}

/// Checks `queue` holds `n` messages (waiting a little for the broker), then empties it.
async fn check_and_purge(channel: &Channel, queue: &str, n: usize) {
    let start = Instant::now();
    loop {
        let now = depth(channel, queue).await as usize;
        if now == n {
            break;
        }
        assert!(
            now < n && start.elapsed() < Duration::from_secs(10),
            "{queue} holds {now} messages, expected {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    channel
        .queue_purge(queue.into(), QueuePurgeOptions::default())
        .await
        .unwrap();
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// A new, started job replaying every archived message of `dlq` to its own target (the same
/// messages every run: they are `replayed` after the first, hence `include_replayed`).
async fn create_job(archive: &dyn Archive, dlq: &str, key: &str, n: usize) -> ReplayJob {
    let selection = Selection::Filter(Box::new(MessageFilter {
        queue: Some(dlq.to_owned()),
        ..Default::default()
    }));
    let selection_text = serde_json::json!({ "queue": dlq }).to_string();
    let job = archive
        .create_job(&JobSpec {
            request_key: key,
            actor: &Actor::system("bench"),
            selection: &selection,
            selection_text: &selection_text,
            target: None,
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: true,
            canary: None,
            start: true,
            policy: &lazarus::replay::policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    assert_eq!(job.plan.to_publish as usize, n, "plan: {:?}", job.plan);
    job
}

async fn check_completed(archive: &dyn Archive, id: i64, n: usize) {
    let job = archive.job(id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Completed, "{job:?}");
    assert_eq!(job.counts.published as usize, n, "{:?}", job.counts);
}

/// Lazarus: a job replaying every archived message of `dlq`, run here by the library's
/// runner until it completes; timed from before `create_job`.
async fn lazarus(
    archive: &dyn Archive,
    settings: &RunnerSettings,
    dlq: &str,
    run: usize,
    n: usize,
) -> Duration {
    let key = format!("bench-{}-{run}", std::process::id());
    let start = Instant::now();
    let job = create_job(archive, dlq, &key, n).await;
    let ran = run_one(archive, settings, job.id, &CancellationToken::new())
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert!(ran, "job {} was not claimed", job.id);
    check_completed(archive, job.id, n).await;
    elapsed
}

/// The baseline: the same messages, held in memory, published on a confirm channel with
/// `mandatory` and at most `window` confirms outstanding (opening its connection is timed,
/// as the job's is).
async fn raw(
    url: &str,
    exchange: &str,
    messages: &[(Vec<u8>, BasicProperties)],
    window: usize,
) -> Duration {
    let start = Instant::now();
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut pending: VecDeque<lapin::PublisherConfirm> = VecDeque::with_capacity(window);
    let settle = |c: Confirmation| {
        assert!(matches!(c, Confirmation::Ack(None)), "not published: {c:?}");
    };
    for (body, props) in messages {
        if pending.len() >= window {
            let confirm = pending.pop_front().unwrap();
            settle(confirm.await.unwrap());
        }
        pending.push_back(
            channel
                .basic_publish(
                    exchange.into(),
                    KEY.into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    body,
                    props.clone(),
                )
                .await
                .unwrap(),
        );
    }
    for confirm in pending {
        settle(confirm.await.unwrap());
    }
    let elapsed = start.elapsed();
    let _ = connection.close(200, "done".into()).await;
    elapsed
}

async fn rabbitmq(tool: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Makes sure the shovel plugin runs (enabling it when it is installed but disabled).
async fn shovel_plugin() -> Result<(), String> {
    let enabled = rabbitmq("rabbitmq-plugins", &["list", "--enabled", "--minimal"]).await?;
    if enabled.lines().any(|l| l.trim() == "rabbitmq_shovel") {
        println!("the rabbitmq_shovel plugin is enabled");
        return Ok(());
    }
    rabbitmq("rabbitmq-plugins", &["enable", "rabbitmq_shovel"]).await?;
    println!("enabled the rabbitmq_shovel plugin (`rabbitmq-plugins enable rabbitmq_shovel`)");
    Ok(())
}

/// How a shovel "Move messages" went: in all (from starting `rabbitmqctl set_parameter`
/// until the destination holds every message), and until the first message arrived.
struct ShovelRun {
    total: Duration,
    first: Duration,
}

/// Fills `<base>.move.src` with the messages (not timed), then times a dynamic shovel that
/// moves them to `<base>.move.dst`, as the management UI's "Move messages" does.
async fn shovel(
    channel: &Channel,
    base: &str,
    messages: &[(Vec<u8>, BasicProperties)],
) -> Result<ShovelRun, String> {
    shovel_plugin().await?;
    let (src, dst, name) = (
        format!("{base}.move.src"),
        format!("{base}.move.dst"),
        format!("{base}.move"),
    );
    for q in [&src, &dst] {
        channel
            .queue_declare(q.as_str().into(), durable(), FieldTable::default())
            .await
            .unwrap();
    }
    println!("filling {src} with {} messages...", messages.len());
    let mut pending = Vec::new();
    for (body, props) in messages {
        pending.push(
            channel
                .basic_publish(
                    "".into(),
                    src.as_str().into(),
                    BasicPublishOptions::default(),
                    body,
                    props.clone(),
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
    let n = messages.len();
    let definition = serde_json::json!({
        "src-protocol": "amqp091",
        "src-uri": "amqp://",
        "src-queue": src,
        "dest-protocol": "amqp091",
        "dest-uri": "amqp://",
        "dest-queue": dst,
        "src-delete-after": "queue-length",
        "ack-mode": "on-confirm",
    })
    .to_string();
    let start = Instant::now();
    let mut set = Command::new("rabbitmqctl")
        .args(["set_parameter", "shovel", &name, &definition])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("rabbitmqctl: {e}"))?;
    let mut first = None;
    let outcome = loop {
        let now = depth(channel, &dst).await as usize;
        if now > 0 && first.is_none() {
            first = Some(start.elapsed());
        }
        if now >= n {
            break Ok(());
        }
        if let Ok(Some(status)) = set.try_wait() {
            if !status.success() {
                break Err(format!("rabbitmqctl set_parameter shovel failed: {status}"));
            }
        }
        if start.elapsed() > Duration::from_secs(600) {
            break Err(format!("the shovel moved {now} of {n} messages in 600 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let total = start.elapsed();
    let _ = set.wait().await;
    // The shovel deletes itself once it moved the queue's length; clear it if it did not.
    let _ = rabbitmq("rabbitmqctl", &["clear_parameter", "shovel", &name]).await;
    for q in [&src, &dst] {
        channel
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
    outcome.map(|()| ShovelRun {
        total,
        first: first.unwrap_or(total),
    })
}

#[tokio::main]
async fn main() {
    let n = env_or("BENCH_MESSAGES", 100_000);
    let runs = env_or("BENCH_RUNS", 3).max(1);
    let url = amqp_url();
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos() % 1_000_000_000;
    let base = format!("bench.replay.{}.{nanos}", std::process::id());
    let (exchange, dlq, target) = (
        base.clone(),
        format!("{base}.dlq"),
        format!("{base}.target"),
    );
    // The job's settings, as `lazarus serve` and `lazarus replay` use them; BENCH_WINDOW (a
    // diagnosis) changes the confirm window and the step size, for the baseline too.
    let mut settings = RunnerSettings::new(&url);
    settings.window = env_or("BENCH_WINDOW", settings.window);
    let window = settings.window;

    let dir = tempfile::tempdir().unwrap();
    let backend = std::env::var("BENCH_BACKEND").unwrap_or_else(|_| "sqlite".into());
    let db = match backend.as_str() {
        "sqlite" => format!("sqlite://{}", dir.path().join("replay.db").display()),
        "postgres" => postgres_url(&format!("lazarus_bench_replay_{}", std::process::id())),
        other => panic!("BENCH_BACKEND: unknown backend {other:?} (sqlite, postgres)"),
    };
    let archive = open(&db).await.unwrap();
    println!("archiving {n} 1 KB dead letters of {dlq} into {backend}...");
    let filling = Instant::now();
    fill_archive(&*archive, &base, n).await;
    println!("archived in {:.1} s", filling.elapsed().as_secs_f64());

    // What the job publishes, held in memory for the raw publisher and the shovel: the same
    // bodies, properties and headers (minus the death headers, plus the link to the record).
    let messages: Vec<(Vec<u8>, BasicProperties)> = (0..n)
        .map(|i| {
            let m = dead_letter(&base, i);
            let target = ReplayTarget {
                exchange: base.clone(),
                routing_key: KEY.into(),
            };
            let headers = replay_headers(m.headers.as_ref(), &target, i as i64 + 1, Some("1"));
            (m.body, m.properties.to_lapin(Some(&headers)))
        })
        .collect();

    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    channel
        .exchange_declare(
            exchange.as_str().into(),
            lapin::ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_declare(target.as_str().into(), durable(), FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_bind(
            target.as_str().into(),
            exchange.as_str().into(),
            KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();

    let (mut laz_runs, mut raw_runs) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        println!("run {run}/{runs}: lazarus replay job...");
        laz_runs.push(lazarus(&*archive, &settings, &dlq, run, n).await);
        check_and_purge(&channel, &target, n).await;
        println!("run {run}/{runs}: raw lapin publisher...");
        raw_runs.push(raw(&url, &exchange, &messages, window).await);
        check_and_purge(&channel, &target, n).await;
    }
    let moved = if env_or("BENCH_SHOVEL", 1) == 0 {
        Err("BENCH_SHOVEL=0".to_owned())
    } else {
        shovel(&channel, &base, &messages).await
    };
    channel
        .queue_delete(target.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    channel
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    drop(archive);
    if backend == "postgres" {
        use sqlx::migrate::MigrateDatabase;
        sqlx::Postgres::force_drop_database(&db).await.unwrap();
    }

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
    println!();
    println!("| run (window {window}, {backend}) | messages | seconds | msg/s | lazarus / raw |");
    println!("|---|---|---|---|---|");
    for (i, (laz, raw)) in laz_runs.iter().zip(&raw_runs).enumerate() {
        println!(
            "| lazarus replay job, run {} | {n} | {} | {:.0} | {:.2} |",
            i + 1,
            s(*laz),
            rate(*laz),
            rate(*laz) / rate(*raw)
        );
        println!(
            "| raw lapin publisher, run {} | {n} | {} | {:.0} | - |",
            i + 1,
            s(*raw),
            rate(*raw)
        );
    }
    let laz_rate = median(laz_runs.iter().map(|d| rate(*d)).collect());
    let raw_rate = median(raw_runs.iter().map(|d| rate(*d)).collect());
    match &moved {
        Ok(m) => println!(
            "| shovel \"Move messages\" (rabbitmqctl set_parameter) | {n} | {} | {:.0} | - |",
            s(m.total),
            rate(m.total)
        ),
        Err(e) => println!("| shovel \"Move messages\": skipped ({e}) | {n} | - | - | - |"),
    }
    println!();
    println!(
        "median msg/s: lazarus {laz_rate:.0}, raw {raw_rate:.0}; ratio lazarus / raw: {:.2} (target ≥ 0.70)",
        laz_rate / raw_rate
    );
    if let Ok(m) = &moved {
        println!(
            "lazarus / shovel: {:.2} (the shovel's first message arrived after {} s, most of it \
             rabbitmqctl starting; {:.0} msg/s from then on)",
            laz_rate / rate(m.total),
            s(m.first),
            n as f64 / (m.total - m.first).as_secs_f64()
        );
    }
}

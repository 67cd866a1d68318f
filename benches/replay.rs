//! Replay benchmark: bulk-replays N dead letters — made by the broker's own dead-lettering
//! (published to a work queue with `x-message-ttl` 0 whose dead-letter target is the DLQ, so
//! each carries `x-death`) and archived by the release `lazarus serve`, the indexer caught up
//! (no job is timed beside it) — through the API a
//! user takes: `POST /api/replays` with a filter on the DLQ, timed from the request (planning
//! included) until `GET /api/replays/{id}` says `completed`. Alternately, in the same run, a
//! raw lapin publisher sends the same number of messages of the same shape with the same
//! window of outstanding confirms (and `mandatory`); then RabbitMQ's shovel "Move messages"
//! moves N such messages between two queues.
//!
//! `cargo bench --bench replay` (env: BENCH_MESSAGES=50000, BENCH_RUNS=3, BENCH_SHOVEL=1,
//! BENCH_BACKENDS=sqlite,postgres — PostgreSQL: a fresh database
//! `lazarus_bench_replay_<pid>` on BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/,
//! dropped afterwards — LAZARUS_TEST_AMQP_URL). Needs the local RabbitMQ; the shovel part also
//! needs `rabbitmqctl` and `rabbitmq-plugins` on this machine (it enables `rabbitmq_shovel`
//! when it is disabled, and is skipped when they are missing or with BENCH_SHOVEL=0) and the
//! default vhost. BENCH_BASELINE: the path of another `lazarus` binary (say the previous
//! commit's, same schema): in each run it serves the same archive and replays it too, the two
//! taking turns going first, and the summary gives this binary's rate over it run by run.
//! Prints a table of rates and the ratios, and for each job the time until
//! `POST /api/replays` answered (planning) and its runner's own time (`started_at` to
//! `finished_at`, as the job records them).

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation};
use lazarus::amqp::publisher::replay_headers;
use lazarus::archive::IncomingMessage;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
use lazarus::replay::job::RunnerSettings;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::process::Command;

mod common;
use common::{
    amqp_url, backend_names, confirm_channel, env_or, expiring_into, invoice_body, median,
    postgres_url, publish_all, text, waiting_to_index,
};

/// The routing key every message was first published with.
const KEY: &str = "work";

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
        broker: "default".into(),
        vhost: String::new(),
        queue: format!("{base}.dlq"),
        exchange: format!("{base}.dlx"),
        routing_key: KEY.into(),
        redelivered: false,
        properties: properties(i),
        headers: Some(headers),
        body: invoice_body(i),
        received_at: now,
        decode_problems: Vec::new(),
        stream_offset: None,
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

/// Fills `<base>.dlq` with `n` dead letters made by the broker: each is published to exchange
/// `<base>` with key `work`, routed to `<base>.work`, where it expires at once and is
/// dead-lettered into the DLQ. The work queue is deleted afterwards, so that replays to the
/// original exchange and key reach only the target queue bound later.
async fn fill_dlq(channel: &Channel, base: &str, n: usize) {
    let (work, dlq) = (format!("{base}.work"), format!("{base}.dlq"));
    channel
        .queue_declare(dlq.as_str().into(), durable(), FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_declare(work.as_str().into(), durable(), expiring_into(&dlq))
        .await
        .unwrap();
    channel
        .queue_bind(
            work.as_str().into(),
            base.into(),
            KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let messages = (0..n).map(|i| {
        let m = dead_letter(base, i);
        // The producer's own headers: the broker adds the death history.
        let mut headers = m.headers.unwrap_or_default();
        headers.retain(|name, _| {
            !name.as_bytes().starts_with(b"x-death")
                && !name.as_bytes().starts_with(b"x-first-death")
        });
        (m.body, m.properties.to_lapin(Some(&headers)))
    });
    publish_all(channel, base, KEY, messages).await;
    let start = Instant::now();
    while (depth(channel, &dlq).await as usize) < n {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{dlq} got {} of {n} dead letters",
            depth(channel, &dlq).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    channel
        .queue_delete(work.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}

/// One HTTP/1.1 request to the Lazarus on `port`: (status, body).
async fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// `binary serve` (a `lazarus`) archiving `dlq` into `database_url`, its web on `port` (no
/// sign-in: the default, loopback only).
fn serve(binary: &str, database_url: &str, dlq: &str, port: u16) -> tokio::process::Child {
    Command::new(binary)
        .args(["serve", "--queue", dlq, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--database-url")
        .arg(database_url)
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until the Lazarus on `port` has archived `n` messages (its `/metrics` totals).
async fn wait_archived(port: u16, n: usize) {
    let start = Instant::now();
    loop {
        // Refused until it listens.
        let (status, metrics) = http(port, "GET", "/metrics", None)
            .await
            .unwrap_or_default();
        let archived: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("lazarus_archived_messages{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if status == 200 && archived as usize >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "lazarus archived {archived} of {n} in 600 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lazarus: `POST /api/replays` of every archived message of `dlq` (already replayed ones
/// too: the same messages every run), timed until the job is `completed`.
async fn lazarus(port: u16, dlq: &str, key: &str, n: usize) -> JobTimes {
    let start = Instant::now();
    let request = serde_json::json!({
        "filter": { "queue": dlq },
        "include_replayed": true,
        "request_key": key,
    });
    let (status, body) = http(port, "POST", "/api/replays", Some(&request))
        .await
        .unwrap();
    assert!(
        (200..300).contains(&status),
        "POST /api/replays: {status} {body}"
    );
    let planning = start.elapsed();
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = job["id"].to_string().trim_matches('"').to_owned();
    assert_eq!(job["plan"]["to_publish"], n, "plan: {job}");
    loop {
        let (status, body) = http(port, "GET", &format!("/api/replays/{id}"), None)
            .await
            .unwrap();
        assert_eq!(status, 200, "GET /api/replays/{id}: {body}");
        let job: serde_json::Value = serde_json::from_str(&body).unwrap();
        match job["state"].as_str().unwrap() {
            "completed" => {
                let total = start.elapsed();
                assert_eq!(job["counts"]["published"], n, "{job}");
                let at = |field: &str| {
                    let text = job[field]
                        .as_str()
                        .unwrap_or_else(|| panic!("{field}: {job}"));
                    OffsetDateTime::parse(text, &Rfc3339).unwrap()
                };
                let running = at("finished_at") - at("started_at");
                return JobTimes {
                    total,
                    planning,
                    running: running.try_into().unwrap_or_default(),
                };
            }
            "queued" | "running" => {}
            other => panic!("job {id} is {other}: {job}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replay job's time as the user sees it, and its two parts.
#[derive(Clone, Copy)]
struct JobTimes {
    /// From the request to `completed`.
    total: Duration,
    /// Until `POST /api/replays` answered: the plan made and the job queued.
    planning: Duration,
    /// From the runner's start to its end, as the job records them (milliseconds).
    running: Duration,
}

/// A free port on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let (connection, channel) = confirm_channel(url).await;
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
    publish_all(
        channel,
        "",
        &src,
        messages.iter().map(|(body, props)| (body, props.clone())),
    )
    .await;
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

/// What the raw publisher and the shovel send: the dead letters' bodies, properties and
/// headers as a replay publishes them (death headers replaced by the link to the record).
fn replayed_messages(base: &str, n: usize) -> Vec<(Vec<u8>, BasicProperties)> {
    (0..n)
        .map(|i| {
            let m = dead_letter(base, i);
            let target = ReplayTarget {
                exchange: base.to_owned(),
                routing_key: KEY.into(),
            };
            let headers =
                replay_headers(m.headers.as_ref(), &target, i as i64 + 1, Some("1"), None);
            (m.body, m.properties.to_lapin(Some(&headers)))
        })
        .collect()
}

/// One backend's runs: Lazarus through the API, and the raw publisher.
struct Measured {
    backend: String,
    lazarus: Vec<JobTimes>,
    /// The BENCH_BASELINE binary's jobs, one beside each of this binary's on the same archive.
    baseline: Vec<JobTimes>,
    raw: Vec<Duration>,
}

/// Archives `n` dead letters into a fresh `backend` archive with `lazarus serve`, then replays
/// them through its API and publishes them raw, `runs` times each, in turns.
async fn measure(channel: &Channel, backend: &str, n: usize, runs: usize) -> Measured {
    let url = amqp_url();
    let window = RunnerSettings::new(&url).window;
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos() % 1_000_000_000;
    let base = format!("bench.replay.{}.{nanos}", std::process::id());
    let (dlq, target) = (format!("{base}.dlq"), format!("{base}.target"));
    channel
        .exchange_declare(
            base.as_str().into(),
            lapin::ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    println!("{backend}: filling {dlq} with {n} dead letters...");
    fill_dlq(channel, &base, n).await;
    channel
        .queue_declare(target.as_str().into(), durable(), FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_bind(
            target.as_str().into(),
            base.as_str().into(),
            KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let db = match backend {
        "sqlite" => format!("sqlite://{}", dir.path().join("replay.db").display()),
        _ => postgres_url(&format!("lazarus_bench_replay_{}", std::process::id())),
    };
    let port = free_port();
    let this = env!("CARGO_BIN_EXE_lazarus");
    let baseline = std::env::var("BENCH_BASELINE").ok();
    let mut child = serve(this, &db, &dlq, port);
    let archiving = Instant::now();
    wait_archived(port, n).await;
    println!(
        "{backend}: archived by lazarus serve in {:.1} s",
        archiving.elapsed().as_secs_f64()
    );
    // A replay after a fix comes long after the messages were archived: none is timed while
    // the indexer still makes the backlog searchable beside it.
    while waiting_to_index(&db).await > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{backend}: searchable {:.1} s after the start",
        archiving.elapsed().as_secs_f64()
    );
    let messages = replayed_messages(&base, n);
    let mut measured = Measured {
        backend: backend.to_owned(),
        lazarus: Vec::new(),
        baseline: Vec::new(),
        raw: Vec::new(),
    };
    for run in 1..=runs {
        let key = format!("bench-{}-{run}", std::process::id());
        // With a baseline, the two binaries take turns going first (the first job on a fresh
        // archive ran slower for either): this one first in odd runs.
        let mut order = vec![(this, false)];
        if let Some(baseline) = &baseline {
            match run % 2 {
                1 => order.push((baseline.as_str(), true)),
                _ => order.insert(0, (baseline.as_str(), true)),
            }
        }
        for (binary, is_baseline) in order {
            if baseline.is_some() {
                // Each binary serves the archive in turn: stopped, the other holds nothing.
                let _ = child.kill().await;
                child = serve(binary, &db, &dlq, port);
                wait_archived(port, n).await;
            }
            println!("{backend}, run {run}/{runs}: POST /api/replays to {binary}...");
            let key = format!("{key}-{}", if is_baseline { "baseline" } else { "this" });
            let times = lazarus(port, &dlq, &key, n).await;
            match is_baseline {
                true => measured.baseline.push(times),
                false => measured.lazarus.push(times),
            }
            check_and_purge(channel, &target, n).await;
        }
        println!("{backend}, run {run}/{runs}: raw lapin publisher...");
        measured.raw.push(raw(&url, &base, &messages, window).await);
        check_and_purge(channel, &target, n).await;
    }
    let _ = child.kill().await;
    for q in [&target, &dlq] {
        channel
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
    channel
        .exchange_delete(base.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    if backend == "postgres" {
        use sqlx::migrate::MigrateDatabase;
        sqlx::Postgres::force_drop_database(&db).await.unwrap();
    }
    measured
}

#[tokio::main]
async fn main() {
    let n = env_or("BENCH_MESSAGES", 50_000);
    let runs = env_or("BENCH_RUNS", 3).max(1);
    let url = amqp_url();
    let window = RunnerSettings::new(&url).window;
    // Kept open until the end: the channel lives on it.
    let (_connection, channel) = confirm_channel(&url).await;
    let mut results = Vec::new();
    for backend in backend_names() {
        results.push(measure(&channel, &backend, n, runs).await);
    }
    let moved = if env_or("BENCH_SHOVEL", 1) == 0 {
        Err("BENCH_SHOVEL=0".to_owned())
    } else {
        let base = format!("bench.replay.{}.shovel", std::process::id());
        shovel(&channel, &base, &replayed_messages(&base, n)).await
    };

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
    println!();
    println!(
        "| run (window {window}) | messages | seconds | msg/s | lazarus / raw | planning s | job running s |"
    );
    println!("|---|---|---|---|---|---|---|");
    for m in &results {
        for (i, (laz, raw)) in m.lazarus.iter().zip(&m.raw).enumerate() {
            println!(
                "| lazarus → {}: POST /api/replays until completed, run {} | {n} | {} | {:.0} | {:.2} | {} | {} |",
                m.backend,
                i + 1,
                s(laz.total),
                rate(laz.total),
                rate(laz.total) / rate(*raw),
                s(laz.planning),
                s(laz.running)
            );
            println!(
                "| raw lapin publisher, run {} | {n} | {} | {:.0} | - | | |",
                i + 1,
                s(*raw),
                rate(*raw)
            );
            if let Some(base) = m.baseline.get(i) {
                println!(
                    "| BENCH_BASELINE → {}, run {} | {n} | {} | {:.0} | {:.2} | {} | {} |",
                    m.backend,
                    i + 1,
                    s(base.total),
                    rate(base.total),
                    rate(base.total) / rate(*raw),
                    s(base.planning),
                    s(base.running)
                );
            }
        }
    }
    match &moved {
        Ok(m) => println!(
            "| shovel \"Move messages\" (rabbitmqctl set_parameter) | {n} | {} | {:.0} | - | | |",
            s(m.total),
            rate(m.total)
        ),
        Err(e) => println!("| shovel \"Move messages\": skipped ({e}) | {n} | - | - | - | | |"),
    }
    println!();
    for m in &results {
        let laz_rate = median(m.lazarus.iter().map(|t| rate(t.total)).collect());
        let raw_rate = median(m.raw.iter().map(|d| rate(*d)).collect());
        let shovel = match &moved {
            Ok(moved) => format!(", lazarus / shovel {:.2}", laz_rate / rate(moved.total)),
            Err(_) => String::new(),
        };
        let baseline = match m.baseline.is_empty() {
            true => String::new(),
            false => {
                let each: Vec<String> = m
                    .lazarus
                    .iter()
                    .zip(&m.baseline)
                    .map(|(l, b)| format!("{:.2}", b.total.as_secs_f64() / l.total.as_secs_f64()))
                    .collect();
                format!("; lazarus / BENCH_BASELINE {}", each.join(", "))
            }
        };
        println!(
            "{}: median msg/s lazarus {laz_rate:.0}, raw {raw_rate:.0}; lazarus / raw {:.2}{shovel}{baseline} (target: faster than the shovel)",
            m.backend,
            laz_rate / raw_rate
        );
    }
    if let Ok(m) = &moved {
        println!(
            "the shovel's first message arrived after {} s, most of it rabbitmqctl starting; {:.0} msg/s from then on",
            s(m.first),
            n as f64 / (m.total - m.first).as_secs_f64()
        );
    }
}

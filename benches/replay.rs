//! Replay benchmark: bulk-replays N archived dead letters to their original exchange with a
//! Lazarus replay job (run in-process, as `lazarus replay` runs its own job), alternately
//! with a raw lapin publisher that has the same window of outstanding confirms, in the same
//! run; then times RabbitMQ's shovel "Move messages" of the same N messages between queues.
//!
//! `cargo bench --bench replay` (env: BENCH_MESSAGES=100000, BENCH_RUNS=3,
//! LAZARUS_TEST_AMQP_URL). Needs the local RabbitMQ; the shovel part also needs
//! `rabbitmqctl` and `rabbitmq-plugins` on this machine (it enables `rabbitmq_shovel` when
//! it is disabled, and is skipped when they are missing) and the default vhost. Prints a
//! table of rates, the ratios, and where the Lazarus job's time went.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use lazarus::amqp::headers::{AmqpValue, Bytes, MessageProperties, Table};
use lazarus::amqp::publisher::replay_headers;
use lazarus::archive::*;
use lazarus::death::ReplayTarget;
use lazarus::replay::job::{run_one, RunnerSettings};
use time::OffsetDateTime;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Archived messages stored per transaction while filling, as ingest's default batch.
const FILL_BATCH: usize = 500;
/// The routing key every message was first published with.
const KEY: &str = "work";

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

fn text(s: &str) -> AmqpValue {
    AmqpValue::LongString(Bytes(s.as_bytes().to_vec()))
}

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
        message_id: Some(format!("m-{i}")),
        ..Default::default()
    }
}

/// The i-th dead letter as the broker delivers it from `<base>.dlq` after one rejection in
/// `<base>.work`, first published to exchange `<base>` with key `work`.
fn dead_letter(base: &str, i: usize) -> IncomingMessage {
    let work = format!("{base}.work");
    let now = OffsetDateTime::now_utc();
    let mut death = Table::new();
    death.insert("queue".into(), text(&work));
    death.insert("reason".into(), text("rejected"));
    death.insert("count".into(), AmqpValue::LongLongInt(1));
    death.insert("exchange".into(), text(base));
    death.insert("routing-keys".into(), AmqpValue::Array(vec![text(KEY)]));
    death.insert(
        "time".into(),
        AmqpValue::Timestamp(now.unix_timestamp() as u64),
    );
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
        archive.confirm_acked(&stored.unconfirmed).await.unwrap();
    }
}

/// The archive, with the time spent in `advance_job` (the runner's one transaction per
/// step) added up.
struct Timed {
    inner: Arc<dyn Archive>,
    advance_nanos: AtomicU64,
    advance_calls: AtomicU64,
}

impl Timed {
    fn take(&self) -> (Duration, u64) {
        (
            Duration::from_nanos(self.advance_nanos.swap(0, Ordering::Relaxed)),
            self.advance_calls.swap(0, Ordering::Relaxed),
        )
    }
}

#[async_trait]
impl Archive for Timed {
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError> {
        self.inner.store_batch(batch).await
    }
    async fn confirm_acked(&self, archive_ids: &[i64]) -> Result<(), ArchiveError> {
        self.inner.confirm_acked(archive_ids).await
    }
    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        self.inner.list_messages(filter, page).await
    }
    async fn get_message(&self, id: i64) -> Result<Option<ArchivedMessage>, ArchiveError> {
        self.inner.get_message(id).await
    }
    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError> {
        self.inner.get_body(id).await
    }
    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError> {
        self.inner.counts().await
    }
    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        self.inner.hourly_counts(since).await
    }
    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        self.inner.failure_groups(limit).await
    }
    async fn related(&self, message: &MessageSummary) -> Result<Vec<MessageSummary>, ArchiveError> {
        self.inner.related(message).await
    }
    async fn begin_replay(
        &self,
        message_id: i64,
        request_key: &str,
        actor: &str,
        target: &ReplayTarget,
        edit: Option<&ReplayEdit>,
    ) -> Result<ReplayStart, ArchiveError> {
        self.inner
            .begin_replay(message_id, request_key, actor, target, edit)
            .await
    }
    async fn finish_replay(
        &self,
        replay_id: i64,
        outcome: &str,
        detail: Option<&str>,
        status: MessageStatus,
    ) -> Result<ReplayRecord, ArchiveError> {
        self.inner
            .finish_replay(replay_id, outcome, detail, status)
            .await
    }
    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError> {
        self.inner.replays_of(message_id).await
    }
    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
        self.inner.create_job(spec).await
    }
    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
        self.inner.job(id).await
    }
    async fn jobs(&self, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
        self.inner.jobs(limit).await
    }
    async fn job_items(
        &self,
        id: i64,
        outcome: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobItem>, ArchiveError> {
        self.inner.job_items(id, outcome, after, limit).await
    }
    async fn control_job(
        &self,
        id: i64,
        action: JobAction,
        actor: &str,
    ) -> Result<ReplayJob, ArchiveError> {
        self.inner.control_job(id, action, actor).await
    }
    async fn claim_job(
        &self,
        owner: &str,
        lease_ms: u64,
        only: Option<i64>,
    ) -> Result<Option<ReplayJob>, ArchiveError> {
        self.inner.claim_job(owner, lease_ms, only).await
    }
    async fn advance_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        outcomes: &[ItemOutcome],
        next: ChunkLimit,
    ) -> Result<JobStep, ArchiveError> {
        let start = Instant::now();
        let step = self
            .inner
            .advance_job(id, owner, lease_ms, outcomes, next)
            .await;
        self.advance_nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.advance_calls.fetch_add(1, Ordering::Relaxed);
        step
    }
    async fn release_job(
        &self,
        id: i64,
        owner: &str,
        state: JobState,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<(), ArchiveError> {
        self.inner
            .release_job(id, owner, state, detail, canary_done)
            .await
    }
    async fn note_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, ArchiveError> {
        self.inner
            .note_job(id, owner, lease_ms, detail, canary_done)
            .await
    }
    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError> {
        self.inner.canary_done(id).await
    }
    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError> {
        self.inner.canary_deaths(id, since).await
    }
    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &str,
    ) -> Result<u64, ArchiveError> {
        self.inner
            .dismiss(selection, selection_text, note, actor)
            .await
    }
    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        self.inner.audit_log(before, limit).await
    }
    async fn ping(&self) -> Result<(), ArchiveError> {
        self.inner.ping().await
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

/// What one Lazarus replay job took: in all, in `create_job` (freezing the selection), in
/// the runner's `advance_job` transactions (and how many), the rest being publishing.
struct LazarusRun {
    total: Duration,
    create: Duration,
    advance: Duration,
    steps: u64,
}

/// Replays every archived message of `dlq` with a job, run here until it completes.
async fn lazarus(archive: &Timed, url: &str, dlq: &str, run: usize, n: usize) -> LazarusRun {
    let selection = Selection::Filter(MessageFilter {
        queue: Some(dlq.to_owned()),
        ..Default::default()
    });
    let selection_text = serde_json::json!({ "queue": dlq }).to_string();
    let key = format!("bench-{}-{run}", std::process::id());
    let settings = RunnerSettings::new(url);
    archive.take();
    let start = Instant::now();
    let job = archive
        .create_job(&JobSpec {
            request_key: &key,
            actor: "bench",
            selection: &selection,
            selection_text: &selection_text,
            target: None,
            rate_per_sec: None,
            // The same messages every run: they are `replayed` after the first.
            include_replayed: true,
            canary: None,
            start: true,
        })
        .await
        .unwrap();
    let create = start.elapsed();
    assert_eq!(job.plan.to_publish as usize, n, "plan: {:?}", job.plan);
    let ran = run_one(archive, &settings, job.id, &CancellationToken::new())
        .await
        .unwrap();
    let total = start.elapsed();
    let (advance, steps) = archive.take();
    assert!(ran, "job {} was not claimed", job.id);
    let job = archive.job(job.id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Completed, "{job:?}");
    assert_eq!(job.counts.published as usize, n, "{:?}", job.counts);
    LazarusRun {
        total,
        create,
        advance,
        steps,
    }
}

/// The baseline: the same messages, held in memory, published on a confirm channel with
/// `mandatory` and at most `window` confirms outstanding (opening its connection is timed,
/// as the job's is). With `steps`, it also waits for every outstanding confirm after each
/// `window` messages, as the job's runner does between two steps (a diagnosis, not the
/// baseline).
async fn raw(
    url: &str,
    exchange: &str,
    messages: &[(Vec<u8>, BasicProperties)],
    window: usize,
    steps: bool,
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
    for (i, (body, props)) in messages.iter().enumerate() {
        if steps && i % window == 0 {
            for confirm in pending.drain(..) {
                settle(confirm.await.unwrap());
            }
        }
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 0 {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
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
    let window = RunnerSettings::new(&url).window;

    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("replay.db").display());
    let archive = Timed {
        inner: open(&db).await.unwrap(),
        advance_nanos: AtomicU64::new(0),
        advance_calls: AtomicU64::new(0),
    };
    println!("archiving {n} 1 KB dead letters of {dlq}...");
    let filling = Instant::now();
    fill_archive(&archive, &base, n).await;
    println!("archived in {:.1} s", filling.elapsed().as_secs_f64());

    // What the job publishes, held in memory for the raw publisher and the shovel: the same
    // bodies, properties and headers (minus the death headers, plus the link to the record).
    let messages: Vec<(Vec<u8>, BasicProperties)> = (0..n)
        .map(|i| {
            let m = dead_letter(&base, i);
            let headers = replay_headers(m.headers.as_ref(), i as i64 + 1, Some("1"));
            (m.body, m.properties.to_amqp(Some(&headers)))
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

    let (mut laz_runs, mut raw_runs, mut step_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=runs {
        println!("run {run}/{runs}: lazarus replay job...");
        let laz = lazarus(&archive, &url, &dlq, run, n).await;
        check_and_purge(&channel, &target, n).await;
        laz_runs.push(laz);
        println!("run {run}/{runs}: raw lapin publisher...");
        raw_runs.push(raw(&url, &exchange, &messages, window, false).await);
        check_and_purge(&channel, &target, n).await;
        println!("run {run}/{runs}: raw lapin publisher in the job's steps...");
        step_runs.push(raw(&url, &exchange, &messages, window, true).await);
        check_and_purge(&channel, &target, n).await;
    }
    let moved = shovel(&channel, &base, &messages).await;
    channel
        .queue_delete(target.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    channel
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let s = |d: Duration| format!("{:.2}", d.as_secs_f64());
    println!();
    println!("| run (window {window}) | messages | seconds | msg/s | lazarus / raw |");
    println!("|---|---|---|---|---|");
    for (i, (laz, raw)) in laz_runs.iter().zip(&raw_runs).enumerate() {
        println!(
            "| lazarus replay job, run {} | {n} | {} | {:.0} | {:.2} |",
            i + 1,
            s(laz.total),
            rate(laz.total),
            rate(laz.total) / rate(*raw)
        );
        println!(
            "| raw lapin publisher, run {} | {n} | {} | {:.0} | - |",
            i + 1,
            s(*raw),
            rate(*raw)
        );
    }
    let laz_rate = median(laz_runs.iter().map(|r| rate(r.total)).collect());
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
        "| lazarus run | in all | create_job | advance_job (calls) | publishing and confirms \
         (the rest) | raw in the job's steps of {window}, no database |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, (laz, steps)) in laz_runs.iter().zip(&step_runs).enumerate() {
        let publishing = laz.total.saturating_sub(laz.create + laz.advance);
        println!(
            "| {} | {} s | {} s | {} s ({}) | {} s | {} s |",
            i + 1,
            s(laz.total),
            s(laz.create),
            s(laz.advance),
            laz.steps,
            s(publishing),
            s(*steps)
        );
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

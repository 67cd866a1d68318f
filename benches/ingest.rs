//! Ingest benchmark: drain a DLQ backlog into the archive with the real `lazarus` binary,
//! against a raw lapin consumer that only acks — every 500 with `multiple`, as Lazarus acks —
//! (same prefetch) in the same run, for each archive backend (SQLite, PostgreSQL) against the
//! same baseline. The backlog is what production sends: messages dead-lettered by the broker
//! (published to a work queue with `x-message-ttl` 0 and a dead-letter exchange, so each
//! carries `x-death` and `x-first-death-*`); a second row publishes them straight into the DLQ
//! (no death history, BENCH_DIRECT=0 leaves it out). Then again with a few
//! 16 MiB messages in the backlog to check the memory bound; then a backlog that comes back
//! redelivered (as after a broker crash), first into an empty archive, then once more into
//! the archive that holds it already. With BENCH_FLOOR=1, each round also drains a backlog with
//! the floor consumer (`floor_consumer`: the raw consumer appending each batch durably to the
//! backend before it acks), the bound on what any archive-then-ack consumer could reach.
//!
//! `cargo bench --bench ingest`. Env: BENCH_MESSAGES=100000, BENCH_BIG=3,
//! BENCH_PREFETCH=2000 (Lazarus' default; both consumers get it),
//! BENCH_REDELIVERED=1 (0: no redelivered backlog), BENCH_DIRECT=1, BENCH_FLOOR=0,
//! BENCH_ROUNDS=3 (the raw consumer and each backend take turns, round after round),
//! BENCH_BACKENDS=sqlite,postgres, BENCH_ERRORS=0 (1: each message carries a failing Spring
//! listener's error — `x-exception-message` naming its own invoice id and the
//! `x-exception-stacktrace` a JVM printed, as RepublishMessageRecoverer writes them — so that
//! deriving each failure's cause is part of what is measured), BENCH_BASELINE (the path of
//! another `lazarus` binary, say the previous commit's: each round runs it too, right after
//! or before this one in turn, and the table ends with this binary's rate over it),
//! BENCH_PAGE_CLIENTS=0 (N: each round also drains a backlog into each backend while N page
//! clients ask Lazarus for an incident's pages, one after another with no pause — the
//! overview, the list and its counts, a common word, an invoice searched for, a message's
//! page — and the summary gives that drain's rate over the unloaded one's and the pages'
//! p50/p95/p99),
//! BENCH_FILLED=0 (N: each round also drains a backlog into each backend's archive that
//! already holds N messages — the pages bench's, which `BENCH_ROWS=N cargo bench --bench
//! pages` fills and keeps; what the drain adds is purged after it — and the summary gives
//! that drain's rate over the one into an empty archive in the same round),
//! BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/
//! (the server: each run gets a fresh database `lazarus_bench_ingest_<pid>_<n>` there, dropped
//! afterwards), LAZARUS_TEST_AMQP_URL. Needs the local RabbitMQ, and PostgreSQL for the
//! postgres backend; prints a table of rates, the ratios to the raw consumer, peak RSS.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use lazarus::archive::{Actor, Archive, MessageFilter, PostgresArchive, Selection, SqliteArchive};
use tokio::process::Command;

mod common;
use common::page_clients::{incident_pages, percentile, PageClients, PageLoad};
use common::{
    amqp_url, backend_names, confirm_channel, env_or, expiring_into, invoice_body, median,
    pages_archive_file, pages_archive_url, postgres_url, publish_all,
};

/// A failing Spring listener's error headers for invoice `i`: the cause's message, naming the
/// invoice, and the stack trace a JVM printed for it (`trace` is one printed for `INV-0`).
fn spring_error(trace: &str, i: usize) -> FieldTable {
    let id = format!("INV-2026-{i:06}");
    let mut headers = FieldTable::default();
    headers.insert(
        "x-exception-message".into(),
        AMQPValue::LongString(format!("no invoice {id} in ledger").as_str().into()),
    );
    headers.insert(
        "x-exception-stacktrace".into(),
        AMQPValue::LongString(trace.replace("INV-0", &id).as_str().into()),
    );
    headers
}

/// The stack trace a JVM prints for the test suite's failing listener (`Invoices.java`) and
/// invoice `INV-0`, when BENCH_ERRORS=1.
fn printed_trace() -> Option<String> {
    if env_or("BENCH_ERRORS", 0) == 0 {
        return None;
    }
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/causes/Invoices.java"
    );
    let out = std::process::Command::new("java")
        .args([source, "INV-0"])
        .output()
        .expect("BENCH_ERRORS=1 runs java");
    let trace = String::from_utf8(out.stdout).unwrap();
    let trace = trace.trim_end().trim_end_matches("----").to_owned();
    assert!(trace.contains("Caused by: "), "{trace}");
    Some(trace)
}

/// Fills `queue` with `n` 1 KB JSON messages, with `big` 16 MiB ones spread among them:
/// dead-lettered into it by the broker (`dead`: each expires at once in a work queue whose
/// dead-letter target is `queue`), or published straight into it; with a failing listener's
/// error headers when `trace` is given ([`spring_error`]).
async fn fill(channel: &Channel, queue: &str, n: usize, big: usize, dead: bool) {
    fill_failing(channel, queue, n, big, dead, None).await
}

async fn fill_failing(
    channel: &Channel,
    queue: &str,
    n: usize,
    big: usize,
    dead: bool,
    trace: Option<&str>,
) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), durable, FieldTable::default())
        .await
        .unwrap();
    let work = format!("{queue}.work");
    if dead {
        channel
            .queue_declare(work.as_str().into(), durable, expiring_into(queue))
            .await
            .unwrap();
    }
    let to = if dead { work.as_str() } else { queue };
    let big_body = vec![0x5a_u8; 16 * 1024 * 1024];
    let every = n.checked_div(big).unwrap_or(usize::MAX).max(1);
    let messages = (0..n).map(|i| {
        let body = invoice_body(i);
        let mut props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_message_id(format!("m-{i}").into());
        if let Some(trace) = trace {
            props = props.with_headers(spring_error(trace, i));
        }
        let payload = if i % every == every / 2 {
            big_body.clone()
        } else {
            body
        };
        (payload, props)
    });
    publish_all(channel, "", to, messages).await;
    if dead {
        // Dead-lettering is the broker's own work, after the publishes are confirmed.
        let start = Instant::now();
        while ready(channel, queue).await < n as u32 {
            assert!(
                start.elapsed() < Duration::from_secs(600),
                "{queue} got {} of {n} dead letters",
                ready(channel, queue).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        channel
            .queue_delete(work.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

/// A channel with `prefetch` consuming `queue`, and when the consuming began.
async fn consume(
    connection: &Connection,
    queue: &str,
    prefetch: u16,
) -> (Channel, lapin::Consumer, Instant) {
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let start = Instant::now();
    let consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    (channel, consumer, start)
}

/// The baseline: consume and ack each message, nothing else.
async fn raw_consumer(connection: &Connection, queue: &str, n: usize, prefetch: u16) -> Duration {
    let (channel, mut consumer, start) = consume(connection, queue, prefetch).await;
    // Acked as Lazarus acks a batch: every 500 at once (`multiple`), and the rest at the end.
    let multiple = BasicAckOptions { multiple: true };
    let mut last = None;
    for i in 1..=n {
        let delivery = consumer.next().await.unwrap().unwrap();
        if i % 500 == 0 {
            delivery.ack(multiple).await.unwrap();
            last = None;
        } else {
            last = Some(delivery);
        }
    }
    if let Some(delivery) = last {
        delivery.ack(multiple).await.unwrap();
    }
    let elapsed = start.elapsed();
    channel.close(200, "done".into()).await.unwrap();
    elapsed
}

/// A table to append deliveries to, with no index: the floor consumer's store.
enum Appender {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// What the floor consumer keeps of a delivery: its routing key, exchange and body.
type Landed = (String, String, Vec<u8>);

impl Appender {
    /// Creates the archive `target` names (WAL and `synchronous=FULL` on SQLite, as Lazarus
    /// opens it) with one table in it.
    async fn open(target: &Target) -> Appender {
        use sqlx::migrate::MigrateDatabase;
        use sqlx::{ConnectOptions, Connection, Executor};
        const TABLE: &str = "CREATE TABLE landed (routing_key TEXT, exchange TEXT, body BYTEA)";
        match &target.file {
            Some(_) => {
                let mut conn = target
                    .url
                    .parse::<sqlx::sqlite::SqliteConnectOptions>()
                    .unwrap()
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                    .connect()
                    .await
                    .unwrap();
                conn.execute(TABLE).await.unwrap();
                Appender::Sqlite(conn)
            }
            None => {
                sqlx::Postgres::create_database(&target.url).await.unwrap();
                let mut conn = sqlx::PgConnection::connect(&target.url).await.unwrap();
                conn.execute(TABLE).await.unwrap();
                Appender::Postgres(conn)
            }
        }
    }

    /// Appends `rows` in one transaction and returns once it is committed.
    async fn append(&mut self, rows: &[Landed]) {
        use sqlx::Connection;
        // The same statement on either backend, with its own placeholders.
        let sql = |placeholder: fn(usize) -> String| {
            let values: Vec<String> = (0..rows.len())
                .map(|i| {
                    let [a, b, c] = [3 * i, 3 * i + 1, 3 * i + 2].map(placeholder);
                    format!("({a}, {b}, {c})")
                })
                .collect();
            format!("INSERT INTO landed VALUES {}", values.join(", "))
        };
        macro_rules! append_on {
            ($conn:expr, $sql:expr) => {{
                let sql = $sql;
                let mut tx = $conn.begin().await.unwrap();
                let mut q = sqlx::query(&sql);
                for (key, exchange, body) in rows {
                    q = q.bind(key).bind(exchange).bind(body);
                }
                q.execute(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
            }};
        }
        match self {
            Appender::Sqlite(conn) => append_on!(conn, sql(|_| "?".into())),
            Appender::Postgres(conn) => append_on!(conn, sql(|i| format!("${}", i + 1))),
        }
    }
}

/// The floor under any consumer that archives before it acks (BENCH_FLOOR=1): the raw
/// consumer, but each batch of 500 is first appended to `target` — routing key, exchange and
/// body, into a table with no index, in one committed transaction — and acked (`multiple`)
/// once that commit returns. A batch is stored by a task of its own while the next is read,
/// as Lazarus stores. It decodes nothing and keeps no properties or headers: what it reaches
/// bounds what any archive-then-ack design (a two-stage ingest that appends now and indexes
/// later, say) could reach on this machine.
async fn floor_consumer(
    connection: &Connection,
    queue: &str,
    n: usize,
    prefetch: u16,
    target: &Target,
) -> Duration {
    let mut appender = Appender::open(target).await;
    let (channel, mut consumer, start) = consume(connection, queue, prefetch).await;
    // One batch stored, one waiting for it, one filling: prefetch 2,000 holds them.
    let (batches, mut to_store) = tokio::sync::mpsc::channel::<(Vec<Landed>, Delivery)>(1);
    let store = tokio::spawn(async move {
        while let Some((rows, last)) = to_store.recv().await {
            appender.append(&rows).await;
            last.ack(BasicAckOptions { multiple: true }).await.unwrap();
        }
    });
    let mut rows = Vec::with_capacity(500);
    for i in 1..=n {
        let delivery = consumer.next().await.unwrap().unwrap();
        rows.push((
            delivery.routing_key.to_string(),
            delivery.exchange.to_string(),
            delivery.data.clone(),
        ));
        if i % 500 == 0 || i == n {
            let batch = std::mem::replace(&mut rows, Vec::with_capacity(500));
            batches.send((batch, delivery)).await.unwrap();
        }
    }
    drop(batches);
    store.await.unwrap();
    let elapsed = start.elapsed();
    channel.close(200, "done".into()).await.unwrap();
    elapsed
}

/// Has every message of `queue` delivered to a consumer that acks none and closes its
/// channel: the broker puts them back flagged redelivered, as after a lost connection or a
/// broker crash.
async fn redeliver_all(connection: &Connection, queue: &str, n: usize) {
    let channel = connection.create_channel().await.unwrap();
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
        consumer.next().await.unwrap().unwrap();
    }
    channel.close(200, "requeue".into()).await.unwrap();
}

/// Ready messages of a queue.
async fn ready(channel: &Channel, queue: &str) -> u32 {
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

/// The bench's own connection to the archive Lazarus writes.
enum Watch {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// The archive one run of the binary drains into: a fresh, empty one (a file in a temporary
/// directory, or a database of its own on the PostgreSQL server, created by Lazarus and
/// dropped by `remove`), or the pages bench's filled archive ([`Target::filled`]), kept.
struct Target {
    backend: &'static str,
    url: String,
    /// The SQLite file (`None`: PostgreSQL).
    file: Option<std::path::PathBuf>,
    /// The temporary directory a fresh SQLite file is in, removed with it.
    _dir: Option<tempfile::TempDir>,
    /// The pages bench's archive: what a run adds is purged by `remove`, the rest kept.
    kept: bool,
}

impl Target {
    fn new(backend: &str, run: usize) -> Target {
        if backend == "sqlite" {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("bench.db");
            Target {
                backend: "SQLite",
                url: format!("sqlite://{}", file.display()),
                file: Some(file),
                _dir: Some(dir),
                kept: false,
            }
        } else {
            let url = postgres_url(&format!(
                "lazarus_bench_ingest_{}_{run}",
                std::process::id()
            ));
            Target {
                backend: "PostgreSQL",
                url,
                file: None,
                _dir: None,
                kept: false,
            }
        }
    }

    /// The archive `BENCH_ROWS=<rows> cargo bench --bench pages` fills and keeps for this
    /// backend (its 30 days of invoices, orders and notifications; `BENCH_DB` as there).
    fn filled(backend: &str, rows: usize) -> Target {
        if backend == "sqlite" {
            let file: std::path::PathBuf = pages_archive_file(rows).into();
            Target {
                backend: "SQLite",
                url: format!("sqlite://{}", file.display()),
                file: Some(file),
                _dir: None,
                kept: true,
            }
        } else {
            Target {
                backend: "PostgreSQL",
                url: pages_archive_url(rows),
                file: None,
                _dir: None,
                kept: true,
            }
        }
    }

    /// Messages archived so far, read from the totals ingest keeps (0 while the archive does
    /// not exist yet). The connection is kept once a read succeeds.
    async fn archived(&self, conn: &mut Option<Watch>) -> i64 {
        self.count(
            conn,
            "SELECT CAST(COALESCE(SUM(messages), 0) AS BIGINT) FROM queue_reason_counts",
        )
        .await
    }

    /// Messages archived whose search entries the indexer has not written yet (0 for a
    /// binary from before append-then-index, whose archive has no such table).
    async fn waiting_to_index(&self, conn: &mut Option<Watch>) -> i64 {
        self.count(conn, "SELECT count(*) FROM index_pending").await
    }

    /// A count `sql` reads (0 while the archive does not exist yet or the read fails).
    async fn count(&self, conn: &mut Option<Watch>, sql: &str) -> i64 {
        use sqlx::{ConnectOptions, Connection};
        if conn.is_none() {
            *conn = match &self.file {
                Some(path) => {
                    // Read-only, and never before Lazarus has created the file.
                    if !path.exists() {
                        return 0;
                    }
                    sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(path)
                        .read_only(true)
                        .connect()
                        .await
                        .ok()
                        .map(Watch::Sqlite)
                }
                None => sqlx::PgConnection::connect(&self.url)
                    .await
                    .ok()
                    .map(Watch::Postgres),
            };
        }
        let read = match conn.as_mut() {
            None => return 0,
            Some(Watch::Sqlite(c)) => sqlx::query_scalar::<_, i64>(sql).fetch_one(c).await,
            Some(Watch::Postgres(c)) => sqlx::query_scalar::<_, i64>(sql).fetch_one(c).await,
        };
        read.unwrap_or_else(|_| {
            *conn = None;
            0
        })
    }

    /// The archive as the library opens it (to purge a run from a kept one).
    async fn open(&self) -> std::sync::Arc<dyn Archive> {
        match self.file {
            Some(_) => std::sync::Arc::new(SqliteArchive::open(&self.url).await.unwrap()),
            None => std::sync::Arc::new(PostgresArchive::open(&self.url).await.unwrap()),
        }
    }

    /// Drops a fresh archive; from a kept one, deletes what the run drained from `queue`
    /// (a purge, as a user would) and gives the space back as retention does after its
    /// deletes, so that it holds what it held before and the next drain appends as into the
    /// filled archive. (Left on SQLite's free list, the next drain reused those pages and
    /// wrote half as much again: 0.63–0.68 of the empty archive's rate at 1M, against 0.75
    /// once given back; docs/lab-notebook.md.)
    async fn remove(self, queue: &str) {
        use sqlx::migrate::MigrateDatabase;
        if self.kept {
            let filter = MessageFilter {
                queue: Some(queue.to_owned()),
                ..Default::default()
            };
            let begun = Instant::now();
            let archive = self.open().await;
            let purged = archive
                .purge(
                    &Selection::Filter(Box::new(filter)),
                    "bench",
                    "the ingest bench's drain into a filled archive",
                    &Actor::system("bench"),
                )
                .await
                .unwrap();
            let pages = archive.reclaim_space().await.unwrap();
            println!(
                "purged the {purged} messages drained into the filled {} archive and gave back \
                 {pages} pages in {:.1} s",
                self.backend,
                begun.elapsed().as_secs_f64()
            );
        } else if self.file.is_none() {
            sqlx::Postgres::force_drop_database(&self.url)
                .await
                .unwrap();
        }
    }
}

/// How many messages the kept archive `target` holds, checked to be about `rows` (the pages
/// bench fills it; a run's drain is purged after it, so it stays at its fill). Its per-minute
/// counts are pruned first, as a running instance keeps them: a first `lazarus serve` on a
/// fresh fill would otherwise spend its first seconds forgetting 30 days of them.
async fn holding(target: &Target, rows: usize) -> i64 {
    target.open().await.prune_minutes().await.unwrap();
    let mut conn = None;
    let held = target.archived(&mut conn).await;
    assert!(
        held as usize >= rows,
        "the {} archive at {} holds {held} messages, not {rows}: fill it first with \
         `BENCH_ROWS={rows} BENCH_BACKENDS=… cargo bench --bench pages`",
        target.backend,
        target.url
    );
    held
}

fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// When a run of the binary is over.
enum Until<'a> {
    /// Its archive counts this many messages.
    Archived(i64),
    /// The queue has no ready message left (up to a prefetch of them may still be in flight).
    Drained(&'a Channel),
}

/// Runs the release binary into `target` until it is done: (time, peak RSS in MiB).
async fn lazarus(target: &Target, queue: &str, until: Until<'_>, prefetch: u16) -> Drained {
    lazarus_binary(
        env!("CARGO_BIN_EXE_lazarus"),
        target,
        queue,
        until,
        (prefetch, 0),
    )
    .await
}

/// [`lazarus`] with the binary at `binary`, and `clients` page clients asking it for pages
/// from the moment it listens until the drain is over ([`incident_pages`]).
async fn lazarus_binary(
    binary: &str,
    target: &Target,
    queue: &str,
    until: Until<'_>,
    (prefetch, clients): (u16, usize),
) -> Drained {
    let mut conn = None;
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let start = Instant::now();
    let mut child = Command::new(binary)
        .args([
            "serve",
            "--queue",
            queue,
            "--listen",
            &listen.to_string(),
            "--prefetch",
            &prefetch.to_string(),
        ])
        .arg("--database-url")
        .arg(&target.url)
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let page_clients = (clients > 0).then(|| PageClients::start(listen, clients, incident_pages));
    let mut peak: f64 = 0.0;
    loop {
        let done = match until {
            Until::Archived(n) => target.archived(&mut conn).await >= n,
            Until::Drained(channel) => ready(channel, queue).await == 0,
        };
        if done {
            break;
        }
        peak = peak.max(peak_rss_mib(pid).unwrap_or(0.0));
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "lazarus did not drain the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    let pages = match page_clients {
        Some(clients) => Some(clients.finish().await),
        None => None,
    };
    // Drained and acked; then until every message is searchable (append, then index).
    while target.waiting_to_index(&mut conn).await > 0 {
        peak = peak.max(peak_rss_mib(pid).unwrap_or(0.0));
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "lazarus did not index what it drained"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let indexed_after = start.elapsed() - elapsed;
    peak = peak.max(peak_rss_mib(pid).unwrap_or(0.0));
    drop(conn);
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    child.wait().await.unwrap();
    Drained {
        elapsed,
        peak,
        indexed_after,
        pages,
    }
}

/// A timed drain by Lazarus: until the archive counts every message, the peak RSS
/// meanwhile, and how much later every message was searchable.
struct Drained {
    elapsed: Duration,
    peak: f64,
    indexed_after: Duration,
    /// What the page clients saw during the drain, if there were any.
    pages: Option<PageLoad>,
}

/// Who drains a backlog.
#[derive(Clone, Copy)]
enum Contender<'a> {
    /// The raw consumer: ack only.
    Raw,
    /// Lazarus into a fresh archive on this backend.
    Lazarus(&'a str),
    /// The BENCH_BASELINE binary (at this path) into a fresh archive on this backend.
    Baseline(&'a str, &'a str),
    /// The floor consumer into a fresh archive on this backend ([`floor_consumer`]).
    Floor(&'a str),
    /// Lazarus into a fresh archive on this backend, with this many page clients asking it
    /// for pages meanwhile (BENCH_PAGE_CLIENTS).
    Loaded(&'a str, usize),
    /// Lazarus into the pages bench's archive of this many messages on this backend
    /// (BENCH_FILLED, [`Target::filled`]).
    Filled(&'a str, usize),
}

/// One timed drain of a backlog: the raw consumer, Lazarus or the floor into one backend.
struct Run {
    round: usize,
    /// `None` for the raw consumer.
    backend: Option<&'static str>,
    /// The floor consumer's run, not Lazarus'.
    floor: bool,
    /// The BENCH_BASELINE binary's run.
    baseline: bool,
    /// A run with page clients: what they saw.
    pages: Option<PageLoad>,
    /// A run into an archive that held this many messages already (BENCH_FILLED).
    filled: Option<i64>,
    big: usize,
    /// What was special about the backlog, for the table.
    note: &'static str,
    /// Dead-lettered by the broker (with `x-death`), not published straight into the DLQ.
    dead: bool,
    elapsed: Duration,
    rss: Option<f64>,
    /// How long after the drain every message was searchable (the indexer caught up).
    indexed_after: Option<Duration>,
}

/// Fills a queue of its own with `n` messages (`big` of them 16 MiB; failing with `trace`,
/// [`spring_error`]), drains it with the contender (into a fresh archive for Lazarus and the
/// floor), and removes both.
#[allow(clippy::too_many_arguments)]
async fn drain(
    connection: &Connection,
    channel: &Channel,
    queue: String,
    contender: Contender<'_>,
    (n, prefetch): (usize, u16),
    big: usize,
    (round, dead): (usize, bool),
    trace: Option<&str>,
) -> Run {
    let how = if dead { "dead-lettered" } else { "published" };
    println!("filling {queue} with {n} 1 KB messages and {big} of 16 MiB, {how}...");
    fill_failing(channel, &queue, n, big, dead, trace).await;
    let mut run = Run {
        round,
        backend: None,
        floor: false,
        baseline: false,
        pages: None,
        filled: None,
        big,
        note: "",
        dead,
        elapsed: Duration::ZERO,
        rss: None,
        indexed_after: None,
    };
    match contender {
        Contender::Raw => run.elapsed = raw_consumer(connection, &queue, n, prefetch).await,
        Contender::Lazarus(name)
        | Contender::Floor(name)
        | Contender::Baseline(name, _)
        | Contender::Loaded(name, _)
        | Contender::Filled(name, _) => {
            let floor = matches!(contender, Contender::Floor(_));
            let baseline = match contender {
                Contender::Baseline(_, path) => Some(path),
                _ => None,
            };
            let clients = match contender {
                Contender::Loaded(_, clients) => clients,
                _ => 0,
            };
            let target = match contender {
                Contender::Filled(_, rows) => Target::filled(name, rows),
                _ => Target::new(
                    name,
                    round * 32
                        + usize::from(big > 0)
                        + 2 * usize::from(dead)
                        + 4 * usize::from(floor)
                        + 8 * usize::from(baseline.is_some())
                        + 16 * usize::from(clients > 0),
                ),
            };
            let before = match contender {
                Contender::Filled(_, rows) => Some(holding(&target, rows).await),
                _ => None,
            };
            if floor {
                run.elapsed = floor_consumer(connection, &queue, n, prefetch, &target).await;
            } else {
                let binary = baseline.unwrap_or(env!("CARGO_BIN_EXE_lazarus"));
                let until = Until::Archived(before.unwrap_or(0) + n as i64);
                let sizes = (prefetch, clients);
                let drained = lazarus_binary(binary, &target, &queue, until, sizes).await;
                (run.elapsed, run.rss) = (drained.elapsed, Some(drained.peak));
                run.indexed_after = Some(drained.indexed_after);
                run.pages = drained.pages;
                run.baseline = baseline.is_some();
                run.filled = before;
            }
            (run.backend, run.floor) = (Some(target.backend), floor);
            target.remove(&queue).await;
        }
    }
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    run
}

/// A backlog of `n` that comes back redelivered, drained by Lazarus into an empty archive
/// (every message looked up, none found), then the same backlog again, redelivered, into the
/// archive that now holds it (every message looked up and found: nothing is stored).
async fn redelivered(
    connection: &Connection,
    channel: &Channel,
    queue: String,
    backend: &str,
    (n, prefetch): (usize, u16),
) -> [Run; 2] {
    let target = Target::new(backend, 1000);
    let timed = |note, drained: Drained| Run {
        round: 0,
        backend: Some(target.backend),
        floor: false,
        baseline: false,
        pages: None,
        filled: None,
        big: 0,
        note,
        dead: true,
        elapsed: drained.elapsed,
        rss: Some(drained.peak),
        indexed_after: Some(drained.indexed_after),
    };
    println!("filling {queue} with {n} 1 KB messages, all redelivered...");
    fill(channel, &queue, n, 0, true).await;
    redeliver_all(connection, &queue, n).await;
    let first = lazarus(&target, &queue, Until::Archived(n as i64), prefetch).await;
    let first = timed("every message redelivered, none archived", first);
    println!("filling {queue} with the same {n} messages, all redelivered...");
    fill(channel, &queue, n, 0, true).await;
    redeliver_all(connection, &queue, n).await;
    let again = lazarus(&target, &queue, Until::Drained(channel), prefetch).await;
    let again = timed("every message redelivered, all archived", again);
    let mut conn = None;
    println!(
        "{} messages archived after the second drain",
        target.archived(&mut conn).await
    );
    drop(conn);
    target.remove(&queue).await;
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    [first, again]
}

#[tokio::main]
async fn main() {
    let n = env_or("BENCH_MESSAGES", 100_000);
    let big = env_or("BENCH_BIG", 3);
    let prefetch = env_or("BENCH_PREFETCH", 2000) as u16;
    let rounds = env_or("BENCH_ROUNDS", 3).max(1);
    let redeliveries = env_or("BENCH_REDELIVERED", 1) > 0;
    let floor = env_or("BENCH_FLOOR", 0) > 0;
    let clients = env_or("BENCH_PAGE_CLIENTS", 0);
    let filled = env_or("BENCH_FILLED", 0);
    let modes: &[bool] = if env_or("BENCH_DIRECT", 1) > 0 {
        &[true, false]
    } else {
        &[true]
    };
    let backends = backend_names();
    let baseline = std::env::var("BENCH_BASELINE").ok();
    let trace = printed_trace();
    let trace = trace.as_deref();
    let (connection, channel) = confirm_channel(&amqp_url()).await;
    let tag = std::process::id();
    let sizes = (n, prefetch);

    // The raw consumer and each backend take turns, round after round (the machine is
    // shared: a slow moment then weighs on one round, not on one contender).
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for &dead in modes {
            let queue = format!("bench.{tag}.raw.{round}.{dead}");
            let raw = Contender::Raw;
            let at = (round, dead);
            runs.push(drain(&connection, &channel, queue, raw, sizes, 0, at, trace).await);
            for backend in &backends {
                // This binary and the baseline in turn, each first every other round.
                let mut contenders = vec![(Contender::Lazarus(backend), "")];
                if let Some(path) = &baseline {
                    contenders.push((Contender::Baseline(backend, path), ".baseline"));
                    if round % 2 == 0 {
                        contenders.reverse();
                    }
                }
                for (b, which) in contenders {
                    let queue = format!("bench.{tag}.{backend}{which}.{round}.{dead}");
                    runs.push(drain(&connection, &channel, queue, b, sizes, 0, at, trace).await);
                }
                if floor {
                    let queue = format!("bench.{tag}.{backend}.floor.{round}.{dead}");
                    let b = Contender::Floor(backend);
                    let run = drain(&connection, &channel, queue, b, sizes, 0, at, trace);
                    runs.push(run.await);
                }
                if clients > 0 {
                    let queue = format!("bench.{tag}.{backend}.loaded.{round}.{dead}");
                    let b = Contender::Loaded(backend, clients);
                    let run = drain(&connection, &channel, queue, b, sizes, 0, at, trace);
                    runs.push(run.await);
                }
                if filled > 0 {
                    let queue = format!("bench.{tag}.{backend}.filled.{round}.{dead}");
                    let b = Contender::Filled(backend, filled);
                    let run = drain(&connection, &channel, queue, b, sizes, 0, at, trace);
                    runs.push(run.await);
                }
            }
        }
    }
    if big > 0 {
        for backend in &backends {
            let queue = format!("bench.{tag}.{backend}.big");
            let b = Contender::Lazarus(backend);
            let run = drain(
                &connection,
                &channel,
                queue,
                b,
                sizes,
                big,
                (0, true),
                trace,
            );
            runs.push(run.await);
        }
    }
    if redeliveries {
        for backend in &backends {
            let queue = format!("bench.{tag}.{backend}.redelivered");
            runs.extend(redelivered(&connection, &channel, queue, backend, sizes).await);
        }
    }

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!();
    println!(
        "| run (prefetch {prefetch}) | round | messages | seconds | msg/s | peak RSS | all searchable |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &runs {
        let how = if r.dead {
            "dead letters"
        } else {
            "published straight into the DLQ"
        };
        let name = match r.backend {
            None => format!("raw lapin consumer, ack only, {how}"),
            Some(b) if r.floor => format!("floor: append-only consumer → {b}, {how}"),
            Some(b) if r.baseline => format!("baseline lazarus → {b}, {how}"),
            Some(b) if r.pages.is_some() => {
                format!("lazarus → {b}, {how}, {clients} page clients meanwhile")
            }
            Some(b) if r.filled.is_some() => {
                format!("lazarus → {b} holding {} already, {how}", r.filled.unwrap())
            }
            Some(b) if r.big > 0 => format!("lazarus → {b}, {} × 16 MiB among them", r.big),
            Some(b) if !r.note.is_empty() => format!("lazarus → {b}, {}", r.note),
            Some(b) => format!("lazarus → {b}, {how}"),
        };
        println!(
            "| {name} | {} | {n} | {:.2} | {:.0} | {} | {} |",
            if r.round > 0 {
                r.round.to_string()
            } else {
                "-".into()
            },
            r.elapsed.as_secs_f64(),
            rate(r.elapsed),
            r.rss.map_or("-".into(), |m| format!("{m:.0} MiB")),
            r.indexed_after
                .map_or("-".into(), |d| format!("{:.1} s later", d.as_secs_f64()))
        );
    }
    println!();
    let rates_of = |backend: Option<&str>, dead: bool, floor: bool, baseline: bool| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.round > 0 && r.backend == backend && r.dead == dead && r.floor == floor)
            .filter(|r| r.baseline == baseline && r.pages.is_none() && r.filled.is_none())
            .map(|r| rate(r.elapsed))
            .collect()
    };
    let rates =
        |backend: Option<&str>, dead: bool, floor: bool| rates_of(backend, dead, floor, false);
    for &dead in modes {
        let how = if dead {
            "dead letters (x-death)"
        } else {
            "published straight into the DLQ"
        };
        let raw = rates(None, dead, false);
        println!("{how}: raw median {:.0} msg/s", median(raw.clone()));
        for backend in ["SQLite", "PostgreSQL"] {
            let own = rates(Some(backend), dead, false);
            if own.is_empty() {
                continue;
            }
            let below = rates(Some(backend), dead, true);
            if !below.is_empty() {
                println!(
                    "  floor (append-only consumer) → {backend}: median {:.0} msg/s, ratio of \
                     medians {:.2}",
                    median(below.clone()),
                    median(below) / median(raw.clone())
                );
            }
            let per_round: Vec<String> = own
                .iter()
                .zip(&raw)
                .map(|(l, r)| format!("{:.2}", l / r))
                .collect();
            let peak = runs
                .iter()
                .filter(|r| r.backend == Some(backend))
                .filter_map(|r| r.rss)
                .fold(0.0, f64::max);
            let searchable = runs
                .iter()
                .filter(|r| r.backend == Some(backend) && !r.baseline && r.pages.is_none())
                .filter(|r| r.filled.is_none())
                .filter_map(|r| r.indexed_after)
                .max()
                .unwrap_or_default();
            println!(
                "  lazarus → {backend}: median {:.0} msg/s, ratio of medians {:.2} (target ≥ 0.9), \
                 per round {}; peak RSS {peak:.0} MiB (target < 150 MiB); every message \
                 searchable at most {:.1} s after the drain (target ≤ 10 s)",
                median(own.clone()),
                median(own.clone()) / median(raw.clone()),
                per_round.join(", "),
                searchable.as_secs_f64()
            );
            loaded_summary(&runs, backend, dead, &own, rate);
            filled_summary(&runs, backend, dead, &own, rate);
            let base = rates_of(Some(backend), dead, false, true);
            if !base.is_empty() {
                let per_round: Vec<String> = own
                    .iter()
                    .zip(&base)
                    .map(|(l, b)| format!("{:.2}", l / b))
                    .collect();
                println!(
                    "  baseline lazarus → {backend}: median {:.0} msg/s; this binary over it: \
                     ratio of medians {:.2}, per round {}",
                    median(base.clone()),
                    median(own) / median(base),
                    per_round.join(", ")
                );
            }
        }
    }
}

/// The filled archive's line of the summary: the drains into the archive that held
/// BENCH_FILLED messages against those into an empty one (`empty`, the same backend's rates
/// round by round).
fn filled_summary(
    runs: &[Run],
    backend: &str,
    dead: bool,
    empty: &[f64],
    rate: impl Fn(Duration) -> f64,
) {
    let into: Vec<(i64, f64)> = runs
        .iter()
        .filter(|r| r.backend == Some(backend) && r.dead == dead)
        .filter_map(|r| Some((r.filled?, rate(r.elapsed))))
        .collect();
    let Some(&(held, _)) = into.first() else {
        return;
    };
    let rates: Vec<f64> = into.iter().map(|(_, r)| *r).collect();
    let per_round: Vec<String> = rates
        .iter()
        .zip(empty)
        .map(|(f, e)| format!("{:.2}", f / e))
        .collect();
    let searchable = runs
        .iter()
        .filter(|r| r.backend == Some(backend) && r.dead == dead && r.filled.is_some())
        .filter_map(|r| r.indexed_after)
        .max()
        .unwrap_or_default();
    println!(
        "  lazarus → {backend} holding {held} already: median {:.0} msg/s, over the empty \
         archive's: ratio of medians {:.2} (target ≥ 0.8), per round {}; every message \
         searchable at most {:.1} s after the drain",
        median(rates.clone()),
        median(rates) / median(empty.to_vec()),
        per_round.join(", "),
        searchable.as_secs_f64()
    );
}

/// The page clients' line of the summary: the drains with page clients against those without
/// (`unloaded`, the same backend's rates round by round), and the pages' times meanwhile.
fn loaded_summary(
    runs: &[Run],
    backend: &str,
    dead: bool,
    unloaded: &[f64],
    rate: impl Fn(Duration) -> f64,
) {
    let loaded: Vec<&Run> = runs
        .iter()
        .filter(|r| r.backend == Some(backend) && r.dead == dead && r.pages.is_some())
        .collect();
    if loaded.is_empty() {
        return;
    }
    let rates: Vec<f64> = loaded.iter().map(|r| rate(r.elapsed)).collect();
    let per_round: Vec<String> = rates
        .iter()
        .zip(unloaded)
        .map(|(l, u)| format!("{:.2}", l / u))
        .collect();
    let mut all = PageLoad::empty();
    for pages in loaded.iter().filter_map(|r| r.pages.as_ref()) {
        all.add(pages);
    }
    let ms =
        |took: &[Duration], p: f64| percentile(took, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let failed: Vec<String> = all
        .failed
        .iter()
        .map(|(status, n)| format!("{n} answered {status}"))
        .collect();
    println!(
        "  lazarus → {backend} under page clients: median {:.0} msg/s, ratio of medians to the \
         unloaded drains {:.2} (target ≥ 0.7), per round {}; {} pages, p50 {:.1} ms, p95 {:.1} \
         ms (target < 100 ms), p99 {:.1} ms; {}",
        median(rates.clone()),
        median(rates) / median(unloaded.to_vec()),
        per_round.join(", "),
        all.took.len(),
        ms(&all.took, 50.0),
        ms(&all.took, 95.0),
        ms(&all.took, 99.0),
        if failed.is_empty() {
            "every page answered".to_owned()
        } else {
            failed.join(", ")
        }
    );
    for (page, took) in &all.by_page {
        println!(
            "    {page}: {} asked, p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
            took.len(),
            ms(took, 50.0),
            ms(took, 95.0),
            ms(took, 99.0)
        );
    }
}

//! Page benchmark at scale: fills an archive with 1,000,000 realistic dead letters (directly,
//! through the archive, no broker), then times the pages through the router (server time,
//! no socket) next to the raw SQL behind each, in the same run, on SQLite and PostgreSQL.
//!
//! Then it times the background reindex that CJK search brought, and the SQLite word list
//! that `prefix*` searches expand with, built from the index (BENCH_REINDEX=0 skips both).
//!
//! `cargo bench --bench pages` (env: BENCH_ROWS=1000000, BENCH_RUNS=50,
//! BENCH_BACKENDS=sqlite,postgres, BENCH_DB=target/bench/pages-<rows>.db,
//! BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/ — the server; the bench uses its own
//! database `lazarus_bench_pages_<rows>` there; BENCH_CASES=overview,group — only the cases
//! whose names hold one of these words). Each archive is reused when it already holds the
//! rows; delete the file or drop the database after a schema change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use lazarus::archive::{
    Actor, Archive, IncomingMessage, IngestRules, MessageFilter, MessageStatus, PageRequest,
    PostgresArchive, PreparedMessage, Selection, SqliteArchive, StatusFilter,
};
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
use lazarus::web::{router, AppState};
use time::OffsetDateTime;
use tower::ServiceExt;

mod common;
use common::{backend_names, env_or, pages_archive_file, pages_archive_url, text};

const QUEUES: [&str; 3] = ["billing.invoices.dlq", "orders.dlq", "notifications.dlq"];
const ERRORS: [&str; 8] = [
    "NullPointerException: invoice.customer.vatId",
    "TimeoutException: tax service did not answer in 5s",
    "ValidationException: amount must be positive",
    "SQLIntegrityConstraintViolation: duplicate key invoices_pkey",
    "HttpClientErrorException: 400 Bad Request from partner API",
    "JsonParseException: unexpected end of input",
    "IllegalStateException: order already shipped",
    "SmtpException: mailbox unavailable",
];
const CITIES: [&str; 6] = ["Berlin", "Lyon", "Zürich", "Porto", "Kraków", "Oslo"];

/// The i-th of `rows` messages: a mix of queues, reasons and errors, spread over 30 days.
fn message(i: usize, rows: usize, start: OffsetDateTime) -> IncomingMessage {
    let queue = QUEUES[i % 7 % 3];
    let reason = match i % 50 {
        0..=34 => Some("rejected"),
        35..=44 => Some("expired"),
        45..=48 => Some("maxlen"),
        _ => None,
    };
    let mut headers = Table::new();
    if let Some(reason) = reason {
        let work = queue.trim_end_matches(".dlq");
        let mut death = Table::new();
        death.insert("queue", text(work));
        death.insert("reason", text(reason));
        death.insert("count", AmqpValue::LongLongInt(1 + (i % 3) as i64));
        death.insert("exchange", text("events"));
        death.insert(
            "routing-keys",
            AmqpValue::Array(vec![text(&format!("{work}.created"))]),
        );
        death.insert(
            "time",
            AmqpValue::Timestamp((start.unix_timestamp() + (i * 2_592_000 / rows) as i64) as u64),
        );
        headers.insert("x-death", AmqpValue::Array(vec![AmqpValue::Table(death)]));
        headers.insert("x-first-death-queue", text(work));
        headers.insert("x-first-death-reason", text(reason));
        headers.insert("x-first-death-exchange", text("events"));
    }
    if reason == Some("rejected") {
        headers.insert("x-exception-message", text(ERRORS[i % ERRORS.len()]));
    }
    headers.insert("tenant", text(&format!("tenant-{}", i % 40)));
    // One message in ten thousand mentions a chargeback: the selective search.
    let note = if i % 10_000 == 17 {
        "customer filed a chargeback"
    } else {
        "payment pending"
    };
    // One in ten carries a Chinese memo ("payment pending"), one in ten thousand another
    // ("the customer filed a chargeback"): the CJK searches, common and selective.
    let memo = match (i % 10, i % 10_000) {
        (_, 23) => r#","memo":"客户提出拒付""#,
        (3, _) => r#","memo":"支付待处理""#,
        _ => "",
    };
    let body = format!(
        r#"{{"invoice_id":"INV-2026-{i:07}","customer":{{"id":"C-{}","name":"Customer {}","city":"{}"}},"amount":"{}.{:02}","currency":"EUR","note":"{note}","lines":[{{"sku":"SKU-{}","qty":{},"price":"19.90"}},{{"sku":"SKU-{}","qty":1,"price":"4.50"}}],"created_at":"2026-11-{:02}T10:00:00Z"{memo}}}"#,
        i % 9973,
        i % 9973,
        CITIES[i % CITIES.len()],
        10 + i % 990,
        i % 100,
        i % 500,
        1 + i % 4,
        i % 311,
        1 + i % 28
    );
    // A few in every 100,000 as other producers send them: the decoded detail pages.
    let (content_type, body) = match Decoded::of(i) {
        None => ("application/json", body.into_bytes()),
        Some(Decoded::Zlib) => {
            headers.insert("compression", text("application/x-gzip"));
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), Default::default());
            std::io::Write::write_all(&mut z, body.as_bytes()).unwrap();
            ("application/json", z.finish().unwrap())
        }
        Some(Decoded::MessagePack) => ("application/x-msgpack", msgpack(&body)),
        Some(Decoded::Protobuf) => ("application/x-protobuf", protobuf(&body)),
    };
    IncomingMessage {
        broker: "default".into(),
        vhost: String::new(),
        queue: queue.into(),
        exchange: "dlx".into(),
        routing_key: "dead".into(),
        redelivered: false,
        properties: MessageProperties {
            content_type: Some(content_type.into()),
            delivery_mode: Some(2),
            message_id: Some(format!("msg-{i:07}").into()),
            correlation_id: Some(format!("corr-{}", i / 3).into()),
            ..Default::default()
        },
        headers: Some(headers),
        body,
        received_at: start + Duration::from_secs((i * 2_592_000 / rows) as u64),
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

/// Bodies not sent as JSON text: kombu's zlib compression, MessagePack, protobuf.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Decoded {
    Zlib,
    MessagePack,
    Protobuf,
}

impl Decoded {
    /// Which, if any, the i-th message is.
    fn of(i: usize) -> Option<Decoded> {
        match i % 100_000 {
            41 => Some(Decoded::Zlib),
            43 => Some(Decoded::MessagePack),
            47 => Some(Decoded::Protobuf),
            _ => None,
        }
    }

    /// The archive id of one in the middle of `rows` (ids count from 1 in fill order).
    fn middle_id(self, rows: usize) -> usize {
        let base = rows / 2 / 100_000 * 100_000;
        (base..).find(|&i| Decoded::of(i) == Some(self)).unwrap() + 1
    }
}

/// The JSON's top-level fields as a MessagePack map of strings (objects and numbers as their
/// JSON text).
fn msgpack(json: &str) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    let map = value.as_object().unwrap();
    let mut out = vec![0xde, 0, map.len() as u8];
    let str16 = |out: &mut Vec<u8>, s: &str| {
        out.push(0xda);
        out.extend_from_slice(&(s.len() as u16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    for (key, value) in map {
        str16(&mut out, key);
        match value {
            serde_json::Value::String(s) => str16(&mut out, s),
            other => str16(&mut out, &other.to_string()),
        }
    }
    out
}

/// The JSON's top-level fields as protobuf fields 1, 2, … holding their text (no schema).
fn protobuf(json: &str) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut out = Vec::new();
    for (n, (_, value)) in value.as_object().unwrap().iter().enumerate() {
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(((n as u8 + 1) << 3) | 2);
        let mut len = text.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn rules() -> IngestRules {
    IngestRules {
        fields: vec![
            "invoice=/invoice_id".parse().unwrap(),
            "customer=/customer/id".parse().unwrap(),
        ],
        ..Default::default()
    }
}

/// One archive under test: the same pages and the same fill, its own raw SQL.
enum Backend {
    Sqlite(SqliteArchive),
    Postgres(PostgresArchive),
}

impl Backend {
    async fn open(name: &str, rows: usize) -> Backend {
        if name == "sqlite" {
            let path = pages_archive_file(rows);
            std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
            Backend::Sqlite(
                SqliteArchive::open(&format!("sqlite://{path}"))
                    .await
                    .unwrap(),
            )
        } else {
            let url = pages_archive_url(rows);
            Backend::Postgres(PostgresArchive::open(&url).await.unwrap_or_else(|e| {
                panic!("cannot open the PostgreSQL archive (BENCH_POSTGRES_URL): {e}")
            }))
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "SQLite",
            Backend::Postgres(_) => "PostgreSQL",
        }
    }

    fn archive(&self) -> Arc<dyn Archive> {
        match self {
            Backend::Sqlite(a) => Arc::new(a.clone()),
            Backend::Postgres(a) => Arc::new(a.clone()),
        }
    }

    /// Runs one statement (with at most one text bind) and returns its rows' count.
    /// Runs `query` with `bind` (several values NUL-separated); how many rows it found.
    async fn run(&self, query: &str, bind: Option<&str>) -> usize {
        let binds: Vec<&str> = bind.map(|b| b.split('\0').collect()).unwrap_or_default();
        match self {
            Backend::Sqlite(a) => {
                let mut q = sqlx::query(query);
                for b in &binds {
                    q = q.bind(b);
                }
                q.fetch_all(a.pool()).await.unwrap().len()
            }
            Backend::Postgres(a) => {
                // Planned with its values each time, as psql would run it and as the archive
                // runs its list: a cached generic plan cannot know whether a word is rare.
                let mut q = sqlx::query(query).persistent(false);
                for b in &binds {
                    q = q.bind(b);
                }
                q.fetch_all(a.pool()).await.unwrap().len()
            }
        }
    }

    async fn count(&self) -> i64 {
        let (n,): (i64,) = self
            .row("SELECT COUNT(*) FROM messages", &[])
            .await
            .unwrap();
        n
    }

    /// The first row `query` returns with `binds`, if any.
    async fn row<T>(&self, query: &str, binds: &[&str]) -> Option<T>
    where
        T: Send
            + Unpin
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        match self {
            Backend::Sqlite(a) => {
                let mut q = sqlx::query_as(query);
                for b in binds {
                    q = q.bind(*b);
                }
                q.fetch_optional(a.pool()).await.unwrap()
            }
            Backend::Postgres(a) => {
                let mut q = sqlx::query_as(query);
                for b in binds {
                    q = q.bind(*b);
                }
                q.fetch_optional(a.pool()).await.unwrap()
            }
        }
    }

    /// After the fill the planner gets its statistics. On PostgreSQL also VACUUM, as
    /// autovacuum would after a million inserts (the visibility map lets index-only scans
    /// skip the heap).
    async fn settle(&self) {
        match self {
            Backend::Sqlite(a) => {
                sqlx::raw_sql("ANALYZE").execute(a.pool()).await.unwrap();
            }
            Backend::Postgres(a) => {
                // The archive's sessions stop a statement after 30 s; at 10,000,000 messages
                // this takes longer.
                let mut conn = a.pool().acquire().await.unwrap();
                for statement in ["SET statement_timeout = 0", "VACUUM (ANALYZE)"] {
                    sqlx::raw_sql(statement).execute(&mut *conn).await.unwrap();
                }
            }
        }
    }
}

/// The migration that came with CJK search reindexes every message archived before it, in
/// the background: how long that takes for all the rows here, next to reading the same rows
/// raw (the same 500-row batches, properties, headers and body) in the same run.
async fn reindex(backend: &Backend, rows: usize) {
    let reset = "DELETE FROM search_reindex; \
                 INSERT INTO search_reindex (version, next_id, last_id) \
                 SELECT 1, 1, max(id) FROM messages;";
    match backend {
        Backend::Sqlite(a) => drop(sqlx::raw_sql(reset).execute(a.pool()).await.unwrap()),
        Backend::Postgres(a) => drop(sqlx::raw_sql(reset).execute(a.pool()).await.unwrap()),
    }
    let raw = match backend {
        Backend::Sqlite(_) => {
            "SELECT m.properties, m.headers, b.body FROM messages m \
             JOIN message_bodies b ON b.message_id = m.id \
             WHERE m.id BETWEEN CAST(?1 AS INTEGER) AND CAST(?1 AS INTEGER) + 499"
        }
        Backend::Postgres(_) => {
            "SELECT m.properties, m.headers, b.body FROM messages m \
             JOIN message_bodies b ON b.message_id = m.id \
             WHERE m.id BETWEEN $1::bigint AND $1::bigint + 499"
        }
    };
    let begun = Instant::now();
    let mut read = 0;
    for first in (1..=rows).step_by(500) {
        read += backend.run(raw, Some(&first.to_string())).await;
    }
    let raw_time = begun.elapsed();
    assert_eq!(read, rows);

    let archive = backend.archive();
    let rules = rules();
    let begun = Instant::now();
    let mut rewritten = 0;
    while let Some(progress) = archive.reindex_batch(&rules, 500).await.unwrap() {
        rewritten += progress.rewritten;
    }
    let took = begun.elapsed();
    println!(
        "| reindex {} | {rows} messages | {:.1} s | {rewritten} rewritten | raw read {:.1} s | {:.1}× raw |",
        backend.name(),
        took.as_secs_f64(),
        raw_time.as_secs_f64(),
        took.as_secs_f64() / raw_time.as_secs_f64()
    );
}

/// SQLite's word list (the `search_terms` a prefix* expands with) as migration 0015 builds it
/// for an archive made before it, from the index: how long that takes at this size, next to
/// reading every word and its count from the index alone (what the migration reads).
async fn word_list(backend: &Backend) {
    let Backend::Sqlite(a) = backend else {
        return;
    };
    let mut conn = a.pool().acquire().await.unwrap();
    sqlx::raw_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_terms \
         USING fts5vocab(main, messages_fts, row)",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let begun = Instant::now();
    let words: i64 = sqlx::query_scalar("SELECT count(*) FROM temp.bench_terms")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let raw_time = begun.elapsed();
    let begun = Instant::now();
    let migration = include_str!("../migrations/sqlite/0015_search_terms.sql").replace(
        "CREATE TABLE search_terms",
        "CREATE TABLE IF NOT EXISTS search_terms",
    );
    sqlx::raw_sql(&format!("DELETE FROM search_terms; {migration}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let took = begun.elapsed();
    println!(
        "| word list SQLite (migration 0015) | {words} words | {:.1} s | read from the index alone {:.1} s | {:.1}× raw |",
        took.as_secs_f64(),
        raw_time.as_secs_f64(),
        took.as_secs_f64() / raw_time.as_secs_f64()
    );
}

/// Fills every archive that is still empty with the same messages, batch by batch: each
/// batch is prepared once and stored into them all at once (ingest's own `store_batch`,
/// 5,000 messages a batch). Archives that hold the rows already are reused.
async fn fill(backends: &[Backend], rows: usize) {
    let mut empty = Vec::new();
    for b in backends {
        // As a running instance keeps them (the fill writes 30 days of them).
        b.archive().prune_minutes().await.unwrap();
        let have = b.count().await;
        if have as usize == rows {
            println!("{}: reusing the archive with {rows} messages", b.name());
            continue;
        }
        assert_eq!(
            have,
            0,
            "the {} archive holds {have} messages, not {rows}: delete it",
            b.name()
        );
        empty.push(b);
    }
    if empty.is_empty() {
        return;
    }
    let archives: Vec<Arc<dyn Archive>> = empty.iter().map(|b| b.archive()).collect();
    let start = OffsetDateTime::now_utc() - Duration::from_secs(2_592_000);
    let rules = rules();
    let begun = Instant::now();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(5_000) {
        let batch: Vec<PreparedMessage> = chunk
            .iter()
            .map(|&i| PreparedMessage::with_rules(message(i, rows, start), &rules))
            .collect();
        let stored = futures_util::future::join_all(archives.iter().map(|a| a.store_batch(&batch)));
        for outcome in stored.await {
            assert_eq!(outcome.unwrap().inserted as usize, batch.len());
        }
    }
    let filled = begun.elapsed();
    for b in &empty {
        b.archive().prune_minutes().await.unwrap();
        b.settle().await;
    }
    let names: Vec<&str> = empty.iter().map(|b| b.name()).collect();
    println!(
        "filled {} with {rows} messages in {:.0} s, settled (ANALYZE) in {:.0} s",
        names.join(" and "),
        filled.as_secs_f64(),
        (begun.elapsed() - filled).as_secs_f64()
    );
}

/// The failure group whose open messages a case lists: after a hotfix most of it is resolved.
const GROUP_QUEUE: &str = "billing.invoices";
const GROUP_ERROR: &str = "NullPointerException: invoice.customer.vatId";

/// In a case's page and raw SQL, the group's id and its key's values (first-death queue,
/// reason, cause, DLQ), as each archive numbers them ([`GroupLink::of`]).
const GROUP_ID: &str = "{group}";
const GROUP_KEY_BINDS: &str = "{group key}";

/// The failure group the overview links to for [`group_filter`]'s messages, in one archive.
struct GroupLink {
    id: String,
    /// The group's key's values, `\0` between them, as [`Backend::run`] binds them.
    key: String,
}

impl GroupLink {
    /// The biggest group of [`GROUP_QUEUE`]'s rejections with [`GROUP_ERROR`] as its example.
    async fn of(backend: &Backend) -> GroupLink {
        const SQL: &str = "SELECT id, queue, reason, cause, dlq FROM failure_groups \
            WHERE queue = $1 AND reason = 'rejected' AND example = $2 \
            ORDER BY messages DESC LIMIT 1";
        type Row = (i64, String, String, String, String);
        let (id, queue, reason, cause, dlq): Row = backend
            .row(SQL, &[GROUP_QUEUE, GROUP_ERROR])
            .await
            .unwrap_or_else(|| panic!("{}: no group of {GROUP_ERROR:?}", backend.name()));
        GroupLink {
            id: id.to_string(),
            key: [queue, reason, cause, dlq].join("\0"),
        }
    }

    /// `text` with this group's id and key in place of [`GROUP_ID`] and [`GROUP_KEY_BINDS`].
    fn fill_in(&self, text: &str) -> String {
        text.replace(GROUP_ID, &self.id)
            .replace(GROUP_KEY_BINDS, &self.key)
    }
}

fn group_filter() -> MessageFilter {
    MessageFilter {
        first_death_queue: Some(GROUP_QUEUE.into()),
        reason: Some("rejected".into()),
        error: Some(GROUP_ERROR.into()),
        ..Default::default()
    }
}

/// Resolves the newest 90 % of one failure group (dismissed, as after a fix), once per
/// archive, so that listing its open messages newest first steps over resolved ones.
async fn resolve_most_of_a_group(backends: &[Backend]) {
    for b in backends {
        let archive = b.archive();
        let page = |filter: MessageFilter, before| {
            let archive = archive.clone();
            async move {
                archive
                    .list_messages(&filter, PageRequest { limit: 500, before })
                    .await
                    .unwrap()
            }
        };
        let dismissed = MessageFilter {
            status: Some(StatusFilter::One(MessageStatus::Dismissed)),
            ..group_filter()
        };
        if !page(dismissed, None).await.messages.is_empty() {
            continue;
        }
        let mut ids = Vec::new();
        let mut before = None;
        loop {
            let found = page(group_filter(), before).await;
            ids.extend(found.messages.iter().map(|m| m.id));
            match found.next_cursor {
                Some(c) => before = Some(c.parse().unwrap()),
                None => break,
            }
        }
        // Newest first: all but the oldest tenth.
        let newest = &ids[..ids.len() * 9 / 10];
        let begun = Instant::now();
        let n = archive
            .dismiss(
                &Selection::Ids(newest.to_vec()),
                "bench",
                "resolved by the pages bench",
                &Actor::system("bench"),
            )
            .await
            .unwrap();
        println!(
            "{}: dismissed {n} of the group's {} messages in {:.1} s (open counts kept)",
            b.name(),
            ids.len(),
            begun.elapsed().as_secs_f64()
        );
    }
}

struct Timing {
    p50: Duration,
    p95: Duration,
}

async fn time<F, Fut>(runs: usize, mut f: F) -> Timing
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f().await; // warm the cache
    let mut samples: Vec<Duration> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f().await;
        samples.push(t.elapsed());
    }
    samples.sort();
    Timing {
        p50: samples[runs / 2],
        p95: samples[(runs * 95 / 100).min(runs - 1)],
    }
}

/// A page, and the raw SQL behind it on each backend (with its bind, if any).
struct Case {
    name: &'static str,
    uri: String,
    target: &'static str,
    sqlite: (&'static str, Option<String>),
    postgres: (&'static str, Option<String>),
    /// Whether the raw SQL finds rows (a filter on a value no message has finds none).
    finds: bool,
}

fn cases(rows: usize) -> Vec<Case> {
    let invoice = format!("INV-2026-{:07}", rows / 2 + 1);
    const FTS: &str =
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 51";
    const TSQUERY: &str =
        "SELECT id FROM message_search WHERE search @@ $1::tsquery ORDER BY id DESC LIMIT 51";
    const NEWEST: &str =
        "SELECT id, queue, archived_at, message_id, deaths FROM messages ORDER BY id DESC LIMIT 51";
    const OVERVIEW: &str = "SELECT queue, reason, messages FROM queue_reason_counts";
    const EXCHANGE: &str =
        "SELECT id FROM messages WHERE first_death_exchange = ? ORDER BY id DESC LIMIT 51";
    const EXCHANGE_PG: &str =
        "SELECT id FROM messages WHERE first_death_exchange = $1 ORDER BY id DESC LIMIT 51";
    const ERROR: &str =
        "SELECT id FROM messages WHERE coalesce(error, '') = ? ORDER BY id DESC LIMIT 51";
    const ERROR_PG: &str =
        "SELECT id FROM messages WHERE coalesce(error, '') = $1 ORDER BY id DESC LIMIT 51";
    const DETAIL: &str = "SELECT m.*, b.body FROM messages m \
        JOIN message_bodies b ON b.message_id = m.id WHERE m.id = CAST(? AS INTEGER)";
    const DETAIL_PG: &str = "SELECT m.*, b.body FROM messages m \
        JOIN message_bodies b ON b.message_id = m.id WHERE m.id = $1::bigint";
    let some = |s: &str| Some(s.to_owned());
    let middle = (rows / 2 + 1).to_string();
    // The open messages of a first-death queue, reason and error text, as the list's filters
    // write them: no index holds the error beside the status, so both walk that error's
    // messages newest first and step over the resolved ones.
    const GROUP: &str = "SELECT id FROM messages WHERE coalesce(first_death_queue, queue) = ? \
        AND first_death_reason = 'rejected' AND coalesce(error, '') = ? \
        AND status IN ('archived', 'replayed', 'replay_failed') ORDER BY id DESC LIMIT 51";
    const GROUP_PG: &str = "SELECT id FROM messages WHERE coalesce(first_death_queue, queue) = $1 \
        AND first_death_reason = 'rejected' AND coalesce(error, '') = $2 \
        AND (SELECT s.status FROM message_status s WHERE s.id = messages.id) \
        IN ('archived', 'replayed', 'replay_failed') ORDER BY id DESC LIMIT 51";
    // A group's open messages by its key, as the list's `group` filter writes it
    // (src/archive/sql/filter.rs): SQLite, the condition of its partial index of open ones.
    const GROUP_OPEN: &str = "SELECT id FROM messages \
        WHERE coalesce(first_death_queue, failed_queue, queue) = ? \
        AND coalesce(first_death_reason, 'none') = ? AND coalesce(cause, error, '') = ? \
        AND queue = ? AND status IN ('archived', 'replayed', 'replay_failed') \
        ORDER BY id DESC LIMIT 51";
    // PostgreSQL: through the status table's partial index of open messages by group
    // (src/archive/postgres/messages.rs, push_open_group).
    const GROUP_OPEN_PG: &str = "SELECT s.id FROM message_status s \
        WHERE s.group_queue = $1 AND s.group_reason = $2 AND s.group_cause = $3 \
        AND s.status IN ('archived', 'replayed', 'replay_failed') \
        AND (SELECT m.queue FROM messages m WHERE m.id = s.id) = $4 \
        ORDER BY s.id DESC LIMIT 51";
    // The overview's link to a group: its id, read from each archive ([`GroupLink`]).
    let group_uri = format!("/messages?group={GROUP_ID}&status=open");
    // The same messages found by the group's first-death queue, reason and error text, as a
    // user filtering the list would (the error is no part of the index of open messages).
    let error_uri = format!(
        "/messages?first_death_queue={GROUP_QUEUE}&reason=rejected&error={}&status=open",
        GROUP_ERROR.replace(' ', "%20").replace(':', "%3A")
    );
    const COUNT_FTS: &str = "SELECT count(*) FROM (SELECT rowid FROM messages_fts \
        WHERE messages_fts MATCH ? LIMIT 10001)";
    const COUNT_TSQUERY: &str = "SELECT count(*) FROM (SELECT id FROM message_search \
        WHERE search @@ $1::tsquery LIMIT 10001) AS found";
    let group_count_uri = group_uri.replacen("/messages?", "/messages/count?", 1);
    vec![
        Case {
            finds: true,
            name: "match count, common word (pending: more than 10,000)",
            uri: "/messages/count?q=pending".into(),
            target: "< 20 ms",
            sqlite: (COUNT_FTS, some("\"pending\"")),
            postgres: (COUNT_TSQUERY, some("'pending'")),
        },
        Case {
            finds: true,
            name: "match count, a word in 1 message in 5 (expired: more than 10,000)",
            uri: "/messages/count?q=expired".into(),
            target: "< 20 ms",
            sqlite: (COUNT_FTS, some("\"expired\"")),
            postgres: (COUNT_TSQUERY, some("'expired'")),
        },
        Case {
            finds: true,
            name: "match count, a group's open messages",
            uri: group_count_uri,
            target: "< 20 ms",
            sqlite: (GROUP_OPEN, Some(GROUP_KEY_BINDS.into())),
            postgres: (GROUP_OPEN_PG, Some(GROUP_KEY_BINDS.into())),
        },
        Case {
            finds: true,
            name: "a group's open messages (90 % of it resolved)",
            uri: group_uri,
            target: "< 20 ms",
            sqlite: (GROUP_OPEN, Some(GROUP_KEY_BINDS.into())),
            postgres: (GROUP_OPEN_PG, Some(GROUP_KEY_BINDS.into())),
        },
        Case {
            finds: true,
            name: "open messages by queue, reason and error text (90 % resolved)",
            uri: error_uri,
            target: "< 20 ms",
            sqlite: (GROUP, Some(format!("{GROUP_QUEUE}\u{0}{GROUP_ERROR}"))),
            postgres: (GROUP_PG, Some(format!("{GROUP_QUEUE}\u{0}{GROUP_ERROR}"))),
        },
        Case {
            finds: true,
            name: "resolved messages, newest first",
            uri: "/messages?status=resolved".into(),
            target: "< 20 ms",
            sqlite: (NEWEST, None),
            postgres: (NEWEST, None),
        },
        Case {
            finds: true,
            name: "newest page",
            uri: "/messages".into(),
            target: "< 20 ms",
            sqlite: (NEWEST, None),
            postgres: (NEWEST, None),
        },
        Case {
            finds: true,
            name: "one message (detail page)",
            uri: format!("/messages/{middle}"),
            target: "< 20 ms",
            sqlite: (DETAIL, Some(middle.clone())),
            postgres: (DETAIL_PG, Some(middle.clone())),
        },
        Case {
            finds: true,
            name: "one message, kombu zlib body",
            uri: format!("/messages/{}", Decoded::Zlib.middle_id(rows)),
            target: "< 20 ms",
            sqlite: (DETAIL, Some(Decoded::Zlib.middle_id(rows).to_string())),
            postgres: (DETAIL_PG, Some(Decoded::Zlib.middle_id(rows).to_string())),
        },
        Case {
            finds: true,
            name: "one message, MessagePack body",
            uri: format!("/messages/{}", Decoded::MessagePack.middle_id(rows)),
            target: "< 20 ms",
            sqlite: (
                DETAIL,
                Some(Decoded::MessagePack.middle_id(rows).to_string()),
            ),
            postgres: (
                DETAIL_PG,
                Some(Decoded::MessagePack.middle_id(rows).to_string()),
            ),
        },
        Case {
            finds: true,
            name: "one message, protobuf body",
            uri: format!("/messages/{}", Decoded::Protobuf.middle_id(rows)),
            target: "< 20 ms",
            sqlite: (DETAIL, Some(Decoded::Protobuf.middle_id(rows).to_string())),
            postgres: (
                DETAIL_PG,
                Some(Decoded::Protobuf.middle_id(rows).to_string()),
            ),
        },
        Case {
            finds: true,
            name: "selective search (chargeback)",
            uri: "/messages?q=chargeback".into(),
            target: "< 20 ms",
            sqlite: (FTS, some("\"chargeback\"")),
            postgres: (TSQUERY, some("'chargeback'")),
        },
        Case {
            finds: true,
            name: "field search (invoice:…)",
            uri: format!("/messages?q=invoice:{invoice}"),
            target: "< 20 ms",
            sqlite: (
                "SELECT message_id FROM message_fields WHERE name = 'invoice' AND value = ?",
                Some(invoice.clone()),
            ),
            postgres: (
                "SELECT message_id FROM message_fields WHERE name = 'invoice' AND value = $1",
                Some(invoice),
            ),
        },
        Case {
            finds: true,
            name: "overview",
            uri: "/".into(),
            target: "< 20 ms",
            sqlite: (OVERVIEW, None),
            postgres: (OVERVIEW, None),
        },
        Case {
            finds: true,
            name: "common word + reason filter",
            uri: "/messages?q=pending&reason=expired".into(),
            target: "< 20 ms",
            sqlite: (FTS, some("\"pending\"")),
            postgres: (TSQUERY, some("'pending'")),
        },
        Case {
            finds: true,
            name: "common prefix (pend*)",
            uri: "/messages?q=pend*".into(),
            target: "< 20 ms",
            sqlite: (FTS, some("\"pend\"*")),
            postgres: (TSQUERY, some("'pend':*")),
        },
        Case {
            finds: true,
            name: "selective CJK search (拒付)",
            uri: "/messages?q=%E6%8B%92%E4%BB%98".into(),
            target: "< 20 ms",
            sqlite: (FTS, some("\"拒付\"")),
            postgres: (TSQUERY, some("'拒付'")),
        },
        Case {
            finds: true,
            name: "common CJK search (待处理)",
            uri: "/messages?q=%E5%BE%85%E5%A4%84%E7%90%86".into(),
            target: "< 20 ms",
            sqlite: (FTS, some("\"待处 处理\"")),
            postgres: (TSQUERY, some("'待处' <-> '处理'")),
        },
        Case {
            finds: false,
            name: "filter on an exchange no message has",
            uri: "/messages?exchange=billing.retry".into(),
            target: "< 20 ms",
            sqlite: (EXCHANGE, some("billing.retry")),
            postgres: (EXCHANGE_PG, some("billing.retry")),
        },
        Case {
            finds: false,
            name: "filter on an error no message has",
            uri: "/messages?error=OutOfMemoryError".into(),
            target: "< 20 ms",
            sqlite: (ERROR, some("OutOfMemoryError")),
            postgres: (ERROR_PG, some("OutOfMemoryError")),
        },
    ]
}

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_ROWS", 1_000_000);
    let runs = env_or("BENCH_RUNS", 50);
    let mut backends = Vec::new();
    for name in backend_names() {
        backends.push(Backend::open(&name, rows).await);
    }
    fill(&backends, rows).await;
    resolve_most_of_a_group(&backends).await;
    let states: Vec<AppState> = backends
        .iter()
        .map(|b| {
            AppState::new(
                b.archive(),
                vec!["invoice".to_owned(), "customer".to_owned()],
                "amqp://guest:guest@127.0.0.1:5672/%2f",
            )
        })
        .collect();

    let page = |state: &AppState, uri: String| {
        let app = router(state.clone());
        async move {
            let response = app
                .oneshot(Request::get(&uri).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert!(
                response.status().is_success(),
                "{uri}: {}",
                response.status()
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            // The match count is a few words; every page is more.
            let least = if uri.starts_with("/messages/count") {
                5
            } else {
                500
            };
            assert!(body.len() > least, "{uri} rendered almost nothing");
        }
    };
    let mut links = Vec::new();
    for backend in &backends {
        links.push(GroupLink::of(backend).await);
    }
    println!();
    println!("| at {rows} messages ({runs} runs) | backend | page p50 | page p95 | raw SQL p50 | raw SQL p95 | target p95 |");
    println!("|---|---|---|---|---|---|---|");
    // BENCH_CASES=overview,group: only the cases whose names hold one of these.
    let only: Vec<String> = std::env::var("BENCH_CASES")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let chosen =
        |case: &Case| only.is_empty() || only.iter().any(|o| case.name.contains(o.as_str()));
    for case in cases(rows).into_iter().filter(chosen) {
        for ((backend, state), link) in backends.iter().zip(&states).zip(&links) {
            let uri = link.fill_in(&case.uri);
            let page_t = time(runs, || page(state, uri.clone())).await;
            let (query, bind) = match backend {
                Backend::Sqlite(_) => &case.sqlite,
                Backend::Postgres(_) => &case.postgres,
            };
            let bind = bind.as_deref().map(|b| link.fill_in(b));
            let sql_t = time(runs, || async {
                let found = backend.run(query, bind.as_deref()).await;
                assert_eq!(found > 0, case.finds, "{query} found {found} rows");
            })
            .await;
            let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                case.name,
                backend.name(),
                ms(page_t.p50),
                ms(page_t.p95),
                ms(sql_t.p50),
                ms(sql_t.p95),
                case.target
            );
        }
    }
    if env_or("BENCH_REINDEX", 1) == 1 {
        println!();
        for backend in &backends {
            reindex(backend, rows).await;
            word_list(backend).await;
        }
    }
}

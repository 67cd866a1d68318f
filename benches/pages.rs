//! Page benchmark at scale: fills an archive with 1,000,000 realistic dead letters (directly,
//! through the archive, no broker), then times the pages through the router (server time,
//! no socket) next to the raw SQL behind each, in the same run.
//!
//! `cargo bench --bench pages` (env: BENCH_ROWS=1000000, BENCH_RUNS=50,
//! BENCH_DB=target/bench/pages-<rows>.db, reused when it already holds the rows).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use lazarus::amqp::headers::{AmqpValue, Bytes, MessageProperties, Table};
use lazarus::archive::{Archive, IncomingMessage, IngestRules, PreparedMessage, SqliteArchive};
use lazarus::web::{router, AppState};
use sqlx::Row;
use time::OffsetDateTime;
use tower::ServiceExt;

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

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn text(s: &str) -> AmqpValue {
    AmqpValue::LongString(Bytes(s.as_bytes().to_vec()))
}

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
        death.insert("queue".into(), text(work));
        death.insert("reason".into(), text(reason));
        death.insert("count".into(), AmqpValue::LongLongInt(1 + (i % 3) as i64));
        death.insert("exchange".into(), text("events"));
        death.insert(
            "routing-keys".into(),
            AmqpValue::Array(vec![text(&format!("{work}.created"))]),
        );
        death.insert(
            "time".into(),
            AmqpValue::Timestamp((start.unix_timestamp() + (i * 2_592_000 / rows) as i64) as u64),
        );
        headers.insert(
            "x-death".into(),
            AmqpValue::Array(vec![AmqpValue::Table(death)]),
        );
        headers.insert("x-first-death-queue".into(), text(work));
        headers.insert("x-first-death-reason".into(), text(reason));
        headers.insert("x-first-death-exchange".into(), text("events"));
    }
    if reason == Some("rejected") {
        headers.insert("x-exception-message".into(), text(ERRORS[i % ERRORS.len()]));
    }
    headers.insert("tenant".into(), text(&format!("tenant-{}", i % 40)));
    // One message in ten thousand mentions a chargeback: the selective search.
    let note = if i % 10_000 == 17 {
        "customer filed a chargeback"
    } else {
        "payment pending"
    };
    let body = format!(
        r#"{{"invoice_id":"INV-2026-{i:07}","customer":{{"id":"C-{}","name":"Customer {}","city":"{}"}},"amount":"{}.{:02}","currency":"EUR","note":"{note}","lines":[{{"sku":"SKU-{}","qty":{},"price":"19.90"}},{{"sku":"SKU-{}","qty":1,"price":"4.50"}}],"created_at":"2026-11-{:02}T10:00:00Z"}}"#,
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
    IncomingMessage {
        queue: queue.into(),
        exchange: "dlx".into(),
        routing_key: "dead".into(),
        redelivered: false,
        properties: MessageProperties {
            content_type: Some("application/json".into()),
            delivery_mode: Some(2),
            message_id: Some(format!("msg-{i:07}")),
            correlation_id: Some(format!("corr-{}", i / 3)),
            ..Default::default()
        },
        headers: Some(headers),
        body: body.into_bytes(),
        received_at: start + Duration::from_secs((i * 2_592_000 / rows) as u64),
    }
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

async fn fill(archive: &SqliteArchive, rows: usize) {
    let have: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages")
        .fetch_one(archive.pool())
        .await
        .unwrap();
    if have as usize == rows {
        println!("reusing the archive with {rows} messages");
        return;
    }
    assert_eq!(
        have, 0,
        "BENCH_DB holds {have} messages, not {rows}: delete it"
    );
    let start = OffsetDateTime::now_utc() - Duration::from_secs(2_592_000);
    let rules = rules();
    let begun = Instant::now();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(5_000) {
        let batch: Vec<PreparedMessage> = chunk
            .iter()
            .map(|&i| PreparedMessage::with_rules(message(i, rows, start), &rules))
            .collect();
        archive.store_batch(&batch).await.unwrap();
    }
    sqlx::query("DELETE FROM pending_acks")
        .execute(archive.pool())
        .await
        .unwrap();
    sqlx::query("ANALYZE")
        .execute(archive.pool())
        .await
        .unwrap();
    println!(
        "filled {rows} messages in {:.0} s",
        begun.elapsed().as_secs_f64()
    );
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

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_ROWS", 1_000_000);
    let runs = env_or("BENCH_RUNS", 50);
    let path =
        std::env::var("BENCH_DB").unwrap_or_else(|_| format!("target/bench/pages-{rows}.db"));
    std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
    let archive = SqliteArchive::open(&format!("sqlite://{path}"))
        .await
        .unwrap();
    fill(&archive, rows).await;
    let pool = archive.pool().clone();
    let state = AppState::new(
        Arc::new(archive),
        vec!["invoice".to_owned(), "customer".to_owned()],
        "amqp://guest:guest@127.0.0.1:5672/%2f",
    );
    let invoice = format!("INV-2026-{:07}", rows / 2 + 1);

    let page = |uri: String| {
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
            assert!(body.len() > 500, "{uri} rendered almost nothing");
        }
    };
    let sql = |query: &'static str, bind: Option<String>| {
        let pool = pool.clone();
        async move {
            let mut q = sqlx::query(query);
            if let Some(b) = bind {
                q = q.bind(b);
            }
            let rows = q.fetch_all(&pool).await.unwrap();
            assert!(
                !rows.is_empty() || query.contains("hourly"),
                "{query} found nothing"
            );
            let _ = rows.first().map(|r| r.len());
        }
    };
    let cases: Vec<(&str, String, &'static str, Option<String>)> = vec![
        (
            "newest page",
            "/messages".into(),
            "SELECT id, queue, archived_at, message_id, deaths FROM messages ORDER BY id DESC LIMIT 51",
            None,
        ),
        (
            "selective search (chargeback)",
            "/messages?q=chargeback".into(),
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 51",
            Some("\"chargeback\"".into()),
        ),
        (
            "field search (invoice:…)",
            format!("/messages?q=invoice:{invoice}"),
            "SELECT message_id FROM message_fields WHERE name = 'invoice' AND value = ?",
            Some(invoice.clone()),
        ),
        (
            "overview",
            "/".into(),
            "SELECT queue, reason, messages FROM queue_reason_counts",
            None,
        ),
        (
            "common word + reason filter",
            "/messages?q=pending&reason=expired".into(),
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 51",
            Some("\"pending\"".into()),
        ),
        (
            "common prefix (pend*)",
            "/messages?q=pend*".into(),
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 51",
            Some("\"pend\"*".into()),
        ),
    ];
    println!();
    println!("| at {rows} messages ({runs} runs) | page p50 | page p95 | raw SQL p50 | raw SQL p95 | target p95 |");
    println!("|---|---|---|---|---|---|");
    for (name, uri, query, bind) in cases {
        let page_t = time(runs, || page(uri.clone())).await;
        let sql_t = time(runs, || sql(query, bind.clone())).await;
        let target = if name == "newest page" {
            "< 20 ms"
        } else {
            "< 50 ms"
        };
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        println!(
            "| {name} | {} | {} | {} | {} | {target} |",
            ms(page_t.p50),
            ms(page_t.p95),
            ms(sql_t.p50),
            ms(sql_t.p95)
        );
    }
}

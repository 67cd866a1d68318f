//! Every failure path of ingest has an answer: a missing queue, an unreachable broker, a
//! locked or unreachable database, malformed death headers, huge / binary / compressed / empty bodies, a
//! shutdown with a batch in flight, redeliveries of what is already archived.

use std::io::Write;
use std::time::{Duration, Instant};

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use lazarus::archive::{IncomingMessage, PreparedMessage};
use lazarus::message::headers::MessageProperties;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::brokers::on_both_brokers;
use crate::helpers::*;

#[tokio::test]
async fn missing_queue_is_reported_and_retried_not_created() {
    let dlq = unique("missing");
    let app = TestApp::spawn(&[&dlq]).await;
    wait_until(
        "queue_missing in /readyz",
        Duration::from_secs(10),
        || async {
            let r = app.get("/readyz").await;
            r.status == 503
                && serde_json::from_slice::<Value>(&r.body).unwrap()["queues"][&dlq]["state"]
                    == "queue_missing"
        },
    )
    .await;
    assert_eq!(app.get("/healthz").await.status, 200);
    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains(&format!(
            "lazarus_ingest_errors_total{{broker=\"default\",queue=\"{dlq}\",kind=\"queue_missing\"}}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "lazarus_consumer_connected{{broker=\"default\",queue=\"{dlq}\"}} 0"
        )),
        "{metrics}"
    );

    // Lazarus never declares it: the queue is still not there until the user creates it.
    let mut t = Topology::new().await;
    assert!(!t.exists(&dlq).await, "Lazarus created the queue");
    t.queue(&dlq, FieldTable::default()).await;
    t.publish("", &dlq, b"late", BasicProperties::default())
        .await;
    app.wait_for_archived(1, Duration::from_secs(30)).await;
    wait_until("ready", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn unreachable_broker_keeps_the_web_up_and_says_so() {
    let app = TestApp::spawn_with(&["some.dlq"], |c| {
        c.connection.amqp_url = "amqp://guest:guest@127.0.0.1:1/%2f".into()
    })
    .await;
    wait_until(
        "disconnected in /readyz",
        Duration::from_secs(10),
        || async {
            let r = app.get("/readyz").await;
            r.status == 503
                && serde_json::from_slice::<Value>(&r.body).unwrap()["queues"]["some.dlq"]["state"]
                    == "disconnected"
        },
    )
    .await;
    let ready = app.json("/readyz", 503).await;
    assert_eq!(ready["database"]["state"], "ok");
    assert_eq!(app.get("/healthz").await.status, 200);
    // The overview says so above everything, in a sentence, not in a small badge.
    let overview = app.get("/").await;
    assert_eq!(overview.status, 200);
    assert!(
        overview.text().contains(r#"<div class="outage" role="alert"><strong>Unreachable.</strong> RabbitMQ is unreachable; nothing is being archived (some.dlq): "#),
        "{}",
        overview.text()
    );
    assert_eq!(app.json("/api/messages", 200).await["messages"], json!([]));
}

/// PostgreSQL behind a forwarder of the test's own, which can go down: its port then
/// refuses connections and every connection through it is cut, as when the server stops,
/// restarts or fails over.
async fn database_proxy() -> TcpProxy {
    TcpProxy::before(&postgres_admin_url()).await
}

/// The archive stops answering: on SQLite another process holds the write lock for longer
/// than Lazarus's busy timeout; on PostgreSQL the server goes away (connections refused,
/// Lazarus's cut), as in a restart or a failover.
enum Outage {
    Locked(sqlx::SqliteConnection),
    Down(TcpProxy),
}

impl Outage {
    async fn begin(database_url: &str, proxy: Option<TcpProxy>) -> Outage {
        match proxy {
            Some(mut proxy) => {
                proxy.down().await;
                Outage::Down(proxy)
            }
            None => {
                let mut locker = sqlx::SqliteConnection::connect(database_url).await.unwrap();
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut locker)
                    .await
                    .unwrap();
                Outage::Locked(locker)
            }
        }
    }

    async fn end(self) {
        match self {
            Outage::Locked(mut locker) => {
                sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
            }
            Outage::Down(mut proxy) => proxy.up().await,
        }
    }
}

on_both_backends!(unavailable_database_holds_deliveries_unacked_until_it_recovers);
async fn unavailable_database_holds_deliveries_unacked_until_it_recovers() {
    let dlq = unique("locked");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let proxy = match Backend::current() {
        Backend::Postgres => Some(database_proxy().await),
        Backend::Sqlite => None,
    };
    let app = TestApp::spawn_with(&[&dlq], |c| {
        if let Some(proxy) = &proxy {
            c.connection.database_url = proxy.url(&c.connection.database_url).into();
        }
        // Batches of 5: one (two on PostgreSQL) is stored, held and retrying, while the next
        // fills behind it.
        c.batch_size = 5;
    })
    .await;
    wait_until("consuming", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;

    let outage = Outage::begin(&app.database_url, proxy).await;
    for i in 0..20 {
        t.publish(
            "",
            &dlq,
            format!("m{i}").as_bytes(),
            json_props(&format!("locked-{i}")),
        )
        .await;
    }
    wait_until(
        "a database ingest error",
        Duration::from_secs(30),
        || async {
            app.get("/metrics").await.text().contains(&format!(
                "lazarus_ingest_errors_total{{broker=\"default\",queue=\"{dlq}\",kind=\"database\"}}"
            ))
        },
    )
    .await;
    let ready = app.json("/readyz", 503).await;
    assert_eq!(
        ready["queues"][&dlq]["state"], "database_unavailable",
        "{ready}"
    );
    // Nothing acked: the broker still holds all 20, delivered to Lazarus and unacknowledged.
    assert_eq!(t.depth(&dlq).await, 0);
    assert_eq!(unacked(&dlq), 20);
    // The overview still answers, and says what is wrong above everything: writes refused
    // (the locked SQLite file), or the database unreachable (PostgreSQL down).
    let overview = app.get("/").await;
    assert_eq!(overview.status, 200, "{}", overview.text());
    let banner = match &outage {
        Outage::Locked(_) => "The database refuses writes; deliveries are held unacked in RabbitMQ",
        Outage::Down(..) => "The database is unreachable",
    };
    assert!(
        overview.text().contains(banner) && overview.text().contains(r#"class="outage""#),
        "{}",
        overview.text()
    );
    // Readers: a locked SQLite file still reads; a PostgreSQL that refuses connections makes
    // pages and API answer 503 with a plain message, not an error page or a hang.
    match &outage {
        Outage::Locked(_) => {
            assert!(app.archive.counts().await.unwrap().is_empty());
            assert_eq!(app.get("/messages").await.status, 200);
        }
        Outage::Down(..) => {
            // Promptly, as orchestrators' probes expect: not after the background work's
            // patience for the database (its pool waits 5 s for a connection).
            for path in ["/readyz", "/messages", "/api/messages", "/metrics"] {
                let asked = Instant::now();
                let response = app.get(path).await;
                let took = asked.elapsed();
                eprintln!(
                    "while PostgreSQL is down, {path} answered {} in {took:?}",
                    response.status
                );
                assert!(
                    took < Duration::from_secs(2),
                    "{path} answered {} after {took:?}",
                    response.status
                );
                let expected = if path == "/metrics" { 200 } else { 503 };
                assert_eq!(response.status, expected, "{path}: {}", response.text());
            }
            // What the LazarusDatabaseUnavailable alert (deploy/prometheus) fires on.
            let metrics = app.get("/metrics").await.text();
            assert!(metrics.contains("lazarus_database_up 0"), "{metrics}");
            let ready = app.json("/readyz", 503).await;
            assert_eq!(ready["database"]["state"], "unavailable", "{ready}");
            let page = app.get("/messages").await;
            assert_eq!(page.status, 503, "{}", page.text());
            assert!(
                page.text().contains("database is unavailable"),
                "{}",
                page.text()
            );
            let api = app.json("/api/messages", 503).await;
            assert_eq!(
                api["error"], "the archive database is unavailable; try again shortly",
                "{api}"
            );
        }
    }

    outage.end().await;
    archived_in_delivery_order_and_acked(&app, &t, &dlq, "locked", 20).await;
    wait_until("ready again", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    t.cleanup().await;
}

/// PostgreSQL stores two batches of a consumer at once (the server writes one while the
/// other commits), and still acks them only once stored, in delivery order. Holding the
/// totals table locked stops both where they write it, so the test sees them in flight.
#[tokio::test]
async fn postgres_stores_two_batches_at_once_and_acks_them_in_delivery_order() {
    Backend::Postgres.scope(two_batches_at_once()).await
}

async fn two_batches_at_once() {
    let dlq = unique("twoatonce");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.batch_size = 10;
        c.prefetch = 100;
    })
    .await;
    wait_until("consuming", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    let mut holder = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE queue_reason_counts IN EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .unwrap();
    for i in 0..50 {
        let id = format!("pair-{i}");
        t.publish("", &dlq, id.as_bytes(), json_props(&id)).await;
    }
    let mut monitor = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock' \
                   AND query LIKE '%INSERT INTO messages%'";
    let what = "two batches being stored at once (waiting on the lock)";
    wait_showing(what, Duration::from_secs(30), async || {
        let stores: i64 = sqlx::query_scalar(waiting)
            .fetch_one(&mut monitor)
            .await
            .unwrap();
        if stores >= 2 {
            Ok(())
        } else {
            Err(format!("{stores} waiting"))
        }
    })
    .await;
    // Give a third one time to show up, were there one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stores: i64 = sqlx::query_scalar(waiting)
        .fetch_one(&mut monitor)
        .await
        .unwrap();
    assert_eq!(stores, 2, "batches being stored at once");
    // Nothing stored, so nothing acked: the broker holds all 50 as delivered, unacked.
    assert_eq!(app.archived().await, 0);
    assert_eq!(unacked(&dlq), 50);

    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    archived_in_delivery_order_and_acked(&app, &t, &dlq, "pair", 50).await;
    t.cleanup().await;
}

/// Waits for the `n` messages published as `<prefix>-0`, `<prefix>-1`, ... to be archived,
/// and checks they were stored once each, in the order they were delivered (archive ids
/// follow it, whichever batch committed first), and only then acked: the broker holds none.
async fn archived_in_delivery_order_and_acked(
    app: &TestApp,
    t: &Topology,
    dlq: &str,
    prefix: &str,
    n: usize,
) {
    app.wait_for_archived(n as i64, Duration::from_secs(30))
        .await;
    let mut stored: Vec<(i64, String)> = app
        .all_messages(dlq)
        .await
        .iter()
        .map(|m| {
            let id: i64 = m["id"].as_str().unwrap().parse().unwrap();
            (id, m["message_id"].as_str().unwrap().to_owned())
        })
        .collect();
    stored.sort();
    let in_archive_order: Vec<&str> = stored.iter().map(|(_, m)| m.as_str()).collect();
    let delivered: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    assert_eq!(in_archive_order, delivered);
    wait_until("all acked", Duration::from_secs(30), || async {
        unacked(dlq) == 0
    })
    .await;
    assert_eq!(t.depth(dlq).await, 0);
}

on_both_backends!(malformed_death_headers_are_archived_and_flagged);
async fn malformed_death_headers_are_archived_and_flagged() {
    let dlq = unique("malformed");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;

    let mut partial = FieldTable::default();
    partial.insert("queue".into(), s("orders"));
    partial.insert("count".into(), s("three"));
    let mut headers = FieldTable::default();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(vec![AMQPValue::FieldTable(partial), AMQPValue::LongInt(7)].into()),
    );
    t.publish("", &dlq, b"{}", json_props("partial").with_headers(headers))
        .await;
    let mut wrong = FieldTable::default();
    wrong.insert("x-death".into(), s("not a list"));
    wrong.insert("x-first-death-queue".into(), AMQPValue::Boolean(true));
    t.publish(
        "",
        &dlq,
        b"{}",
        json_props("wrong-type").with_headers(wrong),
    )
    .await;
    app.wait_for_archived(2, Duration::from_secs(10)).await;

    let partial = app.detail_by_message_id(&dlq, "partial").await;
    assert_eq!(partial["deaths"][0]["queue"], "orders");
    assert_eq!(partial["deaths"][0]["count"], 0);
    assert_eq!(partial["replay_target"], Value::Null);
    let problems = partial["death_problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("count is a long-string")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("x-death[1] is a long-int")),
        "{problems:?}"
    );

    let wrong = app.detail_by_message_id(&dlq, "wrong-type").await;
    assert_eq!(wrong["deaths"], json!([]));
    assert_eq!(
        wrong["death_problems"],
        json!(["x-death is a long-string, not an array; ignored"])
    );
    // The original header is still there, typed, for replay and inspection.
    assert_eq!(
        wrong["headers"]["x-death"],
        json!({"type": "long-string", "value": "not a list"})
    );
    t.cleanup().await;
}

on_both_backends!(huge_binary_compressed_and_empty_bodies_are_kept_byte_for_byte);
async fn huge_binary_compressed_and_empty_bodies_are_kept_byte_for_byte() {
    let dlq = unique("bodies");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;

    // 16 MiB of pseudo-random bytes (RabbitMQ's default size limit in 4.x).
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let huge: Vec<u8> = (0..16 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(br#"{"invoice_id": "INV-1"}"#).unwrap();
    let gzipped = gz.finish().unwrap();
    let latin1 = b"Caf\xe9 cr\xe8me".to_vec();
    let cases: Vec<(&str, Vec<u8>, BasicProperties)> = vec![
        (
            "huge",
            huge,
            BasicProperties::default().with_content_type("application/octet-stream".into()),
        ),
        (
            "gzip",
            gzipped,
            json_props("gzip").with_content_encoding("gzip".into()),
        ),
        (
            "latin1",
            latin1,
            BasicProperties::default().with_content_type("text/plain; charset=iso-8859-1".into()),
        ),
        ("empty", Vec::new(), BasicProperties::default()),
    ];
    for (id, body, props) in &cases {
        t.publish("", &dlq, body, props.clone().with_message_id((*id).into()))
            .await;
    }
    app.wait_for_archived(cases.len() as i64, Duration::from_secs(30))
        .await;

    for (id, body, _) in &cases {
        let detail = app.detail_by_message_id(&dlq, id).await;
        assert_eq!(detail["body_size"], body.len(), "{id}");
        let response = app
            .get(&format!(
                "/api/messages/{}/body",
                detail["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("content-type"),
            Some("application/octet-stream")
        );
        assert!(response
            .header("content-disposition")
            .unwrap()
            .starts_with("attachment"));
        assert!(response.body == *body, "{id}: body bytes differ");
        let expected_encoding = if std::str::from_utf8(body).is_ok() {
            "text"
        } else {
            "base64"
        };
        assert_eq!(detail["body"]["encoding"], expected_encoding, "{id}");
    }
    assert_eq!(
        app.detail_by_message_id(&dlq, "gzip").await["content_encoding"],
        "gzip"
    );
    t.cleanup().await;
}

on_both_backends!(shutdown_stores_and_acks_the_batch_in_flight);
async fn shutdown_stores_and_acks_the_batch_in_flight() {
    let dlq = unique("drain");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    // A batch that would wait a minute: only the shutdown can flush it.
    let mut app = TestApp::spawn_with(&[&dlq], |c| {
        c.batch_interval_ms = 60_000;
        c.batch_size = 10_000;
    })
    .await;
    for i in 0..50 {
        t.publish("", &dlq, b"x", json_props(&format!("drain-{i}")))
            .await;
    }
    t.wait_for_depth(&dlq, 0, Duration::from_secs(10)).await; // all delivered, none acked
    assert_eq!(app.archived().await, 0);
    let archive = app.archive.clone();
    app.stop().await;
    assert_eq!(archive.counts().await.unwrap()[0].messages, 50);
    // Acked before the connection closed: nothing went back to the queue.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.depth(&dlq).await, 0);
    t.cleanup().await;
}

fn incoming(redelivered: bool) -> IncomingMessage {
    IncomingMessage {
        broker: "default".into(),
        vhost: String::new(),
        queue: "dlq".into(),
        exchange: "dlx".into(),
        routing_key: "k".into(),
        redelivered,
        properties: MessageProperties::default(),
        headers: None,
        body: b"same bytes".to_vec(),
        received_at: time::OffsetDateTime::now_utc(),
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

on_both_backends!(redeliveries_of_archived_messages_are_skipped_first_deliveries_never);
async fn redeliveries_of_archived_messages_are_skipped_first_deliveries_never() {
    let dir = tempfile::tempdir().unwrap();
    let archive = lazarus::archive::open(&archive_url(dir.path()).await)
        .await
        .unwrap();
    let store = |batch: Vec<IncomingMessage>| {
        let archive = archive.clone();
        async move {
            let prepared: Vec<_> = batch.into_iter().map(PreparedMessage::new).collect();
            let stored = archive.store_batch(&prepared).await.unwrap();
            (stored.inserted, stored.duplicates)
        }
    };
    // Committed. Whether its ack then got lost (a dropped connection) or reached a broker
    // that crashed before writing it down, the message can come back redelivered...
    assert_eq!(store(vec![incoming(false)]).await, (1, 0));
    // ...as often as it likes: it is the same message.
    for _ in 0..2 {
        assert_eq!(store(vec![incoming(true)]).await, (0, 1));
    }
    // A second identical copy redelivered in the same batch is another message: each
    // archived row stands for one copy.
    assert_eq!(store(vec![incoming(true), incoming(true)]).await, (1, 1));
    assert_eq!(store(vec![incoming(true), incoming(true)]).await, (0, 2));
    // A first delivery is never a redelivery: identical bytes are another message.
    assert_eq!(store(vec![incoming(false)]).await, (1, 0));
    // The same bytes in another DLQ are not a copy of these.
    let mut elsewhere = incoming(true);
    elsewhere.queue = "other.dlq".into();
    assert_eq!(store(vec![elsewhere]).await, (1, 0));
    // A retry after a failure that may have committed anyway (a connection lost during
    // COMMIT) stores only what it finds no archived copy of.
    let mut retried = PreparedMessage::new(incoming(false));
    retried.maybe_stored = true;
    let retry = archive.store_batch(&[retried]).await.unwrap();
    assert_eq!((retry.inserted, retry.duplicates), (0, 1));
    let total: i64 = archive
        .counts()
        .await
        .unwrap()
        .iter()
        .map(|c| c.messages)
        .sum();
    assert_eq!(total, 4);
}

on_both_backends!(deleting_the_queue_under_a_held_batch_keeps_the_messages);
async fn deleting_the_queue_under_a_held_batch_keeps_the_messages() {
    let dlq = unique("deleted");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.batch_interval_ms = 60_000;
        c.batch_size = 10_000;
    })
    .await;
    for i in 0..5 {
        t.publish("", &dlq, b"x", json_props(&format!("held-{i}")))
            .await;
    }
    t.wait_for_depth(&dlq, 0, Duration::from_secs(10)).await; // delivered, held, unacked
                                                              // The broker drops unacked messages with their queue: Lazarus's copy is the last one.
    t.channel
        .queue_delete(
            dlq.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    app.wait_for_archived(5, Duration::from_secs(10)).await;
    // Ready (200) until the consumer notices; then 503 with the queue missing.
    wait_until("queue_missing", Duration::from_secs(10), || async {
        let ready = app.get("/readyz").await;
        ready.status == 503
            && serde_json::from_slice::<serde_json::Value>(&ready.body)
                .is_ok_and(|v| v["queues"][&dlq]["state"] == "queue_missing")
    })
    .await;
}

/// A file system of the test's own, `size` big (tmpfs), unmounted when dropped: a disk that
/// fills up. Mounting needs root; elsewhere the test says it did not run.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let uid = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
            });
        if uid.as_deref() != Some("0") {
            eprintln!("NOT RUN: mounting a small file system needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mount a tmpfs of {size}: {status}");
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Writes a filler file until the file system has no room left.
    fn fill(&self) {
        let mut filler = std::fs::File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0xa5u8; 16 * 1024];
        loop {
            match filler.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // The last partial chunk may have left a few bytes: take them too.
        while filler.write_all(&[0]).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.path().join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Ready plus unacknowledged messages of a queue in the default vhost.
fn held_by_broker(queue: &str) -> u64 {
    rabbitmqctl(&[
        "list_queues",
        "-q",
        "--no-table-headers",
        "name",
        "messages",
    ])
    .lines()
    .filter_map(|l| l.split_once('\t'))
    .find(|(name, _)| *name == queue)
    .map(|(_, n)| n.trim().parse().unwrap())
    .unwrap_or_else(|| panic!("{queue} not listed by rabbitmqctl"))
}

/// SQLite on a disk that fills up while Lazarus ingests: every batch that cannot be written
/// stays unacked, and once there is room again ingest resumes by itself (no restart) and
/// every message is archived exactly once; the other write paths recover as well.
#[tokio::test]
async fn sqlite_resumes_by_itself_once_a_full_disk_has_room_again() {
    let Some(disk) = SmallDisk::mount("8m") else {
        return;
    };
    let dlq = unique("diskfull");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let url = format!("sqlite://{}", disk.path().join("archive.db").display());
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.connection.database_url = url.clone().into();
        c.batch_size = 20;
    })
    .await;
    let body = |i: usize| format!(r#"{{"n": {i}, "padding": "{}"}}"#, "x".repeat(16 * 1024));
    for i in 0..20 {
        t.publish(
            "",
            &dlq,
            body(i).as_bytes(),
            json_props(&format!("full-{i}")),
        )
        .await;
    }
    app.wait_for_archived(20, Duration::from_secs(30)).await;

    disk.fill();
    // 3 MB more than the disk has room for.
    let total = 220;
    for i in 20..total {
        t.publish(
            "",
            &dlq,
            body(i).as_bytes(),
            json_props(&format!("full-{i}")),
        )
        .await;
    }
    wait_until(
        "a database ingest error",
        Duration::from_secs(30),
        || async {
            app.get("/metrics").await.text().contains(&format!(
                "lazarus_ingest_errors_total{{broker=\"default\",queue=\"{dlq}\",kind=\"database\"}}"
            ))
        },
    )
    .await;
    let ready = app.json("/readyz", 503).await;
    let state = &ready["queues"][&dlq];
    assert_eq!(state["state"], "database_unavailable", "{ready}");
    assert!(
        state["detail"].as_str().unwrap().contains("full"),
        "{ready}"
    );
    // Nothing acked that is not stored: the broker holds every message the archive lacks.
    let archived = app.archived().await;
    assert!(archived < total as i64, "the disk never filled up");
    assert_eq!(
        held_by_broker(&dlq) + archived as u64,
        total as u64,
        "archived {archived}"
    );
    // Another write path, while the disk is full: an answer (503, or 200 if the little it
    // writes still fits), not a hang or an error page.
    let first = app.all_messages(&dlq).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dismiss = format!("/api/messages/{first}/dismiss");
    let full = http_request(app.addr, "POST", &dismiss, Some(r#"{"note": "full"}"#)).await;
    assert!(matches!(full.status, 200 | 503), "{}", full.text());

    // Room again: no restart, everything comes in, once.
    disk.free();
    app.wait_for_archived(total as i64, Duration::from_secs(60))
        .await;
    wait_until("an empty DLQ", Duration::from_secs(30), || async {
        held_by_broker(&dlq) == 0
    })
    .await;
    let messages = app.all_messages(&dlq).await;
    let ids: std::collections::HashSet<&str> = messages
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!((messages.len(), ids.len()), (total, total));
    wait_until("ready again", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    // Every write path writes again, on whichever pooled connection it gets.
    for _ in 0..8 {
        let dismissed = app
            .post_json(&dismiss, json!({"note": "room again"}), 200)
            .await;
        assert!(dismissed["dismissed"].is_number(), "{dismissed}");
    }
    t.cleanup().await;
}

/// A sample of the text exposition format: its name, its labels and its value.
type Sample = (String, Vec<(String, String)>, f64);

/// Label values as the text exposition format writes them: `\\`, `\"` and `\n` escaped.
/// `None` when a line is not a valid sample: `name{label="value",...} number`.
fn parse_sample(line: &str) -> Option<Sample> {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_name(name) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=')?;
            let label = &rest[..eq];
            if !is_name(label) {
                return None;
            }
            let mut chars = rest[eq + 1..].strip_prefix('"')?.char_indices();
            let mut value = String::new();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        _ => return None,
                    },
                    (_, '\n') => return None,
                    (_, c) => value.push(c),
                }
            };
            labels.push((label.to_owned(), value));
            rest = &rest[eq + 1..][1 + end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let value = rest.strip_prefix(' ')?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name.to_owned(), labels, value))
}

/// A death reason and a queue name that carry the exposition format's own syntax (a quote,
/// a newline, a closing brace and a sample of their own) neither break the scrape nor forge
/// a series: every line of `/metrics` is a comment or a valid sample, with the names intact.
#[tokio::test]
async fn hostile_queue_names_and_death_reasons_cannot_break_or_forge_metrics() {
    let hostile = "evil\"\n} fake_series 1\n\\";
    // RabbitMQ takes line breaks out of queue names; the rest it keeps.
    let dlq = format!(
        "{}evil\"}} fake_series{{queue=\"x\"}} 1 \\",
        unique("metrics")
    );
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let mut death = FieldTable::default();
    death.insert("queue".into(), s("work"));
    death.insert("reason".into(), s(hostile));
    death.insert("count".into(), AMQPValue::LongLongInt(1));
    death.insert("exchange".into(), s(""));
    death.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(vec![s("work")].into()),
    );
    let mut headers = FieldTable::default();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()),
    );
    headers.insert("x-first-death-queue".into(), s("work"));
    headers.insert("x-first-death-reason".into(), s(hostile));
    headers.insert("x-first-death-exchange".into(), s(""));
    t.publish("", &dlq, b"{}", json_props("hostile").with_headers(headers))
        .await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;

    let scrape = app.get("/metrics").await;
    assert_eq!(scrape.status, 200);
    let text = scrape.text();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                line == "# EOF"
                    || ["# HELP lazarus_", "# TYPE lazarus_", "# UNIT lazarus_"]
                        .iter()
                        .any(|p| line.starts_with(p)),
                "not a comment of ours: {line:?}\n{text}"
            );
            continue;
        }
        let sample =
            parse_sample(line).unwrap_or_else(|| panic!("not a valid sample: {line:?}\n{text}"));
        assert!(
            sample.0.starts_with("lazarus_"),
            "a forged series: {line:?}\n{text}"
        );
        samples.push(sample);
    }
    let archived = samples
        .iter()
        .find(|(name, _, _)| name == "lazarus_archived_messages")
        .unwrap_or_else(|| panic!("no archive total\n{text}"));
    // A reason RabbitMQ does not give is `other` (it is the publisher's to write).
    assert_eq!(
        archived.1,
        [
            ("broker".to_owned(), "default".to_owned()),
            ("queue".to_owned(), dlq.clone()),
            ("reason".to_owned(), "other".to_owned())
        ],
        "{text}"
    );
    assert_eq!(archived.2, 1.0);
    assert!(
        samples.iter().any(
            |(name, labels, value)| name == "lazarus_ingested_messages_total"
                && labels
                    == &[
                        ("broker".to_owned(), "default".to_owned()),
                        ("queue".to_owned(), dlq.clone())
                    ]
                && *value == 1.0
        ),
        "{text}"
    );
    t.cleanup().await;
}

/// `x-death` is the publisher's to write: 200 dead letters with 200 forged reasons, beside
/// real ones the broker dead-lettered, are 200 messages of the `reason="other"` series, not
/// 200 series; the queues of an imported file past the bound (120 of them) share one
/// `queue` label. Every label of every series is counted.
#[tokio::test]
async fn forged_death_reasons_and_imported_queues_add_no_metrics_series() {
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &unique("cardinality")).await;
    let app = TestApp::spawn(&[&dlq]).await;
    for i in 0..200 {
        let mut death = FieldTable::default();
        death.insert("queue".into(), s(&work));
        death.insert("reason".into(), s(&format!("forged-{i}")));
        death.insert("count".into(), AMQPValue::LongLongInt(1));
        death.insert("exchange".into(), s(""));
        death.insert(
            "routing-keys".into(),
            AMQPValue::FieldArray(vec![s(&work)].into()),
        );
        let mut headers = FieldTable::default();
        headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()),
        );
        headers.insert("x-first-death-queue".into(), s(&work));
        headers.insert("x-first-death-reason".into(), s(&format!("forged-{i}")));
        headers.insert("x-first-death-exchange".into(), s(""));
        let props = json_props(&format!("forged-{i}")).with_headers(headers);
        t.publish("", &dlq, b"{}", props).await;
    }
    publish_many(&t.channel, "", &work, "real", 3).await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(203, Duration::from_secs(60)).await;
    worker.abort();

    // An export of one of them, imported back as 120 messages of 120 queues nobody consumes.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args([
            "export",
            "--queue",
            &dlq,
            "--database-url",
            &app.database_url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value = serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap())
        .expect("an exported line");
    let file = dir.path().join("queues.ndjson");
    let mut text = String::new();
    for i in 0..120 {
        let mut m = line.clone();
        m["queue"] = json!(format!("imported-{i:03}"));
        m["id"] = json!(format!("{}", 1_000_000 + i));
        text.push_str(&format!("{m}\n"));
    }
    std::fs::write(&file, text).unwrap();
    let imported = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args(["import", "--database-url", &app.database_url])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );

    let text = app.get("/metrics").await.text();
    let samples: Vec<Sample> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| parse_sample(l).unwrap_or_else(|| panic!("{l:?}")))
        .collect();
    let archived: Vec<&Sample> = samples
        .iter()
        .filter(|(name, _, _)| name == "lazarus_archived_messages")
        .collect();
    let label = |s: &Sample, name: &str| {
        s.1.iter()
            .find(|(l, _)| l == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut of_dlq: Vec<(String, f64)> = archived
        .iter()
        .filter(|s| label(s, "queue") == dlq)
        .map(|s| (label(s, "reason"), s.2))
        .collect();
    of_dlq.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        of_dlq,
        [("other".to_owned(), 200.0), ("rejected".to_owned(), 3.0)],
        "{text}"
    );
    let queues: std::collections::BTreeSet<String> =
        archived.iter().map(|s| label(s, "queue")).collect();
    // The consumed DLQ, the 50 largest others, and the rest summed.
    assert_eq!(queues.len(), 52, "{queues:?}");
    let rest: f64 = archived
        .iter()
        .filter(|s| label(s, "queue") == "(other queues)")
        .map(|s| s.2)
        .sum();
    assert_eq!(rest, 70.0, "{text}");
    // Every series of the scrape: 205 before the bounds (one per forged reason).
    let series = samples.len();
    assert!(series < 150, "{series} series:\n{text}");
    for (name, labels, _) in &samples {
        for (l, value) in labels {
            let bounded = match l.as_str() {
                "queue" => {
                    value == &dlq || value.starts_with("imported-") || value == "(other queues)"
                }
                "reason" => ["rejected", "other"].contains(&value.as_str()),
                // The import's lines name no broker: the default one's.
                "broker" => value == "default",
                "le" | "kind" | "outcome" => true,
                _ => false,
            };
            assert!(bounded, "{name} {l}={value:?}");
        }
    }
    t.cleanup().await;
}

/// A quorum DLQ, on RabbitMQ 4.x, drops a message once it was delivered 20 times (its
/// default delivery limit; a DLQ has nowhere to dead-letter it). During a database outage
/// Lazarus holds what it has and, once its connection is lost, takes nothing more until the
/// database answers: closing its connections 22 times costs one delivery, not every message.
async fn a_quorum_dlq_keeps_its_messages_through_an_outage_and_lost_connections() {
    let vhost = crate::brokers::Vhost::create("quorum");
    let dlq = "dlq";
    let mut t = Topology::on(&vhost.url()).await;
    t.queue(dlq, args(&[("x-queue-type", s("quorum"))])).await;
    let mut proxy = Some(database_proxy().await);
    let app = TestApp::spawn_with(&[dlq], |c| {
        c.connection.amqp_url = vhost.url().into();
        if let Some(proxy) = &proxy {
            c.connection.database_url = proxy.url(&c.connection.database_url).into();
        }
    })
    .await;
    wait_until("consuming", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    let outage = Outage::begin(&app.database_url, proxy.take()).await;
    for i in 0..20 {
        let id = format!("q-{i}");
        t.publish("", dlq, id.as_bytes(), json_props(&id)).await;
    }
    wait_until(
        "a database ingest error",
        Duration::from_secs(30),
        || async {
            app.get("/metrics").await.text().contains(
                "lazarus_ingest_errors_total{broker=\"default\",queue=\"dlq\",kind=\"database\"}",
            )
        },
    )
    .await;
    let broker = vhost.broker();
    // One more than the 20 deliveries 4.x allows.
    for _ in 0..22 {
        broker.close_connections(&vhost.name).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        broker.queue_messages(&vhost.name, dlq).await,
        20,
        "the broker still holds every message"
    );
    outage.end().await;
    app.wait_for_archived(20, Duration::from_secs(60)).await;
    let archived = app.all_messages(dlq).await;
    assert_eq!(archived.len(), 20);
    for m in archived {
        let detail = app
            .json(&format!("/api/messages/{}", m["id"].as_str().unwrap()), 200)
            .await;
        let count = detail["headers"]["x-delivery-count"]["value"]
            .as_i64()
            .unwrap_or(0);
        assert!(count <= 2, "delivered {count} times: {detail}");
    }
}

#[tokio::test]
async fn a_quorum_dlq_keeps_its_messages_through_an_outage_rabbitmq3() {
    crate::brokers::Broker::Rabbitmq3
        .scope(
            Backend::Postgres
                .scope(a_quorum_dlq_keeps_its_messages_through_an_outage_and_lost_connections()),
        )
        .await
}

#[tokio::test]
async fn a_quorum_dlq_keeps_its_messages_through_an_outage_rabbitmq4() {
    crate::brokers::Broker::Rabbitmq4
        .scope(
            Backend::Postgres
                .scope(a_quorum_dlq_keeps_its_messages_through_an_outage_and_lost_connections()),
        )
        .await
}

/// Messages that come back again and again are one step from being dropped by a quorum
/// DLQ's delivery limit: Lazarus says so on /readyz, the overview and in the log.
async fn a_rising_delivery_count_is_reported_before_messages_are_lost() {
    let vhost = crate::brokers::Vhost::create("limit");
    let dlq = "dlq";
    let mut t = Topology::on(&vhost.url()).await;
    t.queue(dlq, args(&[("x-queue-type", s("quorum"))])).await;
    t.publish("", dlq, b"{}", json_props("returned")).await;
    // Another consumer takes it and gives it back, three times (a closed channel counts on
    // every version).
    for _ in 0..3 {
        let channel = t.connection.create_channel().await.unwrap();
        channel
            .basic_qos(1, lapin::options::BasicQosOptions::default())
            .await
            .unwrap();
        let mut consumer = channel
            .basic_consume(
                dlq.into(),
                "".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        use futures_util::StreamExt;
        let _ = tokio::time::timeout(Duration::from_secs(5), consumer.next())
            .await
            .expect("delivered");
        channel.close(200, "giving it back".into()).await.unwrap();
    }
    let app = TestApp::spawn_with(&[dlq], |c| c.connection.amqp_url = vhost.url().into()).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let ready = app.json("/readyz", 200).await;
    let warning = ready["warnings"][dlq].as_str().unwrap_or_default();
    assert!(warning.contains("delivered 3 times"), "{ready}");
    assert!(warning.contains("delivery-limit: -1"), "{warning}");
    let page = app.get("/").await.text();
    assert!(page.contains("delivered 3 times"), "the overview shows it");
}

on_both_brokers!(a_rising_delivery_count_is_reported_before_messages_are_lost);

/// A dead letter from a quorum queue that used its deliveries there arrives with its
/// source's `x-delivery-count`. RabbitMQ 4.3 counts it against the DLQ's own limit, so the
/// DLQ is at risk and Lazarus says why; before 4.3 the DLQ counts afresh, and the carried
/// count raises nothing.
async fn a_dead_letters_carried_delivery_count_is_judged_as_the_broker_counts_it() {
    let vhost = crate::brokers::Vhost::create("carried");
    let broker = vhost.broker();
    let (source, dlq) = ("work", "work.dlq");
    let mut t = Topology::on(&vhost.url()).await;
    t.exchange("dlx", lapin::ExchangeKind::Fanout).await;
    t.queue(dlq, args(&[("x-queue-type", s("quorum"))])).await;
    t.bind(dlq, "dlx", "").await;
    t.queue(
        source,
        args(&[
            ("x-queue-type", s("quorum")),
            ("x-delivery-limit", lapin::types::AMQPValue::LongInt(3)),
            ("x-dead-letter-exchange", s("dlx")),
        ]),
    )
    .await;
    t.publish("", source, b"{}", json_props("spent")).await;
    // A consumer of the source takes it and gives it back until the source's limit
    // dead-letters it (a closed channel counts on every version).
    let start = std::time::Instant::now();
    while broker.queue_messages(&vhost.name, dlq).await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never dead-lettered"
        );
        let channel = t.connection.create_channel().await.unwrap();
        let got = channel
            .basic_get(source.into(), lapin::options::BasicGetOptions::default())
            .await
            .unwrap();
        channel.close(200, "giving it back".into()).await.unwrap();
        if got.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let app = TestApp::spawn_with(&[dlq], |c| c.connection.amqp_url = vhost.url().into()).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let message = &app.all_messages(dlq).await[0];
    let detail = app
        .json(
            &format!("/api/messages/{}", message["id"].as_str().unwrap()),
            200,
        )
        .await;
    let carried = detail["headers"]["x-delivery-count"]["value"]
        .as_i64()
        .unwrap_or(0);
    let version = broker.ctl(&["version"]);
    let mut parts = version
        .trim()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let ready = app.json("/readyz", 200).await;
    let warning = ready["warnings"][dlq]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if version >= (4, 3) {
        assert!(carried >= 3, "4.3 carries the source's count: {detail}");
        assert!(
            warning.contains(&format!("having spent {carried} deliveries already")),
            "{ready}"
        );
        assert!(warning.contains("limit is 20 unless"), "{warning}");
        assert!(!warning.contains("have been delivered"), "{warning}");
    } else {
        assert_eq!(warning, "", "{version:?} counts afresh in the DLQ: {ready}");
    }
    t.cleanup().await;
}

on_both_brokers!(a_dead_letters_carried_delivery_count_is_judged_as_the_broker_counts_it);

/// With `--management-url`, a quorum DLQ's delivery limit is read from the broker before
/// any message has come back: RabbitMQ 4's default of 20 is reported on /readyz and the
/// overview, a DLQ whose policy turns the limit off is not, and a management API that does
/// not answer leaves ingest alone.
#[tokio::test]
async fn a_finite_delivery_limit_is_read_from_the_management_api_rabbitmq4() {
    let broker = crate::brokers::Broker::Rabbitmq4;
    broker
        .scope(async {
            let vhost = crate::brokers::Vhost::create("mgmt");
            let (limited, unlimited) = ("limited.dlq", "unlimited.dlq");
            broker.ctl(&[
                "set_policy",
                "-p",
                &vhost.name,
                "--apply-to",
                "quorum_queues",
                "no-limit",
                "^unlimited\\.dlq$",
                r#"{"delivery-limit": -1}"#,
            ]);
            let mut t = Topology::on(&vhost.url()).await;
            for dlq in [limited, unlimited] {
                t.queue(dlq, args(&[("x-queue-type", s("quorum"))])).await;
                t.publish("", dlq, b"{}", json_props(dlq)).await;
            }
            let management = broker
                .management_url()
                .expect("4.x runs the management API");
            let mut app = TestApp::spawn_with(&[limited, unlimited], |c| {
                c.connection.amqp_url = vhost.url().into();
                c.management_urls = vec![management.parse().unwrap()];
            })
            .await;
            app.wait_for_archived(2, Duration::from_secs(10)).await;
            // The broker gathers a queue's policy every few seconds, later under the load of
            // the other tests (CI once waited more than 40 s on RabbitMQ 4.0).
            wait_until("a warning", Duration::from_secs(120), || async {
                app.json("/readyz", 200).await["warnings"][limited].is_string()
            })
            .await;
            let ready = app.json("/readyz", 200).await;
            let warning = ready["warnings"][limited].as_str().unwrap_or_default();
            assert!(warning.contains("more than 20 times"), "{ready}");
            assert!(warning.contains("delivery-limit: -1"), "{warning}");
            assert!(app.get("/").await.text().contains("more than 20 times"));
            // Give the unlimited DLQ's check as long again: it still has no warning.
            tokio::time::sleep(Duration::from_secs(6)).await;
            let ready = app.json("/readyz", 200).await;
            assert!(ready["warnings"][unlimited].is_null(), "{ready}");

            app.stop().await;
            // Nothing listens there: logged, and ingest goes on.
            let silent = TestApp::spawn_with(&[limited], |c| {
                c.connection.amqp_url = vhost.url().into();
                c.management_urls = vec!["http://127.0.0.1:9".parse().unwrap()];
            })
            .await;
            t.publish("", limited, b"{}", json_props("after")).await;
            silent.wait_for_archived(1, Duration::from_secs(10)).await;
            assert!(silent.json("/readyz", 200).await["warnings"][limited].is_null());
        })
        .await
}

/// Restarts while the archive refuses writes (here a locked SQLite file) take no deliveries:
/// each would go back on stop, raising a quorum DLQ's delivery count toward its limit.
async fn restarts_while_the_archive_refuses_writes_take_no_deliveries() {
    let vhost = crate::brokers::Vhost::create("restarts");
    let dlq = "dlq";
    let mut t = Topology::on(&vhost.url()).await;
    t.queue(dlq, args(&[("x-queue-type", s("quorum"))])).await;
    let mut first =
        TestApp::spawn_with(&[dlq], |c| c.connection.amqp_url = vhost.url().into()).await;
    wait_until("consuming", Duration::from_secs(10), || async {
        first.get("/readyz").await.status == 200
    })
    .await;
    let outage = Outage::begin(&first.database_url, None).await;
    for i in 0..20 {
        let id = format!("r-{i}");
        t.publish("", dlq, id.as_bytes(), json_props(&id)).await;
    }
    wait_until(
        "a database ingest error",
        Duration::from_secs(30),
        || async {
            first.get("/metrics").await.text().contains(
                "lazarus_ingest_errors_total{broker=\"default\",queue=\"dlq\",kind=\"database\"}",
            )
        },
    )
    .await;
    // Stopping with a batch the archive did not take gives it back: once.
    first.stop().await;
    let url = first.database_url.clone();
    for _ in 0..5 {
        let mut again = TestApp::spawn_with(&[dlq], |c| {
            c.connection.amqp_url = vhost.url().into();
            c.connection.database_url = url.clone().into();
        })
        .await;
        wait_until(
            "the archive refusing writes",
            Duration::from_secs(15),
            || async {
                again.json("/readyz", 503).await["queues"][dlq]["state"] == "database_unavailable"
            },
        )
        .await;
        again.stop().await;
    }
    outage.end().await;
    let last = TestApp::spawn_with(&[dlq], |c| {
        c.connection.amqp_url = vhost.url().into();
        c.connection.database_url = url.clone().into();
    })
    .await;
    last.wait_for_archived(20, Duration::from_secs(30)).await;
    for m in last.all_messages(dlq).await {
        let detail = last
            .json(&format!("/api/messages/{}", m["id"].as_str().unwrap()), 200)
            .await;
        let count = detail["headers"]["x-delivery-count"]["value"]
            .as_i64()
            .unwrap_or(0);
        assert!(count <= 2, "delivered {count} times, not once per restart");
    }
}

on_both_brokers!(restarts_while_the_archive_refuses_writes_take_no_deliveries);

/// Lazarus started while PostgreSQL does not answer: it serves (pages and `/readyz` say the
/// database is unavailable), consumes nothing, and once the database answers it migrates the
/// archive and archives what waited in the DLQ — no exit, so no supervisor's restart loop.
#[tokio::test]
async fn started_while_postgresql_is_down_it_waits_for_it() {
    Backend::Postgres
        .scope(async {
            let dlq = unique("pgdown");
            let mut t = Topology::new().await;
            t.queue(&dlq, FieldTable::default()).await;
            for i in 0..5 {
                t.publish("", &dlq, b"{}", json_props(&format!("waited-{i}")))
                    .await;
            }
            let mut proxy = database_proxy().await;
            proxy.down().await;
            let app = TestApp::spawn_with(&[&dlq], |c| {
                c.connection.database_url = proxy.url(&c.connection.database_url).into();
            })
            .await;
            assert_eq!(app.get("/healthz").await.status, 200);
            let ready = app.json("/readyz", 503).await;
            assert_eq!(ready["database"]["state"], "unavailable", "{ready}");
            // The overview answers, and says why above everything; the list cannot.
            let overview = app.get("/").await;
            assert_eq!(overview.status, 200);
            assert!(
                overview.text().contains("The database is unreachable"),
                "{}",
                overview.text()
            );
            for path in ["/messages", "/api/messages"] {
                let page = app.get(path).await;
                assert_eq!(page.status, 503, "{path}: {}", page.text());
                assert!(
                    page.text().contains("database is unavailable"),
                    "{path}: {}",
                    page.text()
                );
            }
            // Nothing is taken from the DLQ while nothing could be stored (the queue's own
            // count, not the broker's statistics, which lag).
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(t.depth(&dlq).await, 5);

            proxy.up().await;
            wait_until("ready", Duration::from_secs(30), || async {
                app.get("/readyz").await.status == 200
            })
            .await;
            wait_until("archived", Duration::from_secs(30), || async {
                app.all_messages(&dlq).await.len() == 5
            })
            .await;
            assert_eq!(t.depth(&dlq).await, 0);
            t.cleanup().await;
        })
        .await
}

/// An archive that refuses inserts (here a trigger; in the field a broken disk or a
/// mis-set permission) while it still takes the write lock: Lazarus takes no delivery from
/// the DLQ, across restarts, so none is handed back (on a quorum queue each return counts
/// toward its delivery limit, past which the broker drops the message). Once the archive
/// takes writes again, every message is archived as a first delivery.
async fn an_archive_that_refuses_inserts_takes_no_deliveries_across_restarts() {
    let dlq = unique("refuses");
    let mut t = Topology::new().await;
    t.queue(&dlq, args(&[("x-queue-type", s("quorum"))])).await;
    // Made and migrated first, then told to refuse.
    let mut first = TestApp::spawn(&[]).await;
    first.stop().await;
    let url = first.database_url.clone();
    let (refuse, allow) = match Backend::current() {
        Backend::Sqlite => (
            "CREATE TRIGGER refuse BEFORE INSERT ON messages \
             BEGIN SELECT RAISE(ABORT, 'this archive refuses inserts'); END",
            "DROP TRIGGER refuse",
        ),
        Backend::Postgres => (
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'this archive refuses inserts'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse()",
            "DROP TRIGGER refuse ON messages",
        ),
    };
    execute_sql(&url, refuse).await;
    for i in 0..5 {
        t.publish("", &dlq, b"{}", json_props(&format!("refused-{i}")))
            .await;
    }
    // A supervisor restarting it, again and again.
    for _ in 0..3 {
        let mut app =
            TestApp::spawn_with(&[&dlq], |c| c.connection.database_url = url.clone().into()).await;
        wait_until("the refusal reported", Duration::from_secs(20), || async {
            let ready = app.get("/readyz").await;
            serde_json::from_slice::<Value>(&ready.body).unwrap()["queues"][&dlq]["state"]
                == "database_unavailable"
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The queue's own count (not the broker's statistics, which lag): all 5 still ready.
        assert_eq!(
            t.depth(&dlq).await,
            5,
            "a delivery taken while nothing can be stored"
        );
        app.stop().await;
    }

    execute_sql(&url, allow).await;
    let app =
        TestApp::spawn_with(&[&dlq], |c| c.connection.database_url = url.clone().into()).await;
    wait_until("archived", Duration::from_secs(30), || async {
        app.all_messages(&dlq).await.len() == 5
    })
    .await;
    let redelivered = count_rows(&url, "SELECT count(*) FROM messages WHERE redelivered").await;
    assert_eq!(
        redelivered, 0,
        "each was delivered once, to the archive that kept it"
    );
    t.cleanup().await;
    drop(first);
}

on_both_brokers!(
    an_archive_that_refuses_inserts_takes_no_deliveries_across_restarts,
    on_both_backends
);

//! Every failure path of ingest has an answer: a missing queue, an unreachable broker, a
//! locked or unreachable database, malformed death headers, huge / binary / compressed / empty bodies, a
//! shutdown with a batch in flight, redeliveries of what is already archived.

use std::io::Write;
use std::time::{Duration, Instant};

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use lazarus::amqp::headers::MessageProperties;
use lazarus::archive::{IncomingMessage, PreparedMessage};
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
            "lazarus_ingest_errors_total{{queue=\"{dlq}\",kind=\"queue_missing\"}}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("lazarus_consumer_connected{{queue=\"{dlq}\"}} 0")),
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
    assert_eq!(app.json("/api/messages", 200).await["messages"], json!([]));
}

/// The archive stops answering: on SQLite another process holds the write lock for longer
/// than Lazarus's busy timeout; on PostgreSQL the database refuses connections and Lazarus's
/// are cut (as in a failover or a restart).
enum Outage {
    Locked(sqlx::SqliteConnection),
    Refused(sqlx::PgConnection, String),
}

impl Outage {
    async fn begin(database_url: &str) -> Outage {
        if database_url.starts_with("sqlite:") {
            let mut locker = sqlx::SqliteConnection::connect(database_url).await.unwrap();
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut locker)
                .await
                .unwrap();
            return Outage::Locked(locker);
        }
        let name = database_url.rsplit('/').next().unwrap().to_owned();
        let mut admin = sqlx::PgConnection::connect(&postgres_admin_url())
            .await
            .unwrap();
        sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
            .execute(&mut admin)
            .await
            .unwrap();
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(&name)
            .execute(&mut admin)
            .await
            .unwrap();
        Outage::Refused(admin, name)
    }

    async fn end(self) {
        match self {
            Outage::Locked(mut locker) => {
                sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
            }
            Outage::Refused(mut admin, name) => {
                sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            }
        }
    }
}

on_both_backends!(unavailable_database_holds_deliveries_unacked_until_it_recovers);
async fn unavailable_database_holds_deliveries_unacked_until_it_recovers() {
    let dlq = unique("locked");
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    wait_until("consuming", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;

    let outage = Outage::begin(&app.database_url).await;
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
                "lazarus_ingest_errors_total{{queue=\"{dlq}\",kind=\"database\"}}"
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
    // Readers: a locked SQLite file still reads; a PostgreSQL that refuses connections makes
    // pages and API answer 503 with a plain message, not an error page or a hang.
    match &outage {
        Outage::Locked(_) => {
            assert!(app.archive.counts().await.unwrap().is_empty());
            assert_eq!(app.get("/messages").await.status, 200);
        }
        Outage::Refused(..) => {
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
    app.wait_for_archived(20, Duration::from_secs(30)).await;
    assert_eq!(app.all_messages(&dlq).await.len(), 20);
    wait_until("ready again", Duration::from_secs(10), || async {
        app.get("/readyz").await.status == 200
    })
    .await;
    t.cleanup().await;
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
        queue: "dlq".into(),
        exchange: "dlx".into(),
        routing_key: "k".into(),
        redelivered,
        properties: MessageProperties::default(),
        headers: None,
        body: b"same bytes".to_vec(),
        received_at: time::OffsetDateTime::now_utc(),
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

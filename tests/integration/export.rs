//! The export, on both backends: broker-made dead letters with typed headers, a binary body
//! and a 16 MiB one, a dismissed message and a replayed one come out of `lazarus export` and
//! `GET /api/export` whole — the body's bytes, every header with its type, the status with
//! its note, the replay records — a line each; the file is its owner's only, the API admins'.

use std::time::Duration;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::{json, Value};

use crate::helpers::*;

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

on_both_backends!(exported_messages_keep_their_bytes_types_status_and_replays);
async fn exported_messages_keep_their_bytes_types_status_and_replays() {
    let p = unique("export");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let keep = format!("{p}.keep");
    t.queue(&keep, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;

    let mut h = FieldTable::default();
    h.insert("i8".into(), AMQPValue::ShortShortInt(-8));
    h.insert("f64".into(), AMQPValue::Double(2.5));
    h.insert("when".into(), AMQPValue::Timestamp(1_764_669_600));
    h.insert(
        "raw".into(),
        AMQPValue::LongString(vec![0u8, 159, 146, 150].into()),
    );
    let typed = BasicProperties::default()
        .with_message_id("typed".into())
        .with_priority(3)
        .with_headers(h);
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let big: Vec<u8> = (0..16 * 1024 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    t.publish("", &work, b"{\"n\":1}", typed).await;
    t.publish("", &work, &binary, json_props("binary")).await;
    t.publish("", &work, &big, json_props("big")).await;
    t.publish("", &work, b"dismiss me", json_props("dismissed"))
        .await;
    t.publish("", &work, b"replay me", json_props("replayed"))
        .await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(5, Duration::from_secs(30)).await;
    worker.abort();
    let id_of = |m: &str| {
        let (app, dlq, m) = (&app, dlq.clone(), m.to_owned());
        async move {
            app.detail_by_message_id(&dlq, &m).await["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let dismissed = id_of("dismissed").await;
    app.post_json(
        &format!("/api/messages/{dismissed}/dismiss"),
        json!({"note": "refunded by hand"}),
        200,
    )
    .await;
    let replayed = id_of("replayed").await;
    app.post_json(
        &format!("/api/messages/{replayed}/replay"),
        json!({"target": {"exchange": "", "routing_key": keep}}),
        200,
    )
    .await;

    // The command line, into a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.ndjson");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args([
            "export",
            "--queue",
            &dlq,
            "--database-url",
            &app.database_url,
        ])
        .arg("--output")
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("exported 5 messages"), "{said}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner may read the bodies");
    }
    let exported = lines(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(exported.len(), 5);
    let by_id = |m: &str| {
        exported
            .iter()
            .find(|e| e["properties"]["message_id"] == m)
            .unwrap_or_else(|| panic!("{m} exported"))
            .clone()
    };
    let body = |e: &Value| BASE64.decode(e["body"].as_str().unwrap()).unwrap();
    assert_eq!(body(&by_id("binary")), binary);
    assert_eq!(body(&by_id("big")), big, "16 MiB, byte for byte");
    let typed = by_id("typed");
    assert_eq!(
        typed["headers"]["i8"],
        json!({"type": "short-short-int", "value": -8})
    );
    assert_eq!(
        typed["headers"]["f64"],
        json!({"type": "double", "value": 2.5})
    );
    assert_eq!(typed["headers"]["when"]["type"], "timestamp");
    assert_eq!(typed["properties"]["priority"], 3);
    let detail = app.detail_by_message_id(&dlq, "typed").await;
    assert_eq!(
        typed["headers"], detail["headers"],
        "every header as archived"
    );
    assert_eq!(typed["properties"], detail["properties"]);
    // Delivered into the DLQ by the dead-letter exchange, with the original routing key.
    assert_eq!(typed["exchange"], format!("{p}.dlx"));
    assert_eq!(typed["routing_key"], work);
    assert_eq!(
        typed["headers"]["x-death"]["value"][0]["value"]["queue"]["value"], work,
        "the death history the broker wrote"
    );
    let d = by_id("dismissed");
    assert_eq!(d["status"], "dismissed");
    assert_eq!(d["status_note"], "refunded by hand");
    assert!(d["status_at"].is_string());
    let r = by_id("replayed");
    assert_eq!(r["replays"][0]["outcome"], "published", "{r}");
    assert_eq!(r["replays"][0]["target"]["routing_key"], keep.as_str());
    let ids: Vec<u64> = exported
        .iter()
        .map(|e| e["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order: {ids:?}");

    // The API streams the same, to admins; a filter narrows it; it is audited.
    let api = app.get(&format!("/api/export?queue={dlq}")).await;
    assert_eq!(api.status, 200);
    assert_eq!(api.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(lines(&api.text()), exported);
    let one = lines(
        &app.get(&format!("/api/export?queue={dlq}&q=dismiss"))
            .await
            .text(),
    );
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["status"], "dismissed");
    let bad = app.get("/api/export?since=yesterday").await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let audit = app.json("/api/audit", 200).await;
    assert_eq!(audit["entries"][0]["action"], "export");
    t.cleanup().await;
}

//! No request can starve the server: connections that never finish their headers are
//! closed and counted against a limit (the binary under a small open-file limit keeps
//! archiving), searches that would cost too much are refused with a message, bad input is
//! a 4xx on both backends, and what anonymous callers and the filesystem get to see.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::{as_user, sign_in, users_app, PASSWORD};
use crate::helpers::*;
use crate::served::Served;

#[tokio::test]
async fn connections_that_never_finish_their_headers_cannot_exhaust_the_server() {
    let p = unique("slowloris");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("archive.db").display());
    let served = Served::start(&dlq, &db, &["--header-timeout-secs", "2"], Some(256)).await;

    // More half-sent requests than the process has file descriptors.
    let mut slow = Vec::new();
    for _ in 0..400 {
        let Ok(mut stream) = TcpStream::connect(served.addr).await else {
            break;
        };
        if stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .is_ok()
        {
            slow.push(stream);
        }
    }
    assert!(slow.len() >= 300, "only {} connections opened", slow.len());

    // The server still answers, and still archives (it has descriptors for the broker and
    // the database).
    let health = tokio::time::timeout(Duration::from_secs(60), http_get(served.addr, "/healthz"))
        .await
        .expect("/healthz answers while slow clients hold connections");
    assert_eq!(health.status, 200);
    publish_many(&t.channel, "", &dlq, "slowloris", 1).await;
    // Every 200 ms: each look is one more connection to a server under attack.
    let patience = Patience::within(Duration::from_secs(60)).every(Duration::from_millis(200));
    wait_until(
        "a message published during the attack to be archived",
        patience,
        async || {
            let page = http_get(served.addr, &format!("/api/messages?queue={dlq}")).await;
            let page: Value = serde_json::from_slice(&page.body).unwrap();
            page["messages"].as_array().is_some_and(|m| m.len() == 1)
        },
    )
    .await;
    // Every slow connection was closed by the server.
    for mut stream in slow {
        let mut buf = [0u8; 512];
        let closed = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a connection without headers stayed open");
    }
    t.cleanup().await;
}

on_both_backends!(searches_that_would_cost_too_much_are_refused_with_a_message);
async fn searches_that_would_cost_too_much_are_refused_with_a_message() {
    let app = TestApp::spawn(&[]).await;
    let letters: Vec<String> = (0..166)
        .map(|i| format!("{}*", char::from(b'a' + (i % 26) as u8)))
        .collect();
    let many_words: Vec<String> = (0..17).map(|i| format!("word{i}")).collect();
    for (q, says) in [
        (letters.join(" "), "at least"),
        ("a*".to_owned(), "at least 3"),
        ("in*".to_owned(), "at least 3"),
        (many_words.join(" "), "at most 16"),
        ("inv* tax* serv* pay* ord* cust*".to_owned(), "at most 4"),
    ] {
        let path = format!(
            "/api/messages?q={}",
            form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>()
        );
        let answer = app.json(&path, 400).await;
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(says), "{q:?}: {error}");
        let page = app.get(&path.replacen("/api", "", 1)).await;
        assert_eq!(page.status, 400);
        assert!(page.text().contains(says), "the page says so too");
    }
    for fine in [
        "inv*",
        "INV-2026-00042 timeout \"tax service\"",
        "queue:x inv* pay*",
    ] {
        let path = format!(
            "/api/messages?q={}",
            form_urlencoded::byte_serialize(fine.as_bytes()).collect::<String>()
        );
        app.json(&path, 200).await;
    }
}

on_both_backends!(nul_in_a_search_or_a_filter_is_a_bad_request);
async fn nul_in_a_search_or_a_filter_is_a_bad_request() {
    let app = TestApp::spawn(&[]).await;
    for path in [
        "/api/messages?q=a%00b",
        "/api/messages?queue=a%00b",
        "/api/messages?error=%00",
        "/api/messages?q=invoice:%00",
        "/messages?routing_key=x%00",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.text().contains("NUL"), "{path}: {}", r.text());
    }
    let plan = http_request(
        app.addr,
        "POST",
        "/api/replays",
        Some(&json!({"filter": {"queue": "a\u{0}b"}, "dry_run": true}).to_string()),
    )
    .await;
    assert_eq!(plan.status, 400, "{}", plan.text());
}

on_both_backends!(a_request_key_names_one_replay_and_one_job);
async fn a_request_key_names_one_replay_and_one_job() {
    let p = unique("keys");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    for i in 0..2 {
        t.publish("", &work, b"{}", json_props(&format!("key-{i}")))
            .await;
    }
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(2, Duration::from_secs(10)).await;
    worker.abort();
    let ids = app.ids(&dlq).await;
    let first = app
        .post_json(
            &format!("/api/messages/{}/replay", ids[0]),
            json!({"request_key": "once"}),
            200,
        )
        .await;
    assert_eq!(first["outcome"], "published");
    let reused = app
        .post_json(
            &format!("/api/messages/{}/replay", ids[1]),
            json!({"request_key": "once"}),
            409,
        )
        .await;
    assert!(reused["error"]
        .as_str()
        .unwrap()
        .contains("another message"));
    assert_eq!(
        app.json(&format!("/api/messages/{}", ids[1]), 200).await["status"],
        "archived",
        "nothing was replayed"
    );
    // A job's key, reused for another selection, is refused the same way.
    let plan = |ids: &[String]| json!({"ids": ids, "request_key": "plan-once", "dry_run": true});
    let a = app.post_json("/api/replays", plan(&ids[..1]), 200).await;
    let again = app.post_json("/api/replays", plan(&ids[..1]), 200).await;
    assert_eq!(a["id"], again["id"]);
    let other = app.post_json("/api/replays", plan(&ids[1..]), 409).await;
    assert!(
        other["error"].as_str().unwrap().contains("request_key"),
        "{other}"
    );
    t.cleanup().await;
}

on_both_backends!(anonymous_readiness_says_only_whether_it_is_ready);
async fn anonymous_readiness_says_only_whether_it_is_ready() {
    let (app, t, dlq, _) = users_app(|c| c.queues.push("t.missing.queue.for.readyz".into())).await;
    let anonymous = app.get("/readyz").await;
    assert_eq!(anonymous.status, 503);
    let text = anonymous.text();
    assert!(
        !text.contains(&dlq) && !text.contains("t.missing"),
        "{text}"
    );
    let anonymous: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(anonymous["ready"], false);
    // Whether the database answers, never what it said (an anonymous answer has no room for
    // an error's text, queue states or warnings).
    let mut keys: Vec<&String> = anonymous.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["database", "ready"], "{anonymous}");
    assert_eq!(anonymous["database"], json!({"state": "ok"}));
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    // The missing queue's consumer says so once its first passive declare has failed.
    let what = format!("/readyz to say {dlq} is missing");
    wait_showing(&what, Duration::from_secs(15), async || {
        let detailed = as_user(&app, &vera, "GET", "/readyz", None).await.text();
        if detailed.contains(&dlq) && detailed.contains("queue_missing") {
            Ok(())
        } else {
            Err(detailed)
        }
    })
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn the_sqlite_archive_is_readable_by_its_owner_only() {
    let app = TestApp::spawn(&[]).await;
    let path = app
        .database_url
        .strip_prefix("sqlite://")
        .unwrap()
        .to_owned();
    // A write makes sure the WAL and its index exist.
    app.archive
        .record(&lazarus::archive::Actor::system("test"), "test", "a write")
        .await
        .unwrap();
    for file in [path.clone(), format!("{path}-wal"), format!("{path}-shm")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file} is {mode:o}");
    }
    // An archive made earlier with wider permissions is narrowed when it is opened.
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    std::fs::write(&old, b"").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    lazarus::archive::open(&format!("sqlite://{}", old.display()))
        .await
        .unwrap();
    let mode = std::fs::metadata(&old).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// The binary fixes glibc's mmap threshold (by re-executing itself, same pid), so freed
/// 16 MiB bodies go back to the system: a burst of them, dead-lettered by the broker, leaves
/// the process's peak resident memory under the 150 MiB the archive promises.
#[tokio::test]
async fn sixteen_mib_dead_letters_are_given_back_to_the_system() {
    let p = unique("bigbodies");
    let mut t = Topology::new().await;
    let (work, dlx, dlq) = (format!("{p}.work"), format!("{p}.dlx"), format!("{p}.dlq"));
    t.exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    // Every message expires at once and is dead-lettered into the DLQ.
    let expiring = args(&[
        ("x-dead-letter-exchange", s(&dlx)),
        ("x-message-ttl", lapin::types::AMQPValue::LongInt(0)),
    ]);
    t.queue(&work, expiring).await;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("archive.db").display());
    let served = Served::start(&dlq, &db, &[], None).await;

    let environ = std::fs::read(format!("/proc/{}/environ", served.pid)).unwrap();
    let threshold = format!(
        "{}={}",
        lazarus::support::memory::MMAP_THRESHOLD_VAR,
        lazarus::support::memory::MMAP_THRESHOLD_BYTES
    );
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|v| v == threshold.as_bytes()),
        "the served process (the test's own child, pid {}) runs with {threshold}",
        served.pid
    );

    // Three 16 MiB dead letters among small ones, as the ingest benchmark sends them.
    for i in 0..3u8 {
        let big = vec![b'a' + i; 16 * 1024 * 1024];
        t.publish("", &work, &big, Default::default()).await;
        publish_many(&t.channel, "", &work, &format!("small{i}"), 3000).await;
    }
    let ingested =
        format!("lazarus_ingested_messages_total{{broker=\"default\",queue=\"{dlq}\"}} 9003");
    // Every 200 ms: the server's peak memory is measured next.
    let patience = Patience::within(Duration::from_secs(120)).every(Duration::from_millis(200));
    wait_until("9,003 dead letters to be archived", patience, async || {
        http_get(served.addr, "/metrics")
            .await
            .text()
            .contains(&ingested)
    })
    .await;
    let peak = served.peak_rss_mib();
    eprintln!("peak RSS with three 16 MiB dead letters: {peak} MiB");
    assert!(
        peak < 150,
        "three 16 MiB dead letters took the server to {peak} MiB"
    );
    t.cleanup().await;
}

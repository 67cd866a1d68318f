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
    t.publish("", &work, b"dies again", json_props("again"))
        .await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(6, Duration::from_secs(30)).await;
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
    // Its copy dies again (the consumer still fails) and is archived pointing back at it.
    let again = id_of("again").await;
    app.post_json(&format!("/api/messages/{again}/replay"), json!({}), 200)
        .await;
    app.wait_for_archived(7, Duration::from_secs(30)).await;
    worker.abort();

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
    assert!(said.contains("exported 7 messages"), "{said}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner may read the bodies");
    }
    let exported = lines(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(exported.len(), 7);
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
    let copy = exported.iter().find(|e| !e["replay_of"].is_null()).unwrap();
    assert_eq!(copy["replay_of"], by_id("again")["id"]);
    assert_eq!(by_id("again")["status"], "died_again");
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

    // Back into an archive of the other backend: the same, twice over.
    let other = match Backend::current() {
        Backend::Sqlite => Backend::Postgres,
        Backend::Postgres => Backend::Sqlite,
    };
    let source = app.database_url.clone();
    other
        .scope(import_into_a_new_archive(&file, &exported, &dlq, &source))
        .await;
    t.cleanup().await;
}

/// `lazarus import` of `file` into a new archive of the current backend: what it exports
/// then is what was exported (but the ids), its totals are the source's, its search finds
/// them, and a second import adds nothing.
async fn import_into_a_new_archive(
    file: &std::path::Path,
    exported: &[Value],
    dlq: &str,
    source: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let lazarus = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .args(args)
            .args(["--database-url", &url])
            .output()
            .unwrap()
    };
    let path = file.to_str().unwrap();
    let first = lazarus(&["import", path]);
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    assert!(
        said.contains("imported 7 messages; 0 were in the archive already"),
        "{said}"
    );
    let again = lazarus(&["export"]);
    assert!(again.status.success());
    let mut again = lines(&String::from_utf8_lossy(&again.stdout));
    // The copy points at the original's new id.
    let id_in = |lines: &[Value], of: &str| {
        lines
            .iter()
            .find(|e| e["properties"]["message_id"] == of && e["replay_of"].is_null())
            .unwrap()["id"]
            .clone()
    };
    let copy = again.iter().find(|e| !e["replay_of"].is_null()).unwrap();
    assert_eq!(copy["replay_of"], id_in(&again, "again"));
    let mut before = exported.to_vec();
    for line in again.iter_mut().chain(before.iter_mut()) {
        let line = line.as_object_mut().unwrap();
        line.remove("id");
        line.remove("replay_of");
    }
    assert_eq!(
        again, before,
        "byte for byte, types, status, notes and replays"
    );
    let totals =
        "SELECT CAST(sum(messages) AS BIGINT) * 1000 + CAST(sum(open_messages) AS BIGINT) \
                  FROM queue_reason_counts";
    assert_eq!(
        count_rows(&url, totals).await,
        count_rows(source, totals).await,
        "the same totals and open counts"
    );
    // Open: archived, replayed (settling), and the copy; not the dismissed one, nor the
    // original whose copy died again.
    assert_eq!(count_rows(&url, totals).await, 7 * 1000 + 5);
    let second = lazarus(&["import", path]);
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{said}");
    assert!(
        said.contains("imported 0 messages; 7 were in the archive already"),
        "{said}"
    );
    let mut app =
        TestApp::spawn_with(&[], |c| c.connection.database_url = url.clone().into()).await;
    assert_eq!(app.archived().await, 7);
    assert_eq!(app.found(dlq, "dismiss").await.len(), 1, "searchable");
    app.stop().await;
}

#[tokio::test]
async fn an_import_refuses_a_line_that_is_not_an_export_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("a.db").display());
    let file = dir.path().join("broken.ndjson");
    std::fs::write(&file, "\n{\"id\": \"1\", \"queue\": \"q\"}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .arg("import")
        .arg(&file)
        .args(["--database-url", &db])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("line 2 refused: not an exported message"),
        "{said}"
    );
    assert!(said.contains("missing field"), "{said}");
    assert!(said.contains("1 lines refused"), "{said}");
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args([
            "import",
            "/nonexistent/export.ndjson",
            "--database-url",
            &db,
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("opening /nonexistent/export.ndjson"));
}

/// An exported line of a message of `vhost` (empty: the importing instance's) and `queue`.
fn exported(id: i64, vhost: &str, queue: &str) -> lazarus::archive::ExportedMessage {
    lazarus::archive::ExportedMessage {
        id,
        queue: queue.into(),
        vhost: vhost.into(),
        broker: "default".into(),
        archived_at: time::OffsetDateTime::now_utc(),
        exchange: "dlx".into(),
        routing_key: "work".into(),
        redelivered: false,
        properties: Default::default(),
        headers: None,
        body: format!("message {id}").into_bytes(),
        unread_body: None,
        status: lazarus::archive::MessageStatus::Archived,
        status_note: None,
        status_at: None,
        replayed_at: None,
        replay_of: None,
        replays: Vec::new(),
    }
}

/// One line of `m` with its body replaced by `body_chars` characters of base64 (`A`: zero
/// bytes), written in pieces so that the test does not hold it whole.
fn write_big_line(
    out: &mut dyn std::io::Write,
    m: &lazarus::archive::ExportedMessage,
    body_chars: usize,
) -> usize {
    let mut m = m.clone();
    m.body = Vec::new();
    let line = serde_json::to_string(&m).unwrap();
    let (before, after) = line.split_once("\"body\":\"\"").expect("an empty body");
    out.write_all(before.as_bytes()).unwrap();
    out.write_all(b"\"body\":\"").unwrap();
    let chunk = vec![b'A'; 1 << 20];
    let mut left = body_chars;
    while left > 0 {
        let n = left.min(chunk.len());
        out.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    out.write_all(b"\"").unwrap();
    out.write_all(after.as_bytes()).unwrap();
    out.write_all(b"\n").unwrap();
    before.len() + after.len() + body_chars + 10
}

/// A field of /proc/PID/FILE (`VmHWM` of status, `rchar` of io), as a number.
fn proc_field(pid: u32, file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A hostile export, through standard input: a 300 MB line, a 150 MiB body, a 129 MiB one
/// (past RabbitMQ's default `max_message_size`, what ingest can archive), a vhost holding NUL,
/// a queue name and a routing key longer than AMQP carries, a line that is not JSON — each
/// refused, said with its line number and why, the good lines around them imported (a vhost
/// holding `?` and markup, which RabbitMQ allows, among them), and the process' peak memory
/// below 256 MiB (its `VmHWM`, read once it has read everything and waits for the end).
#[tokio::test]
async fn a_hostile_import_is_refused_line_by_line_in_bounded_memory() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args(["import", "-", "--database-url", &db])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut written = 0;
        let line = |stdin: &mut std::process::ChildStdin, m: &lazarus::archive::ExportedMessage| {
            let text = format!("{}\n", serde_json::to_string(m).unwrap());
            stdin.write_all(text.as_bytes()).unwrap();
            text.len()
        };
        written += line(&mut stdin, &exported(1, "", "orders.dlq"));
        // 2: 300 MB; 3: a 150 MiB body; 4: a 129 MiB body.
        written += write_big_line(&mut stdin, &exported(2, "", "orders.dlq"), 300_000_000);
        written += write_big_line(
            &mut stdin,
            &exported(3, "", "orders.dlq"),
            (150 << 20) / 3 * 4,
        );
        written += write_big_line(
            &mut stdin,
            &exported(4, "", "orders.dlq"),
            (129 << 20) / 3 * 4,
        );
        written += line(&mut stdin, &exported(5, "bad\0vhost", "orders.dlq"));
        written += line(&mut stdin, &exported(6, "tenant?<b>x</b>", "orders.dlq"));
        written += line(&mut stdin, &exported(7, "", &"q".repeat(300)));
        let mut long_key = exported(8, "", "orders.dlq");
        long_key.routing_key = "k".repeat(256);
        written += line(&mut stdin, &long_key);
        stdin.write_all(b"{not json\n").unwrap();
        written += 11;
        written += line(&mut stdin, &exported(10, "", "orders.dlq"));
        (stdin, written)
    });
    let (stdin, written) = writer.join().unwrap();
    // Everything read (and the process waiting for more): its peak so far is the import's.
    let what = format!("the import to read all {written} bytes and wait for more");
    wait_showing(&what, Duration::from_secs(300), async || {
        let read = proc_field(pid, "io", "rchar").unwrap_or(0);
        let waiting = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .is_ok_and(|s| s.contains("State:\tS"));
        if read >= written as u64 && waiting {
            Ok(())
        } else {
            Err(format!("read {read}, waiting: {waiting}"))
        }
    })
    .await;
    let peak_mib = proc_field(pid, "status", "VmHWM").unwrap() / 1024;
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!("import of a hostile export: peak RSS {peak_mib} MiB\n{said}");
    assert!(
        !out.status.success(),
        "refused lines make the import fail: {said}"
    );
    for (line, why) in [
        (2, "300000"),
        (3, "bytes long; a line holds at most"),
        (4, "at most 134217728 are archived"),
        (5, "control character"),
        (7, "255"),
        (8, "routing_key is 256 bytes"),
        (9, "not an exported message"),
    ] {
        let told = format!("line {line} refused: ");
        let text = said
            .lines()
            .find(|l| l.starts_with(&told))
            .unwrap_or_else(|| panic!("{told} in {said}"));
        assert!(text.contains(why), "{text}");
    }
    assert!(
        said.contains("imported 3 messages; 0 were in the archive already; 7 lines refused"),
        "{said}"
    );
    assert_eq!(count_rows(&db, "SELECT count(*) FROM messages").await, 3);
    let markup = "SELECT count(*) FROM messages WHERE vhost = 'tenant?<b>x</b>'";
    assert_eq!(count_rows(&db, markup).await, 1);
    assert!(peak_mib < 256, "peak RSS {peak_mib} MiB");
}

/// A replay of a message whose vhost the broker does not have (an imported one) answers
/// 400 naming the vhost, not 503 "RabbitMQ is unreachable"; nothing is recorded as sent.
#[tokio::test]
async fn a_replay_into_a_vhost_the_broker_lacks_says_so() {
    let app = TestApp::spawn(&[]).await;
    let vhost = format!("{}?<i>", unique("no-such-vhost"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.ndjson");
    let line = serde_json::to_string(&exported(1, &vhost, "orders.dlq")).unwrap();
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .arg("import")
        .arg(&file)
        .args(["--database-url", &app.database_url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = app.json("/api/messages", 200).await;
    let id = list["messages"][0]["id"].as_str().unwrap().to_owned();
    let request = json!({"target": {"exchange": "", "routing_key": "anywhere"}});
    let answer = app
        .post_json(&format!("/api/messages/{id}/replay"), request, 400)
        .await;
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("RabbitMQ refuses the vhost {vhost:?}")),
        "{error}"
    );
    assert!(!error.contains("unreachable"), "{error}");
    let detail = app.json(&format!("/api/messages/{id}"), 200).await;
    assert_eq!(detail["status"], "archived", "{detail}");
}

/// Messages of the migration test: 5,000 by default (the debug binary, in CI's time);
/// `LAZARUS_TEST_MIGRATE_MESSAGES=100000` is the figure.
fn migrated() -> usize {
    std::env::var("LAZARUS_TEST_MIGRATE_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000)
}

#[tokio::test]
async fn a_migration_from_sqlite_to_postgres_killed_once_resumes_and_verifies() {
    let n = migrated();
    let p = unique("migrate");
    let (work, dlq) = (format!("{p}.work"), format!("{p}.dlq"));
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    // Every message dies on arrival (TTL 0) into the DLQ: a real x-death on each.
    dying_queue(&mut t, &work, &dlq).await;
    publish_many(&t.channel, "", &work, "m", n).await;
    let mut app = TestApp::spawn(&[&dlq]).await;
    app.wait_for_archived(n as i64, Duration::from_secs(300))
        .await;
    let ids = app.ids(&dlq).await;
    app.post_json(
        &format!("/api/messages/{}/dismiss", ids[7]),
        json!({"note": "moved with its note"}),
        200,
    )
    .await;
    // A planned replay of three of them, to be started once they are moved.
    let plan = app
        .post_json(
            "/api/replays",
            json!({"ids": ids[..3], "dry_run": true, "request_key": "moved-plan"}),
            200,
        )
        .await;
    assert_eq!(plan["state"], "planned");
    // A user who signs in with a password, and an API token made on the command line.
    let hash = lazarus::auth::hash_password(crate::auth::PASSWORD).unwrap();
    app.archive
        .put_user(
            "mira",
            Some(&hash),
            lazarus::archive::Role::Admin,
            &[],
            &lazarus::archive::Actor::system("test"),
        )
        .await
        .unwrap();
    app.stop().await;
    let from = app.database_url.clone();
    let created = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args(["token", "create", "nightly", "--role", "viewer"])
        .args(["--database-url", &from])
        .output()
        .unwrap();
    let token = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("lzr_"), "{token}");
    let audited = count_rows(&from, "SELECT count(*) FROM audit_log").await;
    assert!(audited >= 4, "dismiss, plan, user, token: {audited}");

    Backend::Postgres
        .scope(async move {
            let dir = tempfile::tempdir().unwrap();
            let to = archive_url(dir.path()).await;
            let migrate = || {
                let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
                c.args(["migrate", "--from", &from, "--to", &to])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true);
                c
            };
            // Killed part of the way through.
            let mut first = migrate().spawn().unwrap();
            let count =
                "SELECT CAST(coalesce(sum(messages), 0) AS BIGINT) FROM queue_reason_counts";
            // Looking every 20 ms: the kill lands soon after a fifth is copied.
            let soon = Patience::within(Duration::from_secs(120)).every(Duration::from_millis(20));
            let what = format!("the migration to copy a fifth of {n} (no progress)");
            wait_until(&what, soon, async || {
                count_rows(&to, count).await >= (n / 5) as i64
            })
            .await;
            first.kill().await.unwrap();
            let partial = count_rows(&to, count).await;
            assert!(partial < n as i64, "killed before the end: {partial}");

            let second = migrate().output().await.unwrap();
            let said = String::from_utf8_lossy(&second.stderr);
            let out = String::from_utf8_lossy(&second.stdout);
            assert!(second.status.success(), "{said}");
            assert!(
                out.contains(&format!(
                    "verified: both archives hold the same {n} messages"
                )),
                "{out} {said}"
            );
            assert!(
                said.contains(&format!(
                    "copied {} messages; {} were there already",
                    thousands(n as u64 - partial as u64),
                    thousands(partial as u64)
                )),
                "{said}"
            );
            assert_eq!(count_rows(&to, count).await, n as i64);
            let note = count_rows(
                &to,
                "SELECT count(*) FROM messages WHERE status_note = 'moved with its note'",
            )
            .await;
            assert_eq!(note, 1);
            assert!(
                said.contains(&format!(
                    "carried 1 user, 1 API token, 1 replay job and {audited} audit entries"
                )),
                "{said}"
            );
            // The audit entry of the dismissal points at the message's new id.
            let dismissed = count_rows(
                &to,
                "SELECT count(*) FROM audit_log a JOIN messages m ON m.id = a.message_id \
                 WHERE a.action = 'dismiss' AND m.status_note = 'moved with its note'",
            )
            .await;
            assert_eq!(dismissed, 1);
            // The plan's audit entry points at the plan's new id.
            let planned = count_rows(
                &to,
                "SELECT count(*) FROM audit_log a JOIN replay_jobs j ON j.id = a.job_id \
                 WHERE a.action = 'job_plan' AND j.request_key = 'moved-plan'",
            )
            .await;
            assert_eq!(planned, 1);
            // A second run finds everything there.
            let third = migrate().output().await.unwrap();
            let said = String::from_utf8_lossy(&third.stderr);
            assert!(third.status.success(), "{said}");
            assert!(said.contains("copied 0 messages"), "{said}");
            assert!(
                said.contains("carried 0 users, 0 API tokens, 0 replay jobs and 0 audit entries"),
                "{said}"
            );
            let carried = count_rows(
                &to,
                "SELECT count(*) FROM audit_log WHERE action <> 'migrate'",
            )
            .await;
            assert_eq!(carried, audited, "each entry once");
            assert_eq!(
                count_rows(
                    &to,
                    "SELECT count(*) FROM audit_log WHERE action = 'migrate'"
                )
                .await,
                2,
                "each finished run is audited"
            );

            // Served from the new archive, the user signs in with their password and the token
            // still works.
            let mut served = TestApp::spawn_with(&[], |c| {
                c.auth = lazarus::auth::AuthMode::Users;
                c.connection.database_url = to.clone().into();
            })
            .await;
            let cookie = crate::auth::sign_in(&served, "mira", crate::auth::PASSWORD)
                .await
                .expect("mira signs in");
            let page = crate::auth::as_user(&served, &cookie, "GET", "/api/messages", None).await;
            assert_eq!(page.status, 200);
            let bearer = format!("Bearer {token}");
            let with_token = http_with(
                served.addr,
                "GET",
                "/api/messages",
                &[("Authorization", &bearer)],
                None,
            )
            .await;
            assert_eq!(with_token.status, 200, "{}", with_token.text());
            // The plan moved with its items: started here, it publishes the three messages.
            let jobs = crate::auth::as_user(&served, &cookie, "GET", "/api/replays", None).await;
            let jobs: Value = serde_json::from_str(&jobs.text()).unwrap();
            let job = jobs["replays"]
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["plan"]["messages"] == 3)
                .unwrap_or_else(|| panic!("the plan is there: {jobs}"))
                .clone();
            assert_eq!(job["state"], "planned");
            let id = job["id"].as_str().unwrap();
            let started = crate::auth::as_user(
                &served,
                &cookie,
                "POST",
                &format!("/api/replays/{id}/start"),
                Some(json!({})),
            )
            .await;
            assert_eq!(started.status, 200, "{}", started.text());
            let what = format!("job {id} to complete");
            let done = wait_showing(&what, Duration::from_secs(30), async || {
                let path = format!("/api/replays/{id}");
                let job = crate::auth::as_user(&served, &cookie, "GET", &path, None).await;
                let job: Value = serde_json::from_str(&job.text()).unwrap();
                if job["state"] == "completed" {
                    Ok(job)
                } else {
                    Err(job)
                }
            })
            .await;
            assert_eq!(done["counts"]["published"], 3, "{done}");
            served.stop().await;
        })
        .await;
    t.cleanup().await;
}

fn thousands(n: u64) -> String {
    lazarus::support::format::thousands(n)
}

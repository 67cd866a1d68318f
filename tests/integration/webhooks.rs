//! Webhooks against a local receiver, on both backends with real dead letters: a new failure
//! group, a DLQ over its threshold and back under it, a replay job paused, cancelled and
//! completed — each told once, retried when the receiver fails, never waiting on a dead
//! receiver; two PostgreSQL instances tell each change once between them; a flood of new
//! groups told within the webhook's rate, the rest in a digest; HTTPS with the system's (here
//! `SSL_CERT_FILE`'s) roots; and the Teams card as the Adaptive Cards library reads it.
//! What producers write, shown and not obeyed in each format: `escaping`.

mod escaping;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::helpers::*;

/// One POST as the receiver took it.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    user_agent: String,
    body: Value,
}

/// A webhook receiver on a free port: answers 503 to its first `failures` requests and 200
/// after; keeps what it took.
struct Receiver {
    url: String,
    taken: Arc<Mutex<Vec<Received>>>,
    requests: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start(failures: usize) -> Self {
        Self::answering(failures, "503 Service Unavailable").await
    }

    /// One that answers `failure` (a status line) to its first `failures` requests.
    async fn answering(failures: usize, failure: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/hooks/T000/s3cr3t",
            listener.local_addr().unwrap()
        );
        let taken = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(0));
        let (t, r) = (taken.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (t, r) = (t.clone(), r.clone());
                tokio::spawn(async move {
                    let Some((line, head, body)) = read_request(&mut socket).await else {
                        return;
                    };
                    let n = {
                        let mut r = r.lock().unwrap();
                        *r += 1;
                        *r
                    };
                    let status = if n <= failures {
                        failure
                    } else {
                        let path = line
                            .split_whitespace()
                            .nth(1)
                            .unwrap_or_default()
                            .to_owned();
                        let user_agent = head
                            .lines()
                            .find_map(|l| l.strip_prefix("user-agent: "))
                            .unwrap_or_default()
                            .to_owned();
                        t.lock().unwrap().push(Received {
                            path,
                            user_agent,
                            body: serde_json::from_slice(&body).unwrap(),
                        });
                        "200 OK"
                    };
                    let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 2\r\n\r\nok");
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        Receiver {
            url,
            taken,
            requests,
        }
    }

    /// Its URL as Lazarus shows it: scheme and host only.
    fn shown(&self) -> String {
        let host = self
            .url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap();
        format!("http://{host}/…")
    }

    fn events(&self) -> Vec<Received> {
        self.taken.lock().unwrap().clone()
    }

    /// Waits until an event named `name` for which `matches` holds has come, and returns it.
    async fn wait_for(&self, name: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let what = format!("a {name} event");
        wait_showing(&what, Duration::from_secs(30), async || {
            let events = self.events();
            match events
                .iter()
                .find(|r| r.body["lazarus"]["event"] == name && matches(&r.body["lazarus"]))
            {
                Some(r) => Ok(r.body.clone()),
                None => Err(format!("{events:#?}")),
            }
        })
        .await
    }

    fn count(&self, name: &str) -> usize {
        self.events()
            .iter()
            .filter(|r| r.body["lazarus"]["event"] == name)
            .count()
    }
}

/// Reads one HTTP/1.1 request: its request line, its head (lowercased) and its body.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let raw = String::from_utf8_lossy(&data[..end]).into_owned();
    let line = raw.lines().next().unwrap_or_default().to_owned();
    let head = raw.to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < end + length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Some((line, head, data[end..end + length].to_vec()))
}

/// `n` messages that fail with `error`, dead-lettered by the broker into the DLQ.
async fn die(t: &Topology, work: &str, error: &str, n: usize) {
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-exception-message".into(),
            AMQPValue::LongString(error.into()),
        );
        let properties = BasicProperties::default()
            .with_message_id(format!("{error}-{i}").into())
            .with_headers(headers);
        t.publish("", work, format!("{{\"n\": {i}}}").as_bytes(), properties)
            .await;
    }
    let worker = rejecting_worker(work).await;
    t.wait_for_depth(work, 0, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    worker.abort();
}

/// Messages that fail each with its own error, dead-lettered by the broker into the DLQ by
/// the worker returned (abort it once they are archived: aborted, it hands back what it holds).
async fn die_each(t: &Topology, work: &str, errors: &[String]) -> tokio::task::JoinHandle<()> {
    for (i, error) in errors.iter().enumerate() {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-exception-message".into(),
            AMQPValue::LongString(error.as_str().into()),
        );
        let properties = BasicProperties::default()
            .with_message_id(format!("each-{i}").into())
            .with_headers(headers);
        t.publish("", work, b"{}", properties).await;
    }
    let worker = rejecting_worker(work).await;
    t.wait_for_depth(work, 0, Duration::from_secs(30)).await;
    worker
}

on_both_backends!(a_flood_of_new_groups_is_told_within_the_rate_and_digested);
/// 200 distinct forged errors as fast as the broker dead-letters them, against a webhook
/// allowed 5 POSTs in a window longer than the test: 5 POSTs reach the receiver, the last a
/// digest that counts the groups it folds; with those told alone and those still waiting
/// (the metric), every group is accounted for — none told twice, none lost.
async fn a_flood_of_new_groups_is_told_within_the_rate_and_digested() {
    let p = unique("hookflood");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let receiver = Receiver::start(0).await;
    let mut app = TestApp::spawn_with(&[&dlq], |c| {
        c.webhooks.webhooks = vec![receiver.url.parse().unwrap()];
        c.webhooks.webhook_interval_secs = 1;
        c.webhooks.webhook_max_posts = 5;
        c.webhooks.webhook_max_posts_secs = 3_600;
        c.webhooks.public_url = Some("https://lazarus.example.com".into());
    })
    .await;
    // Words, not numbers: each its own failure group.
    let word = |i: usize| {
        [i / 676, i / 26 % 26, i % 26]
            .map(|d| (b'a' + d as u8) as char)
            .iter()
            .collect::<String>()
    };
    let errors: Vec<String> = (0..200)
        .map(|i| format!("Forged failure {} <!channel>", word(i)))
        .collect();
    let worker = die_each(&t, &work, &errors).await;
    app.wait_for_archived(200, Duration::from_secs(60)).await;
    worker.abort();

    // Told alone, counted in a digest, or waiting: until every group is one of these.
    let accounted = || async {
        let events = receiver.events();
        let alone: Vec<String> = events
            .iter()
            .filter(|r| r.body["lazarus"]["event"] == "failure_group")
            .map(|r| r.body["lazarus"]["error"].as_str().unwrap().to_owned())
            .collect();
        let digests: Vec<Value> = events
            .iter()
            .filter(|r| r.body["lazarus"]["event"] == "failure_groups")
            .map(|r| r.body.clone())
            .collect();
        let waiting = app.counter("lazarus_webhook_waiting_events").await;
        (alone, digests, waiting)
    };
    let what = "all 200 groups told alone, in a digest or waiting";
    wait_showing(what, Duration::from_secs(60), async || {
        let (alone, digests, waiting) = accounted().await;
        let folded: u64 = digests
            .iter()
            .map(|d| d["lazarus"]["count"].as_u64().unwrap())
            .sum();
        if alone.len() as u64 + folded + waiting == 200 {
            Ok(())
        } else {
            Err(format!(
                "{} alone, {folded} in digests, {waiting} waiting",
                alone.len()
            ))
        }
    })
    .await;
    // Three more looks: nothing more goes, nothing changes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (alone, digests, waiting) = accounted().await;
    assert_eq!(
        *receiver.requests.lock().unwrap(),
        5,
        "5 POSTs in the window, for 200 new groups"
    );
    assert_eq!(alone.len() + digests.len(), 5, "{:#?}", receiver.events());
    let mut distinct = alone.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), alone.len(), "no group told twice");
    assert!(alone.iter().all(|e| errors.contains(e)));
    assert!(!digests.is_empty(), "the last POST allowed is a digest");
    let mut folded = 0;
    for digest in &digests {
        let count = digest["lazarus"]["count"].as_u64().unwrap();
        folded += count;
        let named = digest["lazarus"]["groups"].as_array().unwrap();
        assert_eq!(named.len() as u64, count.min(5), "{digest}");
        for g in named {
            let error = g["error"].as_str().unwrap();
            assert!(errors.iter().any(|e| e == error) && !alone.iter().any(|e| e == error));
        }
        let text = digest["text"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("{count} new failure groups, more than this webhook may be told one by one: `rejected` in `{work}`, `Forged failure")),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                "and {} more <https://lazarus.example.com/>",
                count - 5
            )),
            "{text}"
        );
        assert!(!text.contains("<!channel>"), "{text}");
        assert_eq!(digest["lazarus"]["url"], "https://lazarus.example.com/");
    }
    assert_eq!(
        alone.len() as u64 + folded + waiting,
        200,
        "every group accounted for"
    );
    assert_eq!(
        app.counter("lazarus_webhook_notifications_total{outcome=\"digested\"}")
            .await,
        folded
    );
    assert_eq!(
        app.counter("lazarus_webhook_notifications_total{outcome=\"sent\"}")
            .await,
        5
    );
    app.stop().await;
    t.cleanup().await;
}

on_both_backends!(failures_of_four_bugs_are_told_as_four_new_groups);
/// 200 failures of four bugs, each error naming its own id, duration or request UUID: the
/// webhook is told of four new groups — one per cause — not of one per id.
async fn failures_of_four_bugs_are_told_as_four_new_groups() {
    let p = unique("hookbugs");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let receiver = Receiver::start(0).await;
    let mut app = TestApp::spawn_with(&[&dlq], |c| {
        c.webhooks.webhooks = vec![receiver.url.parse().unwrap()];
        c.webhooks.webhook_interval_secs = 1;
    })
    .await;
    let bugs = crate::groups::four_bugs(50);
    let worker = crate::groups::dead_letter_all(&t, &work, &bugs).await;
    app.wait_for_archived(200, Duration::from_secs(60)).await;
    worker.abort();
    // The groups told: alone, or counted in a digest.
    let told = || {
        let events = receiver.events();
        let alone: Vec<Value> = events
            .iter()
            .filter(|r| r.body["lazarus"]["event"] == "failure_group")
            .map(|r| r.body["lazarus"].clone())
            .collect();
        let folded: u64 = events
            .iter()
            .filter(|r| r.body["lazarus"]["event"] == "failure_groups")
            .map(|r| r.body["lazarus"]["count"].as_u64().unwrap())
            .sum();
        (alone, folded)
    };
    let what = "the 4 groups told, alone or counted in a digest";
    wait_showing(what, Duration::from_secs(30), async || {
        let (alone, folded) = told();
        if alone.len() as u64 + folded >= 4 {
            Ok(())
        } else {
            Err(format!("{:#?}", (alone, folded)))
        }
    })
    .await;
    // Three more looks: nothing more is told.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (alone, folded) = told();
    assert_eq!(
        alone.len() as u64 + folded,
        4,
        "one new group per bug: {alone:#?}"
    );
    let mut types: Vec<&str> = alone
        .iter()
        .map(|g| g["error_type"].as_str().unwrap())
        .collect();
    types.sort();
    let mut expected: Vec<&str> = bugs.iter().map(|b| b.error_type).collect();
    expected.sort();
    assert_eq!(
        types, expected,
        "each told alone, within the webhook's rate"
    );
    for g in &alone {
        assert_eq!(g["queue"], dlq.as_str());
        assert_eq!(g["first_death_queue"], work.as_str());
        assert!(
            g["error"].as_str().unwrap().contains('<'),
            "a template: {g}"
        );
    }
    assert_eq!(app.counter("lazarus_webhook_waiting_events").await, 0);
    app.stop().await;
    t.cleanup().await;
}

/// A port nothing listens on.
async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/nobody")
}

on_both_backends!(groups_thresholds_and_jobs_are_told_once_each);
async fn groups_thresholds_and_jobs_are_told_once_each() {
    let p = unique("hook");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    // The receiver fails its first two requests: the first event is tried a third time.
    let receiver = Receiver::start(2).await;
    let dead = dead_url().await;
    // And one that refuses everything for good (a webhook deleted on Slack's side).
    let refusing = Receiver::answering(usize::MAX, "404 Not Found").await;
    let configure = |c: &mut lazarus::config::ServeConfig| {
        c.webhooks.webhooks = vec![
            receiver.url.parse().unwrap(),
            dead.parse().unwrap(),
            refusing.url.parse().unwrap(),
        ];
        c.webhooks.thresholds = vec![format!("{dlq}:4").parse().unwrap()];
        c.webhooks.webhook_interval_secs = 1;
        c.webhooks.public_url = Some("https://lazarus.example.com/".into());
    };
    let app = TestApp::spawn_with(&[&dlq], configure).await;
    // A second instance on the same PostgreSQL database watches the same archive.
    let mut twin = None;
    if Backend::current() == Backend::Postgres {
        let database_url = app.database_url.clone();
        twin = Some(
            TestApp::spawn_with(&[], |c| {
                configure(c);
                c.connection.database_url = database_url.into();
            })
            .await,
        );
    }

    // A new way to fail: one failure group, told with a link to its open messages.
    die(&t, &work, "ValueError: amount < 0", 3).await;
    app.wait_for_archived(3, Duration::from_secs(20)).await;
    let told = receiver
        .wait_for("failure_group", |e| {
            e["example"] == "ValueError: amount < 0"
        })
        .await;
    // A group is named by the queue its messages first died in, and its cause.
    assert_eq!(told["lazarus"]["first_death_queue"], work.as_str());
    assert_eq!(told["lazarus"]["queue"], dlq.as_str());
    assert_eq!(told["lazarus"]["reason"], "rejected");
    let url = told["lazarus"]["url"].as_str().unwrap();
    let id = told["lazarus"]["id"].as_str().unwrap();
    assert_eq!(
        url,
        format!("https://lazarus.example.com/messages?group={id}&status=open")
    );
    assert!(
        told["text"].as_str().unwrap().starts_with(&format!(
            "New failure group: `rejected` in `{work}`, `ValueError: amount &lt; &lt;n&gt;`"
        )),
        "{told}"
    );
    assert!(
        *receiver.requests.lock().unwrap() >= 3,
        "the first two tries were refused"
    );
    let first = &receiver.events()[0];
    assert_eq!(first.path, "/hooks/T000/s3cr3t", "the URL's path, as given");
    assert!(first.user_agent.starts_with("lazarus/"), "{first:?}");
    // The link opens the group's messages.
    let path = url.trim_start_matches("https://lazarus.example.com");
    let page = app.get(path).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("ValueError: amount"),
        "{}",
        page.text()
    );

    // A second way to fail, and five open: over the threshold of four.
    die(&t, &work, "Timeout talking to the ledger", 2).await;
    app.wait_for_archived(5, Duration::from_secs(20)).await;
    receiver
        .wait_for("failure_group", |e| {
            e["error"] == "Timeout talking to the ledger"
        })
        .await;
    let over = receiver.wait_for("dlq_over_threshold", |_| true).await;
    assert_eq!(over["lazarus"]["open"], 5);
    assert_eq!(over["lazarus"]["threshold"], 4);
    assert_eq!(
        over["text"],
        format!(
            "`{dlq}` holds 5 open dead letters, over its threshold of 4 \
             <https://lazarus.example.com/messages?queue={dlq}&status=open>"
        )
    );

    // The first group dismissed: two open, back under.
    let dismissed = app
        .post_json(
            "/api/messages/dismiss",
            json!({"filter": {"queue": dlq, "error": "ValueError: amount < 0"}, "note": "bad data"}),
            200,
        )
        .await;
    assert_eq!(dismissed["dismissed"], 3);
    let under = receiver
        .wait_for("dlq_back_under_threshold", |_| true)
        .await;
    assert_eq!(under["lazarus"]["open"], 2);

    // A slow job, paused and then cancelled; a quick one that completes.
    let ids = app.ids(&dlq).await;
    let slow = app
        .post_json(
            "/api/replays",
            json!({"ids": ids[3..5], "rate_per_sec": 1}),
            200,
        )
        .await;
    let slow_id = slow["id"].as_str().unwrap().to_owned();
    app.post_json(&format!("/api/replays/{slow_id}/pause"), json!({}), 200)
        .await;
    let paused = receiver
        .wait_for("job_paused", |e| e["job"] == slow_id.as_str())
        .await;
    assert_eq!(paused["lazarus"]["state"], "paused");
    app.post_json(&format!("/api/replays/{slow_id}/cancel"), json!({}), 200)
        .await;
    receiver
        .wait_for("job_cancelled", |e| e["job"] == slow_id.as_str())
        .await;
    let quick = app
        .post_json(
            "/api/replays",
            json!({"ids": ids[..3], "include_replayed": true}),
            200,
        )
        .await;
    let quick_id = quick["id"].as_str().unwrap().to_owned();
    let done = receiver
        .wait_for("job_completed", |e| e["job"] == quick_id.as_str())
        .await;
    assert_eq!(done["lazarus"]["counts"]["published"], 3, "{done}");
    assert_eq!(
        done["text"],
        format!(
            "Replay job {quick_id} completed: 3 of 3 published \
             <https://lazarus.example.com/replays/{quick_id}>"
        )
    );
    assert!(
        t.depth(&work).await >= 3,
        "the copies went to the work queue"
    );

    // Replayed, the three dismissed messages are open again until their copies settle: the
    // DLQ is over its threshold a second time.
    let what = "a second dlq_over_threshold event";
    wait_showing(what, Duration::from_secs(30), async || {
        if receiver.count("dlq_over_threshold") >= 2 {
            Ok(())
        } else {
            Err(format!("{:#?}", receiver.events()))
        }
    })
    .await;

    // Each change was told once — by one of the two instances where there are two — and the
    // dead receiver held nothing up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (event, n) in [
        ("failure_group", 2),
        ("dlq_over_threshold", 2),
        ("dlq_back_under_threshold", 1),
        ("job_paused", 1),
        ("job_cancelled", 1),
        ("job_completed", 1),
    ] {
        assert_eq!(
            receiver.count(event),
            n,
            "{event}: {:#?}",
            receiver.events()
        );
    }
    assert_eq!(receiver.events().len(), 8);
    let sent = app
        .counter("lazarus_webhook_notifications_total{outcome=\"sent\"}")
        .await;
    let twin_sent = match &twin {
        Some(twin) => {
            twin.counter("lazarus_webhook_notifications_total{outcome=\"sent\"}")
                .await
        }
        None => 0,
    };
    assert_eq!(sent + twin_sent, 8);
    // The overview says where notifications go, the last one told, and the last one lost
    // (the refusing receiver's: the dead URL's are still being tried).
    let page = app.get("/").await.text();
    assert!(
        page.contains(&format!(
            "Notifications to <code>{}</code>",
            receiver.shown()
        )),
        "{page}"
    );
    assert!(
        !page.contains("s3cr3t"),
        "the URL's secret path is not shown"
    );
    assert!(page.contains(&format!(
        "thresholds of open messages: <code>{dlq}:4</code>"
    )));
    assert!(page.contains("Last told"), "{page}");
    assert!(
        page.contains("<span class=\"badge failed\">lost</span>")
            && page.contains(&format!("{} refused it: 404 Not Found", refusing.shown())),
        "{page}"
    );
    let rows = count_rows(&app.database_url, "SELECT count(*) FROM notifications").await;
    assert!(rows >= 5, "{rows} notification states kept");
    if let Some(mut twin) = twin {
        twin.stop().await;
    }
    let mut app = app;
    app.stop().await;
    t.cleanup().await;
}

/// An https:// webhook: the receiver's certificate is signed by a CA trusted through
/// `SSL_CERT_FILE`, as rustls' system roots read it; the real binary tells a new failure
/// group.
#[tokio::test]
async fn https_webhooks_are_told_through_tls() {
    let dir = tempfile::tempdir().unwrap();
    // A test CA, and the receiver's certificate for localhost signed by it.
    let TestCa { ca, cert, key } = TestCa::localhost(dir.path());
    let received = dir.path().join("received.json");
    // Python's own HTTPS server: one POST, written to a file.
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        open(sys.argv[3], 'wb').write(body)
        self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers()
        self.wfile.write(b'ok')
    def log_message(self, *a): pass
server = http.server.HTTPServer(('127.0.0.1', 0), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
    let mut python = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&cert)
        .arg(&key)
        .arg(&received)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut port = String::new();
    {
        use tokio::io::AsyncBufReadExt;
        let stdout = python.stdout.take().unwrap();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut port)
            .await
            .unwrap();
    }
    let url = format!("https://localhost:{}/hook/s3cr3t", port.trim());

    let p = unique("hooktls");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let database_url = archive_url(dir.path()).await;
    let mut lazarus = lazarus_command(
        &amqp_url(),
        &dlq,
        &database_url,
        &["--webhook-interval-secs", "1"],
    )
    .env("LAZARUS_WEBHOOK", &url)
    .env("SSL_CERT_FILE", &ca)
    .spawn()
    .unwrap();
    die(&t, &work, "TLS test failure", 1).await;
    wait_until(
        "an event received over https",
        Duration::from_secs(30),
        async || received.exists(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let body: Value = serde_json::from_slice(&std::fs::read(&received).unwrap()).unwrap();
    assert_eq!(body["lazarus"]["event"], "failure_group");
    assert_eq!(body["lazarus"]["error"], "TLS test failure");
    sigterm(&mut lazarus).await;
    t.cleanup().await;
}

/// `lazarus webhook-test` sends one test event to each webhook and says what each answered:
/// 0 when all took it, 1 when one did not (here, a URL where nothing listens).
#[tokio::test]
async fn webhook_test_says_which_receivers_took_it() {
    let receiver = Receiver::start(0).await;
    let dead = dead_url().await;
    let run = |urls: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .args([
                "webhook-test",
                "--public-url",
                "https://lazarus.example.com",
            ])
            .env("LAZARUS_WEBHOOK", urls)
            .output()
            .await
            .unwrap()
    };
    let good = run(receiver.url.clone()).await;
    let said = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{said}");
    assert_eq!(
        said.trim(),
        format!("{}: took it (200 OK)", receiver.shown())
    );
    let event = receiver.wait_for("test", |_| true).await;
    assert!(event["text"]
        .as_str()
        .unwrap()
        .starts_with("Lazarus can reach this channel"));
    assert_eq!(event["lazarus"]["url"], "https://lazarus.example.com/");

    let mixed = run(format!("{},{dead}", receiver.url)).await;
    assert_eq!(mixed.status.code(), Some(1));
    let complained = String::from_utf8_lossy(&mixed.stderr);
    assert!(complained.contains("connecting"), "{complained}");
    assert!(
        !complained.contains("nobody"),
        "the path is not shown: {complained}"
    );
    assert_eq!(receiver.count("test"), 2);
}

/// What the Adaptive Cards library says of `card` (`tests/integration/adaptive_card.js`, with
/// npm's `adaptivecards` that `scripts/test` installs under `LAZARUS_TEST_NODE_MODULES`).
fn adaptive_cards_say(card: &Value) -> (bool, String) {
    use std::io::Write;
    let modules = std::env::var("LAZARUS_TEST_NODE_MODULES").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lazarus-test-node/node_modules",
            std::env::var("HOME").unwrap()
        )
    });
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/adaptive_card.js");
    let mut child = std::process::Command::new("node")
        .arg(script)
        .env("NODE_PATH", &modules)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node runs (scripts/test installs Node.js's adaptivecards)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(card.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains("Cannot find module"),
        "adaptivecards is installed in {modules}: {said}"
    );
    (out.status.success(), said)
}

/// The card a Teams workflow receives, read by the Adaptive Cards library itself: no unknown
/// element, no missing property, a version it supports — with a link and without one.
#[test]
fn the_teams_card_is_read_by_the_adaptive_cards_library_without_a_word() {
    use lazarus::notify::event::{Event, Format};
    let teams: lazarus::support::http::Target =
        "https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual"
            .parse()
            .unwrap();
    let format = Format::of(&teams);
    assert_eq!(format, Format::Teams);
    let over = Event::OverThreshold {
        queue: "invoices.dlq".into(),
        open: 120,
        threshold: 100,
    };
    for (event, url) in [
        (over, Some("https://lazarus.example.com/")),
        (Event::Test, None),
    ] {
        let payload = event.payload(url, format);
        let card = &payload["attachments"][0]["content"];
        assert_eq!(card["type"], "AdaptiveCard", "{payload}");
        let (clean, said) = adaptive_cards_say(card);
        assert!(clean, "{said} of {card}");
    }
    // The check can fail: a misspelt element and an action without its url.
    let broken = json!({"type": "AdaptiveCard", "version": "1.4",
        "body": [{"type": "TextBlok", "text": "x"}],
        "actions": [{"type": "Action.OpenUrl", "title": "Open"}]});
    let (clean, said) = adaptive_cards_say(&broken);
    assert!(
        !clean && said.contains("TextBlok") && said.contains("url"),
        "{said}"
    );
}

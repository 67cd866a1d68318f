//! What a hostile viewer costs the real binary, in peak resident memory and inside a cgroup
//! the size of the shipped Kubernetes manifest's memory limit: bodies that decode to many
//! times their size, floods of list requests, dead letters of 100 MiB.

use std::net::SocketAddr;
use std::time::Duration;

use lapin::BasicProperties;
use serde_json::Value;

use crate::helpers::*;
use crate::served::{lazarus_cli, MemoryCgroup, Served};

/// The shipped manifest's memory limit (deploy/kubernetes/lazarus.yaml).
pub(crate) const MANIFEST_LIMIT_MIB: u64 = 384;
/// What every attack here must stay under.
pub(crate) const PEAK_MIB: u64 = 256;

/// The served process in a cgroup of the manifest's limit, when this machine lets a test
/// make one (said so, when not: the peak resident memory is still measured).
fn confine(served: &Served) -> Option<MemoryCgroup> {
    match MemoryCgroup::confine(served.pid, MANIFEST_LIMIT_MIB) {
        Ok(cgroup) => Some(cgroup),
        Err(why) => {
            eprintln!("SKIPPED the cgroup half of this test: {why}");
            None
        }
    }
}

/// The process survived, the OOM killer never ran, and the peak stayed under `PEAK_MIB`.
pub(crate) fn assert_bounded(served: &Served, cgroup: Option<&MemoryCgroup>, what: &str) {
    if let Some(cgroup) = cgroup {
        eprintln!(
            "{what}: cgroup of {MANIFEST_LIMIT_MIB} MiB charged at most {} MiB (limit reached {} times)",
            cgroup.max_usage_mib(),
            cgroup.failcnt()
        );
        assert_eq!(cgroup.oom_kills(), 0, "{what}: the OOM killer ran");
        assert_eq!(cgroup.failcnt(), 0, "{what}: the cgroup reached its limit");
    }
    assert!(served.alive(), "{what}: the server died");
    let peak = served.peak_rss_mib();
    eprintln!("{what}: peak RSS {peak} MiB");
    assert!(peak < PEAK_MIB, "{what} took the server to {peak} MiB");
}

/// A viewer's and an operator's bearer tokens for the archive `db` (served with
/// `--auth users`).
pub(crate) fn tokens(db: &str) -> (String, String) {
    let token = |name: &str, role: &str| {
        let token = lazarus_cli(db, &["token", "create", name, "--role", role], None);
        format!("Bearer {}", token.trim())
    };
    (token("v", "viewer"), token("o", "operator"))
}

/// A server with viewer and operator tokens and `flags`.
pub(crate) async fn served_with_tokens(
    dlq: &str,
    db: &str,
    flags: &[&str],
) -> (Served, String, String) {
    let (viewer, operator) = tokens(db);
    let flags = [&["--auth", "users"], flags].concat();
    let served = Served::start(dlq, db, &flags, None).await;
    (served, viewer, operator)
}

pub(crate) async fn get(addr: SocketAddr, bearer: &str, path: &str) -> HttpResponse {
    http_with(addr, "GET", path, &[("Authorization", bearer)], None).await
}

/// The ids of the messages archived from `dlq` by message-id, once there are `n`.
async fn archived_ids(
    addr: SocketAddr,
    bearer: &str,
    dlq: &str,
    n: usize,
) -> Vec<(String, String)> {
    // A page of 500 every 200 ms: the server's memory is what these tests measure.
    let patience = Patience::within(Duration::from_secs(120)).every(Duration::from_millis(200));
    wait_showing(&format!("{n} archived from {dlq}"), patience, async || {
        let page = get(
            addr,
            bearer,
            &format!("/api/messages?queue={dlq}&limit=500"),
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.text());
        let page: Value = serde_json::from_slice(&page.body).unwrap();
        let messages = page["messages"].as_array().unwrap();
        if messages.len() < n {
            return Err(format!("{} archived", messages.len()));
        }
        Ok(messages
            .iter()
            .map(|m| {
                let name = m["message_id"].as_str().unwrap_or_default().to_owned();
                (name, m["id"].as_str().unwrap().to_owned())
            })
            .collect())
    })
    .await
}

/// Bodies of a byte or a few a value — or none: an AMQP 1.0 array of four billion nulls
/// in 12 bytes — that stand for JSON many times their size: (message-id, content type,
/// `type` property, body).
fn decode_bombs() -> Vec<(&'static str, &'static str, Option<&'static str>, Vec<u8>)> {
    // Just under the 8 MiB a body is decoded to be masked, as the issue's attack sent them.
    const SIZE: usize = 8_000_000;
    let array32 = |head: u8, n: usize| [vec![head], (n as u32).to_be_bytes().to_vec()].concat();
    let nulls = SIZE - 5;
    let exts = (SIZE - 5) / 3;
    // A MessagePack array nested 99 deep holding 2 MB of nulls: an operator's page decodes
    // it (under 2 MiB), and pretty-printed at that depth each null is a 200-byte line.
    let deep_nulls = 2_000_000 - 99 - 5;
    vec![
        (
            "msgpack-nulls",
            "application/x-msgpack",
            None,
            [array32(0xdd, nulls), vec![0xc0; nulls]].concat(),
        ),
        (
            "msgpack-ext",
            "application/msgpack",
            None,
            [array32(0xdd, exts), [0xd4, 0x01, 0x00].repeat(exts)].concat(),
        ),
        (
            "msgpack-deep",
            "application/x-msgpack",
            None,
            [
                vec![0x91; 99],
                array32(0xdd, deep_nulls),
                vec![0xc0; deep_nulls],
            ]
            .concat(),
        ),
        (
            "cbor-nulls",
            "application/cbor",
            None,
            [array32(0x9a, nulls), vec![0xf6; nulls]].concat(),
        ),
        (
            "protobuf-by-number",
            "application/x-protobuf",
            None,
            [0x08, 0x00].repeat(SIZE / 2),
        ),
        (
            // Fields out of number order: each must be picked out of the wire.
            "protobuf-interleaved",
            "application/x-protobuf",
            None,
            [0x10, 0x00, 0x08, 0x00].repeat(SIZE / 4),
        ),
        (
            "amqp10-array",
            "application/octet-stream",
            Some("amqp-1.0"),
            vec![
                0x00, 0x53, 0x77, 0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40,
            ],
        ),
    ]
}

on_both_backends!(bodies_that_decode_to_many_times_their_size_cost_bounded_memory);
/// Each body is archived (ingest decodes it for the index and the mask) and opened at once
/// by viewers (masked: decoded whole, up to 8 MiB) and operators (decoded to show): the
/// decode writes JSON within its budget, so the process stays small, and each page says
/// why it shows what it shows.
async fn bodies_that_decode_to_many_times_their_size_cost_bounded_memory() {
    let p = unique("decodebombs");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    // Masking on, as the issue's attack ran: viewers' bodies are decoded whole to be masked.
    let (served, viewer, operator) =
        served_with_tokens(&dlq, &db, &["--mask", "/card/number"]).await;
    let cgroup = confine(&served);
    let bombs = decode_bombs();
    for (name, content_type, kind, body) in &bombs {
        let mut properties = BasicProperties::default()
            .with_content_type((*content_type).into())
            .with_message_id((*name).into());
        if let Some(kind) = kind {
            properties = properties.with_type((*kind).into());
        }
        t.publish("", &dlq, body, properties).await;
    }
    let ids = archived_ids(served.addr, &operator, &dlq, bombs.len()).await;
    assert_eq!(ids.len(), bombs.len());
    assert_bounded(&served, cgroup.as_ref(), "archiving the bodies");

    // Two viewers and an operator open each one, all at once.
    let mut requests = Vec::new();
    for (name, id) in &ids {
        for (who, bearer, path) in [
            ("viewer", &viewer, format!("/messages/{id}")),
            ("viewer", &viewer, format!("/messages/{id}")),
            ("viewer", &viewer, format!("/api/messages/{id}")),
            ("viewer", &viewer, format!("/api/messages/{id}/body")),
            ("operator", &operator, format!("/messages/{id}")),
        ] {
            let (addr, bearer, name) = (served.addr, bearer.clone(), name.clone());
            requests.push(tokio::spawn(async move {
                (name, who, path.clone(), get(addr, &bearer, &path).await)
            }));
        }
    }
    let mut seen = Vec::new();
    for request in requests {
        seen.push(request.await.unwrap());
    }
    for (name, who, path, answer) in &seen {
        assert_eq!(
            answer.status,
            200,
            "{name}: {who} {path}: {}",
            answer.text()
        );
    }
    // What the pages say of them.
    let page = |name: &str, who: &str| {
        seen.iter()
            .find(|(n, w, p, _)| n == name && *w == who && p.starts_with("/messages/"))
            .map(|(_, _, _, answer)| answer.text())
            .unwrap()
    };
    for name in ["msgpack-nulls", "msgpack-ext", "cbor-nulls", "msgpack-deep"] {
        let text = page(name, "viewer");
        assert!(text.contains("too large to mask"), "{name}: {text}");
    }
    for name in ["msgpack-deep", "amqp10-array"] {
        let text = page(name, "operator");
        assert!(
            text.contains("shown as JSON: its first 256 KiB"),
            "{name}: {text}"
        );
    }
    assert_bounded(&served, cgroup.as_ref(), "opening them");
    drop(cgroup);
    t.cleanup().await;
}

/// What a GET answered, counted and digested, not kept (a thousand of them at once, or a
/// 100 MiB download, must not grow the test).
pub(crate) struct Counted {
    pub status: u16,
    /// The whole response, head included.
    pub size: usize,
    pub retry_after: bool,
    /// The body's length and SHA-256 (a body sent with a `Content-Length`).
    pub body: (usize, [u8; 32]),
    /// The start of the response: its head and the first bytes of its body.
    pub start: String,
}

pub(crate) async fn get_counted(addr: SocketAddr, bearer: &str, path: &str) -> Counted {
    use sha2::Digest;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {bearer}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (mut start, mut size, mut buf) = (Vec::new(), 0, vec![0u8; 64 * 1024]);
    let (mut body_at, mut hasher, mut body_len) = (None, sha2::Sha256::new(), 0);
    loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        if body_at.is_none() {
            start.extend_from_slice(chunk);
            if let Some(at) = start.windows(4).position(|w| w == b"\r\n\r\n") {
                body_at = Some(at + 4);
                chunk = &start[at + 4..];
                hasher.update(chunk);
                body_len += chunk.len();
            }
        } else {
            if start.len() < 64 * 1024 {
                start.extend_from_slice(&chunk[..chunk.len().min(64 * 1024)]);
            }
            hasher.update(chunk);
            body_len += chunk.len();
        }
        size += n;
    }
    let start = String::from_utf8_lossy(&start).into_owned();
    let head = start.to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{path}: no response ({size} bytes)"));
    Counted {
        status,
        size,
        retry_after: head.contains("\r\nretry-after: "),
        body: (body_len, hasher.finalize().into()),
        start,
    }
}

/// A dead-letter queue fed by the broker's own dead-lettering (a work queue whose messages
/// expire at once): (work queue, DLQ).
pub(crate) async fn expiring_into_dlq(t: &mut Topology, p: &str) -> (String, String) {
    let (work, dlx, dlq) = (format!("{p}.work"), format!("{p}.dlx"), format!("{p}.dlq"));
    t.exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    let expiring = args(&[
        ("x-dead-letter-exchange", s(&dlx)),
        ("x-message-ttl", lapin::types::AMQPValue::LongInt(0)),
    ]);
    t.queue(&work, expiring).await;
    (work, dlq)
}

on_both_backends!(a_thousand_viewers_listing_500_rows_at_once_cost_bounded_memory);
/// A thousand viewers ask for 500 rows each at once, then a thousand more for every other
/// page that holds rows: a few are read at a time, a short queue waits, the rest hear 503
/// with `Retry-After` at once — the process stays small and what it used is given back.
async fn a_thousand_viewers_listing_500_rows_at_once_cost_bounded_memory() {
    let p = unique("listflood");
    let mut t = Topology::new().await;
    let (work, dlq) = expiring_into_dlq(&mut t, &p).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (served, viewer, _) = served_with_tokens(&dlq, &db, &["--mask", "/card/number"]).await;
    let cgroup = confine(&served);
    publish_many(&t.channel, "", &work, "flood", 600).await;
    let ids = archived_ids(served.addr, &viewer, &dlq, 500).await;
    let id = &ids[0].1;
    assert_bounded(&served, cgroup.as_ref(), "archiving 600 dead letters");
    let resident_before = served.status_kib("VmRSS") / 1024;

    let waves: [Vec<String>; 2] = [
        vec!["/api/messages?limit=500".to_owned()],
        vec![
            "/messages?limit=500".to_owned(),
            format!("/messages?limit=500&queue={dlq}&q=flood*"),
            "/messages/count".to_owned(),
            format!("/api/messages/{id}"),
            format!("/messages/{id}"),
            "/".to_owned(),
            "/replays".to_owned(),
            "/api/replays".to_owned(),
        ],
    ];
    for paths in waves {
        let requests: Vec<_> = (0..1000)
            .map(|i| {
                let (addr, bearer) = (served.addr, viewer.clone());
                let path = paths[i % paths.len()].clone();
                tokio::spawn(async move { (get_counted(addr, &bearer, &path).await, path) })
            })
            .collect();
        let (mut answered, mut refused, mut bytes) = (0, 0, 0);
        for request in requests {
            let (answer, path) = request.await.unwrap();
            match answer.status {
                200 => answered += 1,
                503 => {
                    assert!(answer.retry_after, "{path}: a 503 says when to retry");
                    refused += 1;
                }
                other => panic!("{path} answered {other}"),
            }
            bytes += answer.size;
        }
        eprintln!(
            "{paths:?}: {answered} answered, {refused} refused (503), {} MiB sent",
            bytes >> 20
        );
        assert!(answered >= 64, "only {answered} of 1000 were answered");
        assert_bounded(
            &served,
            cgroup.as_ref(),
            &format!("1,000 at once of {paths:?}"),
        );
    }
    // What the flood used is given back (within what the allocator keeps for reuse).
    let resident_after = served.status_kib("VmRSS") / 1024;
    eprintln!("resident before the floods: {resident_before} MiB, after: {resident_after} MiB");
    assert!(
        resident_after < resident_before + 64,
        "the floods left the server at {resident_after} MiB (from {resident_before} MiB)"
    );
    drop(cgroup);
    t.cleanup().await;
}

on_both_backends!(a_100_mib_dead_letter_is_streamed_to_its_viewers_not_held);
/// A 100 MiB dead letter (RabbitMQ takes up to 128 MiB), dead-lettered by the broker and
/// opened by eight viewers at once — its page, its API detail, its download: the page and
/// the API have its start, the download streams it from the database a piece at a time.
async fn a_100_mib_dead_letter_is_streamed_to_its_viewers_not_held() {
    use sha2::Digest;
    let p = unique("hugebody");
    let mut t = Topology::new().await;
    let (work, dlq) = expiring_into_dlq(&mut t, &p).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (served, viewer, _) = served_with_tokens(&dlq, &db, &[]).await;
    let mut body = br#"{"order": "O-1", "pad": ""#.to_vec();
    body.resize(100 * 1024 * 1024 - 2, b'x');
    body.extend_from_slice(br#""}"#);
    let digest: [u8; 32] = sha2::Sha256::digest(&body).into();
    let size = body.len();
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_message_id("huge".into());
    t.publish("", &work, &body, properties).await;
    drop(body);
    let ids = archived_ids(served.addr, &viewer, &dlq, 1).await;
    let id = ids[0].1.clone();
    // Archiving it is not what is measured here: storing a body copies it (the archive's
    // bind and record), and that is ingest's own bound. From here on, only viewing counts,
    // inside the manifest's limit.
    eprintln!(
        "archiving a 100 MiB dead letter: peak RSS {} MiB",
        served.peak_rss_mib()
    );
    served.reset_peak();
    let cgroup = confine(&served);

    let paths = [
        format!("/messages/{id}"),
        format!("/messages/{id}"),
        format!("/messages/{id}"),
        format!("/api/messages/{id}"),
        format!("/api/messages/{id}"),
        format!("/api/messages/{id}"),
        format!("/api/messages/{id}/body"),
        format!("/api/messages/{id}/body"),
    ];
    // Downloads are digested as they arrive; pages and details (their starts) are kept.
    enum Seen {
        Download(Counted),
        Page(HttpResponse),
    }
    let requests: Vec<_> = paths
        .iter()
        .map(|path| {
            let (addr, bearer, path) = (served.addr, viewer.clone(), path.clone());
            tokio::spawn(async move {
                let seen = match path.ends_with("/body") {
                    true => Seen::Download(get_counted(addr, &bearer, &path).await),
                    false => Seen::Page(get(addr, &bearer, &path).await),
                };
                (seen, path)
            })
        })
        .collect();
    for request in requests {
        match request.await.unwrap() {
            (Seen::Download(answer), path) => {
                assert_eq!(answer.status, 200, "{path}: {}", answer.start);
                assert_eq!(
                    answer.body,
                    (size, digest),
                    "{path}: the download is the body"
                );
            }
            (Seen::Page(answer), path) => {
                assert_eq!(answer.status, 200, "{path}: {}", answer.text());
                assert!(
                    answer.body.len() < 2 * 1024 * 1024,
                    "{path}: {} bytes",
                    answer.body.len()
                );
                if path.starts_with("/api/") {
                    // Its start, and that it is only the start.
                    let detail: Value = serde_json::from_slice(&answer.body).unwrap();
                    assert_eq!(detail["body"]["truncated"], true, "{path}");
                    assert_eq!(detail["body"]["size"], size, "{path}");
                    let data = detail["body"]["data"].as_str().unwrap();
                    assert!(data.starts_with(r#"{"order": "O-1""#), "{path}");
                } else {
                    let text = answer.text();
                    assert!(
                        text.contains("100.0 MiB"),
                        "{path}: the page names its size"
                    );
                    assert!(
                        text.contains("Only the start of the body is shown"),
                        "{path}"
                    );
                }
            }
        }
    }
    assert_bounded(
        &served,
        cgroup.as_ref(),
        "eight viewers of a 100 MiB dead letter",
    );
    drop(cgroup);
    t.cleanup().await;
}

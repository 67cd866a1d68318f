//! What archiving and replaying the largest dead letters RabbitMQ takes (128 MiB,
//! `max_message_size`) costs the real binary, run from its start inside a cgroup of the
//! shipped manifest's memory limit: killed there, it would restart and be handed the message
//! again, and a quorum DLQ drops a message after its delivery limit.

use std::time::Duration;

use lapin::options::BasicGetOptions;
use lapin::BasicProperties;
use serde_json::{json, Value};
use sha2::Digest;

use crate::bounds::{
    assert_bounded, expiring_into_dlq, get, get_counted, tokens, MANIFEST_LIMIT_MIB,
};
use crate::helpers::*;
use crate::served::{lazarus_cli, MemoryCgroup, Served};

/// A body of `size` bytes that is neither text nor repetitive (a stored copy cannot pass
/// for it by accident), and its SHA-256.
fn binary_body(size: usize, seed: u64) -> (Vec<u8>, [u8; 32]) {
    let mut state = seed;
    let body: Vec<u8> = (0..size)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect();
    let digest = sha2::Sha256::digest(&body).into();
    (body, digest)
}

/// Waits until `n` messages of `dlq` are archived, failing at once should the server die.
async fn archived(
    served: &Served,
    cgroup: Option<&MemoryCgroup>,
    bearer: &str,
    dlq: &str,
    n: usize,
) -> Vec<Value> {
    // Every 500 ms: the server's memory is what these tests measure.
    let patience = Patience::within(Duration::from_secs(300)).every(Duration::from_millis(500));
    wait_for(&format!("{n} messages archived"), patience, async || {
        let oom = cgroup.map_or(0, MemoryCgroup::oom_kills);
        assert!(
            served.alive() && oom == 0,
            "the server died while archiving (OOM kills in its cgroup: {oom})"
        );
        let page = get(
            served.addr,
            bearer,
            &format!("/api/messages?queue={dlq}&limit=10"),
        )
        .await;
        if page.status != 200 {
            return None;
        }
        let page: Value = serde_json::from_slice(&page.body).unwrap();
        let messages = page["messages"].as_array().unwrap();
        (messages.len() >= n).then(|| messages.clone())
    })
    .await
}

/// The one message in `queue` (waiting for it), taken off it: (size, SHA-256).
async fn take_one(t: &Topology, queue: &str) -> (usize, [u8; 32]) {
    t.wait_for_depth(queue, 1, Duration::from_secs(120)).await;
    let got = t
        .channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    let body = &got.delivery.data;
    (body.len(), sha2::Sha256::digest(body).into())
}

on_both_backends!(
    dead_letters_of_100_and_128_mib_are_archived_and_replayed_within_the_manifest_limit
);
/// A 100 MiB and a 128 MiB-less-4-KiB dead letter, dead-lettered by the broker into the DLQ
/// of a server that runs, from its start, in a cgroup of the manifest's 384 MiB: both are
/// archived once (the DLQ empty, every delivery acked, one row each), their downloads and an
/// admin's export are their bytes, and replaying the larger one, alone and then with the
/// other in a bulk job, puts its bytes back in a queue — the process never reaching 256 MiB,
/// never the limit.
async fn dead_letters_of_100_and_128_mib_are_archived_and_replayed_within_the_manifest_limit() {
    let p = unique("hugeingest");
    let mut t = Topology::new().await;
    let (work, dlq) = expiring_into_dlq(&mut t, &p).await;
    let back = format!("{p}.back");
    t.queue(&back, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (viewer, operator) = tokens(&db);
    let admin = lazarus_cli(&db, &["token", "create", "a", "--role", "admin"], None);
    let admin = format!("Bearer {}", admin.trim());
    let cgroup = match MemoryCgroup::create(&format!("lazarus-{p}"), MANIFEST_LIMIT_MIB) {
        Ok(cgroup) => Some(cgroup),
        Err(why) => {
            eprintln!("SKIPPED the cgroup half of this test: {why}");
            None
        }
    };
    let served = match &cgroup {
        Some(cgroup) => Served::start_in(&dlq, &db, &["--auth", "users"], cgroup).await,
        None => Served::start(&dlq, &db, &["--auth", "users"], None).await,
    };

    let mut sent = Vec::new();
    for (name, size, seed) in [
        ("big", 100 * 1024 * 1024, 1),
        ("largest", 128 * 1024 * 1024 - 4096, 2),
    ] {
        let (body, digest) = binary_body(size, seed);
        let properties = BasicProperties::default()
            .with_content_type("application/octet-stream".into())
            .with_message_id(name.into());
        t.publish("", &work, &body, properties).await;
        sent.push((name, size, digest));
    }
    let messages = archived(&served, cgroup.as_ref(), &viewer, &dlq, sent.len()).await;
    // Each once: the DLQ is empty and nothing is held unacked, and no second row appears.
    t.wait_for_depth(&dlq, 0, Duration::from_secs(60)).await;
    // The ack follows the commit that made them visible: it may still be on its way.
    wait_until("every delivery acked", Duration::from_secs(60), || async {
        unacked(&dlq) == 0
    })
    .await;
    assert_eq!(
        count_rows(&db, "SELECT count(*) FROM messages").await,
        2,
        "each archived once"
    );
    assert_eq!(messages.len(), 2);
    let id_of = |name: &str| {
        messages
            .iter()
            .find(|m| m["message_id"] == name)
            .and_then(|m| m["id"].as_str())
            .unwrap_or_else(|| panic!("{name} is archived"))
            .to_owned()
    };
    for (name, size, digest) in &sent {
        let path = format!("/api/messages/{}/body", id_of(name));
        let download = get_counted(served.addr, &viewer, &path).await;
        assert_eq!(download.status, 200, "{path}: {}", download.start);
        assert_eq!(
            download.body,
            (*size, *digest),
            "{name}: the download is the body"
        );
    }
    assert_bounded(
        &served,
        cgroup.as_ref(),
        "archiving 100 and 128 MiB dead letters",
    );
    // Each step from here on is measured on its own.
    served.reset_peak();

    // An admin's export: each line whole (its body base64), written as it is read.
    let export = get(served.addr, &admin, &format!("/api/export?queue={dlq}")).await;
    assert_eq!(export.status, 200, "{}", export.text());
    let lines: Vec<&[u8]> = export
        .body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 2, "one line each");
    for line in lines {
        let m: lazarus::archive::ExportedMessage = serde_json::from_slice(line).unwrap();
        let name = m
            .properties
            .message_id
            .as_ref()
            .unwrap()
            .to_text()
            .into_owned();
        let (_, size, digest) = sent.iter().find(|(n, _, _)| *n == name).unwrap();
        let exported: [u8; 32] = sha2::Sha256::digest(&m.body).into();
        assert_eq!(
            (m.body.len(), exported),
            (*size, *digest),
            "{name}: exported"
        );
    }
    drop(export);
    assert_bounded(&served, cgroup.as_ref(), "exporting them");
    served.reset_peak();

    // The largest, replayed on its own into another queue.
    let (_, size, digest) = sent[1];
    let largest = id_of("largest");
    let answer = http_with(
        served.addr,
        "POST",
        &format!("/api/messages/{largest}/replay"),
        &[("Authorization", &operator)],
        Some((
            "application/json",
            &json!({"target": {"exchange": "", "routing_key": back}, "request_key": "huge-1"})
                .to_string(),
        )),
    )
    .await;
    assert!(
        matches!(answer.status, 200 | 202),
        "replay: {} {}",
        answer.status,
        answer.text()
    );
    assert_eq!(
        take_one(&t, &back).await,
        (size, digest),
        "the replayed copy"
    );
    assert_bounded(
        &served,
        cgroup.as_ref(),
        "replaying the 128 MiB dead letter",
    );
    served.reset_peak();

    // Both, in one bulk job: each lands whole.
    let answer = http_with(
        served.addr,
        "POST",
        "/api/replays",
        &[("Authorization", &operator)],
        Some((
            "application/json",
            &json!({
                "ids": [id_of("big"), largest],
                "target": {"exchange": "", "routing_key": back},
                "include_replayed": true,
            })
            .to_string(),
        )),
    )
    .await;
    assert_eq!(answer.status, 200, "bulk replay: {}", answer.text());
    let mut landed = Vec::new();
    for _ in 0..2 {
        landed.push(take_one(&t, &back).await);
    }
    landed.sort();
    let mut expected: Vec<(usize, [u8; 32])> = sent.iter().map(|(_, s, d)| (*s, *d)).collect();
    expected.sort();
    assert_eq!(landed, expected, "the bulk replay's copies");
    assert_bounded(&served, cgroup.as_ref(), "replaying both in a job");
    drop(served);
    drop(cgroup);
    t.cleanup().await;
}

//! Single replays: once per request key, and the status their outcome sets.

use lazarus::archive::{Actor, MessageStatus, Outcome, ReplayEdit, ReplayStart};
use lazarus::message::death::ReplayTarget;

use crate::helpers::*;

use super::*;

on_both_backends!(single_replays_are_recorded_once_per_request_key_and_set_the_status);
async fn single_replays_are_recorded_once_per_request_key_and_set_the_status() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "single.dlq", &["s1", "s2"], REJECTED).await;
    let dave = Actor {
        name: "dave".into(),
        source: Some("10.0.0.7".into()),
    };
    let target = ReplayTarget {
        exchange: "orders".into(),
        routing_key: "order.created".into(),
    };

    let ReplayStart::New(first) = archive
        .begin_replay(m[0], "key-1", &dave, &target, None)
        .await
        .unwrap()
    else {
        panic!("the first use of a key is new")
    };
    // The same key again (a double click, a retried request): the record, not a new publish.
    let ReplayStart::Existing(record) = archive
        .begin_replay(m[0], "key-1", &dave, &target, None)
        .await
        .unwrap()
    else {
        panic!("a key is used once")
    };
    assert_eq!(record.id, first);
    assert_eq!(
        (record.message_id, record.request_key.as_str()),
        (m[0], "key-1")
    );
    assert_eq!((record.actor.as_str(), &record.target), ("dave", &target));
    assert!(record.is_publishing());
    assert!(!record.edited);
    // Not replayed until the broker said so.
    assert_eq!(status(archive, m[0]).await, MessageStatus::Archived);
    let finished = archive
        .finish_replay(first, Outcome::Published, None)
        .await
        .unwrap();
    assert_eq!(
        (finished.outcome.as_str(), finished.detail),
        ("published", None)
    );
    assert_eq!(status(archive, m[0]).await, MessageStatus::Replayed);
    let ReplayStart::Existing(record) = archive
        .begin_replay(m[0], "key-1", &dave, &target, None)
        .await
        .unwrap()
    else {
        panic!("a key is used once")
    };
    assert_eq!(record.outcome, "published");

    // Edited, and failed: the record says both, the message is replay_failed.
    let edit = ReplayEdit {
        body: Some(br#"{"fixed": true}"#.to_vec()),
        headers: None,
    };
    let ReplayStart::New(second) = archive
        .begin_replay(m[1], "key-2", &dave, &target, Some(&edit))
        .await
        .unwrap()
    else {
        panic!("a new key")
    };
    let failed = archive
        .finish_replay(second, Outcome::Failed, Some("channel closed"))
        .await
        .unwrap();
    assert_eq!(
        (
            failed.outcome.as_str(),
            failed.detail.as_deref(),
            failed.edited
        ),
        ("failed", Some("channel closed"), true)
    );
    assert_eq!(status(archive, m[1]).await, MessageStatus::ReplayFailed);
    // Another key is another replay of the same message; newest first.
    let ReplayStart::New(third) = archive
        .begin_replay(m[1], "key-3", &dave, &target, None)
        .await
        .unwrap()
    else {
        panic!("a new key")
    };
    archive
        .finish_replay(third, Outcome::Unroutable, Some("NO_ROUTE"))
        .await
        .unwrap();
    let replays: Vec<(i64, String)> = archive
        .replays_of(m[1])
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.outcome))
        .collect();
    assert_eq!(
        replays,
        vec![(third, "unroutable".into()), (second, "failed".into())]
    );
    assert_eq!(archive.replays_of(m[0]).await.unwrap().len(), 1);

    // Each new replay audited once, before it was published, naming the message.
    let trail = archive.audit_log(None, 100).await.unwrap();
    let lines: Vec<(&str, Option<&str>, Option<&str>)> = trail
        .iter()
        .map(|e| {
            (
                e.action.as_str(),
                e.message_id.as_deref(),
                e.source.as_deref(),
            )
        })
        .collect();
    let (s1, s2) = (m[0].to_string(), m[1].to_string());
    assert_eq!(
        lines,
        vec![
            ("replay", Some(s2.as_str()), Some("10.0.0.7")),
            ("edit_replay", Some(s2.as_str()), Some("10.0.0.7")),
            ("replay", Some(s1.as_str()), Some("10.0.0.7")),
        ]
    );
    assert!(
        trail[2].summary.contains("orders → order.created"),
        "{}",
        trail[2].summary
    );
}

//! Open and resolved: each way a message leaves (dismissed, replayed and settled, died again)
//! or stays open (settling, replay failed), and the open counts of its queue and group kept
//! equal to a recount after every step — purges and a copy that beats its outcome included.

use lazarus::archive::{Actor, MessageStatus, Outcome, ReplayStart, StatusFilter};
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::AmqpValue;
use lazarus::message::headers::REPLAY_OF_HEADER;

use super::*;

/// Every group's and queue's open count is what a recount of open messages finds; the open
/// counts of each DLQ's groups add up to the DLQ's.
pub(super) async fn assert_open_counts_exact(archive: &dyn Archive) {
    let groups = archive.failure_groups(1_000).await.unwrap();
    assert!(groups.len() < 1_000, "every group read");
    let mut by_dlq: std::collections::BTreeMap<String, i64> = Default::default();
    for group in groups {
        *by_dlq.entry(group.queue.clone().unwrap()).or_default() += group.open;
        let filter = MessageFilter {
            group: Some(group.id.expect("a cause group has an id").to_string()),
            status: Some(StatusFilter::Open),
            ..Default::default()
        };
        // The group link (a path of its own on PostgreSQL) finds what the same filter with
        // one more condition finds, page by page, newest first; and counts it.
        let mut walked = Vec::new();
        let mut before = None;
        loop {
            let page = archive
                .list_messages(&filter, PageRequest { limit: 1, before })
                .await
                .unwrap();
            walked.extend(page.messages.iter().map(|m| m.id));
            match page.next_cursor {
                Some(c) => before = Some(c.parse().unwrap()),
                None => break,
            }
        }
        let generic = MessageFilter {
            since: Some(time::OffsetDateTime::UNIX_EPOCH),
            ..filter.clone()
        };
        let all = archive
            .list_messages(
                &generic,
                PageRequest {
                    limit: 500,
                    before: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            walked,
            all.messages.iter().map(|m| m.id).collect::<Vec<_>>()
        );
        assert_eq!(
            archive.count_messages(&filter, 1000).await.unwrap(),
            walked.len() as u64
        );
        let open = open_count(archive, filter).await;
        assert_eq!(group.open, open, "open count of group {group:?}");
    }
    for count in archive.counts().await.unwrap() {
        let filter = MessageFilter {
            queue: Some(count.queue.clone()),
            reason: Some(count.reason.clone()),
            status: Some(StatusFilter::Open),
            ..Default::default()
        };
        let open = open_count(archive, filter).await;
        assert_eq!(count.open, open, "open count of {count:?}");
    }
    let mut dlqs: std::collections::BTreeMap<String, i64> = Default::default();
    for count in archive.counts().await.unwrap() {
        *dlqs.entry(count.queue).or_default() += count.open;
    }
    dlqs.retain(|_, open| *open > 0);
    by_dlq.retain(|_, open| *open > 0);
    assert_eq!(by_dlq, dlqs, "open by DLQ: its groups' and its own");
}

async fn open_count(archive: &dyn Archive, filter: MessageFilter) -> i64 {
    message_ids(archive, &filter).await.len() as i64
}

async fn group_open(archive: &dyn Archive) -> i64 {
    let groups = archive.failure_groups(100).await.unwrap();
    let group = groups
        .iter()
        .find(|g| {
            g.first_death_queue.as_deref() == Some("work") && g.error.as_deref() == Some("timeout")
        })
        .expect("the group exists");
    group.open
}

/// A copy of message `original` (its replay carried `x-lazarus-replay-of`), dead again.
fn copy_of(original: i64, name: &str) -> IncomingMessage {
    let mut copy = with_error(delivery("life.dlq", name, Some(REJECTED)), "timeout");
    copy.headers
        .get_or_insert_with(Table::new)
        .insert(REPLAY_OF_HEADER, AmqpValue::text(&original.to_string()));
    copy
}

pub(super) async fn replay(archive: &dyn Archive, id: i64, key: &str, outcome: Outcome) {
    let actor = Actor::system("test");
    let target = ReplayTarget {
        exchange: "orders".into(),
        routing_key: "order.created".into(),
    };
    let ReplayStart::New(record) = archive
        .begin_replay(id, key, &actor, &target, None)
        .await
        .unwrap()
    else {
        panic!("a new replay")
    };
    archive.finish_replay(record, outcome, None).await.unwrap();
}

on_both_backends!(messages_stay_open_until_dismissed_settled_or_died_again_and_counts_follow);
async fn messages_stay_open_until_dismissed_settled_or_died_again_and_counts_follow() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let names = ["a", "b", "c", "d", "e", "f"];
    let batch = names
        .iter()
        .map(|n| with_error(delivery("life.dlq", n, Some(REJECTED)), "timeout"))
        .collect();
    assert_eq!(store(archive, batch).await, (6, 0));
    let m = listed_ids(archive, "life.dlq").await;
    assert_eq!(group_open(archive).await, 6);
    assert_open_counts_exact(archive).await;
    let user = Actor::system("carol");

    // Dismissed: resolved at once.
    archive
        .dismiss(&ids(&m[..1]), "[a]", "handled by hand", &user)
        .await
        .unwrap();
    assert_eq!(group_open(archive).await, 5);
    assert_open_counts_exact(archive).await;

    // Replayed: still open while it settles; a replay the broker refused leaves it open.
    replay(archive, m[1], "r-b", Outcome::Published).await;
    replay(archive, m[2], "r-c", Outcome::Unroutable).await;
    assert_eq!(status(archive, m[1]).await, MessageStatus::Replayed);
    assert_eq!(status(archive, m[2]).await, MessageStatus::ReplayFailed);
    assert_eq!(group_open(archive).await, 5);
    // Not yet due: nothing settles.
    let an_hour_ago = now() - time::Duration::hours(1);
    assert_eq!(archive.settle(an_hour_ago, 100).await.unwrap(), 0);
    // Due: it settles, once.
    let later = now() + time::Duration::seconds(2);
    assert_eq!(archive.settle(later, 100).await.unwrap(), 1);
    assert_eq!(archive.settle(later, 100).await.unwrap(), 0);
    assert_eq!(status(archive, m[1]).await, MessageStatus::Settled);
    assert_eq!(group_open(archive).await, 4);
    assert_open_counts_exact(archive).await;

    // Replayed, and its copy dies again: the original is resolved, the copy is open.
    replay(archive, m[3], "r-d", Outcome::Published).await;
    assert_eq!(store(archive, vec![copy_of(m[3], "d-again")]).await, (1, 0));
    assert_eq!(status(archive, m[3]).await, MessageStatus::DiedAgain);
    assert_eq!(group_open(archive).await, 4);
    assert_open_counts_exact(archive).await;
    // It does not settle.
    assert_eq!(archive.settle(later, 100).await.unwrap(), 0);

    // The copy dies before the replay's outcome is written down: died again all the same.
    let actor = Actor::system("test");
    let target = ReplayTarget {
        exchange: "orders".into(),
        routing_key: "order.created".into(),
    };
    let ReplayStart::New(record) = archive
        .begin_replay(m[4], "r-e", &actor, &target, None)
        .await
        .unwrap()
    else {
        panic!("a new replay")
    };
    assert_eq!(store(archive, vec![copy_of(m[4], "e-again")]).await, (1, 0));
    archive
        .finish_replay(record, Outcome::Published, None)
        .await
        .unwrap();
    assert_eq!(status(archive, m[4]).await, MessageStatus::DiedAgain);
    assert_open_counts_exact(archive).await;

    // Filters: open and resolved.
    let statuses = |status: StatusFilter| async move {
        let filter = MessageFilter {
            queue: Some("life.dlq".into()),
            status: Some(status),
            ..Default::default()
        };
        message_ids(archive, &filter).await
    };
    assert_eq!(
        statuses(StatusFilter::Open).await,
        ["c", "d-again", "e-again", "f"]
    );
    assert_eq!(statuses(StatusFilter::Resolved).await, ["a", "b", "d", "e"]);

    // Purges take open messages out of the open counts, and resolved ones not.
    archive
        .purge(&ids(&[m[0], m[5]]), "[a, f]", "cleanup", &user)
        .await
        .unwrap();
    assert_eq!(group_open(archive).await, 3);
    assert_open_counts_exact(archive).await;

    // Replay jobs: a published item settles like a single replay; its step records the time
    // it was handed out, so a copy archived before the outcome still counts.
    let copies = listed(archive, "life.dlq").await;
    let again: Vec<i64> = copies
        .iter()
        .filter(|m| {
            m.message_id
                .as_deref()
                .is_some_and(|n| n.ends_with("-again"))
        })
        .map(|m| m.id)
        .collect();
    let id = job(archive, "life-job", &ids(&again)).await.id;
    archive
        .claim_job("runner", None, 60_000, None)
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(
        handed_out(&step(archive, id, "runner", 60_000, &[], 10).await),
        again
    );
    assert_eq!(
        store(archive, vec![copy_of(again[0], "d-third")]).await,
        (1, 0)
    );
    step(archive, id, "runner", 60_000, &published(&again), 10).await;
    assert_eq!(status(archive, again[0]).await, MessageStatus::DiedAgain);
    assert_eq!(status(archive, again[1]).await, MessageStatus::Replayed);
    assert_open_counts_exact(archive).await;
    assert_eq!(archive.settle(later, 100).await.unwrap(), 1);
    assert_eq!(status(archive, again[1]).await, MessageStatus::Settled);
    assert_open_counts_exact(archive).await;
}

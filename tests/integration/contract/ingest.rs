//! Ingest and reading: a stored batch, the totals it adds to, redeliveries not stored twice.

use lazarus::archive::{MessageStatus, MessageSummary, QueueReasonCount};
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::AmqpValue;

use crate::helpers::*;

use super::*;

on_both_backends!(each_total_says_its_broker);
async fn each_total_says_its_broker() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let of = |broker: &str, key: &str, name: &str| IncomingMessage {
        broker: broker.into(),
        ..delivery(key, name, Some(REJECTED))
    };
    let batch = vec![
        of("default", "orders.dlq", "a"),
        of("us", "us:orders.dlq", "b"),
        of("us", "us:orders.dlq", "c"),
    ];
    assert_eq!(store(archive, batch).await, (3, 0));
    // A later batch adds to the total it made, keeping its broker.
    assert_eq!(
        store(archive, vec![of("us", "us:orders.dlq", "d")]).await,
        (1, 0)
    );
    let mut totals: Vec<(String, String, i64)> = archive
        .counts()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.broker, c.queue, c.messages))
        .collect();
    totals.sort();
    assert_eq!(
        totals,
        [
            ("default".into(), "orders.dlq".into(), 1),
            ("us".into(), "us:orders.dlq".into(), 3)
        ]
    );
}

on_both_backends!(totals_of_an_archive_from_before_get_their_broker);
/// An archive an earlier version wrote has totals without a broker: the migration gives
/// each the broker of its messages.
async fn totals_of_an_archive_from_before_get_their_broker() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let of = |broker: &str, key: &str, name: &str| IncomingMessage {
        broker: broker.into(),
        ..delivery(key, name, Some(REJECTED))
    };
    {
        let archive = lazarus::archive::open(&url).await.unwrap();
        let batch = vec![
            of("default", "orders.dlq", "a"),
            of("us", "us:orders.dlq", "b"),
        ];
        assert_eq!(store(&*archive, batch).await, (2, 0));
    }
    // The migration that gave them one, by its name: renumbering it is a rename.
    let version: u32 = migration_version(&url, "totals_broker");
    execute_sql(
        &url,
        &format!(
            "ALTER TABLE queue_reason_counts DROP COLUMN broker; \
             DELETE FROM _sqlx_migrations WHERE version = {version}"
        ),
    )
    .await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let mut totals: Vec<(String, String)> = archive
        .counts()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.broker, c.queue))
        .collect();
    totals.sort();
    assert_eq!(
        totals,
        [
            ("default".into(), "orders.dlq".into()),
            ("us".into(), "us:orders.dlq".into())
        ]
    );
}

on_both_backends!(a_stored_batch_adds_to_the_totals_and_redeliveries_are_not_stored_twice);
async fn a_stored_batch_adds_to_the_totals_and_redeliveries_are_not_stored_twice() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let base = now();
    let earlier = base - time::Duration::hours(2);
    let expired = Death {
        reason: "expired",
        ..REJECTED
    };
    let batch = vec![
        at(
            with_error(delivery("orders.dlq", "a1", Some(REJECTED)), "boom"),
            earlier,
        ),
        with_error(delivery("orders.dlq", "a2", Some(REJECTED)), "boom"),
        delivery("orders.dlq", "a3", Some(REJECTED)),
        delivery("orders.dlq", "b1", None),
        at(delivery("orders.dlq", "b2", None), earlier),
        delivery("billing.dlq", "c1", Some(expired)),
    ];
    assert_eq!(store(archive, batch.clone()).await, (6, 0));

    let count = |queue: &str, reason: &str, messages, oldest, newest| QueueReasonCount {
        queue: queue.into(),
        broker: "default".into(),
        reason: reason.into(),
        messages,
        open: messages,
        oldest,
        newest,
    };
    let mut counts = archive.counts().await.unwrap();
    counts.sort_by(|a, b| (&a.queue, &a.reason).cmp(&(&b.queue, &b.reason)));
    assert_eq!(
        counts,
        vec![
            count("billing.dlq", "expired", 1, base, base),
            count("orders.dlq", "none", 2, earlier, base),
            count("orders.dlq", "rejected", 3, earlier, base),
        ]
    );

    let hourly: Vec<_> = archive
        .hourly_counts(base - time::Duration::hours(3))
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.queue, h.hour, h.messages))
        .collect();
    let (h, h2) = (hour_of(base), hour_of(earlier));
    assert_eq!(
        hourly,
        vec![
            ("billing.dlq".into(), h, 1),
            ("orders.dlq".into(), h2, 2),
            ("orders.dlq".into(), h, 3),
        ]
    );
    let recent = archive
        .hourly_counts(base - time::Duration::minutes(59))
        .await
        .unwrap();
    // The last hour's two DLQs, and nothing of the hour before.
    assert_eq!(recent.len(), 2, "{recent:?}");
    assert!(recent.iter().all(|c| c.hour == h), "{recent:?}");
    // What dies now: per minute, the last hour kept; older minutes are forgotten.
    let now_dying = archive
        .recent_counts(base - time::Duration::minutes(4))
        .await
        .unwrap();
    assert_eq!(
        now_dying,
        [("billing.dlq".to_owned(), 1), ("orders.dlq".to_owned(), 3)]
    );
    let since_earlier = earlier - time::Duration::minutes(1);
    let before = archive.recent_counts(since_earlier).await.unwrap();
    assert_eq!(before[1], ("orders.dlq".to_owned(), 5));
    archive.prune_minutes().await.unwrap();
    let after = archive.recent_counts(since_earlier).await.unwrap();
    assert_eq!(after[1], ("orders.dlq".to_owned(), 3));

    let mut groups: Vec<_> = archive
        .failure_groups(10)
        .await
        .unwrap()
        .into_iter()
        .map(|g| {
            (
                g.first_death_queue.unwrap(),
                g.reason.unwrap(),
                g.error.unwrap(),
                g.total,
                g.first_seen,
                g.last_seen,
            )
        })
        .collect();
    groups.sort();
    let group = |q: &str, r: &str, e: &str, n, first, last| {
        (q.to_owned(), r.to_owned(), e.to_owned(), n, first, last)
    };
    assert_eq!(
        groups,
        vec![
            group("orders.dlq", "none", "", 2, earlier, base),
            group("work", "expired", "", 1, base, base),
            group("work", "rejected", "", 1, base, base),
            group("work", "rejected", "boom", 2, earlier, base),
        ]
    );
    assert_eq!(archive.failure_groups(1).await.unwrap().len(), 1);

    // One message back whole: its delivery, history, target and body.
    let orders = listed(archive, "orders.dlq").await;
    assert_eq!(orders.len(), 5);
    let a2 = orders
        .iter()
        .find(|m| m.message_id.as_deref() == Some("a2"))
        .unwrap();
    let message = archive.get_message(a2.id).await.unwrap().unwrap();
    assert_eq!(&message.summary, a2);
    assert_eq!(message.summary.status, MessageStatus::Archived);
    assert_eq!(
        message.summary.replay_target,
        Some(ReplayTarget {
            exchange: "orders".into(),
            routing_key: "order.created".into()
        })
    );
    let first = message.summary.first_death.as_ref().unwrap();
    assert_eq!(
        (first.queue.as_str(), first.reason.as_str()),
        ("work", "rejected")
    );
    assert_eq!(
        (
            message.delivered_exchange.as_str(),
            message.delivered_routing_key.as_str()
        ),
        ("dlx", "work")
    );
    assert!(!message.redelivered);
    assert_eq!(message.headers, batch[1].headers);
    assert_eq!(message.properties, batch[1].properties);
    let body = archive.get_body(a2.id).await.unwrap().unwrap();
    assert_eq!(body.bytes, batch[1].body);
    assert_eq!(body.content_type.as_deref(), Some("application/json"));
    let b1 = orders
        .iter()
        .find(|m| m.message_id.as_deref() == Some("b1"))
        .unwrap();
    assert_eq!(
        (b1.first_death.as_ref(), b1.replay_target.as_ref()),
        (None, None)
    );
    assert!(archive.get_message(i64::MAX).await.unwrap().is_none());
    assert!(archive.get_body(i64::MAX).await.unwrap().is_none());

    // A redelivered byte-identical copy of a3 is a3 (a lost ack): skipped, however often it
    // comes back, broker delivery counters or not.
    let mut again = batch[2].clone();
    again.redelivered = true;
    assert_eq!(store(archive, vec![again.clone()]).await, (0, 1));
    let mut counted = again.clone();
    counted
        .headers
        .as_mut()
        .unwrap()
        .insert("x-delivery-count", AmqpValue::LongLongInt(2));
    assert_eq!(store(archive, vec![counted]).await, (0, 1));
    // A first delivery of the same content is another message.
    assert_eq!(store(archive, vec![batch[2].clone()]).await, (1, 0));
    // Two rows now stand for two copies; a third copy in the same batch is new.
    assert_eq!(
        store(archive, vec![again.clone(), again.clone(), again]).await,
        (1, 2)
    );
    let rejected = archive
        .counts()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.queue == "orders.dlq" && c.reason == "rejected")
        .unwrap();
    assert_eq!(rejected.messages, 5);

    // The list pages through all of them, newest first, each once; the copies of a3 are
    // related records of it.
    let orders = listed(archive, "orders.dlq").await;
    assert_eq!(orders.len(), 7);
    assert!(orders.windows(2).all(|w| w[0].id < w[1].id));
    let a3: Vec<&MessageSummary> = orders
        .iter()
        .filter(|m| m.message_id.as_deref() == Some("a3"))
        .collect();
    assert_eq!(a3.len(), 3);
    let related: Vec<i64> = archive
        .related(a3[0])
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert!(
        related.contains(&a3[1].id) && related.contains(&a3[2].id),
        "{related:?}"
    );
}

on_both_backends!(a_copy_is_found_by_its_time_and_one_from_before_by_its_fingerprint);
/// A redelivery is looked up by the time its content carries and its fingerprint (the index
/// in time order); a row archived before rows had a time, or whose content carries none, by
/// its fingerprint alone. Either way each archived row stands for one copy, at ingest and at
/// import.
async fn a_copy_is_found_by_its_time_and_one_from_before_by_its_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let died = |name: &str, time: u64| {
        let mut m = delivery("orders.dlq", name, Some(REJECTED));
        let headers = m.headers.as_mut().unwrap();
        let Some(AmqpValue::Array(deaths)) = headers.get("x-death").cloned() else {
            panic!("no x-death");
        };
        let deaths = deaths
            .into_iter()
            .map(|d| match d {
                AmqpValue::Table(mut entry) => {
                    entry.insert("time", AmqpValue::Timestamp(time));
                    AmqpValue::Table(entry)
                }
                other => other,
            })
            .collect();
        headers.insert("x-death", AmqpValue::Array(deaths));
        m
    };
    let again = |mut m: IncomingMessage| {
        m.redelivered = true;
        m
    };
    let old = died("old", 1_700_000_000);
    {
        let archive = lazarus::archive::open(&url).await.unwrap();
        assert_eq!(store(&*archive, vec![old.clone()]).await, (1, 0));
    }
    // The archive as the version before left it: no time, the fingerprint's index alone.
    let version = migration_version(&url, "fingerprint_time");
    let using = match url.starts_with("sqlite://") {
        true => "",
        false => "USING hash ",
    };
    execute_sql(
        &url,
        &format!(
            "DROP INDEX messages_fingerprint_dated; DROP INDEX messages_fingerprint; \
             ALTER TABLE messages DROP COLUMN fingerprint_time; \
             CREATE INDEX messages_fingerprint ON messages {using}(fingerprint); \
             DELETE FROM _sqlx_migrations WHERE version = {version}"
        ),
    )
    .await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let mut stamped = delivery("orders.dlq", "stamped", None);
    stamped.properties.timestamp = Some(1_700_000_500);
    let bare = delivery("orders.dlq", "bare", None);
    let (a, b) = (died("a", 1_700_000_100), died("b", 1_700_000_200));
    let batch = vec![a.clone(), b.clone(), stamped.clone(), bare.clone()];
    assert_eq!(store(archive, batch).await, (4, 0));
    // Those with a time have it; the row from before and the bare message have none.
    let dated = "SELECT count(*) FROM messages WHERE fingerprint_time IS NOT NULL";
    assert_eq!(count_rows(&url, dated).await, 3);
    let timed = "SELECT count(*) FROM messages WHERE fingerprint_time = 1700000200";
    assert_eq!(count_rows(&url, timed).await, 1);

    // Each redelivered once: every one a copy, however its row is found.
    let all = [&old, &a, &b, &stamped, &bare];
    let copies: Vec<IncomingMessage> = all.iter().map(|m| again((*m).clone())).collect();
    assert_eq!(store(archive, copies).await, (0, 5));
    // Two copies of b for its one row: one is new. The same time with other content is
    // another message.
    let b_again = again(b.clone());
    let other = again(died("other", 1_700_000_200));
    assert_eq!(
        store(archive, vec![b_again.clone(), b_again, other]).await,
        (2, 1)
    );
    // The old row, redelivered among dated ones in one batch, is still found.
    assert_eq!(
        store(archive, vec![again(a.clone()), again(old.clone())]).await,
        (0, 2)
    );

    // Import finds the rows as ingest does: b twice now, the old row and the bare one once.
    let keys: Vec<(String, [u8; 32], Option<i64>)> = [&old, &b, &bare]
        .iter()
        .map(|m| {
            let p = PreparedMessage::new((*m).clone());
            (p.message.queue.clone(), p.fingerprint, p.fingerprint_time)
        })
        .collect();
    let ids = archive.ids_with_fingerprints(&keys).await.unwrap();
    let found: Vec<usize> = keys
        .iter()
        .map(|(queue, fingerprint, _)| ids[&(queue.clone(), *fingerprint)].len())
        .collect();
    assert_eq!(found, [1, 2, 1]);
}

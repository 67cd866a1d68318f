//! Bulk actions: dismissing and purging a selection, and what an unfinished job holds.

use lazarus::archive::{Actor, JobAction, MessageStatus, Outcome, ReplayStart};
use lazarus::message::death::ReplayTarget;

use crate::helpers::*;

use super::*;

on_both_backends!(dismiss_marks_and_purge_deletes_but_not_what_an_unfinished_job_holds);
async fn dismiss_marks_and_purge_deletes_but_not_what_an_unfinished_job_holds() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let base = now();
    let earlier = base - time::Duration::hours(2);
    let batch = vec![
        at(delivery("purge.dlq", "p1", Some(REJECTED)), earlier),
        delivery("purge.dlq", "p2", Some(REJECTED)),
        delivery("purge.dlq", "p3", None),
        delivery("purge.dlq", "p4", Some(REJECTED)),
        delivery("keep.dlq", "k1", Some(REJECTED)),
    ];
    assert_eq!(store(archive, batch).await, (5, 0));
    let listed = listed(archive, "purge.dlq").await;
    let p: Vec<i64> = listed.iter().map(|m| m.id).collect();
    assert_eq!(
        listed
            .iter()
            .map(|m| m.message_id.clone().unwrap())
            .collect::<Vec<_>>(),
        ["p1", "p2", "p3", "p4"]
    );
    let user = Actor {
        name: "carol".into(),
        source: Some("10.9.9.9".into()),
    };

    // Dismiss: the status and the note; a message dismissed before keeps its first note.
    assert_eq!(
        archive
            .dismiss(&ids(&p[..1]), "[p1]", "fixed by hand", &user)
            .await
            .unwrap(),
        1
    );
    let p1 = archive.get_message(p[0]).await.unwrap().unwrap();
    assert_eq!(p1.summary.status, MessageStatus::Dismissed);
    assert_eq!(p1.status_note.as_deref(), Some("fixed by hand"));
    assert_eq!(
        archive
            .dismiss(&ids(&p[..2]), "[p1, p2]", "later", &user)
            .await
            .unwrap(),
        1
    );
    let p1 = archive.get_message(p[0]).await.unwrap().unwrap();
    assert_eq!(p1.status_note.as_deref(), Some("fixed by hand"));
    assert_eq!(status(archive, p[1]).await, MessageStatus::Dismissed);
    assert_eq!(
        archive
            .dismiss(&ids(&[i64::MAX]), "[unknown]", "nothing", &user)
            .await
            .unwrap(),
        0
    );

    // p4 is held by a job that is not finished; a plan holds nothing (p3).
    let holding = job(archive, "holds-p4", &ids(&p[3..])).await.id;
    let plan = archive
        .create_job(&spec("plans-p3", &user, &ids(&p[2..3]), false))
        .await
        .unwrap()
        .id;
    // A single replay's record goes with its message.
    let ReplayStart::New(replay) = archive
        .begin_replay(
            p[1],
            "single-p2",
            &user,
            &ReplayTarget {
                exchange: "orders".into(),
                routing_key: "order.created".into(),
            },
            None,
        )
        .await
        .unwrap()
    else {
        panic!("a new request key")
    };
    archive
        .finish_replay(replay, Outcome::Published, None)
        .await
        .unwrap();

    let purged = archive
        .purge(&of_queue("purge.dlq"), "queue purge.dlq", "cleanup", &user)
        .await
        .unwrap();
    assert_eq!(purged, 3);
    for gone in &p[..3] {
        assert!(archive.get_message(*gone).await.unwrap().is_none());
        assert!(archive.get_body(*gone).await.unwrap().is_none());
        assert!(archive.replays_of(*gone).await.unwrap().is_empty());
    }
    assert!(archive.get_message(p[3]).await.unwrap().is_some());
    assert_eq!(listed_ids(archive, "purge.dlq").await, [p[3]],);
    // The totals lose what went, the oldest of what is left included.
    let counts: Vec<_> = archive
        .counts()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.queue, c.reason, c.messages, c.oldest, c.newest))
        .collect();
    let count = |q: &str, r: &str, n| (q.to_owned(), r.to_owned(), n, base, base);
    assert_eq!(
        counts,
        vec![
            count("keep.dlq", "rejected", 1),
            count("purge.dlq", "rejected", 1)
        ]
    );
    let hourly: Vec<_> = archive
        .hourly_counts(base - time::Duration::hours(3))
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.queue, h.hour, h.messages))
        .collect();
    assert_eq!(
        hourly,
        vec![
            ("keep.dlq".to_owned(), hour_of(base), 1),
            ("purge.dlq".to_owned(), hour_of(base), 1)
        ]
    );
    let mut groups: Vec<_> = archive
        .failure_groups(10)
        .await
        .unwrap()
        .into_iter()
        .map(|g| {
            (
                g.queue.unwrap(),
                g.first_death_queue.unwrap(),
                g.reason.unwrap(),
                g.error.unwrap(),
                g.total,
            )
        })
        .collect();
    groups.sort();
    // A group is one DLQ's: the two that took dead letters of `work` have one each.
    let group = |dlq: &str| {
        (
            dlq.into(),
            "work".into(),
            "rejected".into(),
            String::new(),
            1,
        )
    };
    assert_eq!(groups, vec![group("keep.dlq"), group("purge.dlq")]);
    // The plan lost its item; the job keeps its own.
    assert_eq!(reread(archive, plan).await.total, 0);
    assert_eq!(reread(archive, holding).await.total, 1);

    // Once the job is finished, p4 goes too, and so do its totals.
    archive
        .control_job(holding, JobAction::Cancel, &user)
        .await
        .unwrap();
    assert_eq!(
        archive
            .purge(&ids(&p[3..]), "[p4]", "cleanup", &user)
            .await
            .unwrap(),
        1
    );
    assert_eq!(reread(archive, holding).await.total, 0);
    let counts = archive.counts().await.unwrap();
    assert_eq!(counts.len(), 1);
    assert_eq!(
        (counts[0].queue.as_str(), counts[0].messages),
        ("keep.dlq", 1)
    );
    let groups = archive.failure_groups(10).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].total, 1);

    // Every action audited, by whom, with its note.
    let trail = audit_trail(archive).await;
    let lines: Vec<(&str, Option<i64>, &str)> = trail
        .iter()
        .filter(|e| e.0 == "dismiss" || e.0 == "purge")
        .map(|e| (e.0.as_str(), e.3, e.4.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            ("purge", None, "purged 1 message ([p4]): cleanup"),
            (
                "purge",
                None,
                "purged 3 messages (queue purge.dlq): cleanup"
            ),
            // One id selected: the entry names it, archived or not.
            (
                "dismiss",
                Some(i64::MAX),
                "dismissed 0 messages ([unknown]): nothing"
            ),
            ("dismiss", None, "dismissed 1 message ([p1, p2]): later"),
            (
                "dismiss",
                Some(p[0]),
                "dismissed 1 message ([p1]): fixed by hand"
            ),
        ]
    );
    assert!(trail
        .iter()
        .filter(|e| e.0 == "dismiss" || e.0 == "purge")
        .all(|e| e.1 == "carol"));
}

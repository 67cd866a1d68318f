//! Regrouping an archive of the version before failures were grouped by cause, on both
//! backends: its groups were keyed on each error as written (one per id), with messages open,
//! settling, whose replay failed, dismissed, settled and died again in them. The migration
//! keys groups on causes and the background regroup moves each message to its cause group a
//! batch at a time: every open and settling count — per group, per DLQ — exact at every batch
//! boundary and at the end, and the lifecycle's invariants still holding afterwards.

use lazarus::amqp::headers::AmqpValue;
use lazarus::amqp::publisher::REPLAY_OF_HEADER;
use lazarus::archive::{Actor, GroupQuery, IngestRules, Outcome, StatusFilter};

use super::lifecycle::{assert_open_counts_exact, replay};
use super::*;

/// The schema, groups and migration record the version before causes left: what the
/// migration to causes (found by its name, so that renumbering it is a rename) adds dropped,
/// the groups keyed on (first-death queue, reason, error) as that version counted them, and
/// each message's error as it wrote it (`old_errors`: message-id, error).
fn downgrade(url: &str, old_errors: &[(String, String)]) -> String {
    let errors: String = old_errors
        .iter()
        .map(|(id, error)| {
            format!(
                "UPDATE messages SET error = '{}' WHERE message_id = '{id}';",
                error.replace('\'', "''")
            )
        })
        .collect();
    let open = "'archived', 'replayed', 'replay_failed'";
    match url.starts_with("sqlite://") {
        true => format!(
            "{errors}
             DROP INDEX messages_group; DROP INDEX messages_group_open;
             ALTER TABLE messages DROP COLUMN error_type; ALTER TABLE messages DROP COLUMN cause;
             ALTER TABLE messages DROP COLUMN message_type;
             CREATE INDEX messages_group ON messages (coalesce(first_death_queue, queue),
                 first_death_reason, coalesce(error, ''), id);
             CREATE INDEX messages_group_open ON messages (coalesce(first_death_queue, queue),
                 first_death_reason, coalesce(error, ''), id) WHERE status IN ({open});
             DROP TABLE failure_groups;
             CREATE TABLE failure_groups (queue TEXT NOT NULL, reason TEXT NOT NULL,
                 error TEXT NOT NULL, messages INTEGER NOT NULL, first_seen INTEGER NOT NULL,
                 last_seen INTEGER NOT NULL, open_messages INTEGER NOT NULL DEFAULT 0,
                 PRIMARY KEY (queue, reason, error)) WITHOUT ROWID;
             INSERT INTO failure_groups SELECT coalesce(first_death_queue, queue),
                 coalesce(first_death_reason, 'none'), coalesce(error, ''), count(*),
                 min(archived_at), max(archived_at), sum(status IN ({open}))
                 FROM messages GROUP BY 1, 2, 3;
             CREATE INDEX failure_groups_first_seen ON failure_groups (first_seen);
             DROP TABLE regroup;
             DELETE FROM _sqlx_migrations WHERE description = 'failures by cause';"
        ),
        false => format!(
            "{errors}
             DROP INDEX messages_group;
             ALTER TABLE messages DROP COLUMN error_type, DROP COLUMN cause,
                 DROP COLUMN message_type;
             CREATE INDEX messages_group ON messages (coalesce(first_death_queue, queue),
                 first_death_reason, coalesce(error, ''), id);
             ALTER TABLE message_status RENAME COLUMN group_cause TO group_error;
             UPDATE message_status s SET group_error = coalesce(m.error, '') FROM messages m
                 WHERE m.id = s.id;
             DROP TABLE failure_groups;
             CREATE TABLE failure_groups (queue TEXT NOT NULL, reason TEXT NOT NULL,
                 error TEXT NOT NULL, messages BIGINT NOT NULL, first_seen BIGINT NOT NULL,
                 last_seen BIGINT NOT NULL, open_messages BIGINT NOT NULL DEFAULT 0,
                 PRIMARY KEY (queue, reason, error));
             INSERT INTO failure_groups SELECT coalesce(m.first_death_queue, m.queue),
                 coalesce(m.first_death_reason, 'none'), coalesce(m.error, ''), count(*),
                 min(m.archived_at), max(m.archived_at),
                 count(*) FILTER (WHERE s.status IN ({open}))
                 FROM messages m JOIN message_status s ON s.id = m.id GROUP BY 1, 2, 3;
             CREATE INDEX failure_groups_first_seen ON failure_groups (first_seen);
             DROP TABLE regroup;
             DELETE FROM _sqlx_migrations WHERE description = 'failures by cause';"
        ),
    }
}

/// Each group's settling count is what a recount of its replayed (settling) messages finds.
async fn assert_settling_exact(archive: &dyn Archive) {
    for group in archive.failure_groups(1_000).await.unwrap() {
        let filter = MessageFilter {
            group: Some(group.id.unwrap().to_string()),
            status: Some(StatusFilter::One(MessageStatus::Replayed)),
            ..Default::default()
        };
        let settling = message_ids(archive, &filter).await.len() as i64;
        assert_eq!(group.settling, settling, "settling in {group:?}");
    }
}

/// Open messages per DLQ, as its totals count them.
async fn open_by_dlq(archive: &dyn Archive) -> Vec<(String, i64)> {
    let mut out: std::collections::BTreeMap<String, i64> = Default::default();
    for count in archive.counts().await.unwrap() {
        *out.entry(count.queue).or_default() += count.open;
    }
    out.into_iter().collect()
}

on_both_backends!(an_archive_of_an_earlier_version_is_regrouped_with_its_open_counts_exact);
async fn an_archive_of_an_earlier_version_is_regrouped_with_its_open_counts_exact() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    // Four bugs, 6 failures each (the Spring and Python ones from the real runtimes), across
    // two DLQs; and two messages without death history or error.
    let bugs = crate::groups::four_bugs(6);
    let mut batch = Vec::new();
    let mut old_errors = Vec::new();
    for (b, bug) in bugs.iter().enumerate() {
        for (i, headers) in bug.headers.iter().enumerate() {
            let name = format!("bug{b}-{i}");
            let dlq = if b == 0 && i >= 4 { "b.dlq" } else { "a.dlq" };
            let mut m = delivery(dlq, &name, Some(REJECTED));
            let table = m.headers.as_mut().unwrap();
            for (header, value) in headers {
                table.insert(*header, AmqpValue::text(value));
            }
            m.properties.kind = Some(bug.message_type.into());
            // The error as the earlier version wrote it: the first error header's line (a
            // Python traceback's last), ids and all.
            let (_, first) = headers[0].clone();
            let line = match first.starts_with("Traceback") {
                true => first
                    .lines()
                    .rfind(|l| !l.trim().is_empty())
                    .unwrap()
                    .to_owned(),
                false => first.lines().next().unwrap().to_owned(),
            };
            old_errors.push((name, line));
            batch.push(m);
        }
    }
    batch.push(delivery("a.dlq", "bare-1", None));
    batch.push(delivery("a.dlq", "bare-2", None));
    {
        let archive = lazarus::archive::open(&url).await.unwrap();
        assert_eq!(store(&*archive, batch).await, (26, 0));
        // Open, settling, replay failed, dismissed, settled and died again, in several groups.
        let id = |name: &str| {
            let archive = archive.clone();
            let name = name.to_owned();
            async move {
                let filter = MessageFilter::default();
                let page = archive
                    .list_messages(
                        &filter,
                        PageRequest {
                            limit: 500,
                            before: None,
                        },
                    )
                    .await
                    .unwrap();
                page.messages
                    .iter()
                    .find(|m| m.message_id.as_deref() == Some(&name))
                    .unwrap()
                    .id
            }
        };
        let user = Actor::system("carol");
        let dismissed = [id("bug0-0").await, id("bug1-1").await, id("bug2-2").await];
        archive
            .dismiss(&ids(&dismissed), "[...]", "handled by hand", &user)
            .await
            .unwrap();
        replay(&*archive, id("bug1-2").await, "settled", Outcome::Published).await;
        let later = now() + time::Duration::seconds(2);
        assert_eq!(archive.settle(later, 100).await.unwrap(), 1);
        replay(&*archive, id("bug1-0").await, "failed", Outcome::Unroutable).await;
        for (n, name) in ["bug0-1", "bug2-0", "bug3-0", "bug3-1", "bug0-5"]
            .iter()
            .enumerate()
        {
            let key = format!("settling-{n}");
            replay(&*archive, id(name).await, &key, Outcome::Published).await;
        }
        let original = id("bug0-2").await;
        replay(&*archive, original, "again", Outcome::Published).await;
        let mut copy = with_error(delivery("a.dlq", "bug0-2-again", Some(REJECTED)), "boom");
        copy.headers
            .get_or_insert_with(Table::new)
            .insert(REPLAY_OF_HEADER, AmqpValue::text(&original.to_string()));
        assert_eq!(store(&*archive, vec![copy]).await, (1, 0));
        old_errors.push(("bug0-2-again".into(), "boom".into()));
    }
    execute_sql(&url, &downgrade(&url, &old_errors)).await;

    // Opened by this version: migrated, every message still in the group of its error.
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let before = archive.failure_groups(1_000).await.unwrap();
    assert_eq!(
        before.len(),
        // bug0: 4 in a.dlq (one of them now the copy's original), 2 in b.dlq; bug1: 6;
        // bug2: 6; bug3 (every traceback's last line the same): 1; the bare ones; the copy.
        4 + 2 + 6 + 6 + 1 + 1 + 1,
        "{before:#?}"
    );
    assert_open_counts_exact(archive).await;
    assert_settling_exact(archive).await;
    let dlqs = open_by_dlq(archive).await;
    // A message archived after the upgrade is keyed on its cause from the start.
    store(
        archive,
        vec![with_error(
            delivery("a.dlq", "new-1", Some(REJECTED)),
            "CustomerNotFoundException: no customer with id C-9999",
        )],
    )
    .await;
    let dlqs: Vec<(String, i64)> = dlqs
        .into_iter()
        .map(|(q, n)| (q.clone(), n + i64::from(q == "a.dlq")))
        .collect();
    assert_open_counts_exact(archive).await;

    // The regroup, five messages a batch: exact at every boundary.
    let rules = IngestRules::default();
    let mut batches = 0;
    while let Some(progress) = archive.regroup_batch(&rules, 5).await.unwrap() {
        batches += 1;
        assert!(batches <= 10, "{progress:?}");
        assert_open_counts_exact(archive).await;
        assert_settling_exact(archive).await;
        assert_eq!(open_by_dlq(archive).await, dlqs, "after batch {batches}");
    }
    assert_eq!(
        batches, 7,
        "27 messages in batches of 5, then the one that ends it"
    );
    assert_eq!(count_rows(&url, "SELECT count(*) FROM regroup").await, 0);
    assert_eq!(
        count_rows(&url, "SELECT count(*) FROM messages WHERE cause IS NULL").await,
        0
    );
    assert_eq!(
        count_rows(
            &url,
            "SELECT count(*) FROM failure_groups WHERE messages <= 0"
        )
        .await,
        0,
        "the groups of errors emptied are gone"
    );

    // By cause: each bug one group per DLQ; the new message with its bug's.
    let after = archive.failure_groups(1_000).await.unwrap();
    let mut seen: Vec<(String, Option<String>, String, i64, i64, i64)> = after
        .iter()
        .map(|g| {
            (
                g.queue.clone().unwrap(),
                g.error_type.clone(),
                g.error.clone().unwrap(),
                g.total,
                g.open,
                g.settling,
            )
        })
        .collect();
    seen.sort();
    let group = |dlq: &str, kind: Option<&str>, template: &str, total, open, settling| {
        (
            dlq.to_owned(),
            kind.map(str::to_owned),
            template.to_owned(),
            total,
            open,
            settling,
        )
    };
    let mut expected = vec![
        group("a.dlq", None, "", 2, 2, 0),
        group("a.dlq", None, "boom", 1, 1, 0),
        // bug0-0 dismissed, bug0-2 died again; bug0-1 settling; new-1.
        group("a.dlq", Some(bugs[0].error_type), bugs[0].template, 5, 3, 1),
        // bug0-5 settling.
        group("b.dlq", Some(bugs[0].error_type), bugs[0].template, 2, 2, 1),
        // bug1-1 dismissed, bug1-2 settled, bug1-0 failed (open).
        group("a.dlq", Some(bugs[1].error_type), bugs[1].template, 6, 4, 0),
        group("a.dlq", Some(bugs[2].error_type), bugs[2].template, 6, 5, 1),
        group("a.dlq", Some(bugs[3].error_type), bugs[3].template, 6, 6, 2),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    // The error shown is now the root cause's, as ingest shows it.
    let spring = MessageFilter {
        error: Some(format!(
            "{}: no invoice INV-2026-00040 in ledger",
            bugs[2].error_type
        )),
        ..Default::default()
    };
    assert_eq!(message_ids(archive, &spring).await, ["bug2-0"]);

    // The lifecycle goes on exact: a group dismissed, a settling message settled.
    let spring_group = after
        .iter()
        .find(|g| g.error_type.as_deref() == Some(bugs[2].error_type))
        .unwrap();
    let selection = Selection::Filter(Box::new(MessageFilter {
        group: Some(spring_group.id.unwrap().to_string()),
        ..Default::default()
    }));
    let dismissed = archive
        .dismiss(&selection, "group", "fixed", &Actor::system("carol"))
        .await
        .unwrap();
    assert_eq!(dismissed, 5);
    assert_eq!(
        archive
            .settle(now() + time::Duration::seconds(5), 100)
            .await
            .unwrap(),
        4
    );
    assert_open_counts_exact(archive).await;
    assert_settling_exact(archive).await;
    let by_type = archive
        .groups(&GroupQuery {
            by: lazarus::archive::GroupBy::MessageType,
            ..GroupQuery::by_cause(100)
        })
        .await
        .unwrap();
    assert_eq!(
        by_type.len(),
        5,
        "four message types and none: {by_type:#?}"
    );
}

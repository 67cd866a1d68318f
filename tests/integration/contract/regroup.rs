//! Regrouping an archive of the version before failures were grouped by cause, on both
//! backends: its groups were keyed on each error as written (one per id), with messages open,
//! settling, whose replay failed, dismissed, settled and died again in them. The migration
//! keys groups on causes and the background regroup moves each message to its cause group a
//! batch at a time: every open and settling count — per group, per DLQ — exact at every batch
//! boundary and at the end, and the lifecycle's invariants still holding afterwards.

use lazarus::archive::{Actor, GroupQuery, IngestRules, Outcome, StatusFilter};
use lazarus::message::headers::AmqpValue;
use lazarus::message::headers::REPLAY_OF_HEADER;

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
/// Regroups `size` messages a batch to the end, checking after each batch that every open
/// and settling count is exact and each DLQ's open count is still `dlqs`; how many batches.
async fn regroup_checking_counts(
    archive: &dyn Archive,
    rules: &IngestRules,
    size: u32,
    dlqs: &[(String, i64)],
) -> u32 {
    let mut batches = 0;
    while let Some(progress) = archive.regroup_batch(rules, size).await.unwrap() {
        batches += 1;
        assert!(batches <= 10, "{progress:?}");
        assert_open_counts_exact(archive).await;
        assert_settling_exact(archive).await;
        assert_eq!(open_by_dlq(archive).await, dlqs, "after batch {batches}");
    }
    batches
}

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
    let batches = regroup_checking_counts(archive, &rules, 5, &dlqs).await;
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

/// A text as an SQL literal (`NULL` for none).
fn literal(text: Option<&str>) -> String {
    text.map_or_else(|| "NULL".into(), |t| format!("'{}'", t.replace('\'', "''")))
}

/// The schema, rows and groups the version before framework conventions left: the migration
/// `conventions` undone, each message's failure as that version read it (`old`: archive id,
/// failure from the generic headers), no framework target, and each group keyed on the first
/// death's queue or the DLQ, as that version counted it.
fn before_conventions(url: &str, old: &[(i64, lazarus::archive::Failure)]) -> String {
    let mut sql: String = old
        .iter()
        .map(|(id, f)| {
            format!(
                "UPDATE messages SET error = {}, error_type = {}, cause = {}, message_type = {}, \
                 replay_exchange = CASE WHEN replay_target_from IS NULL THEN replay_exchange END, \
                 replay_routing_key = CASE WHEN replay_target_from IS NULL THEN replay_routing_key END \
                 WHERE id = {id};",
                literal(f.error.as_deref()),
                literal(f.error_type.as_deref()),
                literal(Some(&f.cause)),
                literal(f.message_type.as_deref()),
            )
        })
        .collect();
    let open = "'archived', 'replayed', 'replay_failed'";
    let old_key = "coalesce(first_death_queue, queue), coalesce(first_death_reason, 'none'), \
                   coalesce(cause, error, '')";
    sql += &match url.starts_with("sqlite://") {
        true => format!(
            "DROP INDEX messages_group; DROP INDEX messages_group_open;
             ALTER TABLE messages DROP COLUMN convention; ALTER TABLE messages DROP COLUMN failed_queue;
             ALTER TABLE messages DROP COLUMN replay_target_from;
             ALTER TABLE messages DROP COLUMN convention_problems;
             CREATE INDEX messages_group ON messages ({old_key}, id);
             CREATE INDEX messages_group_open ON messages ({old_key}, id) WHERE status IN ({open});
             DELETE FROM failure_groups;
             INSERT INTO failure_groups (dlq, queue, reason, cause, message_type, error_type,
                 example, messages, open_messages, settling_messages, first_seen, last_seen)
             SELECT queue, {old_key}, coalesce(message_type, ''), max(error_type), max(error),
                 count(*), sum(status IN ({open})), sum(status = 'replayed'), min(archived_at),
                 max(archived_at) FROM messages GROUP BY 1, 2, 3, 4, 5;
             DELETE FROM regroup;
             DELETE FROM _sqlx_migrations WHERE description = 'conventions';"
        ),
        false => format!(
            "DROP INDEX messages_group;
             ALTER TABLE messages DROP COLUMN convention, DROP COLUMN failed_queue,
                 DROP COLUMN replay_target_from, DROP COLUMN convention_problems;
             CREATE INDEX messages_group ON messages ({old_key}, id);
             UPDATE message_status s SET group_queue = coalesce(m.first_death_queue, m.queue),
                 group_cause = coalesce(m.cause, m.error, '') FROM messages m WHERE m.id = s.id;
             DELETE FROM failure_groups;
             INSERT INTO failure_groups (dlq, queue, reason, cause, message_type, error_type,
                 example, messages, open_messages, settling_messages, first_seen, last_seen)
             SELECT m.queue, coalesce(m.first_death_queue, m.queue),
                 coalesce(m.first_death_reason, 'none'), coalesce(m.cause, m.error, ''),
                 coalesce(m.message_type, ''), max(m.error_type), max(m.error), count(*),
                 count(*) FILTER (WHERE s.status IN ({open})),
                 count(*) FILTER (WHERE s.status = 'replayed'), min(m.archived_at),
                 max(m.archived_at)
             FROM messages m JOIN message_status s ON s.id = m.id GROUP BY 1, 2, 3, 4, 5;
             DELETE FROM regroup;
             DELETE FROM _sqlx_migrations WHERE description = 'conventions';"
        ),
    };
    sql
}

/// Framework failures as each convention leaves them, without death history: MassTransit's
/// `orders_error`, NServiceBus' `error` and a Spring recoverer's DLQ; and plain ones.
fn framework_failures() -> Vec<IncomingMessage> {
    let with = |queue: &str, name: &str, headers: &[(&str, String)]| {
        let mut m = delivery(queue, name, None);
        let table = m.headers.get_or_insert_with(Table::new);
        for (k, v) in headers {
            table.insert(*k, AmqpValue::text(v));
        }
        m
    };
    let mut out = Vec::new();
    for i in 0..5 {
        out.push(with(
            "orders_error",
            &format!("mt-{i}"),
            &[
                ("MT-Reason", "fault".into()),
                ("MT-Fault-ExceptionType", "Shop.OrderException".into()),
                ("MT-Fault-Message", format!("order O-{i}7 has no lines")),
                ("MT-Fault-InputAddress", "rabbitmq://mq/orders".into()),
                ("MT-Fault-MessageType", "Shop.SubmitOrder".into()),
            ],
        ));
    }
    for i in 0..4 {
        out.push(with(
            "error",
            &format!("nsb-{i}"),
            &[
                ("NServiceBus.FailedQ", "sales".into()),
                (
                    "NServiceBus.ExceptionInfo.ExceptionType",
                    "System.InvalidOperationException".into(),
                ),
                (
                    "NServiceBus.ExceptionInfo.Message",
                    format!("Cannot process order {i}1"),
                ),
                (
                    "NServiceBus.EnclosedMessageTypes",
                    "Shop.PlaceOrder, Shop".into(),
                ),
            ],
        ));
    }
    for i in 0..3 {
        out.push(with(
            "spring.dlq",
            &format!("spring-{i}"),
            &[
                (
                    "x-exception-message",
                    format!("no customer with id C-{i}07"),
                ),
                ("x-original-exchange", "orders".into()),
                ("x-original-routingKey", "order.created".into()),
            ],
        ));
    }
    for i in 0..2 {
        out.push(with(
            "orders_error",
            &format!("plain-{i}"),
            &[("error", "timeout".into())],
        ));
    }
    out
}

on_both_backends!(a_regroup_reads_the_conventions_of_an_archive_made_before_them);
async fn a_regroup_reads_the_conventions_of_an_archive_made_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let batch = framework_failures();
    let rules = IngestRules::default();
    let mut old = Vec::new();
    {
        let archive = lazarus::archive::open(&url).await.unwrap();
        assert_eq!(store(&*archive, batch.clone()).await, (14, 0));
        let mut listed_all = Vec::new();
        for queue in ["orders_error", "error", "spring.dlq"] {
            listed_all.extend(listed(&*archive, queue).await);
        }
        assert_eq!(listed_all.len(), 14);
        let id = |name: &str| {
            listed_all
                .iter()
                .find(|m| m.message_id.as_deref() == Some(name))
                .unwrap()
                .id
        };
        for m in &batch {
            let name = m.properties.message_id.as_ref().unwrap().to_text();
            let generic = lazarus::archive::failure(
                m.headers.as_ref(),
                &m.properties,
                &rules.error_headers,
                None,
            );
            old.push((id(&name), generic));
        }
        // Open, settling, dismissed and settled ones among them.
        let user = Actor::system("carol");
        archive
            .dismiss(&ids(&[id("mt-0"), id("nsb-1")]), "[...]", "by hand", &user)
            .await
            .unwrap();
        replay(&*archive, id("spring-0"), "settled", Outcome::Published).await;
        assert_eq!(
            archive
                .settle(now() + time::Duration::seconds(2), 100)
                .await
                .unwrap(),
            1
        );
        replay(&*archive, id("mt-1"), "settling", Outcome::Published).await;
        replay(&*archive, id("nsb-2"), "failed", Outcome::Unroutable).await;
    }
    execute_sql(&url, &before_conventions(&url, &old)).await;

    // Opened by this version: migrated, the regroup's cursor over every message.
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let before = archive.failure_groups(1_000).await.unwrap();
    assert!(
        before.iter().all(|g| g.first_death_queue == g.queue),
        "grouped under their DLQs: {before:#?}"
    );
    assert_open_counts_exact(archive).await;
    assert_settling_exact(archive).await;
    let dlqs = open_by_dlq(archive).await;
    assert_eq!(
        dlqs,
        [
            ("error".to_owned(), 3),
            ("orders_error".to_owned(), 6),
            ("spring.dlq".to_owned(), 2)
        ]
    );
    let batches = regroup_checking_counts(archive, &rules, 4, &dlqs).await;
    assert_eq!(
        batches, 5,
        "14 messages in batches of 4, then the one that ends it"
    );

    // Each framework's messages: their convention, target and the queue they failed in.
    let expect = [
        (
            "orders_error",
            "mt-",
            Some("masstransit"),
            Some(("", "orders")),
            Some("orders"),
        ),
        (
            "error",
            "nsb-",
            Some("nservicebus"),
            Some(("", "sales")),
            Some("sales"),
        ),
        // Spring's DLQ is named after the queue that failed (`<queue>.dlq`).
        (
            "spring.dlq",
            "spring-",
            Some("spring-amqp"),
            Some(("orders", "order.created")),
            Some("spring"),
        ),
        ("orders_error", "plain-", None, None, None),
    ];
    for (queue, prefix, convention, target, failed) in expect {
        let messages: Vec<MessageSummary> = listed(archive, queue)
            .await
            .into_iter()
            .filter(|m| m.message_id.as_deref().unwrap().starts_with(prefix))
            .collect();
        assert!(!messages.is_empty(), "{prefix}");
        for m in messages {
            assert_eq!(m.convention.map(|c| c.name()), convention, "{m:?}");
            let got = m.replay_target.as_ref();
            let got = got.map(|t| (t.exchange.as_str(), t.routing_key.as_str()));
            assert_eq!(got, target, "{m:?}");
            assert_eq!(m.failed_queue.as_deref(), failed, "{m:?}");
            assert_eq!(m.replay_target_from.is_some(), target.is_some(), "{m:?}");
        }
    }
    // One group per bug, under the queue it failed in.
    let mut groups: Vec<(String, String, Option<String>, i64, i64, i64)> = archive
        .failure_groups(1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|g| {
            (
                g.queue.unwrap(),
                g.first_death_queue.unwrap(),
                g.error_type,
                g.total,
                g.open,
                g.settling,
            )
        })
        .collect();
    groups.sort();
    let group = |dlq: &str, queue: &str, kind: Option<&str>, total, open, settling| {
        (
            dlq.to_owned(),
            queue.to_owned(),
            kind.map(str::to_owned),
            total,
            open,
            settling,
        )
    };
    let mut expected = vec![
        // nsb-1 dismissed, nsb-2 failed (open).
        group(
            "error",
            "sales",
            Some("System.InvalidOperationException"),
            4,
            3,
            0,
        ),
        // mt-0 dismissed, mt-1 settling.
        group(
            "orders_error",
            "orders",
            Some("Shop.OrderException"),
            5,
            4,
            1,
        ),
        group("orders_error", "orders_error", None, 2, 2, 0),
        // spring-0 settled.
        group("spring.dlq", "spring", None, 3, 2, 0),
    ];
    expected.sort();
    assert_eq!(groups, expected);
    let filter = MessageFilter {
        first_death_queue: Some("sales".into()),
        status: Some(StatusFilter::Open),
        ..Default::default()
    };
    assert_eq!(message_ids(archive, &filter).await.len(), 3);
}

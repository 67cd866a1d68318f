//! Append, then index (issue 37): what a DLQ consumer appends is listed and counted at once;
//! its search entries — full text, business fields and their keys — follow from the indexer,
//! each written once whoever runs it and whatever is purged meanwhile.

use lazarus::archive::{IngestRules, Numbering};

use super::*;

fn rules() -> IngestRules {
    IngestRules {
        fields: vec!["name=/name".parse().unwrap()],
        ..Default::default()
    }
}

/// Appends the deliveries as a DLQ consumer does (prepared without their search entries):
/// how many were stored.
async fn append(archive: &dyn Archive, batch: Vec<IncomingMessage>) -> u64 {
    let prepared: Vec<PreparedMessage> = batch
        .into_iter()
        .map(|m| PreparedMessage::to_append(m, &rules()))
        .collect();
    let outcome = archive
        .append_numbered(&prepared, &mut Numbering::default())
        .await
        .unwrap();
    outcome.inserted
}

/// The message-ids the business field search `name:value` finds.
async fn by_field(archive: &dyn Archive, value: &str) -> Vec<String> {
    let search = lazarus::message::search::parse(&format!("name:{value}"), &["name".into()]);
    let search = search.unwrap();
    let filter = MessageFilter {
        text: search.text_query(),
        terms: search.fields,
        ..Default::default()
    };
    message_ids(archive, &filter).await
}

on_both_backends!(appended_messages_are_listed_at_once_and_searchable_once_indexed);
async fn appended_messages_are_listed_at_once_and_searchable_once_indexed() {
    let (_dir, archive) = archive().await;
    let batch = (0..30)
        .map(|i| delivery("idx.dlq", &format!("walrus{i}"), Some(REJECTED)))
        .collect();
    assert_eq!(append(&*archive, batch).await, 30);
    // Listed and counted at once.
    assert_eq!(listed(&*archive, "idx.dlq").await.len(), 30);
    let counted: i64 = archive
        .counts()
        .await
        .unwrap()
        .iter()
        .map(|c| c.messages)
        .sum();
    assert_eq!(counted, 30);
    assert_eq!(archive.index_behind().await.unwrap(), 30);
    assert!(
        found(&*archive, "walrus*").await.is_empty(),
        "searchable before indexed"
    );
    let early = by_field(&*archive, "walrus7").await;
    assert!(
        early.is_empty(),
        "found by its field before indexed: {early:?}"
    );
    // Two indexers at once, in batches smaller than what waits: each message once.
    let index = async || {
        let mut indexed = 0;
        loop {
            match archive.index_batch(&rules(), 7).await.unwrap() {
                0 => return indexed,
                n => {
                    assert!(n <= 7, "a batch of {n}");
                    indexed += n;
                }
            }
        }
    };
    let (a, b) = tokio::join!(index(), index());
    assert_eq!(a + b, 30, "indexed by one or the other: {a} + {b}");
    assert_eq!(archive.index_behind().await.unwrap(), 0);
    assert_eq!(found(&*archive, "walrus*").await.len(), 30);
    assert_eq!(by_field(&*archive, "walrus7").await, ["walrus7"]);
    assert_eq!(archive.index_batch(&rules(), 7).await.unwrap(), 0);
}

on_both_backends!(a_message_prepared_to_append_waits_for_the_indexer_however_it_is_stored);
async fn a_message_prepared_to_append_waits_for_the_indexer_however_it_is_stored() {
    let (_dir, archive) = archive().await;
    // One batch stored with its search entries (as `lazarus import` stores), holding one
    // message prepared as a DLQ consumer prepares it: without them.
    let batch = [
        PreparedMessage::with_rules(delivery("idx.dlq", "okapi1", Some(REJECTED)), &rules()),
        PreparedMessage::to_append(delivery("idx.dlq", "okapi2", Some(REJECTED)), &rules()),
    ];
    assert_eq!(archive.store_batch(&batch).await.unwrap().inserted, 2);
    // Both listed at once, each with the start of its body.
    let listed = listed(&*archive, "idx.dlq").await;
    assert_eq!(listed.len(), 2);
    for m in &listed {
        let name = m.message_id.as_deref().unwrap();
        let snippet = m.snippet.as_deref().unwrap_or_default();
        assert!(snippet.contains(name), "{name}'s snippet: {snippet:?}");
    }
    // The one with its entries is found at once; the other waits for the indexer rather
    // than being stored with none.
    assert_eq!(archive.index_behind().await.unwrap(), 1);
    assert_eq!(found(&*archive, "okapi*").await, ["okapi1"]);
    assert_eq!(by_field(&*archive, "okapi1").await, ["okapi1"]);
    assert!(by_field(&*archive, "okapi2").await.is_empty());
    assert_eq!(archive.index_batch(&rules(), 10).await.unwrap(), 1);
    assert_eq!(found(&*archive, "okapi*").await, ["okapi1", "okapi2"]);
    assert_eq!(by_field(&*archive, "okapi2").await, ["okapi2"]);
    assert_eq!(archive.index_behind().await.unwrap(), 0);
}

on_both_backends!(a_search_while_newer_messages_wait_finds_every_one_indexed);
async fn a_search_while_newer_messages_wait_finds_every_one_indexed() {
    let (_dir, archive) = archive().await;
    let named = |range: std::ops::Range<usize>| -> Vec<IncomingMessage> {
        range
            .map(|i| delivery("idx.dlq", &format!("narwhal{i:03}"), Some(REJECTED)))
            .collect()
    };
    assert_eq!(append(&*archive, named(0..30)).await, 30);
    while archive.index_batch(&rules(), 1_000).await.unwrap() > 0 {}
    // A drain's newest messages, not indexed yet: a search reads past them, and finds every
    // indexed one, the newest of them too.
    assert_eq!(append(&*archive, named(30..330)).await, 300);
    assert_eq!(archive.index_behind().await.unwrap(), 300);
    let indexed: Vec<String> = (0..30).map(|i| format!("narwhal{i:03}")).collect();
    assert_eq!(found(&*archive, "narwhal*").await, indexed);
    while archive.index_batch(&rules(), 1_000).await.unwrap() > 0 {}
    let all: Vec<String> = (0..330).map(|i| format!("narwhal{i:03}")).collect();
    assert_eq!(found(&*archive, "narwhal*").await, all);
}

on_both_backends!(a_message_purged_before_it_is_indexed_leaves_nothing_waiting);
async fn a_message_purged_before_it_is_indexed_leaves_nothing_waiting() {
    let (_dir, archive) = archive().await;
    let batch = (0..3)
        .map(|i| delivery("gone.dlq", &format!("gone-{i}"), Some(REJECTED)))
        .collect();
    append(&*archive, batch).await;
    let ids: Vec<i64> = listed(&*archive, "gone.dlq")
        .await
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids.len(), 3);
    let purged = archive
        .purge(
            &super::ids(&ids[..2]),
            "two",
            "cleanup",
            &Actor::system("test"),
        )
        .await
        .unwrap();
    assert_eq!(purged, 2);
    assert_eq!(
        archive.index_behind().await.unwrap(),
        1,
        "the purged ones wait no more"
    );
    assert_eq!(archive.index_batch(&rules(), 10).await.unwrap(), 1);
    assert_eq!(found(&*archive, "gone").await, ["gone-2"]);
}

on_both_backends!(a_row_that_cannot_be_read_holds_up_no_other);
async fn a_row_that_cannot_be_read_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let batch = ["ok-1", "bad", "ok-2"]
        .iter()
        .map(|id| delivery("bad.dlq", id, Some(REJECTED)))
        .collect();
    append(&*archive, batch).await;
    // Its stored properties no longer JSON, as a hand edit or a damaged page could leave them.
    execute_sql(
        &url,
        "UPDATE messages SET properties = 'not json' WHERE message_id = 'bad';",
    )
    .await;
    assert_eq!(archive.index_batch(&rules(), 10).await.unwrap(), 3);
    assert_eq!(
        archive.index_behind().await.unwrap(),
        0,
        "nothing left waiting"
    );
    assert_eq!(found(&*archive, "ok").await, ["ok-1", "ok-2"]);
    assert_eq!(listed(&*archive, "bad.dlq").await.len(), 3, "still listed");
}

/// A PostgreSQL archive from before its search documents had a table of their own (migration
/// 0031): each message's document moves there, and it is found as before, with nothing
/// waiting for the indexer.
#[tokio::test]
async fn a_postgres_archive_from_before_keeps_what_search_finds() {
    Backend::Postgres.scope(postgres_from_before()).await
}

async fn postgres_from_before() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    // The schema as migration 0030 left it.
    let before = dir.path().join("migrations");
    std::fs::create_dir(&before).unwrap();
    let mut copied = 0;
    for entry in std::fs::read_dir("migrations/postgres").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.as_str() < "0031" {
            std::fs::copy(&path, before.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert_eq!(copied, 30, "migrations 0001-0030");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::migrate::Migrator::new(before.as_path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    for sql in [
        "INSERT INTO messages (id, fingerprint, queue, archived_at, exchange, routing_key, \
         redelivered, message_id, body_size, properties, deaths, search) VALUES \
         (1, '\\x00', 'old.dlq', 0, '', '', false, 'old-1', 2, '{}', '[]', \
         'walrus:1 old:2'::tsvector)",
        "INSERT INTO message_status (id) VALUES (1)",
        "INSERT INTO message_bodies (message_id, body) VALUES (1, '\\x7b7d')",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();

    let archive = lazarus::archive::open(&url).await.unwrap();
    assert_eq!(found(&*archive, "walrus").await, ["old-1"]);
    assert_eq!(found(&*archive, "old walrus").await, ["old-1"]);
    assert!(found(&*archive, "narwhal").await.is_empty());
    assert_eq!(archive.index_behind().await.unwrap(), 0);
}

//! Reindex: an archive whose search index was made before CJK runs were indexed as bigrams is
//! brought up to date in batches, rewriting only the entries that change, on both backends.

use lazarus::archive::IngestRules;

use super::*;

/// An archive as an earlier version left it: four messages, the CJK runs of two indexed as
/// single words, a MessagePack body not read at all, and the migration's cursor over them.
async fn old_archive() -> (tempfile::TempDir, String, Arc<dyn Archive>) {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let with_body = |name: &str, body: &str| {
        let mut m = delivery("q", name, None);
        m.body = body.as_bytes().to_vec();
        m
    };
    // {"task": "refund"} in MessagePack, which earlier versions did not read.
    let mut msgpack = with_body("mp", "");
    msgpack.body = b"\x81\xa4task\xa6refund".to_vec();
    msgpack.properties.content_type = Some("application/x-msgpack".into());
    store(
        &*archive,
        vec![
            with_body("zh", r#"{"note": "测试死信消息"}"#),
            with_body("en", r#"{"note": "dead letter"}"#),
            with_body("ko", r#"{"note": "결제실패"}"#),
            msgpack,
        ],
    )
    .await;
    assert_eq!(found(&*archive, "死信").await, ["zh"]);
    let old_entry = |message: &str, text: &str| {
        match url.starts_with("sqlite://") {
        true => format!(
            "DELETE FROM messages_fts WHERE rowid = (SELECT id FROM messages WHERE message_id = '{message}'); \
             INSERT INTO messages_fts (rowid, body, ids, headers) \
             SELECT id, 'note {text}', '{message}', '' FROM messages WHERE message_id = '{message}';"
        ),
        false => format!(
            "UPDATE message_search SET search = 'note:1 {text}:2 {message}:4'::tsvector \
             WHERE id = (SELECT id FROM messages WHERE message_id = '{message}');"
        ),
    }
    };
    execute_sql(
        &url,
        &format!(
            "{}{}{}UPDATE search_reindex SET next_id = 1, last_id = (SELECT max(id) FROM messages);",
            old_entry("zh", "测试死信消息"),
            old_entry("ko", "결제실패"),
            old_entry("mp", "binary"),
        ),
    )
    .await;
    assert!(found(&*archive, "死信").await.is_empty(), "the old index");
    assert!(found(&*archive, "测试死信消息").await.is_empty());
    assert!(found(&*archive, "refund").await.is_empty());
    (dir, url, archive)
}

on_both_backends!(an_archive_indexed_before_cjk_bigrams_is_reindexed_in_batches);
async fn an_archive_indexed_before_cjk_bigrams_is_reindexed_in_batches() {
    let (_dir, url, archive) = old_archive().await;
    // Two messages a batch: two batches, then the cursor is done and gone.
    let rules = IngestRules::default();
    let mut rewritten = 0;
    let mut batches = 0;
    while let Some(progress) = archive.reindex_batch(&rules, 2).await.unwrap() {
        rewritten += progress.rewritten;
        batches += 1;
        assert!(batches <= 8, "{progress:?}");
    }
    // Each of the two index versions: two batches and the one that ends it; the business
    // field keys' (version 3): one batch (no message has fields) and the one that ends it.
    assert_eq!(
        (batches, rewritten),
        (8, 3),
        "only the entries that change are rewritten"
    );
    assert_eq!(
        count_rows(&url, "SELECT COUNT(*) FROM search_reindex").await,
        0
    );
    assert_eq!(found(&*archive, "死信").await, ["zh"]);
    assert_eq!(found(&*archive, "실패").await, ["ko"]);
    assert_eq!(
        found(&*archive, "dead").await,
        ["en"],
        "the others as they were"
    );
    assert_eq!(found(&*archive, "refund").await, ["mp"]);
    assert_eq!(found(&*archive, "note").await, ["en", "ko", "zh"]);
    assert!(archive.reindex_batch(&rules, 2).await.unwrap().is_none());
}

on_both_backends!(lazarus_serve_reindexes_an_old_archive_in_the_background);
async fn lazarus_serve_reindexes_an_old_archive_in_the_background() {
    let (_dir, url, _) = old_archive().await;
    let app = TestApp::spawn_with(&[], |c| c.connection.database_url = url.clone().into()).await;
    // Found, and the cursor gone (a batch after the last one removes it).
    let what = "the old archive reindexed: 死信 found, the cursor gone";
    wait_until(what, Duration::from_secs(20), async || {
        let listed = app.json("/api/messages?q=%E6%AD%BB%E4%BF%A1", 200).await;
        let done = count_rows(&url, "SELECT COUNT(*) FROM search_reindex").await == 0;
        listed["messages"].as_array().unwrap().len() == 1 && done
    })
    .await;
}

on_both_backends!(a_new_archive_has_nothing_to_reindex);
async fn a_new_archive_has_nothing_to_reindex() {
    let (_dir, archive) = archive().await;
    let rules = IngestRules::default();
    // The migrations' cursors over no messages: each done at once, then gone.
    for _ in 0..3 {
        let step = archive.reindex_batch(&rules, 500).await.unwrap();
        assert_eq!(step.map(|p| p.rewritten), Some(0));
    }
    assert!(archive.reindex_batch(&rules, 500).await.unwrap().is_none());
    store(&*archive, vec![delivery("q", "中文", None)]).await;
    assert!(archive.reindex_batch(&rules, 500).await.unwrap().is_none());
}

on_both_backends!(bodies_read_since_version_2_are_reindexed_and_no_others);
/// An archive whose CJK reindex was done before Lazarus read bzip2 and protobuf bodies: the
/// migration's second cursor rewrites those entries only.
async fn bodies_read_since_version_2_are_reindexed_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    // `{"task": "add", "n": 1}` as bzip2 wrote it, with kombu's header.
    let bzip2 = "425a6839314159265359caa09bb200000a99805004201024090c0a2000229e93d099a0806800f844fdf8a587545a2c33345dc914e142432a826ec8";
    let mut compressed = delivery("q", "bz", None);
    compressed.body = (0..bzip2.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&bzip2[i..i + 2], 16).unwrap())
        .collect();
    let mut headers = compressed.headers.take().unwrap_or_default();
    headers.insert(
        "compression",
        lazarus::message::headers::AmqpValue::LongString("application/x-bz2".into()),
    );
    compressed.headers = Some(headers);
    // Field 1 = "pinecone" in protobuf, no schema known: read by field number.
    let mut protobuf = delivery("q", "pb", None);
    protobuf.body = b"\x0a\x08pinecone".to_vec();
    protobuf.properties.content_type = Some("application/x-protobuf".into());
    let mut plain = delivery("q", "zh", None);
    plain.body = "测试死信消息".as_bytes().to_vec();
    // A word the list keeps beside the one it loses below: `pine*` is expanded, not left
    // to FTS5, so it finds "pinecone" only if the reindex put it back in the list.
    let mut pineapple = delivery("q", "pa", None);
    pineapple.body = b"pineapple".to_vec();
    store(&*archive, vec![compressed, protobuf, plain, pineapple]).await;
    // As version 1 left them: the two bodies unread (on SQLite their words not in the word
    // list either), the cursor of version 2 over all.
    let unread = |message: &str| {
        match url.starts_with("sqlite://") {
        true => format!(
            "DELETE FROM messages_fts WHERE rowid = (SELECT id FROM messages WHERE message_id = '{message}'); \
             INSERT INTO messages_fts (rowid, body, ids, headers) \
             SELECT id, '', '{message}', '' FROM messages WHERE message_id = '{message}'; \
             DELETE FROM search_terms WHERE term IN ('pinecone', 'task');"
        ),
        false => format!(
            "UPDATE message_search SET search = '{message}:1'::tsvector \
             WHERE id = (SELECT id FROM messages WHERE message_id = '{message}');"
        ),
    }
    };
    execute_sql(
        &url,
        &format!(
            "{}{}DELETE FROM search_reindex WHERE version = 1; \
             UPDATE search_reindex SET next_id = 1, last_id = (SELECT max(id) FROM messages);",
            unread("bz"),
            unread("pb"),
        ),
    )
    .await;
    assert!(found(&*archive, "task").await.is_empty(), "the old index");
    assert!(found(&*archive, "pinecone").await.is_empty());
    let mut rewritten = 0;
    while let Some(progress) = archive
        .reindex_batch(&IngestRules::default(), 500)
        .await
        .unwrap()
    {
        rewritten += progress.rewritten;
    }
    assert_eq!(rewritten, 2, "the CJK entry was done by version 1");
    assert_eq!(found(&*archive, "task add").await, ["bz"]);
    assert_eq!(found(&*archive, "pinecone").await, ["pb"]);
    assert_eq!(found(&*archive, "pine*").await, ["pa", "pb"]);
    assert_eq!(found(&*archive, "tas*").await, ["bz"]);
    assert_eq!(found(&*archive, "死信").await, ["zh"]);
}

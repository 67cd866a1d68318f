//! `field:value` finds business fields as the rest of search finds words (issue 35): case
//! and accents folded, a word anywhere in the value, a phrase in order, `prefix*`, CJK runs
//! inside longer ones — on both backends, through the API and the list; a search that finds
//! nothing says how it was read and offers what is near; a message page counts one hit once.

use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

/// Message-ids and bodies (with `customer` and `invoice` fields) the searches below run on.
const INVOICES: [(&str, &str, &str); 6] = [
    ("m-acme", "Acme Corp", "INV-2026-003100"),
    ("m-north", "Northwind", "INV-2026-003101"),
    ("m-zoe", "Zoë Café", "inv-2026-003102"),
    ("m-jp", "株式会社テスト商事", "INV-2026-003103"),
    ("m-acme2", "Acme Corporation", "X-1"),
    ("m-quote", "\"VAT id missing\" Ltd", "INV-2026-003104"),
];

/// A Lazarus archiving a DLQ of its own with the business fields `customer` and `invoice`,
/// holding [`INVOICES`]: (topology, app, dlq).
async fn invoices_archived(prefix: &str) -> (Topology, TestApp, String) {
    let p = unique(prefix);
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.fields = vec![
            "customer=/customer".parse().unwrap(),
            "invoice=/invoice".parse().unwrap(),
        ]
    })
    .await;
    for (id, customer, invoice) in INVOICES {
        let body = json!({"customer": customer, "invoice": invoice, "note": "issued 2026-01-05"});
        t.publish("", &dlq, body.to_string().as_bytes(), json_props(id))
            .await;
    }
    app.wait_for_archived(INVOICES.len() as i64, Duration::from_secs(20))
        .await;
    (t, app, dlq)
}

/// Each search with the message-ids it must find (sorted).
const SEARCHES: [(&str, &[&str]); 22] = [
    ("customer:Acme", &["m-acme", "m-acme2"]),
    ("customer:acme", &["m-acme", "m-acme2"]),
    ("customer:\"Acme Corp\"", &["m-acme"]),
    ("customer:\"acme corp\"", &["m-acme"]),
    ("customer:\"corp acme\"", &[]),
    ("customer:acm", &[]),
    ("customer:acm*", &["m-acme", "m-acme2"]),
    ("customer:corp*", &["m-acme", "m-acme2"]),
    ("customer:northwind", &["m-north"]),
    ("customer:NORTHWIND", &["m-north"]),
    ("customer:North*", &["m-north"]),
    ("customer:zoe", &["m-zoe"]),
    ("customer:CAFE", &["m-zoe"]),
    ("customer:\"zoë café\"", &["m-zoe"]),
    ("customer:テスト", &["m-jp"]),
    ("customer:株式会社", &["m-jp"]),
    ("invoice:inv-2026-003100", &["m-acme"]),
    ("invoice:INV-2026-003102", &["m-zoe"]),
    (
        "invoice:INV-2026-0031*",
        &["m-acme", "m-jp", "m-north", "m-quote", "m-zoe"],
    ),
    ("acme invoice:inv-2026-003100", &["m-acme"]),
    // Lazarus' own words whatever their case; names and ids exactly.
    ("status:OPEN customer:acme", &["m-acme", "m-acme2"]),
    ("customer:\"VAT id missing\"", &["m-quote"]),
];

on_both_backends!(field_values_are_found_as_words_are);
async fn field_values_are_found_as_words_are() {
    let (t, app, dlq) = invoices_archived("fields").await;
    for (q, expected) in SEARCHES {
        assert_eq!(app.found(&dlq, q).await, *expected, "{q}");
    }
    // A DLQ's name is compared exactly, as RabbitMQ compares it.
    let shouting = dlq.to_uppercase();
    assert!(app
        .found(&dlq, &format!("queue:{shouting}"))
        .await
        .is_empty());
    assert_eq!(
        app.found(&dlq, &format!("queue:{dlq}")).await.len(),
        INVOICES.len()
    );
    // The list (and what a selection replays) reads the same language.
    let list = app
        .get(&format!("/messages?q=customer%3Aacme&queue={dlq}"))
        .await
        .text();
    assert!(
        list.contains("m-acme2") && !list.contains("m-north"),
        "{list}"
    );
    // A purge takes the keys with the message.
    let keys = "SELECT count(*) FROM message_field_keys WHERE folded LIKE 'northwind%'";
    assert_eq!(count_rows(&app.database_url, keys).await, 1);
    app.post_json(
        "/api/admin/purge",
        json!({"filter": {"queue": dlq, "q": "customer:northwind"}, "note": "test"}),
        200,
    )
    .await;
    assert_eq!(count_rows(&app.database_url, keys).await, 0);
    assert!(app.found(&dlq, "customer:northwind").await.is_empty());
    t.cleanup().await;
}

on_both_backends!(a_search_that_finds_nothing_says_how_it_was_read_and_what_is_near);
async fn a_search_that_finds_nothing_says_how_it_was_read_and_what_is_near() {
    let (t, app, dlq) = invoices_archived("nearest").await;
    let page = |q: &str| {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let app = &app;
        async move { app.get(&format!("/messages?q={q}")).await.text() }
    };
    // A value misspelt: what was looked for, and the values starting like it.
    let html = page("customer:acmee").await;
    assert!(html.contains("No archived message matches"), "{html}");
    assert!(
        html.contains("customer: a value holding the words \u{201c}acmee\u{201d}"),
        "how it was read: {html}"
    );
    assert!(
        html.contains("No customer value holds \u{201c}acmee\u{201d}"),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/messages?q=customer%3A%22Acme+Corp%22""#),
        "the nearest values, as searches: {html}"
    );
    assert!(
        html.contains(">customer:&#34;Acme Corporation&#34;<"),
        "{html}"
    );
    // A field name misspelt is read as text, and says so.
    let html = page("custmer:acme").await;
    assert!(
        html.contains("\u{201c}custmer\u{201d} is no field, so \u{201c}custmer:acme\u{201d} was looked for as text"),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/messages?q=customer%3Aacme""#),
        "{html}"
    );
    // A DLQ named in another case.
    let html = page(&format!("queue:{}", dlq.to_uppercase())).await;
    assert!(html.contains("DLQ names are compared exactly"), "{html}");
    assert!(html.contains(&format!(">{dlq}<")), "{html}");
    // Something is found: no hint.
    let html = page("customer:acme").await;
    assert!(!html.contains("Nearest"), "{html}");
    t.cleanup().await;
}

#[tokio::test]
async fn a_hit_is_counted_once_and_a_quoted_search_is_not_quoted_again() {
    let (t, app, dlq) = invoices_archived("hits").await;
    let acme = app.detail_by_message_id(&dlq, "m-acme").await;
    let id = acme["id"].as_str().unwrap();
    // One invoice number, in one place: one hit, though it is three words and 2026 is
    // elsewhere in the body too.
    let html = app
        .get(&format!("/messages/{id}?q=INV-2026-003100"))
        .await
        .text();
    assert!(html.contains("<mark>INV-2026-003100</mark>"), "{html}");
    assert!(html.contains("1 hit of"), "{html}");
    assert!(!html.contains("<mark>2026</mark>"), "{html}");
    // A quoted phrase is shown as typed, once quoted.
    let quote = app.detail_by_message_id(&dlq, "m-quote").await;
    let id = quote["id"].as_str().unwrap();
    let html = app
        .get(&format!("/messages/{id}?q=%22VAT+id+missing%22"))
        .await
        .text();
    assert!(html.contains("1 hit of"), "{html}");
    assert!(!html.contains("<q>&#34;"), "quotes inside quotes: {html}");
    t.cleanup().await;
}

on_both_backends!(an_archive_from_before_field_keys_gets_them_in_the_background);
/// An archive an earlier version wrote has no keys for its business fields: exact values
/// are found at once, and every `field:value` search once the background reindex has
/// written them.
async fn an_archive_from_before_field_keys_gets_them_in_the_background() {
    let (t, mut app, dlq) = invoices_archived("backfill").await;
    let url = app.database_url.clone();
    app.stop().await;
    // The migration that made the keys, by its name: renumbering it is a rename.
    let last: u32 = migration_version(&url, "field_keys");
    execute_sql(
        &url,
        &format!(
            "DROP TABLE message_field_keys; DELETE FROM search_reindex; \
             DELETE FROM _sqlx_migrations WHERE version = {last}"
        ),
    )
    .await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.connection.database_url = url.clone().into();
        c.fields = vec![
            "customer=/customer".parse().unwrap(),
            "invoice=/invoice".parse().unwrap(),
        ]
    })
    .await;
    assert_eq!(app.found(&dlq, "customer:Northwind").await, ["m-north"]);
    wait_until(
        "the background reindex to write the keys",
        Duration::from_secs(20),
        async || !app.found(&dlq, "customer:northwind").await.is_empty(),
    )
    .await;
    for (q, expected) in SEARCHES {
        assert_eq!(app.found(&dlq, q).await, *expected, "{q}");
    }
    let keys = count_rows(&url, "SELECT count(*) FROM message_field_keys").await;
    assert!(keys >= 2 * INVOICES.len() as i64, "{keys} keys");
    t.cleanup().await;
}

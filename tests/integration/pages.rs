//! The pages through the router (no socket): overview, list, detail, errors, assets — with
//! hostile message content that must come out escaped.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use lazarus::archive::{IncomingMessage, IngestRules, PreparedMessage};
use lazarus::message::headers::{AmqpValue, Bytes, MessageProperties, Table};
use lazarus::web::{router, AppState};
use tower::ServiceExt;

use crate::helpers::{archive_url, on_both_backends};

struct Pages {
    state: AppState,
    _dir: tempfile::TempDir,
}

fn text(s: &str) -> AmqpValue {
    AmqpValue::LongString(Bytes(s.as_bytes().to_vec()))
}

/// A message as the broker would deliver it after one rejection from `orders`.
fn dead_letter(message_id: &str, body: &[u8], extra: &[(&str, AmqpValue)]) -> IncomingMessage {
    let mut death = Table::new();
    death.insert("queue", text("orders"));
    death.insert("reason", text("rejected"));
    death.insert("count", AmqpValue::LongLongInt(1));
    death.insert("exchange", text("shop"));
    death.insert(
        "routing-keys",
        AmqpValue::Array(vec![text("order.created")]),
    );
    death.insert("time", AmqpValue::Timestamp(1_764_669_600));
    let mut headers = Table::from([
        (
            "x-death".to_owned(),
            AmqpValue::Array(vec![AmqpValue::Table(death)]),
        ),
        ("x-first-death-queue".to_owned(), text("orders")),
        ("x-first-death-reason".to_owned(), text("rejected")),
        ("x-first-death-exchange".to_owned(), text("shop")),
    ]);
    for (k, v) in extra {
        headers.insert((*k).to_owned(), v.clone());
    }
    IncomingMessage {
        broker: "default".into(),
        vhost: String::new(),
        queue: "orders.dlq".into(),
        exchange: "shop.dlx".into(),
        routing_key: "order.created".into(),
        redelivered: false,
        properties: MessageProperties {
            content_type: Some("application/json".into()),
            message_id: Some(message_id.into()),
            ..Default::default()
        },
        headers: Some(headers),
        body: body.to_vec(),
        received_at: time::OffsetDateTime::now_utc(),
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

impl Pages {
    async fn with(messages: Vec<IncomingMessage>) -> Self {
        Self::with_rules(messages, IngestRules::default()).await
    }

    /// Archived as `rules` say, with the business field `invoice` besides.
    async fn with_rules(messages: Vec<IncomingMessage>, rules: IngestRules) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let archive = lazarus::archive::open(&archive_url(dir.path()).await)
            .await
            .unwrap();
        let rules = IngestRules {
            fields: vec!["invoice=/invoice_id".parse().unwrap()],
            ..rules
        };
        let prepared: Vec<_> = messages
            .into_iter()
            .map(|m| PreparedMessage::with_rules(m, &rules))
            .collect();
        archive.store_batch(&prepared).await.unwrap();
        let state = AppState::new(
            archive,
            vec!["invoice".to_owned()],
            "amqp://guest:guest@127.0.0.1:5672/%2f",
        );
        Pages { state, _dir: dir }
    }

    async fn get(&self, uri: &str, htmx: bool) -> (StatusCode, String, axum::http::HeaderMap) {
        let mut request = Request::get(uri);
        if htmx {
            request = request.header("HX-Request", "true");
        }
        let response = router(self.state.clone())
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap(), headers)
    }

    /// The message-ids each failure group's link on `overview` lists, sorted.
    async fn groups_listed(&self, overview: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for piece in overview.split(r#"class="row-link" href=""#).skip(1) {
            let link = piece.split('"').next().unwrap().replace("&#38;", "&");
            assert!(link.contains("group="), "{link}");
            let (status, rows, _) = self.get(&link, true).await;
            assert_eq!(status, StatusCode::OK, "{link}");
            let mut ids: Vec<String> = rows
                .split(r#"<td class="c-id mono wrap-anywhere">"#)
                .skip(1)
                .map(|p| p.split('<').next().unwrap().to_owned())
                .collect();
            ids.sort();
            out.push(ids);
        }
        out.sort();
        out
    }

    async fn first_id(&self) -> i64 {
        self.state
            .archive
            .list_messages(
                &Default::default(),
                lazarus::archive::PageRequest {
                    limit: 1,
                    before: None,
                },
            )
            .await
            .unwrap()
            .messages[0]
            .id
    }
}

const HOSTILE: &str =
    r#"{"note": "<script>alert('body')</script>", "img": "<img src=x onerror=alert(1)>"}"#;

on_both_backends!(overview_shows_queues_reasons_and_failure_groups);
async fn overview_shows_queues_reasons_and_failure_groups() {
    let pages = Pages::with(vec![
        dead_letter(
            "o-1",
            b"{}",
            &[(
                "x-exception-message",
                text("NullPointerException: customer"),
            )],
        ),
        dead_letter(
            "o-2",
            b"{}",
            &[(
                "x-exception-message",
                text("NullPointerException: customer"),
            )],
        ),
        dead_letter("o-3", b"{}", &[]),
    ])
    .await;
    let (status, html, _) = pages.get("/", false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("orders.dlq"), "{html}");
    assert!(html.contains(">rejected 3</a>"), "{html}");
    assert!(html.contains("NullPointerException: customer"));
    // Each group links to its open messages; the group without an error too.
    assert_eq!(
        pages.groups_listed(&html).await,
        [vec!["o-1", "o-2"], vec!["o-3"]]
    );
    // The list of a group says which group it is.
    let link = html
        .split(r#"class="row-link" href=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .replace("&#38;", "&");
    let (_, list, _) = pages.get(&link, false).await;
    assert!(
        list.contains("group: NullPointerException: customer (rejected in orders)")
            || list.contains("group: no error given (rejected in orders)"),
        "{list}"
    );
    assert!(html.contains("<svg class=\"spark\""));
    // All three died just now.
    assert!(
        html.contains(r#"data-dying="orders.dlq" title="3 archived in the last 5 minutes">3 "#),
        "{html}"
    );
}

on_both_backends!(errors_left_in_bodies_group_failures_by_the_error_they_name);
async fn errors_left_in_bodies_group_failures_by_the_error_they_name() {
    // As Dramatiq leaves a retried message: the traceback of its last failure in the body.
    let dramatiq = |id: &str, line: u32| {
        let body = format!(
            r#"{{"queue_name": "default", "actor_name": "charge", "args": ["{id}"], "kwargs": {{}}, "options": {{"retries": 3, "traceback": "Traceback (most recent call last):\n  File \"tasks.py\", line {line}, in charge\n    raise ValueError(\"card declined\")\nValueError: card declined\n"}}, "message_id": "{id}"}}"#
        );
        dead_letter(id, body.as_bytes(), &[])
    };
    let rules = IngestRules {
        error_pointers: vec!["/options/traceback".into()],
        ..Default::default()
    };
    let pages = Pages::with_rules(
        vec![
            dramatiq("d-1", 9),
            dramatiq("d-2", 12),
            dead_letter(
                "h-1",
                b"{}",
                &[("x-exception-message", text("TimeoutError: upstream"))],
            ),
        ],
        rules,
    )
    .await;
    let (status, html, _) = pages.get("/", false).await;
    assert_eq!(status, StatusCode::OK);
    // One group for both, named by the traceback's exception, whatever its frames say.
    assert!(html.contains("ValueError: card declined"), "{html}");
    assert_eq!(
        pages.groups_listed(&html).await,
        [vec!["d-1", "d-2"], vec!["h-1"]]
    );
    assert!(html.contains("TimeoutError: upstream"), "{html}");
    assert!(!html.contains("Traceback (most recent"), "{html}");
    let (_, list, _) = pages
        .get("/messages?error=ValueError%3A+card+declined", true)
        .await;
    assert!(
        list.contains("d-1") && list.contains("d-2") && !list.contains("h-1"),
        "{list}"
    );
}

on_both_backends!(list_page_filters_and_answers_htmx_with_rows_only);
async fn list_page_filters_and_answers_htmx_with_rows_only() {
    let pages = Pages::with(vec![
        dead_letter("a-1", b"{}", &[]),
        dead_letter("a-2", b"{}", &[]),
    ])
    .await;
    let (status, html, _) = pages.get("/messages?queue=orders.dlq", false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<!doctype html>") && html.contains("a-1") && html.contains("a-2"));
    assert!(html.contains("shop → order.created"));
    let (status, partial, _) = pages.get("/messages?queue=orders.dlq&limit=1", true).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!partial.contains("<html"), "htmx gets the rows only");
    assert!(partial.contains("a-2") && !partial.contains("a-1"));
    assert!(partial.contains("Older messages"), "{partial}");
    let (_, none, _) = pages.get("/messages?queue=elsewhere", true).await;
    assert!(none.contains("No archived message matches."));
    // Each row shows the start of its body.
    let (_, noted, _) = pages.get("/messages?queue=orders.dlq", true).await;
    assert!(
        noted.contains(r#"<div class="snippet clamp" title="the start of its body">{}</div>"#),
        "{noted}"
    );
    // How many match is asked for once the rows are shown, with the same filters.
    assert!(
        partial.contains(r#"hx-get="/messages/count?queue=orders.dlq&#38;limit=1""#),
        "{partial}"
    );
    let (status, count, _) = pages.get("/messages/count?queue=orders.dlq", true).await;
    assert_eq!((status, count.as_str()), (StatusCode::OK, "2 match"));
    let (_, one, _) = pages.get("/messages/count?q=message_id:a-1", true).await;
    assert_eq!(one, "1 message matches");
    let (status, bad, _) = pages.get("/messages/count?status=lost", true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}

on_both_backends!(a_common_word_is_counted_to_a_thousand_and_all_on_request);
/// The list counts matches exactly up to 1,000 and says "more than 1,000" beyond, with a
/// button that counts them all with the same filters.
async fn a_common_word_is_counted_to_a_thousand_and_all_on_request() {
    let many: Vec<IncomingMessage> = (0..1_203)
        .map(|i| dead_letter(&format!("m-{i}"), br#"{"note": "commonword"}"#, &[]))
        .collect();
    let pages = Pages::with(many).await;
    let (status, capped, _) = pages.get("/messages/count?q=commonword", true).await;
    assert_eq!(status, StatusCode::OK);
    assert!(capped.starts_with("more than 1,000 match"), "{capped}");
    let link = r#"hx-get="/messages/count?q=commonword&#38;exact=1""#;
    assert!(
        capped.contains(link) && capped.contains("count all"),
        "{capped}"
    );
    let (status, all, _) = pages
        .get("/messages/count?q=commonword&exact=1", true)
        .await;
    assert_eq!((status, all.as_str()), (StatusCode::OK, "1,203 match"));
    let (_, few, _) = pages.get("/messages/count?q=message_id:m-7", true).await;
    assert_eq!(few, "1 message matches");
}

on_both_backends!(a_group_links_filter_is_shown_editable_and_removable);
/// Followed from a failure group, the list is filtered by the error: that filter is shown as
/// a chip and in an input of its own (it was a hidden field that survived every later
/// search, so an invoice searched for afterwards could look missing), and dropping it finds
/// the rest. A form sent with empty fields is sent on to the URL of the filters in use.
async fn a_group_links_filter_is_shown_editable_and_removable() {
    let pages = Pages::with(vec![
        dead_letter(
            "npe-1",
            br#"{"invoice_id": "INV-1"}"#,
            &[(
                "x-exception-message",
                text("NullPointerException: customer"),
            )],
        ),
        dead_letter("other-1", br#"{"invoice_id": "INV-2"}"#, &[]),
    ])
    .await;
    let group = "/messages?first_death_queue=orders&reason=rejected&error=NullPointerException%3A%20customer";
    let (status, html, _) = pages.get(group, false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !html.contains(r#"type="hidden" name="error""#),
        "no hidden filter"
    );
    assert!(
        html.contains(r#"<input name="error" value="NullPointerException: customer""#),
        "an input of its own: {html}"
    );
    assert!(html.contains("npe-1") && !html.contains("other-1"));
    // Each filter a chip whose link drops it; the error's keeps the other two.
    assert!(
        html.contains(">error: NullPointerException: customer <"),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/messages?reason=rejected&#38;first_death_queue=orders""#),
        "{html}"
    );
    assert!(html.contains(r#"<a href="/messages">clear all</a>"#));
    // The rows an htmx search brings carry the chips too, search included.
    let (_, partial, _) = pages
        .get(
            "/messages?reason=rejected&error=NullPointerException%3A%20customer&q=INV-2",
            true,
        )
        .await;
    assert!(partial.contains(">search: INV-2 <"), "{partial}");
    assert!(partial.contains("No archived message matches."));
    let (_, without, _) = pages.get("/messages?reason=rejected&q=INV-2", true).await;
    assert!(
        without.contains("other-1"),
        "found once the error filter is dropped"
    );
    // Empty fields, as a form without script sends them, are left out of the URL.
    let (status, _, headers) = pages
        .get(
            "/messages?q=&queue=&reason=rejected&error=+&limit=10",
            false,
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/messages?reason=rejected&limit=10");
    let (status, _, headers) = pages.get("/messages?q=", false).await;
    assert_eq!(
        (status, &headers["location"]),
        (
            StatusCode::SEE_OTHER,
            &"/messages".parse::<axum::http::HeaderValue>().unwrap()
        )
    );
}

on_both_backends!(malformed_filters_get_an_inline_error_not_a_500);
async fn malformed_filters_get_an_inline_error_not_a_500() {
    let pages = Pages::with(vec![]).await;
    let (status, html, _) = pages.get("/messages?since=yesterday", false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        html.contains("class=\"error-box\"") && html.contains("since must be an RFC 3339 time"),
        "{html}"
    );
    assert!(html.contains("<form"), "the form stays to fix the filter");
    let (status, partial, _) = pages.get("/messages?limit=zero", true).await;
    assert_eq!(status, StatusCode::OK, "htmx swaps the inline error in");
    assert!(partial.contains("limit must be between 1 and 500"));
}

on_both_backends!(detail_page_escapes_hostile_content_and_shows_history);
async fn detail_page_escapes_hostile_content_and_shows_history() {
    let pages = Pages::with(vec![dead_letter(
        "<b>id</b>",
        HOSTILE.as_bytes(),
        &[("x-evil", text("<script>alert('header')</script>"))],
    )])
    .await;
    let id = pages.first_id().await;
    let (status, html, _) = pages.get(&format!("/messages/{id}"), false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !html.contains("<script>alert"),
        "a script from the message reached the page"
    );
    assert!(
        !html.contains("<img src=x"),
        "markup from the message reached the page"
    );
    assert!(!html.contains("<b>id</b>"));
    // askama escapes with numeric entities: &#60; is <, &#34; is ".
    assert!(
        html.contains("&#60;script&#62;alert(&#39;body&#39;)"),
        "the body is shown as text: {html}"
    );
    assert!(
        html.contains("<span class=\"j-key\">&#34;note&#34;</span>"),
        "pretty JSON with highlighting"
    );
    assert!(
        html.contains("rejected</span>\n      in <strong>orders</strong> × 1"),
        "{html}"
    );
    assert!(html.contains("shop → order.created"));
    assert!(html.contains("long-string"), "headers show their AMQP type");
    // The list escapes the same content.
    let (_, list, _) = pages.get("/messages", false).await;
    assert!(!list.contains("<b>id</b>") && list.contains("&#60;b&#62;id&#60;/b&#62;"));
}

on_both_backends!(unknown_ids_are_a_404_page_or_a_toast);
async fn unknown_ids_are_a_404_page_or_a_toast() {
    let pages = Pages::with(vec![]).await;
    let (status, html, _) = pages.get("/messages/424242", false).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        html.contains("<h1>Not found</h1>")
            && html.contains("no archived message with id &#34;424242&#34;"),
        "{html}"
    );
    let (status, partial, _) = pages.get("/messages/nope", true).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(partial.starts_with("<div class=\"error-box\""), "{partial}");
}

on_both_backends!(vendored_assets_are_served_with_a_long_cache);
async fn vendored_assets_are_served_with_a_long_cache() {
    let pages = Pages::with(vec![]).await;
    for path in [
        "/static/htmx-2.0.11.min.js",
        "/static/lazarus-5.css",
        "/static/lazarus-6.js",
    ] {
        let (status, body, headers) = pages.get(path, false).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(!body.is_empty());
        assert_eq!(
            headers["cache-control"],
            "public, max-age=31536000, immutable"
        );
    }
    let (_, page, _) = pages.get("/", false).await;
    assert!(
        page.contains("src=\"/static/htmx-2.0.11.min.js\""),
        "htmx comes from us, not a CDN"
    );
}

on_both_backends!(search_finds_words_phrases_fields_and_explains_mistakes);
async fn search_finds_words_phrases_fields_and_explains_mistakes() {
    let invoice = |n: &str, note: &str| {
        dead_letter(
            &format!("m-{n}"),
            format!(r#"{{"invoice_id": "INV-2026-{n}", "note": "{note}"}}"#).as_bytes(),
            &[],
        )
    };
    let pages = Pages::with(vec![
        invoice("00041", "customer moved to Zürich"),
        invoice("00042", "tax service timeout"),
        invoice("00043", "tax rate missing"),
        // Every token of INV-2026-00042, but not as that id: must not match it.
        invoice("00099", "see INV 2026 ticket 00042"),
    ])
    .await;
    let found = |html: &str| -> Vec<String> {
        ["m-00041", "m-00042", "m-00043", "m-00099"]
            .iter()
            .filter(|id| html.contains(*id))
            .map(|s| s.to_string())
            .collect()
    };
    let pages = &pages;
    let search = |q: &str| {
        let uri = format!("/messages?q={}", q.replace(' ', "%20").replace('"', "%22"));
        async move { pages.get(&uri, true).await.1 }
    };
    assert_eq!(
        found(&search("invoice:INV-2026-00042").await),
        ["m-00042"],
        "business field"
    );
    assert_eq!(
        found(&search("INV-2026-00043").await),
        ["m-00043"],
        "id in the body text"
    );
    assert_eq!(
        found(&search("tax").await),
        ["m-00042", "m-00043"],
        "a word"
    );
    assert_eq!(
        found(&search("\"tax service\"").await),
        ["m-00042"],
        "a phrase"
    );
    assert_eq!(
        found(&search("zurich").await),
        ["m-00041"],
        "diacritics folded"
    );
    assert_eq!(found(&search("tim*").await), ["m-00042"], "a prefix");
    assert!(
        found(&search("tim").await).is_empty(),
        "a word is a whole word"
    );
    assert_eq!(
        found(&search("tax reason:rejected queue:orders.dlq").await).len(),
        2,
        "fields and words"
    );
    assert!(found(&search("tax reason:expired").await).is_empty());
    assert_eq!(found(&search("message_id:m-00041").await), ["m-00041"]);
    let error = search("\"unclosed").await;
    assert!(
        error.contains("class=\"error-box\"") && error.contains("never closed"),
        "{error}"
    );
    let error = search("invoice:").await;
    assert!(error.contains("invoice: needs a value"), "{error}");
    assert!(
        found(&search("colour:red").await).is_empty(),
        "an unknown name: is plain text"
    );
    // The API speaks the same language.
    let (status, json, _) = pages
        .get("/api/messages?q=invoice:INV-2026-00041", false)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        json.contains("\"fields\":{\"invoice\":\"INV-2026-00041\"}"),
        "{json}"
    );
    let (status, _, _) = pages.get("/api/messages?q=%22oops", false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

on_both_backends!(search_finds_chinese_japanese_and_korean_inside_longer_text);
/// CJK text has no spaces between words: any run of two or more of its characters is found
/// inside longer text, in order, mixed with Latin words and fields; one character finds the
/// text where it starts a pair — the same on both backends, through the page and the API.
async fn search_finds_chinese_japanese_and_korean_inside_longer_text() {
    let note = |id: &str, invoice: &str, note: &str| {
        let body = format!(r#"{{"invoice_id": "{invoice}", "note": "{note}"}}"#);
        dead_letter(id, body.as_bytes(), &[])
    };
    let pages = Pages::with(vec![
        note("m-zh", "INV-1", "测试死信消息：订单ABC123处理失败"),
        note("m-zh2", "INV-2", "死亡信号"),
        note("m-ja", "INV-3", "カード決済エラーが発生しました"),
        note("m-ko", "INV-4", "결제실패 주문 처리"),
        note("m-en", "INV-5", "dead letter test"),
    ])
    .await;
    let ids = ["m-zh2", "m-zh", "m-ja", "m-ko", "m-en"];
    let found = |html: &str| -> Vec<&str> {
        let mut hits: Vec<&str> = ids
            .iter()
            .filter(|id| html.contains(&format!(">{id}<")))
            .copied()
            .collect();
        hits.sort();
        hits
    };
    let pages = &pages;
    let search = |q: &str| {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        async move { pages.get(&format!("/messages?q={q}"), true).await.1 }
    };
    let cases: &[(&str, &[&str], &str)] = &[
        ("死信", &["m-zh"], "two characters inside a run"),
        ("死信消", &["m-zh"], "three"),
        ("测试死信消息", &["m-zh"], "the whole run of six"),
        ("信死", &[], "in order only"),
        ("信号", &["m-zh2"], "at the end of a run"),
        ("死", &["m-zh", "m-zh2"], "one character starts a pair"),
        ("处理失败", &["m-zh"], "after Latin letters in the same run"),
        ("订单ABC123处理", &["m-zh"], "CJK and Latin in one word"),
        ("ABC123", &["m-zh"], "the Latin part alone"),
        ("\"消息 订单\"", &["m-zh"], "a phrase across punctuation"),
        ("死信 INV-1", &["m-zh"], "with a Latin word"),
        ("死信 dead", &[], "every word must match"),
        (
            "死信 invoice:INV-1 queue:orders.dlq",
            &["m-zh"],
            "with fields",
        ),
        (
            "死信 invoice:INV-2",
            &[],
            "with a field that does not match",
        ),
        ("決済", &["m-ja"], "Japanese kanji"),
        (
            "エラー",
            &["m-ja"],
            "Japanese katakana with a long vowel mark",
        ),
        ("発生しました", &["m-ja"], "kanji and hiragana"),
        ("결제", &["m-ko"], "Korean inside a word"),
        ("실패 주문", &["m-ko"], "Korean words"),
        ("消息*", &["m-zh"], "a CJK prefix"),
    ];
    for (q, expected, what) in cases {
        assert_eq!(found(&search(q).await), *expected, "{what}: {q}");
    }
    // A row links to its message with the search, whose hits that page marks.
    let rows = search("死信").await;
    let link = "?q=%E6%AD%BB%E4%BF%A1";
    assert!(rows.contains(link), "{rows}");
    let (status, page, _) = pages.get(&format!("/messages/1{link}"), false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<mark>死信</mark>"), "{page}");
    assert!(page.contains("1 hit of <code>死信</code> marked"), "{page}");
    let q: String = form_urlencoded::byte_serialize("発生しました <b>x</b>".as_bytes()).collect();
    let (_, page, _) = pages.get(&format!("/messages/3?q={q}"), false).await;
    assert!(page.contains("<mark>発生しました</mark>"), "{page}");
    assert!(
        page.contains("<code>発生しました &#60;b&#62;x&#60;/b&#62;</code>"),
        "the search shown escaped: {page}"
    );
    // The API speaks the same language.
    let (status, json, _) = pages.get("/api/messages?q=%E6%AD%BB%E4%BF%A1", false).await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let listed: Vec<&str> = json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["m-zh"]);
}

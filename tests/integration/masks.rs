//! `--mask` against a hostile viewer: whatever a body looks like (JSON, text, a BOM, over the
//! indexed prefix, deeper than any parser's limit, escaped names, compressed, another charset,
//! protobuf)
//! no page, API answer, download or search shows a viewer a masked value; a plan's selection
//! does not either. A compression bomb costs a viewer's request bounded memory.

use std::io::Write;
use std::time::Duration;

use lapin::BasicProperties;
use serde_json::{json, Value};

use crate::auth::{as_user, sign_in, users_app, PASSWORD};
use crate::helpers::*;

/// The value under `/card/number` in every hostile body: what a viewer must never learn.
const CARD: &str = "4111222233334444";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// Bodies a producer may send, each holding the card number: (message-id, properties, body).
fn hostile_bodies() -> Vec<(&'static str, BasicProperties, Vec<u8>)> {
    let json = |id: &'static str| {
        BasicProperties::default()
            .with_content_type("application/json".into())
            .with_message_id(id.into())
    };
    let card = format!(r#"{{"number": "{CARD}", "exp": "12/29"}}"#);
    let mut deep = String::new();
    for _ in 0..300 {
        deep.push('[');
    }
    deep.push_str(r#"{"note": "the bottom"}"#);
    for _ in 0..300 {
        deep.push(']');
    }
    vec![
        (
            "plain-json",
            json("plain-json"),
            format!(r#"{{"order": "O-1", "card": {card}}}"#).into_bytes(),
        ),
        (
            "text",
            BasicProperties::default()
                .with_content_type("text/plain".into())
                .with_message_id("text".into()),
            format!("charged card {CARD} for order O-2").into_bytes(),
        ),
        (
            "bom",
            json("bom"),
            format!("\u{feff}{{\"order\": \"O-3\", \"card\": {card}}}").into_bytes(),
        ),
        (
            "huge",
            json("huge"),
            format!(
                r#"{{"card": {card}, "order": "O-4", "filler": "{}"}}"#,
                "lorem ipsum ".repeat(150_000)
            )
            .into_bytes(),
        ),
        (
            "deep",
            json("deep"),
            format!(r#"{{"card": {card}, "order": "O-5", "deep": {deep}}}"#).into_bytes(),
        ),
        (
            "escaped-name",
            json("escaped-name"),
            format!(r#"{{"order": "O-6", "c\u0061rd": {card}}}"#).into_bytes(),
        ),
        (
            "repeated-name",
            json("repeated-name"),
            format!(r#"{{"card": {card}, "order": "O-7", "card": {card}}}"#).into_bytes(),
        ),
        (
            "gzip",
            json("gzip").with_content_encoding("gzip".into()),
            gzip(format!(r#"{{"order": "O-8", "card": {card}}}"#).as_bytes()),
        ),
        (
            "latin1",
            BasicProperties::default()
                .with_content_type("application/json; charset=iso-8859-1".into())
                .with_message_id("latin1".into()),
            [
                b"{\"order\": \"O-9 caf\xe9\", \"card\": ".as_slice(),
                card.as_bytes(),
                b"}",
            ]
            .concat(),
        ),
        (
            "number",
            json("number"),
            format!(r#"{{"order": "O-10", "card": {{"number": {CARD}}}}}"#).into_bytes(),
        ),
    ]
}

on_both_backends!(a_viewer_finds_no_masked_value_on_any_route_or_search);
async fn a_viewer_finds_no_masked_value_on_any_route_or_search() {
    let proto = tempfile::tempdir().unwrap();
    let (descriptors, payment) = crate::producers::payment_protobuf(proto.path(), "O-11", CARD);
    let (app, t, dlq, _) = users_app(|c| {
        c.masks = vec!["/card/number".into()];
        c.fields = vec![
            "card=/card/number".parse().unwrap(),
            "order=/order".parse().unwrap(),
        ];
        c.proto_descriptors = vec![descriptors];
    })
    .await;
    let mut bodies = hostile_bodies();
    bodies.push((
        "protobuf",
        BasicProperties::default()
            .with_content_type("application/x-protobuf".into())
            .with_type("pay.Payment".into())
            .with_message_id("protobuf".into()),
        payment,
    ));
    for (_, properties, body) in &bodies {
        t.publish("", &dlq, body, properties.clone()).await;
    }
    app.wait_for_archived(1 + bodies.len() as i64, Duration::from_secs(30))
        .await;
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    let listed = app
        .archive
        .list_messages(
            &Default::default(),
            lazarus::archive::PageRequest {
                limit: 500,
                before: None,
            },
        )
        .await
        .unwrap();
    let mut ids: Vec<(String, String)> = listed
        .messages
        .iter()
        .filter(|m| m.message_id.as_deref() != Some("auth-0"))
        .map(|m| (m.message_id.clone().unwrap(), m.id.to_string()))
        .collect();
    ids.reverse();
    assert_eq!(ids.len(), bodies.len());

    // An operator plans a replay by the card number: the plan's selection holds it.
    let plan = as_user(
        &app,
        &otto,
        "POST",
        "/api/replays",
        Some(json!({"filter": {"q": format!("card:{CARD}")}, "dry_run": true})),
    )
    .await;
    assert_eq!(plan.status, 200, "{}", plan.text());
    let plan: Value = serde_json::from_slice(&plan.body).unwrap();
    let job = plan["id"].as_str().unwrap().to_owned();
    assert!(plan["selection"].to_string().contains(CARD), "{plan}");
    // And once by the number as a free word.
    let word_plan = as_user(
        &app,
        &otto,
        "POST",
        "/api/replays",
        Some(json!({"filter": {"q": CARD}, "dry_run": true})),
    )
    .await;
    assert_eq!(word_plan.status, 200, "{}", word_plan.text());
    let word_plan: Value = serde_json::from_slice(&word_plan.body).unwrap();
    let word_job = word_plan["id"].as_str().unwrap().to_owned();

    let mut routes = vec![
        "/".to_owned(),
        "/messages".to_owned(),
        format!("/messages?queue={dlq}"),
        format!("/api/messages?queue={dlq}&limit=500"),
        "/replays".to_owned(),
        format!("/replays/{job}"),
        format!("/replays/{job}/progress"),
        "/api/replays".to_owned(),
        format!("/api/replays/{job}"),
        format!("/api/replays/{job}/items"),
        format!("/replays/{word_job}"),
        format!("/api/replays/{word_job}"),
        "/metrics".to_owned(),
        "/readyz".to_owned(),
    ];
    for (_, id) in &ids {
        routes.push(format!("/messages/{id}"));
        routes.push(format!("/api/messages/{id}"));
        routes.push(format!("/api/messages/{id}/body"));
    }
    // Every leak is listed, not only the first.
    let mut leaks: Vec<String> = Vec::new();
    for route in &routes {
        let seen = as_user(&app, &vera, "GET", route, None).await;
        assert!(
            seen.status < 500,
            "{route} → {}: {}",
            seen.status,
            seen.text()
        );
        if seen.text().contains(CARD) {
            leaks.push(format!("{route} shows the card number"));
        }
    }
    // Masked where it can be masked, withheld where it cannot: nothing is shown as archived.
    for (name, id) in &ids {
        let detail = as_user(&app, &vera, "GET", &format!("/api/messages/{id}"), None).await;
        let detail: Value = serde_json::from_slice(&detail.body).unwrap();
        let body = detail["body"]["data"].as_str().unwrap();
        let expected = if name == "text" { "withheld" } else { "***" };
        if !body.contains(expected) {
            leaks.push(format!(
                "{name} is not {expected}: {}",
                &body[..200.min(body.len())]
            ));
        }
    }

    // Word, prefix and phrase searches find nothing by the card number.
    let hostile: Vec<&str> = ids.iter().map(|(_, id)| id.as_str()).collect();
    for q in [
        CARD.to_owned(),
        format!("{CARD}*"),
        "4111*".to_owned(),
        "41112*".to_owned(),
        "411122223*".to_owned(),
        format!("\"{CARD}\""),
        format!("charged {CARD}"),
    ] {
        let path = format!("/api/messages?queue={dlq}&q={}", urlencode(&q));
        let found = as_user(&app, &vera, "GET", &path, None).await;
        assert_eq!(found.status, 200, "{q}: {}", found.text());
        let found: Value = serde_json::from_slice(&found.body).unwrap();
        let found: Vec<&str> = found["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .filter(|id| hostile.contains(id))
            .collect();
        if !found.is_empty() {
            leaks.push(format!("a viewer's search {q:?} finds {found:?}"));
        }
        let page = as_user(
            &app,
            &vera,
            "GET",
            &format!("/messages?queue={dlq}&q={}", urlencode(&q)),
            None,
        )
        .await
        .text();
        for id in &hostile {
            if page.contains(&format!("href=\"/messages/{id}\"")) {
                leaks.push(format!("the list page's search {q:?} finds {id}"));
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
    let by_field = as_user(
        &app,
        &vera,
        "GET",
        &format!("/api/messages?q=card:{CARD}"),
        None,
    )
    .await;
    assert_eq!(by_field.status, 403, "{}", by_field.text());

    // Operators still see the messages as archived, and find them by the field.
    let seen = as_user(
        &app,
        &otto,
        "GET",
        &format!("/api/messages/{}/body", ids[0].1),
        None,
    )
    .await;
    assert!(seen.text().contains(CARD));
    let found = as_user(
        &app,
        &otto,
        "GET",
        &format!("/api/messages?q=card:{CARD}"),
        None,
    )
    .await;
    assert!(found.text().contains(&ids[0].1), "{}", found.text());
    t.cleanup().await;
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn a_compression_bomb_costs_a_viewers_request_bounded_memory() {
    let p = unique("bomb");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("archive.db").display());
    let token =
        crate::served::lazarus_cli(&db, &["token", "create", "v", "--role", "viewer"], None)
            .trim()
            .to_owned();
    let served = crate::served::Served::start(
        &dlq,
        &db,
        &["--auth", "users", "--mask", "/card/number"],
        None,
    )
    .await;
    // 63 MiB of JSON (32 million numbers) in about 64 KB of gzip.
    let mut json = format!(r#"{{"card": {{"number": "{CARD}"}}, "pad": [0"#).into_bytes();
    while json.len() < 63 * 1024 * 1024 {
        json.extend_from_slice(b",0");
    }
    json.extend_from_slice(b"]}");
    let bomb = gzip(&json);
    drop(json);
    assert!(bomb.len() < 128 * 1024, "{} bytes", bomb.len());
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("gzip".into())
        .with_message_id("bomb".into());
    t.publish("", &dlq, &bomb, properties).await;
    let bearer = format!("Bearer {token}");
    let viewer = |path: String| {
        let bearer = bearer.clone();
        let addr = served.addr;
        async move { http_with(addr, "GET", &path, &[("Authorization", &bearer)], None).await }
    };
    // Every 100 ms: the server's peak memory is measured next.
    let patience = Patience::within(Duration::from_secs(30)).every(Duration::from_millis(100));
    let id = wait_for("the bomb to be archived", patience, async || {
        let page = viewer(format!("/api/messages?queue={dlq}")).await;
        let page: Value = serde_json::from_slice(&page.body).unwrap();
        page["messages"][0]["id"].as_str().map(str::to_owned)
    })
    .await;
    let before = served.peak_rss_mib();

    // Four viewers open it at once; the server keeps answering meanwhile.
    let requests: Vec<_> = [
        format!("/messages/{id}"),
        format!("/api/messages/{id}"),
        format!("/api/messages/{id}/body"),
        format!("/messages/{id}"),
    ]
    .into_iter()
    .map(|path| tokio::spawn(viewer(path)))
    .collect();
    let health = http_get(served.addr, "/healthz").await;
    assert_eq!(health.status, 200);
    for request in requests {
        let seen = request.await.unwrap();
        assert_eq!(seen.status, 200, "{}", seen.text());
        assert!(!seen.text().contains(CARD));
        assert!(seen.text().contains("withheld"), "{}", seen.text());
    }
    let peak = served.peak_rss_mib();
    eprintln!("peak RSS before the viewers: {before} MiB, after: {peak} MiB");
    assert!(
        peak < 256,
        "four viewers of a 64 KB gzip body took the server to {peak} MiB"
    );
    t.cleanup().await;
}

//! The JSON API's contract: list filters, keyset pages, unknown ids, bad queries, bodies.

use std::time::Duration;

use lapin::BasicProperties;
use serde_json::Value;

use crate::helpers::*;

on_both_backends!(list_pages_newest_first_without_gaps_or_repeats);
async fn list_pages_newest_first_without_gaps_or_repeats() {
    let dlq = unique("pages");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    for i in 0..25 {
        t.publish(
            "",
            &dlq,
            format!("m{i}").as_bytes(),
            json_props(&format!("m-{i}")),
        )
        .await;
    }
    app.wait_for_archived(25, Duration::from_secs(10)).await;

    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = app
            .json(
                &format!("/api/messages?queue={dlq}&limit=10&cursor={cursor}"),
                200,
            )
            .await;
        let messages = page["messages"].as_array().unwrap();
        assert!(messages.len() <= 10);
        seen.extend(
            messages
                .iter()
                .map(|m| m["message_id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).rev().map(|i| format!("m-{i}")).collect();
    assert_eq!(seen, expected, "newest first, every message exactly once");

    let summary = &app
        .json(&format!("/api/messages?queue={dlq}&limit=1"), 200)
        .await["messages"][0];
    for field in [
        "id",
        "queue",
        "archived_at",
        "message_id",
        "correlation_id",
        "content_type",
        "content_encoding",
        "body_size",
        "first_death",
        "deaths",
        "replay_target",
        "status",
        "open",
        "error",
        "replay_of",
    ] {
        assert!(
            summary.get(field).is_some(),
            "summary lacks {field}: {summary}"
        );
    }
    assert_eq!(summary["status"], "archived");
    assert_eq!(summary["open"], true);
    assert_eq!(summary["replay_of"], Value::Null);
    assert_eq!(summary["content_encoding"], Value::Null);
    t.cleanup().await;
}

on_both_backends!(time_and_status_filters_narrow_the_list);
async fn time_and_status_filters_narrow_the_list() {
    let dlq = unique("filters");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    t.publish("", &dlq, b"x", BasicProperties::default()).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let count = |v: Value| v["messages"].as_array().unwrap().len();
    assert_eq!(
        count(
            app.json(
                &format!("/api/messages?queue={dlq}&since=2000-01-01T00:00:00Z"),
                200
            )
            .await
        ),
        1
    );
    assert_eq!(
        count(
            app.json(
                &format!("/api/messages?queue={dlq}&until=2000-01-01T00:00:00Z"),
                200
            )
            .await
        ),
        0
    );
    assert_eq!(
        count(
            app.json(&format!("/api/messages?queue={dlq}&status=archived"), 200)
                .await
        ),
        1
    );
    assert_eq!(
        count(
            app.json(&format!("/api/messages?queue={dlq}&status=replayed"), 200)
                .await
        ),
        0
    );
    t.cleanup().await;
}

on_both_backends!(unknown_ids_and_bad_queries_get_clear_answers);
async fn unknown_ids_and_bad_queries_get_clear_answers() {
    let app = TestApp::spawn(&[]).await;
    for path in [
        "/api/messages/999999",
        "/api/messages/not-an-id",
        "/api/messages/999999/body",
        "/api/nothing-here",
    ] {
        let error = app.json(path, 404).await;
        assert!(!error["error"].as_str().unwrap().is_empty(), "{path}");
    }
    assert_eq!(
        app.json("/api/messages/424242", 404).await["error"],
        "no archived message with id \"424242\""
    );
    for (path, expected) in [
        (
            "/api/messages?limit=100000",
            "limit must be between 1 and 500",
        ),
        (
            "/api/messages?cursor=%27%3B%20DROP",
            "is not one this API returned",
        ),
        (
            "/api/messages?status=lost",
            "status must be open, resolved, archived",
        ),
        (
            "/api/messages?since=yesterday",
            "since must be an RFC 3339 time",
        ),
    ] {
        let error = app.json(path, 400).await;
        assert!(
            error["error"].as_str().unwrap().contains(expected),
            "{path}: {error}"
        );
    }
    // What axum itself rejects still answers in JSON.
    assert!(app.json("/api/messages?limit=1&limit=2", 400).await["error"].is_string());
    assert!(app.json("/api/messages/%FF", 404).await["error"].is_string());
    assert_eq!(app.get("/healthz").await.status, 200);
}

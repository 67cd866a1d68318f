//! One instance archiving two clusters (`--amqp-url` as `default` and `--broker b=…`): the
//! machine's RabbitMQ 3.10 and the 4.x beside it, each with its own `orders.dlq`. The two stay
//! apart in the list, the `broker=` filter, the `broker:` search, the message page, groups,
//! metrics and the export; one replay job over both lands each copy in its own cluster. A
//! viewer of one broker's DLQs scrapes that broker's series only.

use std::time::Duration;

use lazarus::archive::{Actor, Grant, Role, TokenSpec};
use lazarus::auth::{secret_hash, AuthMode, TOKEN_PREFIX};

use crate::brokers::{Broker, Vhost};
use crate::helpers::*;
use crate::vhosts::shop;

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

on_both_backends!(two_clusters_are_archived_apart_and_replayed_each_into_its_own);
async fn two_clusters_are_archived_apart_and_replayed_each_into_its_own() {
    let a = Vhost::on(Broker::Rabbitmq3, "clusters-a");
    let b = Vhost::on(Broker::Rabbitmq4, "clusters-b");
    let shop_a = shop(&a.url(), "a", 3).await;
    let shop_b = shop(&b.url(), "b", 2).await;
    let b_url = b.url();
    let app = TestApp::spawn_with(&["orders.dlq", "b:orders.dlq"], |c| {
        c.connection.amqp_url = a.url().into();
        c.connection.brokers = vec![format!("b={b_url}").parse().unwrap()];
    })
    .await;
    app.wait_for_archived(5, Duration::from_secs(30)).await;
    for t in [&shop_a, &shop_b] {
        t.channel
            .queue_purge("orders.audit".into(), Default::default())
            .await
            .unwrap();
    }

    // Same-named DLQs of two clusters: two keys, counted apart.
    let counts = app.archive.counts().await.unwrap();
    let total = |queue: &str| -> i64 {
        counts
            .iter()
            .filter(|c| c.queue == queue)
            .map(|c| c.messages)
            .sum()
    };
    assert_eq!(
        (total("orders.dlq"), total("b:orders.dlq")),
        (3, 2),
        "{counts:?}"
    );
    // Their failure groups too: the queue they first died in is keyed with the broker.
    let groups = app.archive.failure_groups(100).await.unwrap();
    let first_died = |queue: &str| {
        groups
            .iter()
            .filter(|g| g.first_death_queue.as_deref() == Some(queue))
            .count()
    };
    assert_eq!(
        (first_died("orders.work"), first_died("b:orders.work")),
        (1, 1),
        "{groups:?}"
    );

    // The broker is a filter and a search field; every message says its own.
    let app = &app;
    let of = |query: &str| {
        let query = query.to_owned();
        async move {
            let page = app.json(&format!("/api/messages?{query}"), 200).await;
            page["messages"].as_array().unwrap().clone()
        }
    };
    let on_b = of("broker=b").await;
    assert_eq!(on_b.len(), 2);
    for m in &on_b {
        assert_eq!(m["broker"], "b", "{m}");
        assert_eq!(m["queue"], "b:orders.dlq", "{m}");
    }
    let on_default = of("broker=default").await;
    assert_eq!(on_default.len(), 3);
    assert!(on_default.iter().all(|m| m["broker"] == "default"));
    assert_eq!(of("q=broker%3Ab").await.len(), 2);
    assert_eq!(of("q=broker%3Adefault").await.len(), 3);
    assert_eq!(of("broker=nowhere").await.len(), 0);
    assert_eq!(of("queue=orders.dlq").await.len(), 3);
    let a_ids = sorted(app.ids("orders.dlq").await);
    let b_ids = sorted(app.ids("b:orders.dlq").await);
    assert_eq!((a_ids.len(), b_ids.len()), (3, 2));

    // The message page names the broker.
    let page = app.get(&format!("/messages/{}", b_ids[0])).await.text();
    assert!(
        page.contains(r#"<a href="/messages?broker=b">b</a>"#),
        "{page}"
    );

    // Metrics: each DLQ by its broker and its key there, a label each.
    let metrics = app.get("/metrics").await.text();
    for series in [
        r#"lazarus_archived_messages{broker="b",queue="orders.dlq",reason="expired"} 2"#,
        r#"lazarus_archived_messages{broker="default",queue="orders.dlq",reason="expired"} 3"#,
        r#"lazarus_ingested_messages_total{broker="b",queue="orders.dlq"} 2"#,
        r#"lazarus_ingested_messages_total{broker="default",queue="orders.dlq"} 3"#,
        r#"lazarus_consumer_connected{broker="b",queue="orders.dlq"} 1"#,
        r#"lazarus_consumer_connected{broker="default",queue="orders.dlq"} 1"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    assert!(!metrics.contains("b:orders"), "{metrics}");

    // The export names the broker, and the queue by its own name there.
    let export = app.get("/api/export?broker=b").await.text();
    let lines: Vec<serde_json::Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{export}");
    for line in &lines {
        assert_eq!(
            (line["broker"].as_str(), line["queue"].as_str()),
            (Some("b"), Some("orders.dlq")),
            "{line}"
        );
    }

    // One job over both clusters: each message back to its own.
    let job = app
        .post_json(
            "/api/replays",
            serde_json::json!({"filter": {"status": "open"}, "request_key": "both"}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap();
    let targets = job["plan"]["targets"].as_array().unwrap();
    let brokers: Vec<&str> = targets
        .iter()
        .map(|t| t["broker"].as_str().unwrap_or("default"))
        .collect();
    assert!(
        brokers.len() == 2 && brokers.contains(&"b") && brokers.contains(&"default"),
        "{job}"
    );
    let page = app.get(&format!("/replays/{id}")).await.text();
    assert!(page.contains("on broker b"), "{page}");
    let done = app
        .wait_for_job(id, Duration::from_secs(30), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 5, "{done}");
    shop_a
        .wait_for_depth("orders.audit", 3, Duration::from_secs(10))
        .await;
    shop_b
        .wait_for_depth("orders.audit", 2, Duration::from_secs(10))
        .await;
    assert_eq!(sorted(drain_links(&a.url(), "orders.audit").await), a_ids);
    assert_eq!(sorted(drain_links(&b.url(), "orders.audit").await), b_ids);

    // A single replay of b's message: to b again.
    app.post_json(
        &format!("/api/messages/{}/replay", b_ids[1]),
        serde_json::json!({"request_key": "one"}),
        200,
    )
    .await;
    shop_b
        .wait_for_depth("orders.audit", 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        drain_links(&b.url(), "orders.audit").await,
        [b_ids[1].clone()]
    );
    assert_eq!(shop_a.depth("orders.audit").await, 0);
}

on_both_backends!(a_viewer_of_one_brokers_dlqs_scrapes_that_brokers_series_only);
async fn a_viewer_of_one_brokers_dlqs_scrapes_that_brokers_series_only() {
    let a = Vhost::on(Broker::Rabbitmq3, "scrape-a");
    let b = Vhost::on(Broker::Rabbitmq4, "scrape-b");
    let _shop_a = shop(&a.url(), "a", 3).await;
    let _shop_b = shop(&b.url(), "b", 2).await;
    let b_url = b.url();
    let app = TestApp::spawn_with(&["orders.dlq", "b:orders.dlq"], |c| {
        c.connection.amqp_url = a.url().into();
        c.connection.brokers = vec![format!("b={b_url}").parse().unwrap()];
        c.auth = AuthMode::Users;
    })
    .await;
    app.wait_for_archived(5, Duration::from_secs(30)).await;
    // A token of someone who may view b's DLQs (of its URL's vhost) and nothing else.
    let token = format!("{TOKEN_PREFIX}bea-secret-of-the-test");
    app.archive
        .create_token(
            &TokenSpec {
                name: "bea",
                token_hash: &secret_hash(&token),
                role: Role::Viewer,
                grants: &[Grant {
                    role: Role::Viewer,
                    on: "b:*".into(),
                }],
                owner: None,
                expires_at: time::OffsetDateTime::now_utc() + time::Duration::days(1),
            },
            &Actor::system("test"),
        )
        .await
        .unwrap();
    let bearer = format!("Bearer {token}");
    let scrape = http_with(
        app.addr,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        None,
    )
    .await;
    assert_eq!(scrape.status, 200, "{}", scrape.text());
    let metrics = scrape.text();
    // The same-named DLQ on each broker: hers, and not the default broker's.
    for series in [
        r#"lazarus_archived_messages{broker="b",queue="orders.dlq",reason="expired"} 2"#,
        r#"lazarus_ingested_messages_total{broker="b",queue="orders.dlq"} 2"#,
        r#"lazarus_consumer_connected{broker="b",queue="orders.dlq"} 1"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    let samples: Vec<&str> = metrics.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!samples.is_empty());
    for line in &samples {
        assert!(line.contains(r#"broker="b",queue=""#), "not of b: {line}");
    }
}

//! One instance archiving two clusters (`--amqp-url` as `default` and `--broker b=…`): the
//! machine's RabbitMQ 3.10 and the 4.x beside it, each with its own `orders.dlq`. The two stay
//! apart in the list, the `broker=` filter, the `broker:` search, the message page, groups,
//! metrics and the export; one replay job over both lands each copy in its own cluster. A
//! viewer of one broker's DLQs scrapes that broker's series only.
//! With a management API per cluster (`--management-url` and `--management-url b=…`), each
//! cluster's DLQs are discovered, adopted under its keys and read for their delivery limit,
//! and a plan's reach is known on both; a default-broker queue keyed as `b:…` is refused, by
//! discovery and, once archived, at start-up.

use std::time::Duration;

use lapin::types::AMQPValue;
use lapin::ExchangeKind;
use lazarus::archive::{Actor, Grant, Role, TokenSpec};
use lazarus::auth::{secret_hash, AuthMode, TOKEN_PREFIX};
use serde_json::Value;

use crate::brokers::{Broker, PrivateBroker, Vhost};
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

/// The DLQ of `broker` keyed `key` in a `/api/dlqs` answer.
fn found_dlq<'a>(answer: &'a Value, broker: &str, key: &str) -> Option<&'a Value> {
    answer["dlqs"]
        .as_array()?
        .iter()
        .find(|d| d["broker"] == broker && d["key"] == key)
}

on_both_backends!(each_cluster_is_discovered_and_read_through_its_own_management_api);
async fn each_cluster_is_discovered_and_read_through_its_own_management_api() {
    // The default broker: a 3.10 of the test's own with its management plugin (the
    // machine's runs without one); b: the 4.x, whose management API listens beside it.
    let port = free_local_port();
    let a = PrivateBroker::configured(
        Broker::Rabbitmq3,
        "[rabbitmq_management].",
        &format!("management.tcp.port = {port}\nmanagement.tcp.ip = 127.0.0.1\n"),
    )
    .await;
    let a_management = format!("http://127.0.0.1:{port}");
    let b = Vhost::on(Broker::Rabbitmq4, "fleet-b");
    let b_management = Broker::Rabbitmq4
        .management_url()
        .expect("4.x runs the management API");

    // a: `orders.dlq`, and a DLQ whose name starts as broker b's keys do.
    let mut ta = Topology::on(&a.url()).await;
    ta.queue("orders.dlq", Default::default()).await;
    dying_queue(&mut ta, "orders.work", "orders.dlq").await;
    ta.queue("b:clash.dlq", Default::default()).await;
    dying_queue(&mut ta, "clash.work", "b:clash.dlq").await;
    // b: a quorum `orders.dlq` that drops a message delivered more than 7 times, fed through
    // the exchange `orders`, which also routes to an audit queue.
    let mut tb = Topology::on(&b.url()).await;
    tb.exchange("orders", ExchangeKind::Direct).await;
    tb.queue(
        "orders.dlq",
        args(&[
            ("x-queue-type", s("quorum")),
            ("x-delivery-limit", AMQPValue::LongInt(7)),
        ]),
    )
    .await;
    dying_queue(&mut tb, "orders.work", "orders.dlq").await;
    tb.queue("orders.audit", Default::default()).await;
    tb.bind("orders.work", "orders", "order").await;
    tb.bind("orders.audit", "orders", "order").await;
    for i in 0..3 {
        ta.publish("", "orders.work", b"{}", json_props(&format!("a-{i}")))
            .await;
    }
    for i in 0..2 {
        ta.publish("", "clash.work", b"{}", json_props(&format!("clash-{i}")))
            .await;
        tb.publish("orders", "order", b"{}", json_props(&format!("b-{i}")))
            .await;
    }
    ta.wait_for_depth("b:clash.dlq", 2, Duration::from_secs(10))
        .await;
    tb.wait_for_depth("orders.dlq", 2, Duration::from_secs(10))
        .await;

    let b_url = b.url();
    let app = TestApp::spawn_with(&[], |c| {
        c.connection.amqp_url = a.url().into();
        c.connection.brokers = vec![format!("b={b_url}").parse().unwrap()];
        c.management_urls = vec![
            a_management.parse().unwrap(),
            format!("b={b_management}").parse().unwrap(),
        ];
        c.discover.discover = true;
        c.discover.discover_interval_secs = 1;
    })
    .await;
    // Each cluster's DLQ adopted under its own key; the clashing one left alone.
    app.wait_for_archived(5, Duration::from_secs(60)).await;
    assert_eq!(app.ids("orders.dlq").await.len(), 3);
    let b_ids = app.ids("b:orders.dlq").await;
    assert_eq!(b_ids.len(), 2);
    let on_b = app.json("/api/messages?broker=b", 200).await;
    assert_eq!(on_b["messages"].as_array().unwrap().len(), 2, "{on_b}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.archived().await, 5, "b:clash.dlq is not archived");
    assert_eq!(ta.depth("b:clash.dlq").await, 2);
    let audit = app.json("/api/audit", 200).await.to_string();
    assert!(
        audit.contains("archiving b:orders.dlq, found as the dead-letter queue of orders.work"),
        "{audit}"
    );

    // b's DLQ's delivery limit, read through b's management API.
    wait_until("b's delivery limit", Duration::from_secs(120), || async {
        app.json("/readyz", 200).await["warnings"]["b:orders.dlq"].is_string()
    })
    .await;
    let ready = app.json("/readyz", 200).await;
    let warning = ready["warnings"]["b:orders.dlq"].as_str().unwrap();
    assert!(warning.contains("more than 7 times"), "{ready}");
    assert!(ready["warnings"]["orders.dlq"].is_null(), "{ready}");

    // `/api/dlqs` lists both clusters' DLQs, each naming its broker.
    let patience = Patience::within(Duration::from_secs(120)).every(Duration::from_secs(1));
    let answer = wait_showing("/api/dlqs to list both brokers", patience, async || {
        let answer = app.json("/api/dlqs", 200).await;
        let b_dlq = found_dlq(&answer, "b", "b:orders.dlq");
        match b_dlq.is_some_and(|d| d["warnings"].to_string().contains("delivery limit of 7")) {
            true => Ok(answer),
            false => Err(answer),
        }
    })
    .await;
    let a_dlq = found_dlq(&answer, "default", "orders.dlq").expect("a's orders.dlq");
    assert_eq!(
        (&a_dlq["vhost"], &a_dlq["archived"]),
        (&Value::from("/"), &Value::from(true)),
        "{a_dlq}"
    );
    let b_dlq = found_dlq(&answer, "b", "b:orders.dlq").unwrap();
    assert_eq!(
        (&b_dlq["vhost"], &b_dlq["name"], &b_dlq["archived"]),
        (
            &Value::from(b.name.as_str()),
            &Value::from("orders.dlq"),
            &Value::from(true)
        ),
        "{b_dlq}"
    );
    let clash = found_dlq(&answer, "default", "b:clash.dlq").expect("the clashing DLQ");
    assert_eq!(clash["archived"], false, "{clash}");
    let refused = clash["refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains(r#"starts with "b:""#) && refused.contains("broker b's"),
        "{clash}"
    );
    assert!(answer.get("unlisted").is_none(), "{answer}");
    // The overview names the broker of each DLQ not archived, and why the clash is not.
    let page = app.get("/").await.text();
    assert!(page.contains(r#"<th scope="col">Broker</th>"#), "{page}");
    assert!(
        page.contains("b:clash.dlq") && page.contains("rename the queue"),
        "{page}"
    );

    // A plan over b's messages: its target's reach, through b's management API.
    let plan = app
        .post_json(
            "/api/replays",
            serde_json::json!({"filter": {"broker": "b"}, "dry_run": true}),
            200,
        )
        .await;
    let page = app
        .get(&format!("/replays/{}", plan["id"].as_str().unwrap()))
        .await
        .text();
    let reach = page
        .split(r#"class="wrap reach">"#)
        .nth(1)
        .unwrap_or_else(|| panic!("no reach column: {page}"))
        .split("</td>")
        .next()
        .unwrap();
    assert!(
        reach.contains("orders.work") && reach.contains("orders.audit"),
        "{reach}"
    );

    // `lazarus discover` lists both clusters' DLQs, b's prefixed with its name.
    let discover = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .args(["discover", "--queue", "b:orders.dlq"])
            .env("LAZARUS_AMQP_URL", a.url())
            .env("LAZARUS_BROKER", format!("b={b_url}"))
            .env(
                "LAZARUS_MANAGEMENT_URL",
                format!("{a_management} b={b_management}"),
            )
            .output()
            .unwrap()
    };
    let shown = discover();
    let out = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{out} {shown:?}");
    for line in [
        "%2F/orders.dlq\tarchive\tfed by orders.work".to_owned(),
        format!(
            "b:{}/orders.dlq\tarchived already (--queue)\tfed by orders.work",
            b.name
        ),
    ] {
        assert!(out.lines().any(|l| l == line), "{line:?} in {out}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("%2F/b:clash.dlq\tleave: its key \"b:clash.dlq\"")),
        "{out}"
    );
    assert!(
        out.contains("  risk: a quorum queue with a delivery limit of 7"),
        "{out}"
    );

    let mut app = app;
    app.stop().await;
    ta.cleanup().await;
    tb.cleanup().await;
}

on_both_backends!(an_archive_holding_a_default_queue_keyed_as_a_brokers_is_refused);
async fn an_archive_holding_a_default_queue_keyed_as_a_brokers_is_refused() {
    // Archived before `--broker us` was named: the default broker's queue `us:orders.dlq`.
    let v = Vhost::create("key-clash");
    let mut t = Topology::on(&v.url()).await;
    t.queue("us:orders.dlq", Default::default()).await;
    dying_queue(&mut t, "orders.work", "us:orders.dlq").await;
    t.publish("", "orders.work", b"{}", json_props("clash-1"))
        .await;
    let mut app = TestApp::spawn_with(&["us:orders.dlq"], |c| {
        c.connection.amqp_url = v.url().into()
    })
    .await;
    app.wait_for_archived(1, Duration::from_secs(30)).await;
    app.stop().await;

    // The same archive with a broker named `us`: refused at start, naming queue and broker.
    let config = |broker: &str| {
        let mut config = lazarus::config::ServeConfig::defaults();
        config.connection.database_url = app.database_url.clone().into();
        config.connection.amqp_url = v.url().into();
        config.connection.brokers = vec![format!("{broker}={}", Broker::Rabbitmq4.url())
            .parse()
            .unwrap()];
        config.listen = "127.0.0.1:0".parse().unwrap();
        config
    };
    let error = lazarus::startup::Application::build(config("us"))
        .await
        .err()
        .expect("refused");
    let said = format!("{error:#}");
    assert!(
        said.contains(r#"queue "us:orders.dlq""#) && said.contains("--broker us"),
        "{said}"
    );
    // Named otherwise, the broker shares no key with it.
    assert!(lazarus::startup::Application::build(config("us-east"))
        .await
        .is_ok());
    t.cleanup().await;
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

//! The replay publisher against the real broker: a dead letter goes back to its original
//! queue exactly as it was published (body, properties, typed headers) minus the death
//! headers plus the link to its archive record; an unroutable target is reported, not
//! counted as published. (Jobs, plans and the pages' replay come with the replay issue.)

use std::time::Duration;

use lapin::options::BasicGetOptions;
use lapin::types::{AMQPValue, DecimalValue, FieldTable};
use lapin::ExchangeKind;
use lazarus::amqp::lapin_types::table_from_lapin;
use lazarus::amqp::publisher::{
    PublishOutcome, Publisher, ReplayBody, ReplayMessage, REPLAY_OF_HEADER,
};
use lazarus::amqp::wire::Connection;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::MessageProperties;

use crate::helpers::*;

on_both_backends!(a_replayed_dead_letter_arrives_as_published_minus_death_headers_plus_its_link);
async fn a_replayed_dead_letter_arrives_as_published_minus_death_headers_plus_its_link() {
    let p = unique("replay");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;

    let mut headers = FieldTable::default();
    headers.insert("tenant".into(), AMQPValue::ShortShortUInt(7));
    headers.insert(
        "amount".into(),
        AMQPValue::DecimalValue(DecimalValue {
            scale: 2,
            value: 12_000,
        }),
    );
    headers.insert(
        "trace".into(),
        AMQPValue::FieldArray(
            vec![
                AMQPValue::LongString("a".into()),
                AMQPValue::Timestamp(1_764_669_600),
            ]
            .into(),
        ),
    );
    let original = json_props("pay-1")
        .with_correlation_id("corr-1".into())
        .with_priority(3)
        .with_timestamp(1_764_669_600)
        .with_type("payment.requested".into())
        .with_app_id("checkout".into())
        .with_headers(headers.clone());
    let body = br#"{"payment_id": "pay-1", "amount": "120.00"}"#;
    // Published to the default exchange with the queue's name: the target to come back to.
    t.publish("", &work, body, original.clone()).await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await; // the aborted worker's channel closes

    let id = app.all_messages(&dlq).await[0]["id"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let archived = app.archive.get_message(id).await.unwrap().unwrap();
    let stored = app.archive.get_body(id).await.unwrap().unwrap();
    let target = archived
        .summary
        .replay_target
        .clone()
        .expect("a rejected message has a target");
    assert_eq!(
        target,
        ReplayTarget {
            exchange: String::new(),
            routing_key: work.clone()
        }
    );
    assert!(archived.headers.as_ref().unwrap().get("x-death").is_some());

    let mut publisher = Publisher::open(
        Connection::open_in(&amqp_url(), "", "replay test")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let mut outcomes = Vec::new();
    let message = ReplayMessage {
        archive_id: id,
        properties: &archived.properties,
        headers: archived.headers.as_ref(),
        body: ReplayBody::Bytes(&stored.bytes),
        target: &target,
        job: None,
        convention: archived.summary.convention,
    };
    publisher
        .publish_all([message], 16, |id, o| outcomes.push((id, o)))
        .await;
    assert_eq!(outcomes, [(id, PublishOutcome::Published)]);

    let got = t
        .channel
        .basic_get(work.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the copy is in the work queue");
    assert_eq!(got.delivery.data, body);
    let (props, got_headers) = MessageProperties::from_lapin(&got.delivery.properties);
    let (want_props, _) = MessageProperties::from_lapin(&original);
    assert_eq!(props, want_props, "every property as published");
    let mut expected = table_from_lapin(&headers);
    expected.insert(
        REPLAY_OF_HEADER,
        lazarus::message::headers::AmqpValue::text(&id.to_string()),
    );
    // lapin's tables are sorted by name: compare the entries, not their order.
    let sorted = |t: &lazarus::message::headers::Table| {
        t.iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(
        sorted(&got_headers.unwrap()),
        sorted(&expected),
        "typed headers as published, no death headers, plus the link"
    );
    publisher.close().await;
    t.cleanup().await;
}

on_both_backends!(unroutable_targets_and_missing_exchanges_are_reported_not_published);
async fn unroutable_targets_and_missing_exchanges_are_reported_not_published() {
    let p = unique("unroutable");
    let (fanout, queue) = (format!("{p}.fanout"), format!("{p}.q"));
    let mut t = Topology::new().await;
    t.exchange(&fanout, ExchangeKind::Fanout).await;
    t.queue(&queue, Default::default()).await;
    t.bind(&queue, &fanout, "").await;
    let mut publisher = Publisher::open(
        Connection::open_in(&amqp_url(), "", "replay test")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(publisher.exchange_exists(&fanout).await.unwrap());
    assert!(publisher.exchange_exists("").await.unwrap());
    assert!(!publisher
        .exchange_exists(&format!("{p}.gone"))
        .await
        .unwrap());

    let props = MessageProperties::default();
    let fanout_target = ReplayTarget {
        exchange: fanout.clone(),
        routing_key: String::new(),
    };
    let nowhere = ReplayTarget {
        exchange: String::new(),
        routing_key: format!("{p}.no-such-queue"),
    };
    let messages = (1..=3).map(|i| ReplayMessage {
        archive_id: i,
        properties: &props,
        headers: None,
        body: ReplayBody::Bytes(b"x"),
        target: if i == 2 { &nowhere } else { &fanout_target },
        job: Some("job-7"),
        convention: None,
    });
    let mut outcomes = Vec::new();
    publisher
        .publish_all(messages, 2, |id, o| outcomes.push((id, o)))
        .await;
    assert_eq!(
        outcomes[0],
        (1, PublishOutcome::Published),
        "a fanout with an empty key is a target"
    );
    assert!(
        matches!(&outcomes[1], (2, PublishOutcome::Unroutable { reply }) if reply.contains("NO_ROUTE")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[2], (3, PublishOutcome::Published));
    t.wait_for_depth(&queue, 2, Duration::from_secs(5)).await;
    publisher.close().await;
    t.cleanup().await;
}

on_both_backends!(single_replay_through_the_api_is_once_per_request_key_and_links_the_next_death);
async fn single_replay_through_the_api_is_once_per_request_key_and_links_the_next_death() {
    let p = unique("single");
    let bare = format!("{p}.bare");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    t.queue(&bare, Default::default()).await;
    let app = TestApp::spawn(&[&dlq, &bare]).await;
    t.publish("", &work, b"{\"order\": 1}", json_props("order-1"))
        .await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = app.all_messages(&dlq).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // A double click: the same request key twice publishes once.
    let path = format!("/api/messages/{id}/replay");
    let first = app
        .post_json(&path, serde_json::json!({"request_key": "click-1"}), 200)
        .await;
    assert_eq!(first["outcome"], "published");
    assert_eq!(
        first["target"],
        serde_json::json!({"exchange": "", "routing_key": work})
    );
    let again = app
        .post_json(&path, serde_json::json!({"request_key": "click-1"}), 200)
        .await;
    assert_eq!(again["id"], first["id"]);
    t.wait_for_depth(&work, 1, Duration::from_secs(5)).await;
    assert_eq!(
        app.json(&format!("/api/messages/{id}"), 200).await["status"],
        "replayed"
    );

    // The consumer still fails: the copy dies again and is archived linked to the original.
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(2, Duration::from_secs(10)).await;
    worker.abort();
    let records = app.all_messages(&dlq).await;
    let copy = records[1]["id"].as_str().unwrap();
    let related = app
        .archive
        .related(
            &app.archive
                .get_message(copy.parse().unwrap())
                .await
                .unwrap()
                .unwrap()
                .summary,
        )
        .await
        .unwrap();
    assert_eq!(
        related[0].id.to_string(),
        id,
        "the new record points back to the one replayed"
    );

    // A bare copy has no target: refused without one, delivered with one.
    t.publish("", &bare, b"bare", json_props("bare-1")).await;
    app.wait_for_archived(3, Duration::from_secs(10)).await;
    let bare_id = app.all_messages(&bare).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = app
        .post_json(
            &format!("/api/messages/{bare_id}/replay"),
            serde_json::json!({}),
            400,
        )
        .await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("no death history"),
        "{refused}"
    );
    let delivered = app
        .post_json(
            &format!("/api/messages/{bare_id}/replay"),
            serde_json::json!({"target": {"exchange": "", "routing_key": work}}),
            200,
        )
        .await;
    assert_eq!(delivered["outcome"], "published");
    let missing = app
        .post_json(
            &format!("/api/messages/{bare_id}/replay"),
            serde_json::json!({"target": {"exchange": format!("{p}.gone"), "routing_key": "x"}}),
            400,
        )
        .await;
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{missing}"
    );
    let unknown = app
        .post_json("/api/messages/999999/replay", serde_json::json!({}), 404)
        .await;
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("no archived message"),
        "{unknown}"
    );
    t.cleanup().await;
}

on_both_backends!(a_replay_reaches_the_cc_queues_the_broker_dropped_on_dead_lettering);
async fn a_replay_reaches_the_cc_queues_the_broker_dropped_on_dead_lettering() {
    let p = unique("cc");
    let mut t = Topology::new().await;
    let (exchange, audit, billing, dlq) = (
        format!("{p}.x"),
        format!("{p}.audit"),
        format!("{p}.billing"),
        format!("{p}.dlq"),
    );
    t.exchange(&exchange, ExchangeKind::Direct).await;
    t.queue(&dlq, FieldTable::default()).await;
    t.queue(&audit, FieldTable::default()).await;
    // The queue that fails is reached through a CC key, and dead-letters with a routing key
    // of its own: the broker drops the CC header then, but x-death still lists both keys.
    t.queue(
        &billing,
        args(&[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s(&dlq)),
        ]),
    )
    .await;
    t.bind(&audit, &exchange, "invoice.created").await;
    t.bind(&billing, &exchange, "billing").await;
    let mut headers = FieldTable::default();
    headers.insert(
        "CC".into(),
        AMQPValue::FieldArray(vec![s("billing")].into()),
    );
    let props = json_props("inv-cc").with_headers(headers);
    t.publish(&exchange, "invoice.created", b"{}", props).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let worker = rejecting_worker(&billing).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.wait_for_depth(&audit, 1, Duration::from_secs(5)).await;

    let detail = app.detail_by_message_id(&dlq, "inv-cc").await;
    assert!(
        detail["headers"].get("CC").is_none(),
        "the broker dropped CC"
    );
    assert_eq!(
        detail["deaths"][0]["routing_keys"],
        serde_json::json!(["invoice.created", "billing"])
    );
    let id = detail["id"].as_str().unwrap();
    let record = app
        .post_json(
            &format!("/api/messages/{id}/replay"),
            serde_json::json!({"request_key": "cc-1"}),
            200,
        )
        .await;
    assert_eq!(record["outcome"], "published", "{record}");
    // The copy reaches the queue that failed (through the rebuilt CC) and, as the original
    // publish did, the one bound to the routing key.
    t.wait_for_depth(&billing, 1, Duration::from_secs(5)).await;
    t.wait_for_depth(&audit, 2, Duration::from_secs(5)).await;
    t.cleanup().await;
}

on_both_backends!(only_the_queue_it_died_in_gets_the_replay_and_an_audit_queue_nothing);
async fn only_the_queue_it_died_in_gets_the_replay_and_an_audit_queue_nothing() {
    let p = unique("diedin");
    let mut t = Topology::new().await;
    let (shop, orders, dlq, audit) = shop_with_audit(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let worker = rejecting_worker(&orders).await;
    for i in 0..2 {
        t.publish(
            &shop,
            "order.created",
            b"{}",
            json_props(&format!("{p}-{i}")),
        )
        .await;
    }
    app.wait_for_archived(2, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.wait_for_depth(&audit, 2, Duration::from_secs(5)).await;
    let ids = app.ids(&dlq).await;

    // The message page offers it, as the default exchange and the queue's name.
    let page = app.get(&format!("/messages/{}", ids[0])).await.text();
    assert!(
        page.contains(&format!(
            r#"<input type="hidden" name="routing_key" value="{orders}">"#
        )) && page.contains(&format!("Replay to {orders} only")),
        "{page}"
    );
    let form = format!(
        "request_key={p}-single&exchange=&routing_key={}",
        orders.replace('.', "%2E")
    );
    let replayed = http_with(
        app.addr,
        "POST",
        &format!("/messages/{}/replay", ids[0]),
        &[("HX-Request", "true")],
        Some(("application/x-www-form-urlencoded", &form)),
    )
    .await;
    assert_eq!(replayed.status, 200, "{}", replayed.text());
    assert!(replayed.text().contains("published"), "{}", replayed.text());

    // A job does the same for each message: its own first-death queue.
    let job = app
        .post_json(
            "/api/replays",
            serde_json::json!({"ids": [ids[1]], "to_first_death_queue": true, "request_key": format!("{p}-job")}),
            200,
        )
        .await;
    assert_eq!(job["to_first_death_queue"], true, "{job}");
    assert_eq!(job["plan"]["targets"][0]["exchange"], "", "{job}");
    assert_eq!(
        job["plan"]["targets"][0]["routing_key"],
        orders.as_str(),
        "{job}"
    );
    let id = job["id"].as_str().unwrap();
    let done = app
        .wait_for_job(id, Duration::from_secs(20), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 1, "{done}");

    // Both copies are back in the work queue; the audit queue got nothing more.
    t.wait_for_depth(&orders, 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.depth(&audit).await, 2, "the audit queue got a duplicate");

    // A message that never died has no such queue: the plan says so. Both at once is refused.
    t.publish("", &dlq, b"{}", json_props(&format!("{p}-direct")))
        .await;
    app.wait_for_archived(3, Duration::from_secs(10)).await;
    let plan = app
        .post_json(
            "/api/replays",
            serde_json::json!({"filter": {"queue": dlq}, "to_first_death_queue": true, "dry_run": true}),
            200,
        )
        .await;
    assert_eq!(plan["plan"]["no_target"], 1, "{plan}");
    let both = app
        .post_json(
            "/api/replays",
            serde_json::json!({"ids": [ids[0]], "to_first_death_queue": true,
                "target": {"exchange": "", "routing_key": "x"}}),
            400,
        )
        .await;
    assert!(
        both["error"].as_str().unwrap().contains("not both"),
        "{both}"
    );
    t.cleanup().await;
}

/// With `--management-url` a plan says which queues each of its targets reaches now: the
/// original exchange and key reach the audit queue too, the queue it died in alone does not.
#[tokio::test]
async fn a_plan_says_which_queues_each_target_reaches_rabbitmq4() {
    let broker = crate::brokers::Broker::Rabbitmq4;
    broker
        .scope(async {
            let vhost = crate::brokers::Vhost::create("reach");
            let mut t = Topology::on(&vhost.url()).await;
            t.exchange("shop", ExchangeKind::Topic).await;
            t.exchange("dlx", ExchangeKind::Fanout).await;
            t.queue("orders.dlq", FieldTable::default()).await;
            t.bind("orders.dlq", "dlx", "").await;
            t.queue("orders", args(&[("x-dead-letter-exchange", s("dlx"))]))
                .await;
            t.queue("audit", FieldTable::default()).await;
            t.bind("orders", "shop", "order.*").await;
            t.bind("audit", "shop", "#").await;
            let management = broker
                .management_url()
                .expect("4.x runs the management API");
            let app = TestApp::spawn_with(&["orders.dlq"], |c| {
                c.connection.amqp_url = vhost.url().into();
                c.management_urls = vec![management.parse().unwrap()];
            })
            .await;
            let worker = rejecting_worker_on(&vhost.url(), "orders").await;
            t.publish("shop", "order.created", b"{}", json_props("reach-1"))
                .await;
            app.wait_for_archived(1, Duration::from_secs(20)).await;
            worker.abort();

            let plan = |to_first_death_queue: bool| {
                let app = &app;
                async move {
                    let job = app
                        .post_json(
                            "/api/replays",
                            serde_json::json!({"filter": {"queue": "orders.dlq"}, "dry_run": true,
                                "to_first_death_queue": to_first_death_queue}),
                            200,
                        )
                        .await;
                    let page = app
                        .get(&format!("/replays/{}", job["id"].as_str().unwrap()))
                        .await
                        .text();
                    let cell = page
                        .split(r#"class="wrap reach">"#)
                        .nth(1)
                        .unwrap_or_else(|| panic!("no reach column: {page}"))
                        .split("</td>")
                        .next()
                        .unwrap()
                        .to_owned();
                    cell
                }
            };
            let original = plan(false).await;
            assert!(
                original.contains("orders") && original.contains("audit"),
                "{original}"
            );
            assert_eq!(plan(true).await, "orders");
            t.cleanup().await;
        })
        .await;
}

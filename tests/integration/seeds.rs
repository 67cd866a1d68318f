//! One test per seed topology (`shared/seeds/`): real dead-lettering through RabbitMQ 3.10
//! and 4.x, each on both backends, then the archive checked through the HTTP API — deaths in
//! broker order, counts, first death, replay target, body bytes, and the headers only 4.x adds.

use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, ExchangeKind};
use serde_json::{json, Value};

use lazarus::message::death::is_death_header;
use lazarus::message::headers::MessageProperties;

use crate::brokers::{on_both_brokers, Broker};
use crate::helpers::*;

const WAIT: Duration = Duration::from_secs(20);

/// Replays one archived message through a bulk job (to its own target, or `target`) and
/// returns the finished job.
async fn replay_job(app: &TestApp, id: &str, target: Option<Value>) -> Value {
    let mut request = json!({"ids": [id]});
    if let Some(target) = target {
        request["target"] = target;
    }
    let job = app.post_json("/api/replays", request, 200).await;
    app.wait_for_job(job["id"].as_str().unwrap(), WAIT, |j| {
        j["state"] == "completed"
    })
    .await
}

/// The body, properties and typed headers of the next message in `queue`.
async fn take_copy(t: &Topology, queue: &str) -> (Vec<u8>, Value, Value) {
    let got = wait_for(&format!("a copy in {queue}"), WAIT, async || {
        t.channel
            .basic_get(
                queue.into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap()
    })
    .await;
    let (props, headers) = MessageProperties::from_lapin(&got.delivery.properties);
    (
        got.delivery.data,
        serde_json::to_value(props).unwrap(),
        serde_json::to_value(headers.unwrap_or_default()).unwrap(),
    )
}

/// The copy is the archived message exactly — body, properties, typed headers — minus the
/// death headers, plus the links to its record and its job.
fn assert_exact_copy(original: &Value, body: &[u8], copy: (Vec<u8>, Value, Value), job: &Value) {
    let (copy_body, copy_props, mut copy_headers) = copy;
    assert_eq!(copy_body, body, "body bytes");
    assert_eq!(copy_props, original["properties"], "properties");
    let headers = copy_headers.as_object_mut().unwrap();
    headers.retain(|name, _| !is_death_header(&name.as_str().into()));
    let link = headers
        .remove("x-lazarus-replay-of")
        .expect("linked to its record");
    assert_eq!(link["value"], original["id"]);
    let job_link = headers
        .remove("x-lazarus-replay-job")
        .expect("linked to its job");
    assert_eq!(job_link["value"], job["id"]);
    let mut expected = original["headers"].as_object().cloned().unwrap_or_default();
    expected.retain(|name, _| !is_death_header(&name.as_str().into()));
    assert_eq!(
        Value::Object(headers.clone()),
        Value::Object(expected),
        "typed headers"
    );
}

/// Deaths without their `time` (asserted separately: present and recent).
fn deaths_without_time(detail: &Value) -> Value {
    let mut deaths = detail["deaths"].clone();
    for d in deaths.as_array_mut().unwrap() {
        let time = d.as_object_mut().unwrap().remove("time").unwrap();
        let time = time::OffsetDateTime::parse(
            time.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        assert!(
            (time::OffsetDateTime::now_utc() - time)
                .whole_minutes()
                .abs()
                < 10,
            "death time {time} is not now"
        );
    }
    deaths
}

/// RabbitMQ 4.x also names the newest death (`x-death[0]`) in `x-last-death-*` headers, and
/// Lazarus keeps them as delivered; 3.10 has none.
fn assert_last_death(detail: &Value, queue: &str, reason: &str, exchange: &str) {
    let headers = &detail["headers"];
    let expected = [
        ("x-last-death-queue", queue),
        ("x-last-death-reason", reason),
        ("x-last-death-exchange", exchange),
    ];
    for (name, value) in expected {
        match Broker::current() {
            Broker::Rabbitmq3 => assert_eq!(headers.get(name), None, "{name} on 3.10"),
            Broker::Rabbitmq4 => assert_eq!(
                headers[name],
                json!({"type": "long-string", "value": value}),
                "{name}"
            ),
        }
    }
}

on_both_brokers!(seed_000_ttl_retry_loop_with_parking_queue, on_both_backends);
/// Seed 000 (aio-pika): work queue → direct DLX → retry queue with a TTL → back through the
/// default exchange; after the third failure the worker parks a copy in a parking queue.
async fn seed_000_ttl_retry_loop_with_parking_queue() {
    let p = unique("s000");
    let (work, dlx, retry, parking, retry_key) = (
        format!("{p}.work"),
        format!("{p}.dlx"),
        format!("{p}.retry"),
        format!("{p}.parking"),
        format!("{p}.retry-key"),
    );
    let mut t = Topology::new().await;
    t.exchange(&dlx, ExchangeKind::Direct).await;
    t.queue(
        &retry,
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(100)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s(&work)),
        ]),
    )
    .await;
    t.bind(&retry, &dlx, &retry_key).await;
    t.queue(
        &work,
        args(&[
            ("x-dead-letter-exchange", s(&dlx)),
            ("x-dead-letter-routing-key", s(&retry_key)),
        ]),
    )
    .await;
    t.queue(&parking, Default::default()).await;

    let app = TestApp::spawn(&[&parking]).await;
    let (work_q, parking_q) = (work.clone(), parking.clone());
    let worker = spawn_worker(&amqp_url(), &work, move |channel, delivery| {
        let (work, parking) = (work_q.clone(), parking_q.clone());
        async move {
            // json.loads fails every time; the third failure parks the message.
            if death_count(&delivery.properties, &work) >= 2 {
                channel
                    .basic_publish(
                        "".into(),
                        parking.as_str().into(),
                        BasicPublishOptions::default(),
                        &delivery.data,
                        delivery.properties.clone(),
                    )
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                delivery.ack(BasicAckOptions::default()).await.unwrap();
            } else {
                delivery
                    .reject(BasicRejectOptions { requeue: false })
                    .await
                    .unwrap();
            }
        }
    })
    .await;

    let body = br#"{"task": "rotate-certificates", "host": "db-7"}"#;
    for i in 0..3 {
        t.publish("", &work, body, json_props(&format!("task-{i}")))
            .await;
    }
    app.wait_for_archived(3, WAIT).await;
    worker.abort();

    let detail = app.detail_by_message_id(&parking, "task-1").await;
    // Newest first: the retry queue expired it last; the work queue rejected it first.
    assert_eq!(
        deaths_without_time(&detail),
        json!([
            {"queue": retry, "reason": "expired", "count": 2, "exchange": dlx, "routing_keys": [retry_key], "original_expiration": null},
            {"queue": work, "reason": "rejected", "count": 2, "exchange": "", "routing_keys": [work], "original_expiration": null},
        ])
    );
    assert_eq!(
        detail["first_death"],
        json!({"queue": work, "reason": "rejected", "exchange": ""})
    );
    // The worker parked a copy with the headers it was delivered with (4.x's last death too).
    assert_last_death(&detail, &retry, "expired", &dlx);
    // The default exchange with the work queue's name: not the retry queue of x-death[0].
    assert_eq!(
        detail["replay_target"],
        json!({"exchange": "", "routing_key": work})
    );
    assert_eq!(detail["queue"], parking.as_str());
    assert_eq!(
        detail["body"],
        json!({
            "encoding": "text",
            "data": std::str::from_utf8(body).unwrap(),
            "size": body.len(),
            "truncated": false
        })
    );
    assert_eq!(app.body(detail["id"].as_str().unwrap()).await, body);
    assert!(detail["death_problems"].as_array().unwrap().is_empty());

    // Replayed, it goes to the first death's target (the work queue), not the retry queue.
    let job = replay_job(&app, detail["id"].as_str().unwrap(), None).await;
    assert_eq!(job["counts"]["published"], 1, "{job}");
    assert_exact_copy(&detail, body, take_copy(&t, &work).await, &job);
    assert_eq!(t.depth(&retry).await, 0);
    t.cleanup().await;
}

on_both_brokers!(
    seed_002_billing_quorum_queues_override_and_overflow,
    on_both_backends
);
/// Seed 002 (Go, billing): topic exchange → quorum work queue whose DLX routing key is
/// overridden (`dead.processing`) and whose length is capped → quorum DLQ. Consumed with a
/// second DLQ (`invoices.dlq`) by one Lazarus, as `--queue invoices.dlq --queue processing_dlq`.
async fn seed_002_billing_quorum_queues_override_and_overflow() {
    let p = unique("s002");
    let (events, dlx, work, dlq) = (
        format!("{p}.events.topic"),
        format!("{p}.events.dlx"),
        format!("{p}.processing_queue"),
        format!("{p}.processing_dlq"),
    );
    let (billing, billing_dlx, invoices, invoices_dlq) = (
        format!("{p}.billing.topic"),
        format!("{p}.billing.dlx"),
        format!("{p}.invoices.process"),
        format!("{p}.invoices.dlq"),
    );
    let quorum = || ("x-queue-type", s("quorum"));
    let mut t = Topology::new().await;
    t.exchange(&events, ExchangeKind::Topic).await;
    t.exchange(&dlx, ExchangeKind::Direct).await;
    t.queue(&dlq, args(&[quorum()])).await;
    t.bind(&dlq, &dlx, "dead.processing").await;
    t.queue(
        &work,
        args(&[
            quorum(),
            ("x-dead-letter-exchange", s(&dlx)),
            ("x-dead-letter-routing-key", s("dead.processing")),
            ("x-max-length", AMQPValue::LongInt(3)),
        ]),
    )
    .await;
    t.bind(&work, &events, "event.created").await;
    // The invoices flavour: no key override, the DLQ bound with the original key.
    t.exchange(&billing, ExchangeKind::Topic).await;
    t.exchange(&billing_dlx, ExchangeKind::Topic).await;
    t.queue(&invoices_dlq, Default::default()).await;
    t.bind(&invoices_dlq, &billing_dlx, "#").await;
    t.queue(
        &invoices,
        args(&[("x-dead-letter-exchange", s(&billing_dlx))]),
    )
    .await;
    t.bind(&invoices, &billing, "invoice.*").await;

    let app = TestApp::spawn(&[&invoices_dlq, &dlq]).await;

    // Overflow: five events into a queue capped at three drop the two oldest (maxlen).
    for i in 0..5 {
        t.publish(
            &events,
            "event.created",
            format!(r#"{{"event": {i}}}"#).as_bytes(),
            json_props(&format!("event-{i}")),
        )
        .await;
    }
    // The three that stay are rejected by a worker that cannot process them.
    let worker = spawn_worker(&amqp_url(), &work, |_, d| async move {
        d.nack(BasicNackOptions {
            requeue: false,
            multiple: false,
        })
        .await
        .unwrap();
    })
    .await;
    let invoice_worker = spawn_worker(&amqp_url(), &invoices, |_, d| async move {
        d.reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
    })
    .await;
    let invoice = br#"{"invoice_id": "INV-2026-00042", "amount": "120.00", "currency": "EUR"}"#;
    t.publish(
        &billing,
        "invoice.created",
        invoice,
        json_props("INV-2026-00042"),
    )
    .await;

    app.wait_for_archived(6, WAIT).await;
    worker.abort();
    invoice_worker.abort();

    for (i, reason) in [
        (0, "maxlen"),
        (1, "maxlen"),
        (2, "rejected"),
        (3, "rejected"),
        (4, "rejected"),
    ] {
        let detail = app.detail_by_message_id(&dlq, &format!("event-{i}")).await;
        // routing-keys keeps the original key even though the DLX key was overridden.
        assert_eq!(
            deaths_without_time(&detail),
            json!([
                {"queue": work, "reason": reason, "count": 1, "exchange": events, "routing_keys": ["event.created"], "original_expiration": null},
            ]),
            "event-{i}"
        );
        assert_eq!(
            detail["first_death"],
            json!({"queue": work, "reason": reason, "exchange": events})
        );
        assert_last_death(&detail, &work, reason, &events);
        assert_eq!(
            detail["replay_target"],
            json!({"exchange": events, "routing_key": "event.created"})
        );
        assert_eq!(detail["delivered_routing_key"], "dead.processing");
        assert_eq!(detail["body"]["data"], format!(r#"{{"event": {i}}}"#));
    }
    let rejected = app
        .json(&format!("/api/messages?queue={dlq}&reason=rejected"), 200)
        .await;
    assert_eq!(rejected["messages"].as_array().unwrap().len(), 3);
    let maxlen = app
        .json(&format!("/api/messages?queue={dlq}&reason=maxlen"), 200)
        .await;
    assert_eq!(maxlen["messages"].as_array().unwrap().len(), 2);

    let detail = app
        .detail_by_message_id(&invoices_dlq, "INV-2026-00042")
        .await;
    assert_eq!(
        detail["replay_target"],
        json!({"exchange": billing, "routing_key": "invoice.created"})
    );
    assert_last_death(&detail, &invoices, "rejected", &billing);
    assert_eq!(app.body(detail["id"].as_str().unwrap()).await, invoice);
    // Replayed to the topic exchange with its original key: back in the invoices queue.
    let job = replay_job(&app, detail["id"].as_str().unwrap(), None).await;
    assert_eq!(job["counts"]["published"], 1, "{job}");
    assert_exact_copy(&detail, invoice, take_copy(&t, &invoices).await, &job);

    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains(&format!(
            "lazarus_archived_messages{{broker=\"default\",queue=\"{dlq}\",reason=\"maxlen\"}} 2"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "lazarus_archived_messages{{broker=\"default\",queue=\"{dlq}\",reason=\"rejected\"}} 3"
        )),
        "{metrics}"
    );
    t.cleanup().await;
}

on_both_brokers!(
    seed_003_queue_ttl_and_message_expiration_into_topic_dlx,
    on_both_backends
);
/// Seed 003 (Java): fanout exchange → queue with a TTL and a DLX routing key → topic DLX →
/// DLQ bound `dlx.*`; plus a message with its own, shorter, expiration.
async fn seed_003_queue_ttl_and_message_expiration_into_topic_dlx() {
    let p = unique("s003");
    let (normal_ex, normal_q, dlx_ex, dlx_q) = (
        format!("{p}.normal_exchange"),
        format!("{p}.normal_queue"),
        format!("{p}.dlx_exchange"),
        format!("{p}.dlx_queue"),
    );
    let mut t = Topology::new().await;
    t.exchange(&dlx_ex, ExchangeKind::Topic).await;
    t.queue(&dlx_q, Default::default()).await;
    t.bind(&dlx_q, &dlx_ex, "dlx.*").await;
    t.exchange(&normal_ex, ExchangeKind::Fanout).await;
    t.queue(
        &normal_q,
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(300)),
            ("x-dead-letter-exchange", s(&dlx_ex)),
            ("x-dead-letter-routing-key", s("dlx.test")),
        ]),
    )
    .await;
    t.bind(&normal_q, &normal_ex, "").await;

    let app = TestApp::spawn(&[&dlx_q]).await;
    let text_props = |id: &str| {
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("text/plain".into())
            .with_content_encoding("UTF-8".into())
            .with_message_id(id.into())
    };
    t.publish(
        &normal_ex,
        "",
        "测试死信消息".as_bytes(),
        text_props("per-message").with_expiration("100".into()),
    )
    .await;
    t.publish(
        &normal_ex,
        "",
        "测试死信消息".as_bytes(),
        text_props("queue-ttl"),
    )
    .await;
    app.wait_for_archived(2, WAIT).await;

    for (id, expiration) in [("per-message", json!("100")), ("queue-ttl", Value::Null)] {
        let detail = app.detail_by_message_id(&dlx_q, id).await;
        assert_eq!(
            deaths_without_time(&detail),
            json!([
                {"queue": normal_q, "reason": "expired", "count": 1, "exchange": normal_ex, "routing_keys": [""], "original_expiration": expiration},
            ]),
            "{id}"
        );
        assert_last_death(&detail, &normal_q, "expired", &normal_ex);
        // A fanout route with an empty key is a valid target.
        assert_eq!(
            detail["replay_target"],
            json!({"exchange": normal_ex, "routing_key": ""})
        );
        assert_eq!(detail["delivered_routing_key"], "dlx.test");
        // The broker removed the per-message expiration property on dead-lettering.
        assert_eq!(detail["properties"]["expiration"], Value::Null);
        assert_eq!(detail["body"]["data"], "测试死信消息");
    }

    // Replayed through the fanout with an empty key, the copy expires in the TTL queue
    // again: archived as a new record, linked both ways to the one replayed.
    let original = app.detail_by_message_id(&dlx_q, "queue-ttl").await;
    let job = replay_job(&app, original["id"].as_str().unwrap(), None).await;
    assert_eq!(job["counts"]["published"], 1, "{job}");
    app.wait_for_archived(3, WAIT).await;
    let all = app.all_messages(&dlx_q).await;
    let again = app
        .json(
            &format!("/api/messages/{}", all[2]["id"].as_str().unwrap()),
            200,
        )
        .await;
    let again_body = app.body(again["id"].as_str().unwrap()).await;
    let copy = (
        again_body,
        again["properties"].clone(),
        again["headers"].clone(),
    );
    assert_exact_copy(&original, "测试死信消息".as_bytes(), copy, &job);
    let page = app
        .get(&format!("/messages/{}", again["id"].as_str().unwrap()))
        .await
        .text();
    assert!(
        page.contains(&format!(
            "href=\"/messages/{}\"",
            original["id"].as_str().unwrap()
        )),
        "the new record links to the one replayed"
    );
    let page = app
        .get(&format!("/messages/{}", original["id"].as_str().unwrap()))
        .await
        .text();
    assert!(
        page.contains(&format!(
            "href=\"/messages/{}\"",
            again["id"].as_str().unwrap()
        )),
        "the replayed record links to the copy that died again"
    );
    t.cleanup().await;
}

on_both_brokers!(
    seed_004_spring_retry_with_bare_dead_copies,
    on_both_backends
);
/// Seed 004 (Spring): NORMAL → READY (TTL, DLX back to the exchange as `retry`) → RETRY,
/// counted in a `retry-times` header; when retries run out the worker publishes a bare
/// copy (no headers) to DEAD. Lazarus archives DEAD: no death history, so no target.
async fn seed_004_spring_retry_with_bare_dead_copies() {
    let p = unique("s004");
    let ex = format!("{p}.E.NOTIFY_CALLBACK");
    let (normal, ready, retry, dead) = (
        format!("{p}.Q@NORMAL"),
        format!("{p}.Q@READY"),
        format!("{p}.Q@RETRY"),
        format!("{p}.Q@DEAD"),
    );
    let mut t = Topology::new().await;
    t.exchange(&ex, ExchangeKind::Direct).await;
    t.queue(
        &ready,
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(100)),
            ("x-dead-letter-exchange", s(&ex)),
            ("x-dead-letter-routing-key", s("retry")),
        ]),
    )
    .await;
    t.bind(&ready, &ex, "ready").await;
    for (q, key) in [(&normal, "normal"), (&retry, "retry"), (&dead, "dead")] {
        t.queue(q, Default::default()).await;
        t.bind(q, &ex, key).await;
    }

    let app = TestApp::spawn(&[&dead]).await;
    let with_retry_times = |properties: &BasicProperties, n: i32| {
        let mut headers = properties.headers().clone().unwrap_or_default();
        headers.insert("retry-times".into(), AMQPValue::LongInt(n));
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_encoding("UTF-8".into())
            .with_content_type("application/json".into())
            .with_headers(headers)
    };
    let ex_n = ex.clone();
    let normal_worker = spawn_worker(&amqp_url(), &normal, move |channel, d| {
        let ex = ex_n.clone();
        async move {
            channel
                .basic_publish(
                    ex.as_str().into(),
                    "ready".into(),
                    BasicPublishOptions::default(),
                    &d.data,
                    with_retry_times(&d.properties, 0),
                )
                .await
                .unwrap()
                .await
                .unwrap();
            d.ack(BasicAckOptions::default()).await.unwrap();
        }
    })
    .await;
    let ex_r = ex.clone();
    let retry_worker = spawn_worker(&amqp_url(), &retry, move |channel, d| {
        let ex = ex_r.clone();
        async move {
            let times = match d
                .properties
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get("retry-times").cloned())
            {
                Some(AMQPValue::LongInt(n)) => n + 1,
                _ => 1,
            };
            let max: i32 = serde_json::from_slice::<Value>(&d.data).unwrap()["retryTimes"]
                .as_i64()
                .unwrap() as i32;
            let (key, props) = if times > max {
                // MessageProperties.PERSISTENT_BASIC: no headers, no history.
                (
                    "dead",
                    BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_priority(0)
                        .with_content_type("application/octet-stream".into()),
                )
            } else {
                ("ready", with_retry_times(&d.properties, times))
            };
            channel
                .basic_publish(
                    ex.as_str().into(),
                    key.into(),
                    BasicPublishOptions::default(),
                    &d.data,
                    props,
                )
                .await
                .unwrap()
                .await
                .unwrap();
            d.ack(BasicAckOptions { multiple: true }).await.unwrap();
        }
    })
    .await;

    let body = br#"{"url":"https://shop.example/callback","orderId":"ORD-77","retryTimes":2}"#;
    t.publish(
        &ex,
        "normal",
        body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await;
    app.wait_for_archived(1, WAIT).await;
    normal_worker.abort();
    retry_worker.abort();

    let all = app.all_messages(&dead).await;
    assert_eq!(all.len(), 1);
    let detail = app
        .json(
            &format!("/api/messages/{}", all[0]["id"].as_str().unwrap()),
            200,
        )
        .await;
    assert_eq!(detail["deaths"], json!([]));
    assert_eq!(detail["first_death"], Value::Null);
    assert_eq!(detail["replay_target"], Value::Null);
    assert_eq!(detail["headers"], Value::Null);
    assert_eq!(detail["status"], "archived");
    assert_eq!(detail["delivered_exchange"], ex.as_str());
    assert_eq!(detail["delivered_routing_key"], "dead");
    assert_eq!(app.body(all[0]["id"].as_str().unwrap()).await, body);
    let none = app
        .json(&format!("/api/messages?queue={dead}&reason=none"), 200)
        .await;
    assert_eq!(none["messages"].as_array().unwrap().len(), 1);

    // No history, no target: a job skips it; with a target chosen, it is delivered.
    let id = all[0]["id"].as_str().unwrap();
    let job = replay_job(&app, id, None).await;
    assert_eq!(job["counts"]["skipped"], 1, "{job}");
    assert_eq!(job["plan"]["no_target"], 1);
    let job = replay_job(
        &app,
        id,
        Some(json!({"exchange": ex, "routing_key": "normal"})),
    )
    .await;
    assert_eq!(job["counts"]["published"], 1, "{job}");
    assert_exact_copy(&detail, body, take_copy(&t, &normal).await, &job);
    t.cleanup().await;
}

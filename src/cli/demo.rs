//! `lazarus demo`: a demo topology modelled on the seed articles, a few hundred failing
//! invoices, payments, notifications and orders pushed through it by real dead-lettering,
//! and the dashboard consuming its DLQs — real pages within a minute.
//!
//! Unlike `serve`, the demo declares queues: they are its own, named `demo.*`, in a vhost of
//! their own (`lazarus-demo`, created with `rabbitmqctl` when the broker is local), or, where
//! that cannot be done, in the vhost of `--amqp-url`.

use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

/// The DLQs the demo fills and Lazarus archives.
pub const DEMO_QUEUES: [&str; 4] = [
    "demo.invoices.dlq",
    "demo.payments.parking",
    "demo.notifications.dlq",
    "demo.orders.dead",
];

/// Business fields of the demo's messages.
pub const DEMO_FIELDS: [&str; 3] = [
    "invoice=/invoice_id",
    "order=/order_id",
    "customer=/customer/id",
];

const DEMO_VHOST: &str = "lazarus-demo";

/// The URL to use: the demo vhost on a local broker when it can be created, else `url`.
pub fn demo_vhost_url(url: &str) -> String {
    let local = url.contains("@127.0.0.1")
        || url.contains("@localhost")
        || url.starts_with("amqp://127.0.0.1")
        || url.starts_with("amqp://localhost");
    let Some((base, _vhost)) = url.rsplit_once('/') else {
        return url.to_owned();
    };
    if !local || base.ends_with('/') {
        return url.to_owned();
    }
    let user = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(auth, _)| auth.split(':').next().unwrap_or("guest"))
        .unwrap_or("guest");
    let ctl = |args: &[&str]| {
        std::process::Command::new("rabbitmqctl")
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    // add_vhost fails when it exists; set_permissions tells whether we can use it.
    ctl(&["add_vhost", DEMO_VHOST]);
    if ctl(&["set_permissions", "-p", DEMO_VHOST, user, ".*", ".*", ".*"]) {
        format!("{base}/{DEMO_VHOST}")
    } else {
        tracing::warn!("could not create the {DEMO_VHOST} vhost (rabbitmqctl unavailable?): the demo uses the vhost of --amqp-url");
        url.to_owned()
    }
}

fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

async fn queue(ch: &Channel, name: &str, args: FieldTable) -> anyhow::Result<()> {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .with_context(|| format!("declaring {name} (delete it if it exists with other arguments)"))?;
    Ok(())
}

async fn exchange(ch: &Channel, name: &str, kind: ExchangeKind) -> anyhow::Result<()> {
    ch.exchange_declare(
        name.into(),
        kind,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    Ok(())
}

async fn bind(ch: &Channel, q: &str, ex: &str, key: &str) -> anyhow::Result<()> {
    ch.queue_bind(
        q.into(),
        ex.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok(())
}

/// The four seed topologies, under `demo.*` names.
async fn declare(ch: &Channel) -> anyhow::Result<()> {
    // Seed 002: billing topic → capped work queue, DLX key overridden → invoices DLQ.
    exchange(ch, "demo.billing", ExchangeKind::Topic).await?;
    exchange(ch, "demo.billing.dlx", ExchangeKind::Direct).await?;
    queue(ch, "demo.invoices.dlq", FieldTable::default()).await?;
    bind(ch, "demo.invoices.dlq", "demo.billing.dlx", "dead.invoices").await?;
    queue(
        ch,
        "demo.invoices",
        table(&[
            ("x-dead-letter-exchange", s("demo.billing.dlx")),
            ("x-dead-letter-routing-key", s("dead.invoices")),
            ("x-max-length", AMQPValue::LongInt(40)),
        ]),
    )
    .await?;
    bind(ch, "demo.invoices", "demo.billing", "invoice.*").await?;
    // Seed 000: work queue ⇄ TTL retry queue; the third failure is parked.
    exchange(ch, "demo.payments.dlx", ExchangeKind::Direct).await?;
    queue(
        ch,
        "demo.payments.retry",
        table(&[
            ("x-message-ttl", AMQPValue::LongInt(300)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("demo.payments")),
        ]),
    )
    .await?;
    bind(ch, "demo.payments.retry", "demo.payments.dlx", "retry").await?;
    queue(
        ch,
        "demo.payments",
        table(&[
            ("x-dead-letter-exchange", s("demo.payments.dlx")),
            ("x-dead-letter-routing-key", s("retry")),
        ]),
    )
    .await?;
    queue(ch, "demo.payments.parking", FieldTable::default()).await?;
    // Seed 003: fanout → queue with a TTL → topic DLX → DLQ bound dlx.*.
    exchange(ch, "demo.notify", ExchangeKind::Fanout).await?;
    exchange(ch, "demo.notify.dlx", ExchangeKind::Topic).await?;
    queue(ch, "demo.notifications.dlq", FieldTable::default()).await?;
    bind(ch, "demo.notifications.dlq", "demo.notify.dlx", "dlx.*").await?;
    queue(
        ch,
        "demo.notifications",
        table(&[
            ("x-message-ttl", AMQPValue::LongInt(1000)),
            ("x-dead-letter-exchange", s("demo.notify.dlx")),
            ("x-dead-letter-routing-key", s("dlx.notification")),
        ]),
    )
    .await?;
    bind(ch, "demo.notifications", "demo.notify", "").await?;
    // Seed 004: NORMAL → READY (TTL) → RETRY → DEAD, bare copies in DEAD.
    exchange(ch, "demo.orders", ExchangeKind::Direct).await?;
    queue(
        ch,
        "demo.orders.ready",
        table(&[
            ("x-message-ttl", AMQPValue::LongInt(300)),
            ("x-dead-letter-exchange", s("demo.orders")),
            ("x-dead-letter-routing-key", s("retry")),
        ]),
    )
    .await?;
    bind(ch, "demo.orders.ready", "demo.orders", "ready").await?;
    for (q, key) in [
        ("demo.orders.normal", "normal"),
        ("demo.orders.retry", "retry"),
        ("demo.orders.dead", "dead"),
    ] {
        queue(ch, q, FieldTable::default()).await?;
        bind(ch, q, "demo.orders", key).await?;
    }
    Ok(())
}

const ERRORS: [&str; 5] = [
    "NullPointerException: invoice.customer.vatId",
    "TimeoutException: tax service did not answer in 5s",
    "ValidationException: amount must be positive",
    "HttpClientErrorException: 400 Bad Request from partner API",
    "card declined: insufficient funds",
];

fn json_props(id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id(id.into())
        .with_app_id("lazarus-demo".into())
}

fn count_of(properties: &BasicProperties, queue: &str) -> i64 {
    let Some(AMQPValue::FieldArray(deaths)) = properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-death").cloned())
    else {
        return 0;
    };
    deaths
        .as_slice()
        .iter()
        .find_map(|d| match d {
            AMQPValue::FieldTable(t) if t.inner().get("queue") == Some(&s(queue)) => {
                match t.inner().get("count") {
                    Some(AMQPValue::LongLongInt(n)) => Some(*n),
                    _ => None,
                }
            }
            _ => None,
        })
        .unwrap_or(0)
}

/// A worker that fails every message, the way each seed's consumer does.
async fn worker(connection: &Connection, queue: &'static str) -> anyhow::Result<()> {
    let channel = connection.create_channel().await?;
    channel.basic_qos(50, BasicQosOptions::default()).await?;
    let mut deliveries = channel
        .basic_consume(
            queue.into(),
            ShortString::from(format!("demo-worker-{queue}")),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tokio::spawn(async move {
        while let Some(Ok(d)) = deliveries.next().await {
            let n = d.delivery_tag as usize;
            let result = match queue {
                "demo.payments" if count_of(&d.properties, queue) >= 2 => {
                    // Third failure: park a copy, with the error, and drop it from the loop.
                    let mut headers = d.properties.headers().clone().unwrap_or_default();
                    headers.insert(
                        "exception".into(),
                        AMQPValue::LongString(LongString::from(ERRORS[4])),
                    );
                    let copy = d.properties.clone().with_headers(headers);
                    let _ = channel
                        .basic_publish(
                            "".into(),
                            "demo.payments.parking".into(),
                            BasicPublishOptions::default(),
                            &d.data,
                            copy,
                        )
                        .await;
                    d.ack(BasicAckOptions::default()).await
                }
                "demo.orders.normal" => {
                    let mut headers = FieldTable::default();
                    headers.insert("retry-times".into(), AMQPValue::LongInt(0));
                    let p = d.properties.clone().with_headers(headers);
                    let _ = channel
                        .basic_publish(
                            "demo.orders".into(),
                            "ready".into(),
                            BasicPublishOptions::default(),
                            &d.data,
                            p,
                        )
                        .await;
                    d.ack(BasicAckOptions::default()).await
                }
                "demo.orders.retry" => {
                    let times = match d
                        .properties
                        .headers()
                        .as_ref()
                        .and_then(|h| h.inner().get("retry-times").cloned())
                    {
                        Some(AMQPValue::LongInt(t)) => t + 1,
                        _ => 1,
                    };
                    let (key, p) = if times > 2 {
                        // Retries exhausted: a bare copy with the error, no death history.
                        let mut headers = FieldTable::default();
                        headers.insert(
                            "x-exception-message".into(),
                            AMQPValue::LongString(LongString::from(ERRORS[n % 4])),
                        );
                        (
                            "dead",
                            BasicProperties::default()
                                .with_delivery_mode(2)
                                .with_content_type("application/json".into())
                                .with_headers(headers),
                        )
                    } else {
                        let mut headers = d.properties.headers().clone().unwrap_or_default();
                        headers.insert("retry-times".into(), AMQPValue::LongInt(times));
                        ("ready", d.properties.clone().with_headers(headers))
                    };
                    let _ = channel
                        .basic_publish(
                            "demo.orders".into(),
                            key.into(),
                            BasicPublishOptions::default(),
                            &d.data,
                            p,
                        )
                        .await;
                    d.ack(BasicAckOptions::default()).await
                }
                _ => d.reject(BasicRejectOptions { requeue: false }).await,
            };
            if let Err(e) = result {
                tracing::warn!(queue, error = %e, "demo worker stopped");
                break;
            }
        }
    });
    Ok(())
}

/// Declares the topology, starts the failing workers, publishes `messages` messages.
/// Returns the connection, which keeps the workers alive while it lives. (A broker given as
/// several addresses: its first node.)
pub async fn run(amqp_url: &str, messages: usize) -> anyhow::Result<Connection> {
    let connection = lapin::Connection::connect(
        &crate::message::broker_nodes::first_node_url(amqp_url),
        lapin::ConnectionProperties::default().with_connection_name("lazarus demo".into()),
    )
    .await
    .context("connecting to RabbitMQ for the demo")?;
    let channel = connection.create_channel().await?;
    declare(&channel).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let publish = |ex: &'static str, key: &'static str, body: String, p: BasicProperties| {
        let channel = channel.clone();
        async move {
            channel
                .basic_publish(
                    ex.into(),
                    key.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    p,
                )
                .await?
                .await?;
            anyhow::Ok(())
        }
    };
    // A burst of invoices before any worker: the cap of 40 drops the oldest (maxlen).
    let invoices = messages * 2 / 5;
    for i in 0..invoices {
        let body = format!(
            r#"{{"invoice_id":"INV-2026-{:05}","customer":{{"id":"C-{}","name":"{}"}},"amount":"{}.00","currency":"EUR","lines":[{{"sku":"SKU-{}","qty":{}}}]}}"#,
            42 + i,
            100 + i % 17,
            [
                "Ada Lovelace",
                "Grace Hopper",
                "Alan Turing",
                "Edsger Dijkstra"
            ][i % 4],
            20 + i % 300,
            i % 50,
            1 + i % 3
        );
        publish(
            "demo.billing",
            "invoice.created",
            body,
            json_props(&format!("INV-2026-{:05}", 42 + i)),
        )
        .await?;
    }
    worker(&connection, "demo.invoices").await?;
    worker(&connection, "demo.payments").await?;
    worker(&connection, "demo.orders.normal").await?;
    worker(&connection, "demo.orders.retry").await?;
    for i in 0..messages / 5 {
        let body = format!(
            r#"{{"payment_id":"PAY-{i:05}","order_id":"ORD-{:05}","customer":{{"id":"C-{}"}},"amount":"{}.90"}}"#,
            7000 + i,
            100 + i % 17,
            10 + i % 90
        );
        publish(
            "",
            "demo.payments",
            body,
            json_props(&format!("PAY-{i:05}")),
        )
        .await?;
    }
    for i in 0..messages / 5 {
        let body = format!(
            r#"{{"notification":"invoice-reminder","customer":{{"id":"C-{}"}},"channel":"{}"}}"#,
            100 + i % 17,
            ["email", "sms"][i % 2]
        );
        let mut p = json_props(&format!("NOTE-{i:05}"));
        if i % 3 == 0 {
            p = p.with_expiration("200".into()); // its own, shorter, expiration
        }
        publish("demo.notify", "", body, p).await?;
    }
    for i in 0..messages / 5 {
        let body = format!(
            r#"{{"order_id":"ORD-{:05}","customer":{{"id":"C-{}"}},"callback":"https://shop.example/orders/{}/paid"}}"#,
            9000 + i,
            100 + i % 17,
            9000 + i
        );
        publish(
            "demo.orders",
            "normal",
            body,
            json_props(&format!("ORD-{:05}", 9000 + i)),
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(connection)
}

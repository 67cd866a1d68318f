//! Watermill's poison queue (no Go toolchain here): what `middleware.PoisonQueue` publishes
//! through watermill-amqp's durable queue configuration — the message's payload as the body,
//! every metadata value a long string plus `_watermill_message_uuid`, persistent, no content
//! type — when a handler returns an error.

use lazarus::message::conventions::Convention;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};

use super::{names, publish, Produced};
use crate::helpers::*;

/// A handler on topic `{p}.orders` that failed: the message is in the poison topic
/// `{p}.poison` (the queue config: default exchange, the topic as queue and routing key).
pub async fn watermill(url: &str, p: &str, order: &str) -> Produced {
    let topic = format!("{p}.orders");
    let poison = format!("{p}.poison");
    let mut t = Topology::on(url).await;
    t.queue(&topic, Default::default()).await;
    t.queue(&poison, Default::default()).await;
    let message = format!("order {order}: payment service unavailable");
    let headers: Table = [
        (
            "_watermill_message_uuid",
            "2f1e7c1a-0e7b-4d0e-9b61-3d3f5c1e9a10",
        ),
        ("correlation_id", "7d2b3c44-93a1-4b9e-a0d2-1b8e4f6a7c55"),
        ("reason_poisoned", message.as_str()),
        ("topic_poisoned", topic.as_str()),
        ("handler_poisoned", "orders_handler"),
        ("subscriber_poisoned", "amqp.Subscriber"),
    ]
    .into_iter()
    .map(|(k, v)| (k, AmqpValue::text(v)))
    .collect();
    let properties = MessageProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    let body = format!(r#"{{"order_id":"{order}","amount":"12.50"}}"#);
    publish(&t, "", &poison, body.as_bytes(), &properties, headers).await;
    let _ = t.connection.close(200, "produced".into()).await;
    Produced {
        convention: Convention::Watermill,
        dlq: poison.clone(),
        lands_in: topic.clone(),
        target: Some(ReplayTarget {
            exchange: String::new(),
            routing_key: topic.clone(),
        }),
        failed_queue: Some(topic.clone()),
        message_type: None,
        error_type: None,
        message,
        root_type: String::new(),
        failure_headers: names(&[
            "reason_poisoned",
            "topic_poisoned",
            "handler_poisoned",
            "subscriber_poisoned",
        ]),
        kept_headers: names(&["_watermill_message_uuid", "correlation_id"]),
        queues: vec![topic, poison],
        exchanges: vec![],
    }
}

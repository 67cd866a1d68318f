//! MassTransit 8's `_error` and `_skipped` messages (no .NET runtime here), published as its
//! RabbitMQ transport moves them: the original body and properties, every header a long string
//! as the .NET client writes strings (the retry count an int), and the base exception's
//! stack trace in the shape `Exception.StackTrace` prints after MassTransit's cleanup.

use lazarus::message::conventions::Convention;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
use serde_json::json;

use super::{endpoint, names, publish, vhost_of, Produced};
use crate::helpers::*;

/// `Exception.StackTrace` of the base exception after MassTransit's cleanup (frame lines
/// only; `MassTransit.DependencyInjection` frames gone, its own file suffixes cut).
const MT_STACK: &str = "   at Shop.Billing.SubmitOrderConsumer.Consume(ConsumeContext`1 context) in /src/Shop.Billing/SubmitOrderConsumer.cs:line 21\n   at MassTransit.Middleware.ConsumerMessageFilter`2.MassTransit.IFilter<MassTransit.ConsumeContext<TMessage>>.Send(ConsumeContext`1 context, IPipe`1 next) ";

fn host_headers() -> Vec<(&'static str, AmqpValue)> {
    [
        ("MT-Host-MachineName", "web-1"),
        ("MT-Host-ProcessName", "Shop.Billing"),
        ("MT-Host-ProcessId", "4242"),
        ("MT-Host-Assembly", "Shop.Billing"),
        ("MT-Host-AssemblyVersion", "1.0.0.0"),
        ("MT-Host-MassTransitVersion", "8.5.8.0"),
        ("MT-Host-FrameworkVersion", "8.0.11"),
        ("MT-Host-OperatingSystemVersion", "Unix 6.1.0.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k, AmqpValue::text(v)))
    .collect()
}

/// The System.Text.Json envelope (camelCase, indented by 2, nulls written).
fn envelope(input: &str, order: &str) -> Vec<u8> {
    let value = json!({
        "messageId": "00ab0000-6ab3-f8b4-f78c-08db7c8365ff",
        "requestId": null,
        "correlationId": null,
        "conversationId": "00ab0000-6ab3-f8b4-739e-08db7c83660f",
        "initiatorId": null,
        "sourceAddress": "rabbitmq://localhost/web1_Shop_bus_8xyyyyn5kyfcjfaqbdpm3dbdgp",
        "destinationAddress": input,
        "responseAddress": null,
        "faultAddress": null,
        "messageType": ["urn:message:Shop.Contracts:SubmitOrder"],
        "message": {"orderId": order, "customer": format!("C-{order}")},
        "expirationTime": null,
        "sentTime": "2026-12-06T04:33:17.689102Z",
        "headers": {},
        "host": {
            "machineName": "web-1", "processName": "Shop.Web", "processId": 43776,
            "assembly": "Shop.Web", "assemblyVersion": "1.0.0.0", "frameworkVersion": "8.0.11",
            "massTransitVersion": "8.5.8.0", "operatingSystemVersion": "Unix 6.1.0.0"
        }
    });
    serde_json::to_vec_pretty(&value).unwrap()
}

fn masstransit_properties() -> MessageProperties {
    MessageProperties {
        content_type: Some("application/vnd.masstransit+json".into()),
        message_id: Some("00ab0000-6ab3-f8b4-f78c-08db7c8365ff".into()),
        delivery_mode: Some(2),
        ..Default::default()
    }
}

/// `rabbitmq://host[/vhost]/queue` as `RabbitMqEndpointAddress` prints it: the default vhost
/// omitted, another escaped with `Uri.EscapeDataString`.
fn address(url: &str, queue: &str) -> String {
    match vhost_of(url).as_str() {
        "/" => format!("rabbitmq://localhost/{queue}"),
        vhost => format!(
            "rabbitmq://localhost/{}/{queue}",
            vhost.replace('%', "%25").replace('/', "%2F")
        ),
    }
}

/// A consumer of `{p}.submit-order` that threw: the message moved to `{p}.submit-order_error`
/// with the base exception's `MT-Fault-*` headers.
pub async fn masstransit_fault(url: &str, p: &str, order: &str) -> Produced {
    let input = format!("{p}.submit-order");
    let error = format!("{input}_error");
    let mut t = Topology::on(url).await;
    endpoint(&mut t, &input).await;
    endpoint(&mut t, &error).await;
    let message = format!("Order {order} has no lines");
    let mut headers: Table = host_headers().into_iter().collect();
    for (k, v) in [
        ("MT-Reason", AmqpValue::text("fault")),
        (
            "MT-Fault-ExceptionType",
            AmqpValue::text("Shop.Sales.OrderValidationException"),
        ),
        (
            "MT-Fault-InputAddress",
            AmqpValue::text(&address(url, &input)),
        ),
        ("MT-Fault-Message", AmqpValue::text(&message)),
        (
            "MT-Fault-Timestamp",
            AmqpValue::text("2026-12-06T04:33:18.1234567Z"),
        ),
        ("MT-Fault-StackTrace", AmqpValue::text(MT_STACK)),
        (
            "MT-Fault-ConsumerType",
            AmqpValue::text("Shop.Billing.SubmitOrderConsumer"),
        ),
        (
            "MT-Fault-MessageType",
            AmqpValue::text("Shop.Contracts.SubmitOrder"),
        ),
        ("MT-Fault-RetryCount", AmqpValue::LongInt(2)),
    ] {
        headers.insert(k, v);
    }
    let body = envelope(&address(url, &input), order);
    // Moved to the error exchange with the original routing key (a fanout's: empty).
    publish(&t, &error, "", &body, &masstransit_properties(), headers).await;
    let _ = t.connection.close(200, "produced".into()).await;
    Produced {
        convention: Convention::MassTransit,
        dlq: error.clone(),
        lands_in: input.clone(),
        target: Some(ReplayTarget {
            exchange: String::new(),
            routing_key: input.clone(),
        }),
        failed_queue: Some(input.clone()),
        message_type: Some("Shop.Contracts.SubmitOrder".into()),
        error_type: Some("Shop.Sales.OrderValidationException".into()),
        message,
        root_type: "Shop.Sales.OrderValidationException".into(),
        failure_headers: names(&[
            "MT-Reason",
            "MT-Fault-ExceptionType",
            "MT-Fault-InputAddress",
            "MT-Fault-Message",
            "MT-Fault-Timestamp",
            "MT-Fault-StackTrace",
            "MT-Fault-ConsumerType",
            "MT-Fault-MessageType",
            "MT-Fault-RetryCount",
        ]),
        kept_headers: names(&[
            "MT-Host-MachineName",
            "MT-Host-ProcessId",
            "MT-Host-MassTransitVersion",
        ]),
        queues: vec![input.clone(), error.clone()],
        exchanges: vec![input, error],
    }
}

/// A message no consumer of `{p}.submit-order` took: moved to `_skipped` with
/// `MT-Reason: dead-letter` and no fault headers.
pub async fn masstransit_skipped(url: &str, p: &str, order: &str) -> Produced {
    let input = format!("{p}.submit-order");
    let skipped = format!("{input}_skipped");
    let mut t = Topology::on(url).await;
    endpoint(&mut t, &input).await;
    endpoint(&mut t, &skipped).await;
    let mut headers: Table = host_headers().into_iter().collect();
    headers.insert("MT-Reason", AmqpValue::text("dead-letter"));
    let body = envelope(&address(url, &input), order);
    publish(&t, &skipped, "", &body, &masstransit_properties(), headers).await;
    let _ = t.connection.close(200, "produced".into()).await;
    Produced {
        convention: Convention::MassTransit,
        dlq: skipped.clone(),
        lands_in: input.clone(),
        target: Some(ReplayTarget {
            exchange: String::new(),
            routing_key: input.clone(),
        }),
        failed_queue: Some(input.clone()),
        message_type: Some("Shop.Contracts.SubmitOrder".into()),
        error_type: None,
        message: String::new(),
        root_type: String::new(),
        failure_headers: names(&["MT-Reason"]),
        kept_headers: names(&["MT-Host-MachineName", "MT-Host-Assembly"]),
        queues: vec![input.clone(), skipped.clone()],
        exchanges: vec![input, skipped],
    }
}

//! NServiceBus' error queue (RabbitMQ transport, conventional routing; no .NET runtime
//! here): `MoveToError`'s headers, every one a long string, with the handler's exception as
//! `Exception.ToString()` prints it.

use lazarus::message::conventions::Convention;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
use serde_json::json;

use super::{endpoint, names, publish, Produced};
use crate::helpers::*;

/// `Exception.ToString()` of a handler's wrapped failure (.NET 8: the inner exception after
/// ` ---> `, then `--- End of inner exception stack trace ---`).
fn nservicebus_trace(order: &str) -> String {
    format!(
        "System.InvalidOperationException: Cannot process order {order}\n ---> Shop.Sales.OrderValidationException: Order {order} has no lines\n   at Shop.Sales.OrderValidator.Validate(PlaceOrder message) in /src/Shop.Sales/OrderValidator.cs:line 14\n   at Shop.Sales.PlaceOrderHandler.Handle(PlaceOrder message, IMessageHandlerContext context) in /src/Shop.Sales/PlaceOrderHandler.cs:line 21\n   --- End of inner exception stack trace ---\n   at Shop.Sales.PlaceOrderHandler.Handle(PlaceOrder message, IMessageHandlerContext context) in /src/Shop.Sales/PlaceOrderHandler.cs:line 25\n   at NServiceBus.InvokeHandlerTerminator.Terminate(IInvokeHandlerContext context) in /_/src/NServiceBus.Core/Pipeline/Incoming/InvokeHandlerTerminator.cs:line 33"
    )
}

/// A handler of `{p}.Sales` that threw past its retries: `MoveToError` sends the message to
/// the error queue `{p}.error` (conventional routing: its fanout exchange) with the fault
/// headers, every one a long string.
pub async fn nservicebus(url: &str, p: &str, order: &str) -> Produced {
    let input = format!("{p}.Sales");
    let error = format!("{p}.error");
    let mut t = Topology::on(url).await;
    endpoint(&mut t, &input).await;
    endpoint(&mut t, &error).await;
    let types = "Shop.Messages.PlaceOrder, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null;Shop.Messages.IOrderCommand, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null";
    let message = format!("Cannot process order {order}");
    let trace = nservicebus_trace(order);
    let headers: Table = [
        (
            "NServiceBus.MessageId",
            "5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3",
        ),
        ("NServiceBus.MessageIntent", "Send"),
        (
            "NServiceBus.ConversationId",
            "2c6f4c1e-5a1d-4f0e-8f55-b1e800c2a1f2",
        ),
        (
            "NServiceBus.CorrelationId",
            "5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3",
        ),
        ("NServiceBus.OriginatingEndpoint", "Shop.Web"),
        ("NServiceBus.ContentType", "application/json"),
        ("NServiceBus.EnclosedMessageTypes", types),
        ("NServiceBus.Version", "9.2.0"),
        ("NServiceBus.TimeSent", "2026-12-06 04:33:17:912345 Z"),
        ("NServiceBus.ReplyToAddress", "Shop.Web"),
        ("NServiceBus.FailedQ", input.as_str()),
        ("NServiceBus.ProcessingMachine", "web-1"),
        ("NServiceBus.ProcessingEndpoint", "Sales"),
        ("$.diagnostics.hostid", "6f1a0d5c2b7e4e0c9a9d3f2b1c0e8a7d"),
        ("$.diagnostics.hostdisplayname", "web-1"),
        (
            "NServiceBus.ExceptionInfo.ExceptionType",
            "System.InvalidOperationException",
        ),
        (
            "NServiceBus.ExceptionInfo.InnerExceptionType",
            "Shop.Sales.OrderValidationException",
        ),
        ("NServiceBus.ExceptionInfo.Message", message.as_str()),
        ("NServiceBus.ExceptionInfo.Source", "Shop.Sales"),
        ("NServiceBus.ExceptionInfo.StackTrace", trace.as_str()),
        ("NServiceBus.TimeOfFailure", "2026-12-06 04:33:18:123456 Z"),
        (
            "NServiceBus.ExceptionInfo.Data.Message type",
            "Shop.Messages.PlaceOrder",
        ),
        (
            "NServiceBus.ExceptionInfo.Data.Handler type",
            "Shop.Sales.PlaceOrderHandler",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, AmqpValue::text(v)))
    .collect();
    let properties = MessageProperties {
        message_id: Some("5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3".into()),
        correlation_id: Some("5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3".into()),
        reply_to: Some("Shop.Web".into()),
        content_type: Some("application/json".into()),
        kind: Some("Shop.Messages.PlaceOrder".into()),
        delivery_mode: Some(2),
        ..Default::default()
    };
    let body = json!({"OrderId": order, "Customer": format!("C-{order}")}).to_string();
    publish(&t, &error, "", body.as_bytes(), &properties, headers).await;
    let _ = t.connection.close(200, "produced".into()).await;
    Produced {
        convention: Convention::NServiceBus,
        dlq: error.clone(),
        lands_in: input.clone(),
        target: Some(ReplayTarget {
            exchange: String::new(),
            routing_key: input.clone(),
        }),
        failed_queue: Some(input.clone()),
        message_type: Some("Shop.Messages.PlaceOrder".into()),
        error_type: Some("System.InvalidOperationException".into()),
        message,
        root_type: "Shop.Sales.OrderValidationException".into(),
        failure_headers: names(&[
            "NServiceBus.FailedQ",
            "NServiceBus.TimeOfFailure",
            "NServiceBus.ExceptionInfo.ExceptionType",
            "NServiceBus.ExceptionInfo.InnerExceptionType",
            "NServiceBus.ExceptionInfo.Message",
            "NServiceBus.ExceptionInfo.Source",
            "NServiceBus.ExceptionInfo.StackTrace",
            "NServiceBus.ExceptionInfo.Data.Message type",
            "NServiceBus.ExceptionInfo.Data.Handler type",
        ]),
        kept_headers: names(&[
            "NServiceBus.MessageId",
            "NServiceBus.EnclosedMessageTypes",
            "NServiceBus.ProcessingEndpoint",
            "NServiceBus.ProcessingMachine",
            "$.diagnostics.hostid",
        ]),
        queues: vec![input.clone(), error.clone()],
        exchanges: vec![input, error],
    }
}

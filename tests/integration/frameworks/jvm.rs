//! Spring AMQP's `RepublishMessageRecoverer` (no Spring here; Maven Central is out of reach):
//! the headers it writes, each a long string, on the message as received — and its stack
//! trace printed by a real JVM, from a listener invoked and wrapped the way Spring's
//! container does (`frameworks/spring/*.java`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use lazarus::message::conventions::Convention;
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{AmqpValue, MessageProperties, Table};

use super::{names, publish, script, Produced};
use crate::helpers::*;

/// The Java classes, compiled once per test run.
fn classes() -> &'static PathBuf {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("spring-classes-{}", std::process::id()));
        let sources = [
            "ListenerExecutionFailedException.java",
            "OrderListener.java",
            "MessagingMessageListenerAdapter.java",
        ]
        .map(|f| script("spring").join(f));
        let javac = Command::new("javac")
            .arg("-d")
            .arg(&out)
            .args(sources)
            .output()
            .expect("javac runs (JDK 17)");
        assert!(
            javac.status.success(),
            "javac: {}",
            String::from_utf8_lossy(&javac.stderr)
        );
        out
    })
}

/// What the recoverer writes for a listener that failed on `order`: the cause's message and
/// the whole trace, as the JVM printed them.
fn recovered(order: &str) -> (String, String) {
    let out = Command::new("java")
        .arg("-cp")
        .arg(classes())
        .arg("org.springframework.amqp.rabbit.listener.adapter.MessagingMessageListenerAdapter")
        .arg(order)
        .output()
        .expect("java runs");
    assert!(
        out.status.success(),
        "java: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (message, trace) = text.split_once('\0').expect("message NUL trace");
    (message.to_owned(), trace.to_owned())
}

/// A listener of `{p}.billing` (bound to the topic exchange `{p}.orders` by `order.*`) that
/// threw on an `order.created` message: republished through the default exchange with the
/// error routing key prefix `{p}.error.` into the queue `{p}.error.order.created`.
pub async fn spring(url: &str, p: &str, order: &str) -> Produced {
    let (exchange, input, dlq) = (
        format!("{p}.orders"),
        format!("{p}.billing"),
        format!("{p}.error.order.created"),
    );
    let mut t = Topology::on(url).await;
    t.exchange(&exchange, lapin::ExchangeKind::Topic).await;
    t.queue(&input, Default::default()).await;
    t.bind(&input, &exchange, "order.*").await;
    t.queue(&dlq, Default::default()).await;
    let order = order.to_owned();
    let (message, trace) = tokio::task::spawn_blocking(move || recovered(&order))
        .await
        .unwrap();
    // The received headers (Jackson's type id), then the recoverer's, all long strings.
    let headers: Table = [
        ("__TypeId__", "com.example.orders.OrderCreated"),
        ("x-exception-stacktrace", trace.as_str()),
        ("x-exception-message", message.as_str()),
        ("x-original-exchange", exchange.as_str()),
        ("x-original-routingKey", "order.created"),
    ]
    .into_iter()
    .map(|(k, v)| (k, AmqpValue::text(v)))
    .collect();
    // The received properties are kept; the recoverer's delivery mode is PERSISTENT.
    let properties = MessageProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("UTF-8".into()),
        message_id: Some(format!("{p}-order").into()),
        priority: Some(0),
        delivery_mode: Some(2),
        ..Default::default()
    };
    publish(&t, "", &dlq, br#"{"orderId":"1007"}"#, &properties, headers).await;
    let _ = t.connection.close(200, "produced".into()).await;
    Produced {
        convention: Convention::SpringAmqp,
        dlq: dlq.clone(),
        lands_in: input.clone(),
        target: Some(ReplayTarget {
            exchange: exchange.clone(),
            routing_key: "order.created".into(),
        }),
        failed_queue: None,
        message_type: Some("com.example.orders.OrderCreated".into()),
        error_type: None,
        message,
        root_type: "com.example.orders.OrderListener$CustomerNotFoundException".into(),
        failure_headers: names(&[
            "x-exception-stacktrace",
            "x-exception-message",
            "x-original-exchange",
            "x-original-routingKey",
        ]),
        kept_headers: names(&["__TypeId__"]),
        queues: vec![input, dlq],
        exchanges: vec![exchange],
    }
}

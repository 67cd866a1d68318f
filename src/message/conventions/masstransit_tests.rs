//! MassTransit's `_error` and `_skipped` messages as its RabbitMQ transport writes them.

use super::*;
use crate::message::conventions::tests::{delivery, problems_of, read_one};
use crate::message::headers::{AmqpValue, Bytes, Table};

const STACK: &str = "   at Shop.Billing.SubmitOrderConsumer.Consume(ConsumeContext`1 context) in /src/Shop.Billing/SubmitOrderConsumer.cs:line 21\n   at MassTransit.Middleware.ConsumerMessageFilter`2.MassTransit.IFilter<MassTransit.ConsumeContext<TMessage>>.Send(ConsumeContext`1 context, IPipe`1 next) ";

/// An `_error` message's headers: the original ones, `MT-Host-*`, then the exception's
/// (every value a long string but the retry count, an int).
fn faulted(address: &str) -> Table {
    Table::from([
        ("MT-Host-MachineName", AmqpValue::text("web-1")),
        ("MT-Host-ProcessId", AmqpValue::text("4242")),
        ("MT-Host-MassTransitVersion", AmqpValue::text("8.5.8.0")),
        (REASON, AmqpValue::text("fault")),
        (
            EXCEPTION_TYPE,
            AmqpValue::text("Shop.Sales.OrderValidationException"),
        ),
        (INPUT_ADDRESS, AmqpValue::text(address)),
        (MESSAGE, AmqpValue::text("Order 42 has no lines")),
        (
            "MT-Fault-Timestamp",
            AmqpValue::text("2026-12-06T04:33:18.1234567Z"),
        ),
        (STACK_TRACE, AmqpValue::text(STACK)),
        (
            CONSUMER_TYPE,
            AmqpValue::text("Shop.Billing.SubmitOrderConsumer"),
        ),
        (MESSAGE_TYPE, AmqpValue::text("Shop.Contracts.SubmitOrder")),
        ("MT-Fault-RetryCount", AmqpValue::LongInt(3)),
    ])
}

#[test]
fn a_fault_gives_the_base_exception_and_the_input_queue() {
    let headers = faulted("rabbitmq://localhost/submit-order");
    let f = read_one(&delivery("submit-order_error", &headers));
    assert_eq!(f.convention, Convention::MassTransit);
    assert_eq!(
        f.error_type.as_deref(),
        Some("Shop.Sales.OrderValidationException")
    );
    assert_eq!(f.message.as_deref(), Some("Order 42 has no lines"));
    assert_eq!(f.stack_trace.as_deref(), Some(STACK.trim()));
    assert_eq!(f.found_in, [EXCEPTION_TYPE, MESSAGE, STACK_TRACE]);
    assert_eq!(f.failed_queue.as_deref(), Some("submit-order"));
    assert_eq!(f.target.unwrap().label(), "(AMQP default) → submit-order");
    assert_eq!(f.target_from.as_deref(), Some(INPUT_ADDRESS));
    assert_eq!(
        f.message_type.as_deref(),
        Some("Shop.Contracts.SubmitOrder")
    );
    assert_eq!(
        f.consumer.as_deref(),
        Some("Shop.Billing.SubmitOrderConsumer")
    );
    assert!(f.problems.is_empty(), "{:?}", f.problems);
}

#[test]
fn a_named_vhost_must_be_the_dlqs() {
    let headers = faulted("rabbitmq://broker/billing/submit-order");
    let here = crate::message::conventions::Delivery {
        vhost: "billing",
        ..delivery("submit-order_error", &headers)
    };
    assert_eq!(
        read_one(&here).failed_queue.as_deref(),
        Some("submit-order")
    );
    let f = read_one(&delivery("submit-order_error", &headers));
    assert_eq!(f.target, None);
    assert_eq!(
        problems_of(&f),
        ["target unknown: MT-Fault-InputAddress names vhost \"billing\", this DLQ is in \"/\""]
    );
}

#[test]
fn malformed_addresses_are_said_and_give_no_target() {
    let long = format!("rabbitmq://localhost/{}", "q".repeat(300));
    let cases = [
        ("not a url", "target unknown: MT-Fault-InputAddress is not a rabbitmq:// address: \"not a url\""),
        ("amqp://h/q", "target unknown: MT-Fault-InputAddress is not a rabbitmq:// address (its scheme is \"amqp\"): \"amqp://h/q\""),
        ("rabbitmq://h", "target unknown: MT-Fault-InputAddress is a rabbitmq:// address that names no queue: \"rabbitmq://h\""),
        ("", "target unknown: MT-Fault-InputAddress is not a rabbitmq:// address: \"\""),
        (&long, "target unknown: the routing key from MT-Fault-InputAddress is 300 bytes; AMQP allows 255"),
    ];
    for (address, said) in cases {
        let f = read_one(&delivery("q_error", &faulted(address)));
        assert_eq!(f.target, None, "{address}");
        assert_eq!(problems_of(&f), [said]);
    }
    let mut headers = faulted("");
    headers.insert(INPUT_ADDRESS, AmqpValue::LongLongInt(5));
    let f = read_one(&delivery("q_error", &headers));
    assert_eq!(
        problems_of(&f),
        ["target unknown: MT-Fault-InputAddress is not text (long-long-int)"]
    );
    // .NET writes byte[] as a long string; a byte array of text is read all the same.
    headers.insert(
        INPUT_ADDRESS,
        AmqpValue::ByteArray(Bytes::from("rabbitmq://h/q")),
    );
    assert_eq!(
        read_one(&delivery("q_error", &headers))
            .failed_queue
            .as_deref(),
        Some("q")
    );
    headers.insert(
        INPUT_ADDRESS,
        AmqpValue::LongString(Bytes(b"rabbitmq://h/q\xff".to_vec())),
    );
    let f = read_one(&delivery("q_error", &headers));
    assert_eq!(f.failed_queue.as_deref(), Some("q\u{fffd}"));
    assert_eq!(
        problems_of(&f),
        ["MT-Fault-InputAddress is not UTF-8; read with replacement characters"]
    );
}

#[test]
fn without_an_input_address_the_error_queue_names_its_input() {
    let mut headers = faulted("");
    headers.retain(|k, _| k != INPUT_ADDRESS);
    let f = read_one(&delivery("submit-order_error", &headers));
    assert_eq!(f.failed_queue.as_deref(), Some("submit-order"));
    assert_eq!(
        f.target_from.as_deref(),
        Some("the queue's name without _error")
    );
    let f = read_one(&delivery("faults", &headers));
    assert_eq!(f.target, None);
    assert_eq!(
        problems_of(&f),
        ["target unknown: no MT-Fault-InputAddress, and the queue's name does not end in _error"]
    );
}

#[test]
fn a_skipped_message_failed_in_the_queue_before_skipped() {
    let headers = Table::from([
        ("MT-Host-MachineName", AmqpValue::text("web-1")),
        (REASON, AmqpValue::text("dead-letter")),
    ]);
    let envelope = r#"{
  "messageId": "00ab0000-6ab3-f8b4-f78c-08db7c8365ff",
  "destinationAddress": "rabbitmq://localhost/submit-order",
  "messageType": [
    "urn:message:Shop.Contracts:SubmitOrder",
    "urn:message:Shop.Contracts:IOrderCommand"
  ],
  "message": {"orderId": 42}
}"#;
    let d = crate::message::conventions::Delivery {
        body_text: Some(envelope),
        ..delivery("submit-order_skipped", &headers)
    };
    let f = read_one(&d);
    assert_eq!(f.failed_queue.as_deref(), Some("submit-order"));
    assert_eq!(f.target.unwrap().label(), "(AMQP default) → submit-order");
    assert_eq!(
        f.message_type.as_deref(),
        Some("Shop.Contracts.SubmitOrder")
    );
    assert_eq!((f.error_type, f.message), (None, None));
    let f = read_one(&delivery("orders", &headers));
    assert_eq!(problems_of(&f), ["target unknown: MT-Reason is dead-letter, but the queue's name does not end in _skipped"]);
}

#[test]
fn message_types_come_from_headers_envelopes_and_urns() {
    assert_eq!(
        urn_type("urn:message:Shop.Contracts:SubmitOrder"),
        "Shop.Contracts.SubmitOrder"
    );
    assert_eq!(
        urn_type("urn:message:Shop:Outer+Inner;urn:message:Shop:IBase"),
        "Shop.Outer+Inner"
    );
    assert_eq!(
        urn_type("urn:message:MassTransit:Fault[[Shop.Contracts:SubmitOrder]]"),
        "MassTransit.Fault[[Shop.Contracts:SubmitOrder]]"
    );
    assert_eq!(urn_type("SubmitOrder"), "SubmitOrder");
    let headers = Table::from([
        (REASON, AmqpValue::text("fault")),
        (INPUT_ADDRESS, AmqpValue::text("rabbitmq://h/q")),
        (RAW_MESSAGE_TYPE, AmqpValue::text("urn:message:Shop:Ping")),
    ]);
    assert_eq!(
        read_one(&delivery("q_error", &headers))
            .message_type
            .as_deref(),
        Some("Shop.Ping")
    );
    let mut headers = faulted("rabbitmq://h/q");
    headers.retain(|k, _| k != MESSAGE_TYPE);
    for (body, said) in [
        (
            r#"{"messageType": "urn:message:A:B"}"#,
            Some("the envelope's messageType is not a list of URNs"),
        ),
        (
            r#"{"messageType": [7]}"#,
            Some("the envelope's messageType holds no URN"),
        ),
        (r#"{"messageType": []}"#, None),
        ("{not json", None),
    ] {
        let d = crate::message::conventions::Delivery {
            body_text: Some(body),
            ..delivery("q_error", &headers)
        };
        let f = read_one(&d);
        assert_eq!(f.message_type, None, "{body}");
        assert_eq!(
            problems_of(&f),
            said.into_iter().collect::<Vec<_>>(),
            "{body}"
        );
    }
}

#[test]
fn reasons_and_headers_of_the_wrong_kind_are_said() {
    let mut headers = faulted("rabbitmq://h/q");
    headers.insert(REASON, AmqpValue::text("expired"));
    headers.insert(MESSAGE, AmqpValue::Array(vec![]));
    let f = read_one(&delivery("q_error", &headers));
    assert_eq!(f.failed_queue.as_deref(), Some("q"));
    assert_eq!(f.message, None);
    assert_eq!(
        problems_of(&f),
        [
            "MT-Fault-Message is not text (array)",
            "MT-Reason is \"expired\", not fault or dead-letter"
        ]
    );
}

#[test]
fn failure_headers_are_the_faults_and_the_reason() {
    for name in [
        REASON,
        EXCEPTION_TYPE,
        INPUT_ADDRESS,
        MESSAGE,
        STACK_TRACE,
        "MT-Fault-RetryCount",
        "mt-fault-timestamp",
    ] {
        assert!(is_failure_header(name), "{name}");
    }
    for name in [
        "MT-Host-MachineName",
        "MT-Fault-Address",
        "MT-MessageType",
        "MessageId",
        "MT-Faulty",
    ] {
        assert!(!is_failure_header(name), "{name}");
    }
}

//! Shared test helpers, and what holds across conventions: which one a message follows,
//! their names, and that reading never fails on what a producer may send.

use super::*;
use crate::message::headers::{AmqpValue, Bytes, Table};

/// A delivery from `queue` in the default vhost, with its name as the routing key.
pub fn delivery<'a>(queue: &'a str, headers: &'a Table) -> Delivery<'a> {
    Delivery {
        queue,
        vhost: "/",
        routing_key: queue,
        headers: Some(headers),
        body_text: None,
    }
}

/// The convention the delivery follows; the test fails when it follows none.
pub fn read_one(d: &Delivery<'_>) -> FrameworkFailure {
    read(d).unwrap_or_else(|| panic!("no convention read in {d:?}"))
}

pub fn problems_of(f: &FrameworkFailure) -> Vec<String> {
    f.problems.clone()
}

fn texts(entries: &[(&str, &str)]) -> Table {
    entries
        .iter()
        .map(|(k, v)| (*k, AmqpValue::text(v)))
        .collect()
}

#[test]
fn names_round_trip_and_are_distinct() {
    for c in Convention::ALL {
        assert_eq!(Convention::parse(c.name()), Some(c));
        assert!(!c.label().is_empty());
    }
    let names: std::collections::HashSet<_> = Convention::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(names.len(), Convention::ALL.len());
    assert_eq!(Convention::parse("Spring AMQP"), None);
}

#[test]
fn each_signature_picks_its_convention() {
    let cases = [
        (
            texts(&[("x-exception-message", "boom")]),
            Convention::SpringAmqp,
        ),
        (
            texts(&[("X-ORIGINAL-ROUTINGKEY", "k")]),
            Convention::SpringAmqp,
        ),
        (texts(&[("MT-Reason", "fault")]), Convention::MassTransit),
        (
            texts(&[("MT-Fault-Message", "boom")]),
            Convention::MassTransit,
        ),
        (
            texts(&[("NServiceBus.FailedQ", "Sales")]),
            Convention::NServiceBus,
        ),
        (
            texts(&[("NServiceBus.ExceptionInfo.Message", "boom")]),
            Convention::NServiceBus,
        ),
        (
            texts(&[("NServiceBus.MessageId", "m")]),
            Convention::NServiceBus,
        ),
        (
            texts(&[(
                "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\SentToFailureTransportStamp",
                "[]",
            )]),
            Convention::SymfonyMessenger,
        ),
        (
            texts(&[("topic_poisoned", "orders")]),
            Convention::Watermill,
        ),
    ];
    for (headers, convention) in cases {
        assert_eq!(
            read_one(&delivery("dlq", &headers)).convention,
            convention,
            "{headers:?}"
        );
    }
}

#[test]
fn plain_dead_letters_follow_no_convention() {
    let death = AmqpValue::Array(vec![AmqpValue::Table(texts(&[("queue", "work")]))]);
    let cases = [
        Table::new(),
        Table::from([("x-death", death.clone())]),
        // An NServiceBus message the broker dead-lettered: not from its error queue.
        Table::from([
            ("x-death", death),
            ("NServiceBus.MessageId", AmqpValue::text("m")),
        ]),
        texts(&[
            ("exception", "boom"),
            ("MT-Host-MachineName", "web-1"),
            ("MT-Fault-Address", "rabbitmq://h/faults"),
        ]),
        texts(&[
            (
                "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\BusNameStamp",
                "[]",
            ),
            ("type", "App\\Ping"),
        ]),
        texts(&[("subscriber_poisoned", "amqp.Subscriber")]),
    ];
    for headers in cases {
        let d = Delivery {
            body_text: Some(r#"{"invoice":"INV-1"}"#),
            ..delivery("orders.dlq", &headers)
        };
        assert_eq!(read(&d), None, "{headers:?}");
    }
    let empty = Table::new();
    let none = Delivery {
        headers: None,
        ..delivery("orders.dlq", &empty)
    };
    assert_eq!(read(&none), None);
}

#[test]
fn headers_decide_before_a_body() {
    let headers = texts(&[
        ("MT-Reason", "fault"),
        ("MT-Fault-InputAddress", "rabbitmq://h/q"),
    ]);
    let body = r#"{"queue_name":"q","actor_name":"a"}"#;
    let d = Delivery {
        body_text: Some(body),
        ..delivery("q.XQ", &headers)
    };
    assert_eq!(read_one(&d).convention, Convention::MassTransit);
}

#[test]
fn failure_headers_belong_to_their_convention_only() {
    let samples = [
        (Convention::SpringAmqp, "x-exception-stacktrace"),
        (Convention::MassTransit, "MT-Fault-StackTrace"),
        (
            Convention::NServiceBus,
            "NServiceBus.ExceptionInfo.StackTrace",
        ),
        (
            Convention::SymfonyMessenger,
            "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\ErrorDetailsStamp",
        ),
        (Convention::Watermill, "reason_poisoned"),
    ];
    for c in Convention::ALL {
        for (owner, name) in samples {
            assert_eq!(c.is_failure_header(name), c == owner, "{c:?} {name}");
        }
        for kept in [
            "x-death",
            "x-first-death-queue",
            "content-type",
            "retry-count",
            "x-lazarus-replay-of",
            "",
        ] {
            assert!(!c.is_failure_header(kept), "{c:?} {kept}");
        }
    }
}

#[test]
fn huge_and_broken_values_are_cut_and_said() {
    let huge = "x".repeat(4 * MAX_TRACE_BYTES);
    let mut headers = texts(&[
        ("MT-Reason", "fault"),
        ("MT-Fault-InputAddress", "rabbitmq://h/q"),
    ]);
    headers.insert("MT-Fault-StackTrace", AmqpValue::text(&huge));
    headers.insert(
        "MT-Fault-Message",
        AmqpValue::LongString(Bytes(b"bad \xff\xfe bytes".to_vec())),
    );
    headers.insert(
        "MT-Fault-ExceptionType",
        AmqpValue::ShortString(Bytes::from(&*"é".repeat(MAX_TEXT_BYTES))),
    );
    let f = read_one(&delivery("q_error", &headers));
    assert_eq!(
        f.stack_trace.as_ref().map(String::len),
        Some(MAX_TRACE_BYTES)
    );
    assert_eq!(f.error_type.as_ref().map(String::len), Some(MAX_TEXT_BYTES));
    assert_eq!(f.message.as_deref(), Some("bad \u{fffd}\u{fffd} bytes"));
    assert_eq!(
        problems_of(&f),
        [
            format!(
                "MT-Fault-ExceptionType is {} bytes; the first {MAX_TEXT_BYTES} are read",
                2 * MAX_TEXT_BYTES
            ),
            "MT-Fault-Message is not UTF-8; read with replacement characters".to_owned(),
            format!(
                "MT-Fault-StackTrace is {} bytes; the first {MAX_TRACE_BYTES} are read",
                huge.len()
            ),
        ]
    );
    assert_eq!(f.failed_queue.as_deref(), Some("q"), "the target survives");
}

#[test]
fn names_that_are_not_utf8_are_passed_over() {
    let headers: Table = [(Bytes(b"MT-Reason\xff".to_vec()), AmqpValue::text("fault"))]
        .into_iter()
        .collect();
    assert_eq!(read(&delivery("q_error", &headers)), None);
}

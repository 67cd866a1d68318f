//! Dramatiq's `.XQ` messages, from the body a real Dramatiq 2.2.1 worker left there.

use super::*;
use crate::message::conventions::tests::{delivery, problems_of, read_one};
use crate::message::conventions::Delivery;
use crate::message::headers::{AmqpValue, Bytes, Table};

/// Captured from `.XQ` (the spec, §6.2): exact bytes.
const BODY: &str = r#"{"queue_name":"lazarus_research_dq","actor_name":"process_order","args":[42],"kwargs":{"region":"us"},"options":{"retries":1,"traceback":"Traceback (most recent call last):\n  File \"/tmp/tmp.gLzd31n8It/dramatiq-2.2.1-py3-none-any.whl/dramatiq/worker.py\", line 560, in process_message\n    res = actor(*message.args, **message.kwargs)\n          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/tmp/tmp.gLzd31n8It/dramatiq-2.2.1-py3-none-any.whl/dramatiq/actor.py\", line 194, in __call__\n    return self.fn(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/tmp/lztr/dq/run.py\", line 14, in process_order\n    raise ValueError(f\"order {order_id} is invalid\")\nValueError: order 42 is invalid\n","requeue_timestamp":1796531815856},"message_id":"6b12c329-becc-4d74-ad7b-e332e50e8f87","message_timestamp":1796531815769}"#;

/// The broker's death headers on it.
fn died() -> Table {
    let death = Table::from([
        ("count", AmqpValue::LongLongInt(1)),
        ("reason", AmqpValue::text("rejected")),
        ("queue", AmqpValue::text("lazarus_research_dq")),
        ("time", AmqpValue::Timestamp(1_796_531_815)),
        ("exchange", AmqpValue::text("")),
        (
            "routing-keys",
            AmqpValue::Array(vec![AmqpValue::text("lazarus_research_dq")]),
        ),
    ]);
    Table::from([
        ("x-death", AmqpValue::Array(vec![AmqpValue::Table(death)])),
        ("x-first-death-exchange", AmqpValue::text("")),
        (
            "x-first-death-queue",
            AmqpValue::text("lazarus_research_dq"),
        ),
        ("x-first-death-reason", AmqpValue::text("rejected")),
    ])
}

fn in_xq<'a>(headers: &'a Table, body: &'a str) -> Delivery<'a> {
    Delivery {
        body_text: Some(body),
        ..delivery("lazarus_research_dq.XQ", headers)
    }
}

#[test]
fn the_body_gives_queue_actor_and_traceback() {
    let headers = died();
    let f = read_one(&in_xq(&headers, BODY));
    assert_eq!(f.convention, Convention::Dramatiq);
    assert_eq!(f.failed_queue.as_deref(), Some("lazarus_research_dq"));
    assert_eq!(f.message_type.as_deref(), Some("process_order"));
    let trace = f.stack_trace.as_deref().unwrap();
    assert!(
        trace.starts_with("Traceback (most recent call last):"),
        "{trace}"
    );
    assert!(
        trace.ends_with("ValueError: order 42 is invalid"),
        "{trace}"
    );
    assert_eq!(f.found_in, ["body options.traceback"]);
    assert_eq!(f.target, None, "x-death gives the target");
    assert!(f.problems.is_empty(), "{:?}", f.problems);
    let cause = crate::message::cause::Cause::from_parts(None, None, f.stack_trace.as_deref());
    assert_eq!(cause.error_type.as_deref(), Some("ValueError"));
}

#[test]
fn without_death_headers_the_queue_name_is_the_target() {
    let body = BODY.replace("\"lazarus_research_dq\"", "\"orders.DQ\"");
    let f = read_one(&Delivery {
        body_text: Some(&body),
        ..delivery("parked", &Table::new())
    });
    assert_eq!(f.failed_queue.as_deref(), Some("orders"));
    assert_eq!(f.target.unwrap().label(), "(AMQP default) → orders");
    assert_eq!(f.target_from.as_deref(), Some("body queue_name"));
}

#[test]
fn no_traceback_is_no_problem() {
    let body = r#"{"queue_name":"q","actor_name":"a","args":[],"kwargs":{},"options":{},"message_id":"m","message_timestamp":1}"#;
    let headers = died();
    let f = read_one(&in_xq(&headers, body));
    assert_eq!((f.stack_trace, f.found_in.len()), (None, 0));
    assert!(f.problems.is_empty(), "{:?}", f.problems);
}

#[test]
fn bodies_that_are_not_dramatiqs_in_an_xq_are_said() {
    let headers = died();
    let cases = [
        ("", "the body is empty"),
        (
            "[\"q\", \"a\", {}]",
            "the body is not a Dramatiq message (not a JSON object)",
        ),
        (
            "{\"queue_name\":",
            "the body is not a Dramatiq message (EOF while parsing a value at line 1 column 14)",
        ),
        (
            r#"{"queue_name":7,"actor_name":"a"}"#,
            "the body's queue_name is a number, not text",
        ),
        (
            r#"{"queue_name":".XQ","actor_name":null}"#,
            "the body's queue_name is empty",
        ),
        (
            r#"{"queue_name":"q","actor_name":"a","options":[]}"#,
            "the body's options is a list, not an object",
        ),
        (
            r#"{"queue_name":"q","actor_name":"a","options":{"traceback":{}}}"#,
            "the body's options.traceback is an object, not text",
        ),
    ];
    for (body, said) in cases {
        let f = read_one(&in_xq(&headers, body));
        let from_body = body.contains(r#""queue_name":"q""#);
        let failed = if from_body {
            "q"
        } else {
            "lazarus_research_dq"
        };
        assert_eq!(f.failed_queue.as_deref(), Some(failed), "{body}");
        assert_eq!(
            problems_of(&f).first().map(String::as_str),
            Some(said),
            "{body}"
        );
    }
    let f = read_one(&Delivery {
        body_text: None,
        ..delivery("q.XQ", &headers)
    });
    assert_eq!(problems_of(&f), ["the body is not text"]);
    let f = read_one(&in_xq(&headers, r#"{"queue_name":"q"}"#));
    assert_eq!(problems_of(&f), ["the body's actor_name is missing"]);
}

#[test]
fn huge_bodies_and_traces_are_bounded() {
    let headers = died();
    let huge = format!(
        r#"{{"queue_name":"q","actor_name":"a","args":["{}"]}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let f = read_one(&in_xq(&headers, &huge));
    assert!(
        problems_of(&f)[0].contains("more than Lazarus reads"),
        "{:?}",
        f.problems
    );
    let long = format!(
        r#"{{"queue_name":"q","actor_name":"a","options":{{"traceback":"{}"}}}}"#,
        "é".repeat(MAX_TRACE_BYTES)
    );
    let f = read_one(&in_xq(&headers, &long));
    assert_eq!(
        f.stack_trace.as_ref().map(String::len),
        Some(MAX_TRACE_BYTES)
    );
    assert_eq!(problems_of(&f).len(), 1);
}

#[test]
fn other_json_is_no_dramatiq_message() {
    let headers = Table::from([("x", AmqpValue::ByteArray(Bytes::from("y")))]);
    for body in [
        r#"{"invoice":"INV-1"}"#,
        "plain text",
        r#"{"queue_name":"q"}"#,
    ] {
        let d = Delivery {
            body_text: Some(body),
            ..delivery("orders.dlq", &headers)
        };
        assert_eq!(crate::message::conventions::read(&d), None, "{body}");
    }
}

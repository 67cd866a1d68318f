//! Symfony Messenger 5.4's failure-transport messages, as the real worker left them in
//! RabbitMQ (captured by `tests/integration/frameworks/symfony_failure.php`): the Symfony
//! serializer's stamp headers, and the default `PhpSerializer`'s body.

use super::*;
use crate::message::conventions::tests::{delivery, problems_of, read_one};
use crate::message::conventions::Delivery;
use crate::message::headers::{AmqpValue, Table};

/// Every header php-amqp wrote, each a long string, and the routing key it came with.
fn captured() -> (Table, String) {
    let fixture: Json =
        serde_json::from_str(include_str!("fixtures/symfony_json_headers.json")).unwrap();
    let headers = fixture["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), AmqpValue::text(v.as_str().unwrap())))
        .collect();
    (headers, fixture["routing_key"].as_str().unwrap().to_owned())
}

const PHP_BODY: &str = include_str!("fixtures/symfony_php_body.txt");

fn in_failed<'a>(headers: &'a Table, key: &'a str) -> Delivery<'a> {
    Delivery {
        routing_key: key,
        ..delivery("failed", headers)
    }
}

#[test]
fn the_symfony_serializers_stamps_give_error_trace_and_queue() {
    let (headers, key) = captured();
    let f = read_one(&in_failed(&headers, &key));
    assert_eq!(f.convention, Convention::SymfonyMessenger);
    assert_eq!(f.error_type.as_deref(), Some("InvoiceFailed"));
    assert_eq!(
        f.message.as_deref(),
        Some("invoice INV-42 could not be sent")
    );
    assert_eq!(f.message_type.as_deref(), Some("SendInvoice"));
    assert_eq!(f.consumer.as_deref(), Some("async"));
    assert_eq!(f.failed_queue.as_deref(), Some("t.fx1.async"));
    assert_eq!(f.target.unwrap().label(), "(AMQP default) → t.fx1.async");
    assert_eq!(
        f.found_in,
        ["X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\ErrorDetailsStamp"]
    );
    let trace = f.stack_trace.unwrap();
    // Symfony's getAsString(): the root first, its wrapper after `Next`.
    assert!(trace.starts_with("CustomerNotFound: no customer for invoice INV-42 in /tmp/app/symfony_failure.php:47\nStack trace:\n#0 /tmp/app/symfony_failure.php(52): load_customer()\n"), "{trace}");
    assert!(trace.contains("\n\nNext InvoiceFailed: invoice INV-42 could not be sent in /tmp/app/symfony_failure.php:54\nStack trace:\n"), "{trace}");
    assert!(trace.ends_with("{main}"), "{trace}");
    assert!(f.problems.is_empty(), "{:?}", f.problems);
}

#[test]
fn the_php_serializers_body_gives_the_same() {
    let headers = Table::new();
    let d = Delivery {
        body_text: Some(PHP_BODY),
        ..in_failed(&headers, "t.fx2.async")
    };
    let f = read_one(&d);
    assert_eq!(f.convention, Convention::SymfonyMessenger);
    assert_eq!(f.error_type.as_deref(), Some("InvoiceFailed"));
    assert_eq!(
        f.message.as_deref(),
        Some("invoice INV-43 could not be sent")
    );
    assert_eq!(f.message_type.as_deref(), Some("SendInvoice"));
    assert_eq!(f.consumer.as_deref(), Some("async"));
    assert_eq!(f.failed_queue.as_deref(), Some("t.fx2.async"));
    assert!(f
        .stack_trace
        .as_ref()
        .unwrap()
        .starts_with("CustomerNotFound: no customer for invoice INV-43 in "));
    assert_eq!(f.found_in, ["body ErrorDetailsStamp"]);
    assert_eq!(problems_of(&f).len(), 1);
    assert!(
        problems_of(&f)[0].contains("keeps its SentToFailureTransportStamp"),
        "{:?}",
        f.problems
    );
    // Base64, as Symfony sends a body that is not UTF-8.
    use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
    let encoded = BASE64.encode(PHP_BODY);
    let d = Delivery {
        body_text: Some(&encoded),
        ..in_failed(&headers, "t.fx2.async")
    };
    assert_eq!(
        read_one(&d).message.as_deref(),
        Some("invoice INV-43 could not be sent")
    );
}

#[test]
fn the_base64_signature_is_the_envelopes() {
    use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
    assert_eq!(
        ENVELOPE_BASE64,
        BASE64.encode(&ENVELOPE[0].as_bytes()[..45])
    );
}

#[test]
fn a_broken_php_body_is_said() {
    let headers = Table::new();
    let cut_short = &PHP_BODY[..2000];
    for (body, said) in [
        (cut_short, "cannot be read: cut short"),
        (
            r#"O:36:"Symfony\Component\Messenger\Envelope":x:{}"#,
            "cannot be read: a bad number",
        ),
    ] {
        let d = Delivery {
            body_text: Some(body),
            ..in_failed(&headers, "q")
        };
        let f = read_one(&d);
        assert!(problems_of(&f)[0].contains(said), "{:?}", f.problems);
        assert_eq!(f.failed_queue.as_deref(), Some("q"));
    }
}

#[test]
fn malformed_stamps_and_a_missing_routing_key_are_said() {
    let stamp = |s: &str| format!("{STAMP}{s}");
    let headers = Table::from([
        (stamp(ERROR_DETAILS), AmqpValue::text("{not json")),
        (stamp(SENT_TO_FAILURE), AmqpValue::text("[7]")),
        (TYPE.to_owned(), AmqpValue::LongInt(1)),
    ]);
    let f = read_one(&in_failed(&headers, ""));
    assert_eq!(
        (&f.target, &f.failed_queue, &f.error_type),
        (&None, &None, &None)
    );
    assert_eq!(
        problems_of(&f),
        [
            "type is not text (long-int)",
            "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\ErrorDetailsStamp is not a JSON list of stamps",
            "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\SentToFailureTransportStamp holds no stamp object",
            "target unknown: it came with no routing key, so its original queue is not known",
        ]
    );
    let headers = Table::from([(
        stamp(SENT_TO_FAILURE),
        AmqpValue::text(r#"[{"originalReceiverName":"async"}]"#),
    )]);
    let f = read_one(&in_failed(&headers, ""));
    assert_eq!(problems_of(&f), ["target unknown: it came with no routing key, so its original queue is not known (its transport: async)"]);
}

#[test]
fn failure_headers_are_the_failures_stamps() {
    for s in FAILURE_STAMPS {
        assert!(is_failure_header(&format!("{STAMP}{s}")), "{s}");
    }
    assert!(is_failure_header(
        "x-message-stamp-symfony\\component\\messenger\\stamp\\delaystamp"
    ));
    for name in [
        TYPE,
        "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\BusNameStamp",
        "X-Message-Stamp-App\\DelayStamp",
        "DelayStamp",
    ] {
        assert!(!is_failure_header(name), "{name}");
    }
}

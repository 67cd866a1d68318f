//! Watermill's poison queue middleware (pure): `reason_poisoned` is the handler's error text
//! (with the `Recoverer` middleware, a recovered panic and its goroutine dump),
//! `topic_poisoned` the topic it failed on — with watermill-amqp's queue configuration the
//! topic is the queue, published to through the default exchange — and `handler_poisoned`
//! the handler.

use super::fields::{non_blank, Fields, Unread, MAX_TEXT_BYTES, MAX_TRACE_BYTES};
use super::{Convention, Delivery, FrameworkFailure};

const REASON: &str = "reason_poisoned";
const TOPIC: &str = "topic_poisoned";
const HANDLER: &str = "handler_poisoned";
const SUBSCRIBER: &str = "subscriber_poisoned";
const FAILURE_HEADERS: [&str; 4] = [REASON, TOPIC, HANDLER, SUBSCRIBER];
/// How the `Recoverer` middleware words a panic: `panic occurred: %#v, stacktrace: \n%s`.
const PANIC: &str = "panic occurred: ";
const STACK: &str = ", stacktrace: \n";

pub fn is_signature(name: &str) -> bool {
    [REASON, TOPIC, HANDLER]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

pub fn is_failure_header(name: &str) -> bool {
    FAILURE_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
}

pub fn read(d: &Delivery<'_>) -> FrameworkFailure {
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::Watermill);
    if let Some(reason) = non_blank(f.optional(REASON, MAX_TRACE_BYTES)) {
        out.found_in.push(REASON.to_owned());
        match reason
            .starts_with(PANIC)
            .then(|| reason.split_once(STACK))
            .flatten()
        {
            Some((panic, stack)) => {
                out.message = Some(f.bounded(REASON, panic, MAX_TEXT_BYTES));
                out.stack_trace = non_blank(Some(stack.to_owned()));
            }
            None => out.message = Some(f.bounded(REASON, &reason, MAX_TEXT_BYTES)),
        }
    }
    out.consumer = non_blank(f.optional(HANDLER, MAX_TEXT_BYTES));
    match f.text(TOPIC, MAX_TEXT_BYTES) {
        Ok(topic) if topic.is_empty() => {
            f.problems.push(format!("target unknown: {TOPIC} is empty"))
        }
        Ok(topic) => {
            out.target = f.target("", &topic, TOPIC);
            out.target_from = out.target.as_ref().map(|_| {
                format!("{TOPIC} (a queue, as watermill-amqp's queue configuration names it)")
            });
            out.failed_queue = Some(topic);
        }
        Err(why @ (Unread::Void | Unread::NotText(_))) => {
            f.problems.push(format!("target unknown: {TOPIC} {why}"))
        }
        Err(Unread::Absent) => f.problems.push(format!("target unknown: no {TOPIC}")),
    }
    out.problems.append(&mut f.problems);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::conventions::tests::{delivery, problems_of, read_one};
    use crate::message::headers::{AmqpValue, Bytes, Table};

    /// watermill-amqp writes every metadata value as a long string (Go strings), and the
    /// message's UUID beside them.
    fn poisoned(reason: &str) -> Table {
        [
            (
                "_watermill_message_uuid",
                "2f1e7c1a-0e7b-4d0e-9b61-3d3f5c1e9a10",
            ),
            (REASON, reason),
            (TOPIC, "orders"),
            (HANDLER, "orders_handler"),
            (SUBSCRIBER, "amqp.Subscriber"),
        ]
        .into_iter()
        .map(|(k, v)| (k, AmqpValue::text(v)))
        .collect()
    }

    #[test]
    fn an_error_gives_its_text_topic_and_handler() {
        let headers = poisoned("order 42: payment service unavailable");
        let f = read_one(&delivery("poison", &headers));
        assert_eq!(f.convention, Convention::Watermill);
        assert_eq!(
            f.message.as_deref(),
            Some("order 42: payment service unavailable")
        );
        assert_eq!(f.stack_trace, None);
        assert_eq!(f.failed_queue.as_deref(), Some("orders"));
        assert_eq!(f.target.unwrap().label(), "(AMQP default) → orders");
        assert_eq!(f.consumer.as_deref(), Some("orders_handler"));
        assert_eq!(f.found_in, [REASON]);
        assert!(f.problems.is_empty(), "{:?}", f.problems);
    }

    #[test]
    fn a_recovered_panic_splits_into_value_and_goroutine_dump() {
        let dump = "goroutine 23 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:24 +0x5e\nmain.handle(...)\n\t/app/main.go:17 +0x1d\n";
        let headers = poisoned(&format!(
            "panic occurred: \"order 42 has no lines\", stacktrace: \n{dump}"
        ));
        let f = read_one(&delivery("poison", &headers));
        assert_eq!(
            f.message.as_deref(),
            Some("panic occurred: \"order 42 has no lines\"")
        );
        assert_eq!(f.stack_trace.as_deref(), Some(dump.trim()));
    }

    #[test]
    fn bad_topics_are_said() {
        let cases = [
            (
                Some(AmqpValue::text("")),
                "target unknown: topic_poisoned is empty",
            ),
            (
                Some(AmqpValue::Void),
                "target unknown: topic_poisoned is void",
            ),
            (
                Some(AmqpValue::Boolean(true)),
                "target unknown: topic_poisoned is not text (boolean)",
            ),
            (None, "target unknown: no topic_poisoned"),
        ];
        for (topic, said) in cases {
            let mut headers = poisoned("boom");
            headers.retain(|k, _| k != TOPIC);
            if let Some(topic) = topic {
                headers.insert(TOPIC, topic);
            }
            let f = read_one(&delivery("poison", &headers));
            assert_eq!((&f.target, &f.failed_queue), (&None, &None), "{said}");
            assert_eq!(problems_of(&f), [said]);
        }
        // amqp091-go writes []byte as a byte array: read as text.
        let mut headers = poisoned("boom");
        headers.insert(TOPIC, AmqpValue::ByteArray(Bytes::from("orders")));
        assert_eq!(
            read_one(&delivery("poison", &headers))
                .failed_queue
                .as_deref(),
            Some("orders")
        );
    }

    #[test]
    fn failure_headers_are_the_poison_metadata() {
        for name in FAILURE_HEADERS {
            assert!(is_failure_header(name), "{name}");
        }
        for name in [
            "_watermill_message_uuid",
            "_watermill_requeuer_retries",
            "reason",
        ] {
            assert!(!is_failure_header(name), "{name}");
        }
    }
}

//! NServiceBus' error queue (pure): `NServiceBus.FailedQ` is the input queue a replay goes
//! back to (as ServiceControl's retry does), `NServiceBus.ExceptionInfo.*` the exception
//! (its `StackTrace` is the whole `Exception.ToString()`, inner exceptions included), and
//! `NServiceBus.EnclosedMessageTypes` the message's types. A message in the error queue
//! without `FailedQ` is a poison message its transport could not read.

use super::fields::{non_blank, Fields, Unread, MAX_TEXT_BYTES, MAX_TRACE_BYTES};
use super::{starts_with_ignore_case, Convention, Delivery, FrameworkFailure};

const FAILED_QUEUE: &str = "NServiceBus.FailedQ";
const EXCEPTION_INFO: &str = "NServiceBus.ExceptionInfo.";
const EXCEPTION_TYPE: &str = "NServiceBus.ExceptionInfo.ExceptionType";
const MESSAGE: &str = "NServiceBus.ExceptionInfo.Message";
const STACK_TRACE: &str = "NServiceBus.ExceptionInfo.StackTrace";
const ENCLOSED_TYPES: &str = "NServiceBus.EnclosedMessageTypes";
const ENDPOINT: &str = "NServiceBus.ProcessingEndpoint";
/// What ServiceControl's `HeaderFilter.RemoveErrorMessageHeaders` removes before a retry:
/// every header whose name starts with one of these.
const FAILURE_PREFIXES: [&str; 5] = [
    "NServiceBus.Retries",
    FAILED_QUEUE,
    "NServiceBus.TimeOfFailure",
    EXCEPTION_INFO,
    "ServiceControl.EditOf",
];

pub fn is_fault_signature(name: &str) -> bool {
    name.eq_ignore_ascii_case(FAILED_QUEUE) || starts_with_ignore_case(name, EXCEPTION_INFO)
}

pub fn is_failure_header(name: &str) -> bool {
    FAILURE_PREFIXES
        .iter()
        .any(|p| starts_with_ignore_case(name, p))
}

pub fn read(d: &Delivery<'_>) -> FrameworkFailure {
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::NServiceBus);
    for (slot, name, limit) in [
        (&mut out.error_type, EXCEPTION_TYPE, MAX_TEXT_BYTES),
        (&mut out.message, MESSAGE, MAX_TEXT_BYTES),
        (&mut out.stack_trace, STACK_TRACE, MAX_TRACE_BYTES),
    ] {
        *slot = non_blank(f.optional(name, limit));
        if slot.is_some() {
            out.found_in.push(name.to_owned());
        }
    }
    out.consumer = non_blank(f.optional(ENDPOINT, MAX_TEXT_BYTES));
    out.message_type =
        non_blank(f.optional(ENCLOSED_TYPES, MAX_TEXT_BYTES)).and_then(|types| first_type(&types));
    match f.text(FAILED_QUEUE, MAX_TEXT_BYTES) {
        Ok(queue) if queue.trim().is_empty() => {
            f.problems
                .push(format!("target unknown: {FAILED_QUEUE} is empty"));
        }
        Ok(queue) => {
            out.target = f.target("", &queue, FAILED_QUEUE);
            out.target_from = out.target.as_ref().map(|_| FAILED_QUEUE.to_owned());
            out.failed_queue = Some(queue);
        }
        Err(Unread::Absent) if out.found_in.is_empty() => f.problems.push(format!(
            "target unknown: no {FAILED_QUEUE} nor exception headers: a poison message \
             NServiceBus could not read, or one sent to its error queue by hand"
        )),
        Err(why) => f
            .problems
            .push(format!("target unknown: {FAILED_QUEUE} {why}")),
    }
    out.problems.append(&mut f.problems);
    out
}

/// The full name of the first of the `;`-separated, assembly-qualified types:
/// `Shop.Messages.PlaceOrder, Shop.Messages, Version=1.0.0.0, …` → `Shop.Messages.PlaceOrder`.
fn first_type(types: &str) -> Option<String> {
    let first = types.split(';').next()?;
    non_blank(first.split(',').next().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::conventions::tests::{delivery, problems_of, read_one};
    use crate::message::headers::{AmqpValue, Table};

    /// `Exception.ToString()` of a wrapped failure, as the spec constructs it (.NET 8).
    const TRACE: &str = "System.InvalidOperationException: Cannot process order 42\n ---> Shop.Sales.OrderValidationException: Order 42 has no lines\n   at Shop.Sales.OrderValidator.Validate(PlaceOrder message) in /src/Shop.Sales/OrderValidator.cs:line 14\n   --- End of inner exception stack trace ---\n   at Shop.Sales.PlaceOrderHandler.Handle(PlaceOrder message, IMessageHandlerContext context) in /src/Shop.Sales/PlaceOrderHandler.cs:line 25";
    const TYPES: &str = "Shop.Messages.PlaceOrder, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null;Shop.Messages.IOrderCommand, Shop.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null";

    /// Every NServiceBus header is a long string.
    fn moved_to_error() -> Table {
        [
            (
                "NServiceBus.MessageId",
                "5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3",
            ),
            ("NServiceBus.MessageIntent", "Send"),
            (ENCLOSED_TYPES, TYPES),
            ("NServiceBus.ContentType", "application/json"),
            (FAILED_QUEUE, "Sales"),
            ("NServiceBus.ProcessingMachine", "web-1"),
            (ENDPOINT, "Sales"),
            ("$.diagnostics.hostid", "6f1a0d5c2b7e4e0c9a9d3f2b1c0e8a7d"),
            (EXCEPTION_TYPE, "System.InvalidOperationException"),
            (
                "NServiceBus.ExceptionInfo.InnerExceptionType",
                "Shop.Sales.OrderValidationException",
            ),
            (MESSAGE, "Cannot process order 42"),
            ("NServiceBus.ExceptionInfo.Source", "Shop.Sales"),
            (STACK_TRACE, TRACE),
            ("NServiceBus.TimeOfFailure", "2026-12-06 04:33:18:123456 Z"),
            (
                "NServiceBus.ExceptionInfo.Data.Message type",
                "Shop.Messages.PlaceOrder",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k, AmqpValue::text(v)))
        .collect()
    }

    #[test]
    fn a_moved_message_gives_its_input_queue_exception_and_type() {
        let headers = moved_to_error();
        let f = read_one(&delivery("error", &headers));
        assert_eq!(f.convention, Convention::NServiceBus);
        assert_eq!(f.failed_queue.as_deref(), Some("Sales"));
        assert_eq!(f.target.unwrap().label(), "(AMQP default) → Sales");
        assert_eq!(
            f.error_type.as_deref(),
            Some("System.InvalidOperationException")
        );
        assert_eq!(f.message.as_deref(), Some("Cannot process order 42"));
        assert_eq!(f.found_in, [EXCEPTION_TYPE, MESSAGE, STACK_TRACE]);
        assert_eq!(f.message_type.as_deref(), Some("Shop.Messages.PlaceOrder"));
        assert_eq!(f.consumer.as_deref(), Some("Sales"));
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        // The trace's inner exception names the bug, over the type header's wrapper.
        let cause = crate::message::cause::Cause::from_parts(
            f.error_type.as_deref(),
            f.message.as_deref(),
            f.stack_trace.as_deref(),
        );
        assert_eq!(
            cause.error_type.as_deref(),
            Some("Shop.Sales.OrderValidationException")
        );
    }

    #[test]
    fn a_poison_message_and_bad_failed_queues_are_said() {
        let poison: Table = [
            ("NServiceBus.MessageId", "m-1"),
            (ENCLOSED_TYPES, "Shop.Ping"),
        ]
        .into_iter()
        .map(|(k, v)| (k, AmqpValue::text(v)))
        .collect();
        let f = read_one(&delivery("error", &poison));
        assert_eq!((&f.target, &f.failed_queue), (&None, &None));
        assert_eq!(f.message_type.as_deref(), Some("Shop.Ping"));
        assert!(
            problems_of(&f)[0].contains("a poison message"),
            "{:?}",
            f.problems
        );
        let cases = [
            (AmqpValue::LongLongInt(1), "target unknown: NServiceBus.FailedQ is not text (long-long-int)"),
            (AmqpValue::Void, "target unknown: NServiceBus.FailedQ is void"),
            (AmqpValue::text(" "), "target unknown: NServiceBus.FailedQ is empty"),
            (AmqpValue::text(&"q".repeat(256)), "target unknown: the routing key from NServiceBus.FailedQ is 256 bytes; AMQP allows 255"),
        ];
        for (value, said) in cases {
            let mut headers = moved_to_error();
            headers.insert(FAILED_QUEUE, value);
            let f = read_one(&delivery("error", &headers));
            assert_eq!(f.target, None, "{said}");
            assert_eq!(problems_of(&f), [said]);
        }
        let mut headers = moved_to_error();
        headers.retain(|k, _| k != FAILED_QUEUE);
        let f = read_one(&delivery("error", &headers));
        assert_eq!(
            problems_of(&f),
            ["target unknown: NServiceBus.FailedQ is missing"]
        );
    }

    #[test]
    fn failure_headers_are_what_servicecontrol_removes() {
        for name in [
            FAILED_QUEUE,
            "NServiceBus.Retries",
            "NServiceBus.Retries.Timestamp",
            "NServiceBus.TimeOfFailure",
            STACK_TRACE,
            "NServiceBus.ExceptionInfo.Data.Handler type",
            "ServiceControl.EditOf",
        ] {
            assert!(is_failure_header(name), "{name}");
        }
        for name in [
            "NServiceBus.MessageId",
            ENCLOSED_TYPES,
            ENDPOINT,
            "NServiceBus.ProcessingMachine",
            "NServiceBus.FLRetries",
            "$.diagnostics.hostid",
        ] {
            assert!(!is_failure_header(name), "{name}");
        }
    }

    #[test]
    fn enclosed_types_give_the_first_full_name() {
        assert_eq!(
            first_type(TYPES).as_deref(),
            Some("Shop.Messages.PlaceOrder")
        );
        assert_eq!(first_type("Shop.Ping").as_deref(), Some("Shop.Ping"));
        assert_eq!(first_type(";Shop.Ping"), None);
    }
}

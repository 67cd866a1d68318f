//! Spring AMQP's `RepublishMessageRecoverer` and Spring Cloud Stream's `republishToDlq`
//! (pure): the cause's message, the whole trace (the wrapper first, the bug after
//! `Caused by:`), and the exchange and routing key the message was received with.

use super::fields::{non_blank, Fields, Unread, MAX_TEXT_BYTES, MAX_TRACE_BYTES};
use super::{strip_suffix, Convention, Delivery, FrameworkFailure};

const MESSAGE: &str = "x-exception-message";
const STACK_TRACE: &str = "x-exception-stacktrace";
const EXCHANGE: &str = "x-original-exchange";
const ROUTING_KEY: &str = "x-original-routingKey";
/// The four headers the recoverer writes. `retry-count` is not one of them: the recoverer
/// passes it on unchanged, and Spring's documented re-drive increments it to park a message
/// after N trips — stripping it would let a poison message cycle through replays forever.
const FAILURE_HEADERS: [&str; 4] = [MESSAGE, STACK_TRACE, EXCHANGE, ROUTING_KEY];
/// The type Spring's Jackson converter names the payload with.
const TYPE_ID: &str = "__TypeId__";

pub fn is_signature(name: &str) -> bool {
    is_failure_header(name)
}

pub fn is_failure_header(name: &str) -> bool {
    FAILURE_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
}

pub fn read(d: &Delivery<'_>) -> FrameworkFailure {
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::SpringAmqp);
    out.message = non_blank(f.optional(MESSAGE, MAX_TEXT_BYTES));
    out.stack_trace = non_blank(f.optional(STACK_TRACE, MAX_TRACE_BYTES));
    for (found, name) in [(&out.message, MESSAGE), (&out.stack_trace, STACK_TRACE)] {
        if found.is_some() {
            out.found_in.push(name.to_owned());
        }
    }
    out.message_type = non_blank(f.optional(TYPE_ID, MAX_TEXT_BYTES));
    // An empty exchange (the default one) and an empty key (a fanout's) are both targets.
    match (
        f.text(EXCHANGE, MAX_TEXT_BYTES),
        f.text(ROUTING_KEY, MAX_TEXT_BYTES),
    ) {
        (Ok(exchange), Ok(key)) => {
            out.target = f.target(&exchange, &key, "x-original-exchange/-routingKey");
            out.target_from = out
                .target
                .as_ref()
                .map(|_| format!("{EXCHANGE}, {ROUTING_KEY}"));
            if exchange.is_empty() && !key.is_empty() {
                // Published to the default exchange: the key is the queue.
                out.failed_queue = Some(key);
            }
        }
        (Err(Unread::Absent), Err(Unread::Absent)) => out.problems.push(format!(
            "target unknown: no {EXCHANGE} and no {ROUTING_KEY}"
        )),
        (exchange, key) => {
            let said: Vec<String> = [(EXCHANGE, exchange), (ROUTING_KEY, key)]
                .into_iter()
                .filter_map(|(name, read)| read.err().map(|why| format!("{name} {why}")))
                .collect();
            out.problems
                .push(format!("target unknown: {}", said.join(", ")));
        }
    }
    if out.failed_queue.is_none() {
        // Spring Cloud Stream's DLQ is `<destination>.<group>.dlq`: the input queue's name
        // plus `.dlq`.
        out.failed_queue = strip_suffix(d.queue, ".dlq").map(str::to_owned);
    }
    out.problems.append(&mut f.problems);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::conventions::tests::{delivery, problems_of, read_one};
    use crate::message::headers::{AmqpValue, Table};

    /// The headers as the recoverer writes them (every value a long string).
    fn recovered(trace: &str) -> Table {
        Table::from([
            (STACK_TRACE, AmqpValue::text(trace)),
            (MESSAGE, AmqpValue::text("Order 42 has no lines")),
            (EXCHANGE, AmqpValue::text("orders")),
            (ROUTING_KEY, AmqpValue::text("order.created")),
            ("retry-count", AmqpValue::LongLongInt(1)),
        ])
    }

    const TRACE: &str = "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method 'public void com.example.orders.OrderListener.handle(java.lang.String)' threw exception\n\tat org.springframework.amqp.rabbit.listener.adapter.MessagingMessageListenerAdapter.invokeHandler(MessagingMessageListenerAdapter.java:270)\nCaused by: java.lang.IllegalStateException: Order 42 has no lines\n\tat com.example.orders.OrderListener.handle(OrderListener.java:12)\n\t... 21 more\n";

    #[test]
    fn the_recoverers_headers_give_message_trace_and_target() {
        let headers = recovered(TRACE);
        let f = read_one(&delivery("error.order.created", &headers));
        assert_eq!(f.convention, Convention::SpringAmqp);
        assert_eq!(f.message.as_deref(), Some("Order 42 has no lines"));
        assert_eq!(f.stack_trace.as_deref(), Some(TRACE.trim()));
        assert_eq!(f.found_in, [MESSAGE, STACK_TRACE]);
        let target = f.target.unwrap();
        assert_eq!(
            (target.exchange.as_str(), target.routing_key.as_str()),
            ("orders", "order.created")
        );
        assert_eq!(f.failed_queue, None, "an exchange's key names no queue");
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        let cause = crate::message::cause::Cause::from_parts(
            None,
            f.message.as_deref(),
            f.stack_trace.as_deref(),
        );
        assert_eq!(
            cause.error_type.as_deref(),
            Some("java.lang.IllegalStateException")
        );
    }

    #[test]
    fn the_default_exchange_names_the_queue_and_a_cloud_stream_dlq_its_input() {
        let mut headers = recovered(TRACE);
        headers.insert(EXCHANGE, AmqpValue::text(""));
        headers.insert(ROUTING_KEY, AmqpValue::text("invoices"));
        let f = read_one(&delivery("error.invoices", &headers));
        assert_eq!(f.failed_queue.as_deref(), Some("invoices"));
        assert_eq!(f.target.unwrap().label(), "(AMQP default) → invoices");
        // Spring 4.0.5+ writes no stack trace unless asked to; Cloud Stream's DLQ is named
        // after the input queue.
        let headers = Table::from([
            (MESSAGE, AmqpValue::text("has an error")),
            (EXCHANGE, AmqpValue::text("input")),
            (ROUTING_KEY, AmqpValue::text("#")),
        ]);
        let f = read_one(&delivery("input.hello.dlq", &headers));
        assert_eq!(f.failed_queue.as_deref(), Some("input.hello"));
        assert_eq!(f.stack_trace, None);
        assert_eq!(f.target.unwrap().label(), "input → #");
    }

    #[test]
    fn missing_void_and_mistyped_target_headers_are_said() {
        let cases: [(&[(&str, AmqpValue)], &str); 4] = [
            (&[(MESSAGE, AmqpValue::text("boom"))], "target unknown: no x-original-exchange and no x-original-routingKey"),
            (&[(EXCHANGE, AmqpValue::Void), (ROUTING_KEY, AmqpValue::text("k"))], "target unknown: x-original-exchange is void"),
            (&[(EXCHANGE, AmqpValue::text("e")), (ROUTING_KEY, AmqpValue::LongInt(7))], "target unknown: x-original-routingKey is not text (long-int)"),
            (&[(EXCHANGE, AmqpValue::text("e")), (ROUTING_KEY, AmqpValue::text(&"k".repeat(300)))], "target unknown: the routing key from x-original-exchange/-routingKey is 300 bytes; AMQP allows 255"),
        ];
        for (entries, said) in cases {
            let headers: Table = entries.iter().cloned().collect();
            let f = read_one(&delivery("error.x", &headers));
            assert_eq!(f.target, None, "{said}");
            assert_eq!(problems_of(&f), [said]);
        }
    }

    #[test]
    fn a_void_message_is_no_message_and_a_mistyped_one_is_said() {
        let headers = Table::from([
            (MESSAGE, AmqpValue::Void),
            (STACK_TRACE, AmqpValue::Table(Table::new())),
            (EXCHANGE, AmqpValue::text("")),
            (ROUTING_KEY, AmqpValue::text("q")),
        ]);
        let f = read_one(&delivery("error.q", &headers));
        assert_eq!((&f.message, &f.stack_trace), (&None, &None));
        assert_eq!(
            problems_of(&f),
            ["x-exception-stacktrace is not text (table)"]
        );
        assert!(f.target.is_some());
    }
}

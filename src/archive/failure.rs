//! A dead letter's failure as ingest reads it (pure): the error users read and search (the
//! raw line, or a stack trace's root cause), the [`Cause`] that groups it with the other
//! failures of the same bug, and its message type — read with a framework convention's own
//! names where the message follows one (`src/conventions/`: the queue it failed in and its
//! replay target too), else from the error headers (`--error-header`), an `--error-pointer`
//! into the body, and the generic stack trace and exception type headers below.

use crate::message::cause::Cause;
use crate::message::conventions::{self, Convention, FrameworkFailure};
use crate::message::death::ReplayTarget;
use crate::message::headers::{MessageProperties, Table};

/// Longest error description kept (longer ones are cut at a character boundary).
pub(super) const MAX_ERROR_LEN: usize = 300;

/// Text as the archive's columns keep it: lossy where it was not UTF-8 and NUL replaced,
/// identically on both backends (PostgreSQL's text cannot hold NUL). The exact value is in
/// the typed JSON beside it.
pub fn column_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}").into()
    } else {
        text.into()
    }
}

/// The line of an error text that names the error, at most 300 bytes: the first, except in
/// a Python traceback, which names it last (`ValueError: boom` after the frames). Failures of
/// one kind share it, whatever their frames or ids further down — a failure group.
pub fn error_line(text: &str) -> Option<String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next()?;
    let line = match first.starts_with("Traceback (most recent call last)") {
        true => text
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty() && !l.starts_with("File \"") && !l.starts_with('^'))
            .unwrap_or(first),
        false => first,
    };
    Some(column_text(crate::message::body::prefix(line, MAX_ERROR_LEN)).into_owned())
}

/// Headers in which failing consumers leave their exception's stack trace, read on a message
/// no convention claims: Spring AMQP's, MassTransit's and NServiceBus' names, as a consumer
/// that copies one of them writes it.
pub const TRACE_HEADERS: [&str; 3] = [
    "x-exception-stacktrace",
    "MT-Fault-StackTrace",
    "NServiceBus.ExceptionInfo.StackTrace",
];

/// Headers in which failing consumers name their exception's type (no convention claiming
/// the message): MassTransit's and NServiceBus' names.
pub const TYPE_HEADERS: [&str; 2] = [
    "MT-Fault-ExceptionType",
    "NServiceBus.ExceptionInfo.ExceptionType",
];

/// Longest cause kept, in bytes: a key of a failure group (with its queues and message type,
/// well within what a PostgreSQL index entry holds).
const MAX_CAUSE_LEN: usize = 1_000;

/// The most of an error or trace text that is parsed: a trace's root cause is well within.
const MAX_PARSED: usize = 256 * 1024;

/// Longest target source and problem kept, in bytes.
const MAX_SAID_LEN: usize = 1_000;
/// Most convention problems kept per message.
const MAX_PROBLEMS: usize = 20;

/// What a dead letter says of its failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    /// The error shown and searched: the root cause's `Type: message` where a stack trace or a
    /// type header names it, else the error line as the consumer left it (ids and all).
    pub error: Option<String>,
    pub error_type: Option<String>,
    /// What its failure group is keyed on: [`Cause::signature`] (`""`: no error given).
    pub cause: String,
    /// The message's type: the convention's, else the AMQP `type` property.
    pub message_type: Option<String>,
    /// The framework convention it follows, and what that says beyond the error.
    pub framework: Option<Framework>,
}

/// What a framework convention says of a dead letter beyond its error, as the archive keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framework {
    pub convention: Convention,
    /// The queue it failed in, as the archive keys queues (`vhost/name` outside home).
    pub failed_queue: Option<String>,
    /// Where the convention sends a replay (`None`: it does not say, or not readably).
    pub target: Option<ReplayTarget>,
    /// The header(s) that gave the target (`MT-Fault-InputAddress`).
    pub target_from: Option<String>,
    /// Malformed convention headers and hazards, in words.
    pub problems: Vec<String>,
}

impl Framework {
    /// `MassTransit's MT-Fault-InputAddress`: what pages say gave a target.
    pub fn source(convention: Convention, target_from: &str) -> String {
        format!("{}'s {target_from}", convention.label())
    }
}

/// A dead letter as its failure is read from it, at ingest or by the regroup.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The DLQ as the archive keys it ([`Dlq::key`](crate::message::dlq::Dlq::key)).
    pub queue: &'a str,
    /// Its vhost as the archive stores it (empty: the AMQP URL's, `home_vhost`).
    pub vhost: &'a str,
    /// Its broker (`default`: `--amqp-url`'s), whose `broker:` prefix a key of another has.
    pub broker: &'a str,
    pub home_vhost: &'a str,
    pub routing_key: &'a str,
    pub headers: Option<&'a Table>,
    pub properties: &'a MessageProperties,
    /// The start of the body as text (at most [`conventions::MAX_BODY_BYTES`] + 1 bytes).
    pub body_text: Option<&'a str>,
    /// The text at an `--error-pointer` into the body.
    pub body_error: Option<&'a str>,
}

/// The failure of a dead letter: with its convention's names where it follows one, else as
/// [`failure`] reads any message.
pub fn read(source: &Source<'_>, error_headers: &[String]) -> Failure {
    let dlq = crate::message::dlq::Dlq::from_stored(source.queue, source.broker, source.vhost);
    let vhost = crate::message::dlq::named_vhost(source.vhost, source.home_vhost);
    let delivery = conventions::Delivery {
        queue: &dlq.name,
        vhost,
        routing_key: source.routing_key,
        headers: source.headers,
        body_text: source.body_text,
    };
    match conventions::read(&delivery) {
        Some(framework) => convention_failure(source, framework, error_headers),
        None => failure(
            source.headers,
            source.properties,
            error_headers,
            source.body_error,
        ),
    }
}

/// The failure of a message that follows a convention: its error, type and trace as the
/// framework names them (an `--error-pointer` or error header filling in when it names no
/// error), its message type (the AMQP `type` property filling in).
fn convention_failure(
    source: &Source<'_>,
    framework: FrameworkFailure,
    error_headers: &[String],
) -> Failure {
    let said = framework.message.is_some()
        || framework.stack_trace.is_some()
        || framework.error_type.is_some();
    let mut out = match said {
        true => derive(
            framework.error_type.as_deref(),
            framework.message.as_deref(),
            framework.stack_trace.as_deref(),
            source.properties,
        ),
        false => failure(
            source.headers,
            source.properties,
            error_headers,
            source.body_error,
        ),
    };
    if let Some(kind) = framework.message_type.as_deref().filter(|k| !k.is_empty()) {
        out.message_type =
            Some(column_text(crate::message::body::prefix(kind, MAX_SAID_LEN)).into_owned());
    }
    let said =
        |text: &str| column_text(crate::message::body::prefix(text, MAX_SAID_LEN)).into_owned();
    out.framework = Some(Framework {
        convention: framework.convention,
        failed_queue: framework
            .failed_queue
            .filter(|q| !q.is_empty())
            .map(|q| said(&crate::message::dlq::qualify(source.vhost, &q))),
        target_from: framework
            .target
            .is_some()
            .then_some(framework.target_from)
            .flatten()
            .map(|t| said(&t)),
        target: framework.target,
        problems: framework
            .problems
            .iter()
            .take(MAX_PROBLEMS)
            .map(|p| said(p))
            .collect(),
    });
    out
}

/// The header text of the first of `names` (case-insensitive) that holds non-blank text.
fn header_text<'a>(headers: Option<&'a Table>, names: &[&str]) -> Option<&'a str> {
    let headers = headers?;
    names.iter().find_map(|name| {
        let (_, value) = headers
            .iter()
            .find(|(k, _)| k.as_bytes().eq_ignore_ascii_case(name.as_bytes()))?;
        value.as_str().filter(|t| !t.trim().is_empty())
    })
}

/// The failure of a message with these headers and properties, no convention read: its error
/// text is the first of `error_headers` holding text, else `body_error` (the text at an
/// `--error-pointer`).
pub fn failure(
    headers: Option<&Table>,
    properties: &MessageProperties,
    error_headers: &[String],
    body_error: Option<&str>,
) -> Failure {
    let names: Vec<&str> = error_headers.iter().map(String::as_str).collect();
    let text = header_text(headers, &names).or(body_error);
    let trace = header_text(headers, &TRACE_HEADERS);
    let kind = header_text(headers, &TYPE_HEADERS);
    derive(kind, text, trace, properties)
}

/// The failure an exception type, an error text and a stack trace (each maybe missing) give.
fn derive(
    kind: Option<&str>,
    text: Option<&str>,
    trace: Option<&str>,
    properties: &MessageProperties,
) -> Failure {
    let text = text.map(|t| crate::message::body::prefix(t, MAX_PARSED));
    let trace = trace.map(|t| crate::message::body::prefix(t, MAX_PARSED));
    let kind = kind.filter(|k| !k.trim().is_empty());
    let cause = match (trace, text) {
        (Some(trace), _) => Cause::from_parts(kind, text, Some(trace)),
        // The error text may be a whole trace itself; a single line is also the message, should
        // it not read as one.
        (None, Some(text)) => {
            let one_line = text.trim().lines().nth(1).is_none();
            Cause::from_parts(kind, one_line.then_some(text), Some(text))
        }
        (None, None) => Cause::from_parts(kind, None, None),
    };
    let raw = text.and_then(error_line);
    // A trace or a type header says more than the line: its root cause, as `Type: message`.
    let said = cause.runtime.is_some() || kind.is_some();
    let error = match said.then(|| shown(&cause)).flatten() {
        Some(shown) => Some(shown),
        None => raw,
    };
    Failure {
        error,
        error_type: cause
            .error_type
            .as_deref()
            .map(|t| column_text(t).into_owned()),
        cause: column_text(crate::message::body::prefix(
            &cause.signature(),
            MAX_CAUSE_LEN,
        ))
        .into_owned(),
        message_type: properties
            .kind
            .as_ref()
            .map(|k| column_text(&k.to_text()).into_owned()),
        framework: None,
    }
}

/// `Type: message`, `Type` or `message`, as long as an error is kept.
fn shown(cause: &Cause) -> Option<String> {
    let text = match (&cause.error_type, cause.message.is_empty()) {
        (Some(kind), false) => format!("{kind}: {}", cause.message),
        (Some(kind), true) => kind.clone(),
        (None, false) => cause.message.clone(),
        (None, true) => return None,
    };
    Some(column_text(crate::message::body::prefix(&text, MAX_ERROR_LEN)).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::headers::AmqpValue;

    fn of(pairs: &[(&str, &str)]) -> Failure {
        let headers: Table = pairs
            .iter()
            .map(|(k, v)| (*k, AmqpValue::text(v)))
            .collect();
        let rules = super::super::IngestRules::default();
        failure(
            Some(&headers),
            &MessageProperties::default(),
            &rules.error_headers,
            None,
        )
    }

    #[test]
    fn a_plain_line_is_kept_as_it_was_left_and_grouped_by_its_template() {
        let f = of(&[(
            "x-exception-message",
            "CustomerNotFoundException: no customer with id C-1007",
        )]);
        assert_eq!(
            f.error.as_deref(),
            Some("CustomerNotFoundException: no customer with id C-1007")
        );
        assert_eq!(f.error_type.as_deref(), Some("CustomerNotFoundException"));
        assert_eq!(
            f.cause,
            "CustomerNotFoundException: no customer with id C-<n>"
        );
        let other = of(&[("error", "tax service did not answer within 3012 ms")]);
        assert_eq!(other.error_type, None);
        assert_eq!(other.cause, "tax service did not answer within <n> ms");
        // A line that merely starts like a frame is still the message.
        let odd = of(&[("error", "at the moment nothing works")]);
        assert_eq!(odd.error.as_deref(), Some("at the moment nothing works"));
        assert_eq!(odd.cause, "at the moment nothing works");
    }

    #[test]
    fn spring_shows_the_root_cause_its_trace_names() {
        let trace = "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: \
                     Listener method 'onMessage' threw exception\n\
                     \tat org.springframework.amqp.rabbit.listener.X.invoke(X.java:10)\n\
                     Caused by: com.acme.CustomerNotFoundException: no customer with id C-1007\n\
                     \tat com.acme.Billing.load(Billing.java:12)\n\t... 5 more";
        let f = of(&[
            ("x-exception-message", "no customer with id C-1007"),
            ("x-exception-stacktrace", trace),
        ]);
        assert_eq!(
            f.error.as_deref(),
            Some("com.acme.CustomerNotFoundException: no customer with id C-1007")
        );
        assert_eq!(
            f.cause,
            "com.acme.CustomerNotFoundException: no customer with id C-<n>"
        );
    }

    #[test]
    fn a_type_header_names_the_type_of_a_message_header() {
        let f = of(&[
            ("MT-Fault-ExceptionType", "System.TimeoutException"),
            ("MT-Fault-Message", "The operation timed out after 3012 ms"),
            (
                "MT-Fault-StackTrace",
                "   at Billing.Consumer.Consume(ConsumeContext`1 context) in /src/Consumer.cs:line 42",
            ),
        ]);
        assert_eq!(
            f.error.as_deref(),
            Some("System.TimeoutException: The operation timed out after 3012 ms")
        );
        assert_eq!(
            f.cause,
            "System.TimeoutException: The operation timed out after <n> ms"
        );
    }

    #[test]
    fn no_error_is_no_cause() {
        let f = of(&[("other", "x")]);
        assert_eq!(f, Failure::default());
        let properties = MessageProperties {
            kind: Some("invoice.created".into()),
            ..Default::default()
        };
        let typed = failure(None, &properties, &[], None);
        assert_eq!(typed.message_type.as_deref(), Some("invoice.created"));
        assert_eq!(typed.cause, "");
    }
}

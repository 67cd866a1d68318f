//! Symfony Messenger's failure transport (pure). With the Symfony (JSON) serializer the stamps
//! are `X-Message-Stamp-<class>` headers of JSON lists; with the default `PhpSerializer` they
//! are inside the PHP-serialized envelope that is the body. The AMQP transport sends a failed
//! message on with its original queue as the routing key: that is the queue it failed in.

use serde_json::Value as Json;

use super::fields::{cut, non_blank, Fields, MAX_BODY_BYTES, MAX_TEXT_BYTES, MAX_TRACE_BYTES};
use super::php::{self, Value as Php};
use super::{Convention, Delivery, FrameworkFailure};

const STAMP: &str = "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\";
const ERROR_DETAILS: &str = "ErrorDetailsStamp";
const SENT_TO_FAILURE: &str = "SentToFailureTransportStamp";
/// The stamps a failure adds, stripped before a replay: with `SentToFailureTransportStamp`
/// kept, Symfony would not send the message to the failure transport again when it fails
/// again (it drops it after its retries); with `DelayStamp` kept it would be delayed again.
const FAILURE_STAMPS: [&str; 4] = [
    ERROR_DETAILS,
    SENT_TO_FAILURE,
    "DelayStamp",
    "RedeliveryStamp",
];
const TYPE: &str = "type";
/// The start of `serialize($envelope)`, as `addslashes` leaves it and as it is.
const ENVELOPE: [&str; 2] = [
    r#"O:36:\"Symfony\\Component\\Messenger\\Envelope\""#,
    r#"O:36:"Symfony\Component\Messenger\Envelope""#,
];
/// Exceptions of a chain read at most.
const MAX_CHAIN: usize = 16;

fn stamp_name(header: &str) -> Option<&str> {
    let head = header.get(..STAMP.len())?;
    head.eq_ignore_ascii_case(STAMP)
        .then(|| &header[STAMP.len()..])
}

pub fn is_signature(name: &str) -> bool {
    stamp_name(name).is_some_and(|s| {
        [ERROR_DETAILS, SENT_TO_FAILURE]
            .iter()
            .any(|k| k.eq_ignore_ascii_case(s))
    })
}

pub fn is_failure_header(name: &str) -> bool {
    stamp_name(name).is_some_and(|s| FAILURE_STAMPS.iter().any(|k| k.eq_ignore_ascii_case(s)))
}

/// A failure-transport message of the Symfony serializer (its stamps in headers).
pub fn read(d: &Delivery<'_>) -> FrameworkFailure {
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::SymfonyMessenger);
    out.message_type = non_blank(f.optional(TYPE, MAX_TEXT_BYTES));
    if let Some(error) = last_stamp(&mut f, ERROR_DETAILS) {
        let text = |key: &str| non_blank(error.get(key).and_then(json_text));
        out.error_type = text("exceptionClass");
        out.message = text("exceptionMessage");
        out.stack_trace = error
            .get("flattenException")
            .and_then(|e| as_string(&Flat::Json(e)));
        if out.error_type.is_some() || out.message.is_some() || out.stack_trace.is_some() {
            out.found_in.push(format!("{STAMP}{ERROR_DETAILS}"));
        }
    }
    out.consumer = last_stamp(&mut f, SENT_TO_FAILURE)
        .and_then(|s| non_blank(s.get("originalReceiverName").and_then(json_text)));
    bound(&mut out, &mut f);
    target(d, &mut out, &mut f);
    out.problems.append(&mut f.problems);
    out
}

/// A failure-transport message of the default `PhpSerializer`, if the body is one.
/// Whether a body (its start) is a PHP-serialized envelope, plain or base64.
pub fn may_read(body: &str) -> bool {
    let body = body.trim_start();
    ENVELOPE.iter().any(|e| body.starts_with(e)) || is_base64_envelope(body)
}

pub fn read_body(d: &Delivery<'_>) -> Option<FrameworkFailure> {
    let body = d.body_text?.trim_start();
    if !may_read(body) {
        return None;
    }
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::SymfonyMessenger);
    match read_envelope(body, &mut out) {
        Ok(()) => f.problems.push(
            "the stamps are inside a PHP-serialized body (Symfony's PhpSerializer): a replay \
             keeps its SentToFailureTransportStamp, so should it fail again Symfony drops it \
             after its retries instead of sending it to the failure transport"
                .into(),
        ),
        Err(why) => f.problems.push(format!(
            "the body is a PHP-serialized envelope that cannot be read: {why}"
        )),
    }
    bound(&mut out, &mut f);
    target(d, &mut out, &mut f);
    out.problems.append(&mut f.problems);
    Some(out)
}

/// The base64 of the first 45 bytes of `ENVELOPE[0]` (a multiple of 3: no padding).
const ENVELOPE_BASE64: &str = "TzozNjpcIlN5bWZvbnlcXENvbXBvbmVudFxcTWVzc2VuZ2VyXFxFbnZlbG9w";

fn is_base64_envelope(body: &str) -> bool {
    !body.ends_with('}') && body.starts_with(ENVELOPE_BASE64)
}

fn read_envelope(body: &str, out: &mut FrameworkFailure) -> Result<(), String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "it is {} bytes, more than Lazarus reads",
            body.len()
        ));
    }
    let bytes = php::transport_decode(body).ok_or("it is neither PHP nor base64")?;
    let envelope = php::unserialize(&bytes).map_err(|e| e.to_string())?;
    out.message_type = envelope
        .get("message")
        .and_then(Php::class)
        .map(str::to_owned);
    let stamps = envelope.get("stamps");
    let last = |class: &str| {
        let full = format!("Symfony\\Component\\Messenger\\Stamp\\{class}");
        stamps?.get(&full)?.values().last()
    };
    if let Some(error) = last(ERROR_DETAILS) {
        out.error_type = non_blank(error.get("exceptionClass").and_then(Php::text));
        out.message = non_blank(error.get("exceptionMessage").and_then(Php::text));
        out.stack_trace = error
            .get("flattenException")
            .and_then(|e| as_string(&Flat::Php(e)));
        out.found_in.push(format!("body {ERROR_DETAILS}"));
    }
    out.consumer = last(SENT_TO_FAILURE)
        .and_then(|s| non_blank(s.get("originalReceiverName").and_then(Php::text)));
    Ok(())
}

/// The failed queue and target: the routing key the AMQP transport sent it on with.
fn target(d: &Delivery<'_>, out: &mut FrameworkFailure, f: &mut Fields<'_>) {
    if d.routing_key.is_empty() {
        let from = out
            .consumer
            .as_deref()
            .map(|c| format!(" (its transport: {c})"))
            .unwrap_or_default();
        return f.problems.push(format!(
            "target unknown: it came with no routing key, so its original queue is not known{from}"
        ));
    }
    out.target = f.target("", d.routing_key, "the routing key");
    out.target_from = out
        .target
        .as_ref()
        .map(|_| "the routing key (Symfony's original queue)".to_owned());
    out.failed_queue = Some(d.routing_key.to_owned());
}

/// The last stamp of a stamp header's JSON list.
fn last_stamp(f: &mut Fields<'_>, stamp: &str) -> Option<serde_json::Map<String, Json>> {
    let name = format!("{STAMP}{stamp}");
    let text = f.optional(&name, MAX_BODY_BYTES)?;
    match serde_json::from_str::<Json>(&text) {
        Ok(Json::Array(mut list)) => match list.pop() {
            Some(Json::Object(stamp)) => Some(stamp),
            None => None,
            Some(_) => {
                f.problems.push(format!("{name} holds no stamp object"));
                None
            }
        },
        _ => {
            f.problems
                .push(format!("{name} is not a JSON list of stamps"));
            None
        }
    }
}

fn json_text(value: &Json) -> Option<String> {
    match value {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A `FlattenException` as either serializer wrote it.
enum Flat<'a> {
    Json(&'a Json),
    Php(&'a Php),
}

impl<'a> Flat<'a> {
    fn text(&self, json: &str, php: &str) -> String {
        match self {
            Flat::Json(v) => v.get(json).and_then(json_text),
            Flat::Php(v) => v.get(php).and_then(Php::text),
        }
        .unwrap_or_default()
    }

    fn previous(&self) -> Option<Flat<'a>> {
        match self {
            Flat::Json(v) => v.get("previous").filter(|p| p.is_object()).map(Flat::Json),
            Flat::Php(v) => v
                .get("previous")
                .filter(|p| p.class().is_some())
                .map(Flat::Php),
        }
    }
}

/// The exception chain as Symfony's `FlattenException::getAsString()` prints it (what
/// `messenger:failed:show -vv` shows): the innermost first, each wrapper after `Next`.
fn as_string(outer: &Flat<'_>) -> Option<String> {
    let mut chain = vec![];
    let mut next = Some(match outer {
        Flat::Json(v) if v.is_object() => Flat::Json(v),
        Flat::Php(v) if v.class().is_some() => Flat::Php(v),
        _ => return None,
    });
    while let Some(e) = next.filter(|_| chain.len() < MAX_CHAIN) {
        next = e.previous();
        chain.push(e);
    }
    let mut out = String::new();
    for (i, e) in chain.iter().rev().enumerate() {
        if i > 0 {
            out.push_str("Next ");
        }
        out.push_str(&e.text("class", "class"));
        let message = e.text("message", "message");
        if !message.is_empty() {
            out.push_str(": ");
            out.push_str(&message);
        }
        let (file, line) = (e.text("file", "file"), e.text("line", "line"));
        let trace = e.text("trace_as_string", "traceAsString");
        out.push_str(&format!(" in {file}:{line}\nStack trace:\n{trace}\n\n"));
    }
    non_blank(Some(out))
}

fn bound(out: &mut FrameworkFailure, f: &mut Fields<'_>) {
    for (slot, what, limit) in [
        (&mut out.error_type, "the exception class", MAX_TEXT_BYTES),
        (&mut out.message, "the exception message", MAX_TEXT_BYTES),
        (&mut out.stack_trace, "the stack trace", MAX_TRACE_BYTES),
        (&mut out.message_type, "the message type", MAX_TEXT_BYTES),
        (&mut out.consumer, "the original transport", MAX_TEXT_BYTES),
    ] {
        if let Some(text) = slot.as_deref().filter(|t| cut(t, limit).len() < t.len()) {
            *slot = Some(f.bounded(what, text, limit));
        }
    }
}

#[cfg(test)]
#[path = "symfony_tests.rs"]
mod tests;

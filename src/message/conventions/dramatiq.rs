//! Dramatiq's `<queue>.XQ` (pure): the broker dead-letters the message (so `x-death` gives
//! the target), and its JSON body holds the rest — `queue_name` (the queue it failed in,
//! `.DQ`/`.XQ` dropped), `actor_name`, and `options.traceback`, the traceback of the
//! *previous* attempt (none at all when the actor had no retries left to take).

use serde::Deserialize;
use serde_json::Value;

use super::fields::{cut, non_blank, Fields, MAX_BODY_BYTES, MAX_TEXT_BYTES, MAX_TRACE_BYTES};
use super::{Convention, Delivery, FrameworkFailure};

/// How Dramatiq's JSON encoder starts a message (compact, its fields in dataclass order);
/// `actor_name` follows the queue's name, well within [`SIGNATURE_BYTES`]. Another body is
/// looked at only in a `.XQ` queue.
const SIGNATURE: &str = r#"{"queue_name":"#;
const SIGNATURE_BYTES: usize = 1024;

#[derive(Deserialize)]
struct Message {
    queue_name: Option<Value>,
    actor_name: Option<Value>,
    options: Option<Value>,
}

/// Whether a delivery from `queue` whose body starts with `body` is Dramatiq's to read.
pub fn may_read(queue: &str, body: &str) -> bool {
    let head = cut(body.trim_start(), SIGNATURE_BYTES);
    queue.ends_with(".XQ") || (head.starts_with(SIGNATURE) && head.contains(r#""actor_name":"#))
}

pub fn read(d: &Delivery<'_>) -> Option<FrameworkFailure> {
    let body = d.body_text.map(str::trim_start).unwrap_or_default();
    if !may_read(d.queue, body) {
        return None;
    }
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::Dramatiq);
    let parsed = match (d.body_text, body.len()) {
        (None, _) => Err("is not text".to_owned()),
        (Some(_), 0) => Err("is empty".to_owned()),
        (_, n) if n > MAX_BODY_BYTES => Err(format!(
            "is {n} bytes, more than Lazarus reads for its fields"
        )),
        _ if !body.starts_with('{') => {
            Err("is not a Dramatiq message (not a JSON object)".to_owned())
        }
        _ => serde_json::from_str::<Message>(body)
            .map_err(|e| format!("is not a Dramatiq message ({e})")),
    };
    match parsed {
        Ok(message) => read_message(message, &mut out, &mut f),
        Err(why) => out.problems.push(format!("the body {why}")),
    }
    if out.failed_queue.is_none() {
        out.failed_queue = d
            .queue
            .strip_suffix(".XQ")
            .filter(|q| !q.is_empty())
            .map(str::to_owned);
    }
    let has_death = d.headers.is_some_and(|h| h.get("x-death").is_some());
    if !has_death {
        // Not dead-lettered by the broker (moved here by hand): Dramatiq itself publishes to
        // the default exchange with the queue's name.
        if let Some(queue) = out.failed_queue.clone() {
            out.target = f.target("", &queue, "the body's queue_name");
            out.target_from = out.target.as_ref().map(|_| "body queue_name".to_owned());
        }
    }
    out.problems.append(&mut f.problems);
    Some(out)
}

fn read_message(message: Message, out: &mut FrameworkFailure, f: &mut Fields<'_>) {
    match message.queue_name {
        Some(Value::String(queue)) => {
            let queue = queue
                .strip_suffix(".DQ")
                .or_else(|| queue.strip_suffix(".XQ"))
                .unwrap_or(&queue);
            match queue.is_empty() {
                true => f.problems.push("the body's queue_name is empty".into()),
                false => {
                    out.failed_queue =
                        Some(f.bounded("the body's queue_name", queue, MAX_TEXT_BYTES))
                }
            }
        }
        other => f.problems.push(format!(
            "the body's queue_name {}",
            not_text(other.as_ref())
        )),
    }
    match message.actor_name {
        Some(Value::String(actor)) => {
            out.message_type = non_blank(Some(f.bounded(
                "the body's actor_name",
                &actor,
                MAX_TEXT_BYTES,
            )))
        }
        other => f.problems.push(format!(
            "the body's actor_name {}",
            not_text(other.as_ref())
        )),
    }
    let traceback = match message.options {
        Some(Value::Object(mut options)) => options.remove("traceback"),
        None | Some(Value::Null) => None,
        Some(other) => {
            f.problems.push(format!(
                "the body's options {}, not an object",
                json_kind(&other)
            ));
            None
        }
    };
    match traceback {
        Some(Value::String(trace)) => {
            out.stack_trace = non_blank(Some(f.bounded(
                "the body's options.traceback",
                &trace,
                MAX_TRACE_BYTES,
            )));
            if out.stack_trace.is_some() {
                out.found_in.push("body options.traceback".into());
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => f.problems.push(format!(
            "the body's options.traceback {}",
            not_text(Some(&other))
        )),
    }
}

fn not_text(value: Option<&Value>) -> String {
    match value {
        None => "is missing".into(),
        Some(v) => format!("{}, not text", json_kind(v)),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "is null",
        Value::Bool(_) => "is a boolean",
        Value::Number(_) => "is a number",
        Value::String(_) => "is text",
        Value::Array(_) => "is a list",
        Value::Object(_) => "is an object",
    }
}

#[cfg(test)]
#[path = "dramatiq_tests.rs"]
mod tests;

//! MassTransit's `<queue>_error` (`MT-Reason: fault`, the base exception in `MT-Fault-*`, the
//! input queue in `MT-Fault-InputAddress`) and `<queue>_skipped` (`MT-Reason: dead-letter`)
//! (pure). The message type is `MT-Fault-MessageType`, or the envelope's first `messageType`
//! URN (`urn:message:Shop.Contracts:SubmitOrder`).

use serde::Deserialize;

use super::fields::{
    non_blank, quoted, Fields, Unread, MAX_BODY_BYTES, MAX_TEXT_BYTES, MAX_TRACE_BYTES,
};
use super::{
    mt_address, starts_with_ignore_case, strip_suffix, Convention, Delivery, FrameworkFailure,
};

const REASON: &str = "MT-Reason";
const INPUT_ADDRESS: &str = "MT-Fault-InputAddress";
const EXCEPTION_TYPE: &str = "MT-Fault-ExceptionType";
const MESSAGE: &str = "MT-Fault-Message";
const STACK_TRACE: &str = "MT-Fault-StackTrace";
const MESSAGE_TYPE: &str = "MT-Fault-MessageType";
const CONSUMER_TYPE: &str = "MT-Fault-ConsumerType";
const FAULT_ADDRESS: &str = "MT-Fault-Address";
/// The message types of a raw-JSON message (no envelope): URNs separated by `;`.
const RAW_MESSAGE_TYPE: &str = "MT-MessageType";

pub fn is_signature(name: &str) -> bool {
    is_failure_header(name)
}

/// Every `MT-Fault-*` and `MT-Reason`, as Particular's connector strips them; `MT-Host-*`
/// (who sent it) stays, and so does `MT-Fault-Address`: a raw-JSON message's sender writes
/// it to say where its faults go, before anything failed.
pub fn is_failure_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(REASON)
        || starts_with_ignore_case(name, "MT-Fault-") && !name.eq_ignore_ascii_case(FAULT_ADDRESS)
}

pub fn read(d: &Delivery<'_>) -> FrameworkFailure {
    let mut f = Fields::new(d.headers);
    let mut out = FrameworkFailure::new(Convention::MassTransit);
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
    out.consumer = non_blank(f.optional(CONSUMER_TYPE, MAX_TEXT_BYTES));
    out.message_type = non_blank(f.optional(MESSAGE_TYPE, MAX_TEXT_BYTES))
        .or_else(|| non_blank(f.optional(RAW_MESSAGE_TYPE, MAX_TEXT_BYTES)).map(|t| urn_type(&t)))
        .or_else(|| envelope_type(d.body_text, &mut f));
    let skipped = match f.text(REASON, MAX_TEXT_BYTES) {
        Ok(reason) if reason == "dead-letter" => true,
        Ok(reason) if reason == "fault" => false,
        Ok(other) => {
            f.problems.push(format!(
                "{REASON} is {}, not fault or dead-letter",
                quoted(&other)
            ));
            false
        }
        Err(Unread::NotText(kind)) => {
            f.problems.push(format!("{REASON} is not text ({kind})"));
            false
        }
        Err(_) => false,
    };
    if skipped {
        from_queue_name(d.queue, "_skipped", &mut out, &mut f);
    } else {
        match f.text(INPUT_ADDRESS, MAX_TEXT_BYTES) {
            Ok(address) => from_address(&address, d.vhost, &mut out, &mut f),
            // Before MassTransit 8.0.7 there was no input address: the error queue is
            // named after the input queue.
            Err(Unread::Absent) => from_queue_name(d.queue, "_error", &mut out, &mut f),
            Err(why) => f
                .problems
                .push(format!("target unknown: {INPUT_ADDRESS} {why}")),
        }
    }
    out.problems.append(&mut f.problems);
    out
}

fn from_address(address: &str, vhost: &str, out: &mut FrameworkFailure, f: &mut Fields<'_>) {
    let address = match mt_address::parse(address) {
        Ok(a) => a,
        Err(why) => {
            let value = quoted(address);
            return f
                .problems
                .push(format!("target unknown: {INPUT_ADDRESS} {why}: {value}"));
        }
    };
    if let Some(named) = address.vhost.filter(|v| v != vhost) {
        return f.problems.push(format!(
            "target unknown: {INPUT_ADDRESS} names vhost {}, this DLQ is in {}",
            quoted(&named),
            quoted(vhost)
        ));
    }
    out.target = f.target("", &address.queue, INPUT_ADDRESS);
    out.target_from = out.target.as_ref().map(|_| INPUT_ADDRESS.to_owned());
    out.failed_queue = Some(address.queue);
}

fn from_queue_name(queue: &str, suffix: &str, out: &mut FrameworkFailure, f: &mut Fields<'_>) {
    let Some(input) = strip_suffix(queue, suffix) else {
        let said = match suffix {
            "_error" => format!("no {INPUT_ADDRESS}, and"),
            _ => format!("{REASON} is dead-letter, but"),
        };
        return f.problems.push(format!(
            "target unknown: {said} the queue's name does not end in {suffix}"
        ));
    };
    out.target = f.target("", input, "the queue's name");
    out.target_from = out
        .target
        .as_ref()
        .map(|_| format!("the queue's name without {suffix}"));
    out.failed_queue = Some(input.to_owned());
}

/// `urn:message:Ns:Type` as `Ns.Type` (the form of `MT-Fault-MessageType`); the first of
/// several (`;`-separated); anything else as it is.
fn urn_type(urns: &str) -> String {
    let urn = urns.split(';').next().unwrap_or_default().trim();
    let Some(name) = urn.strip_prefix("urn:message:") else {
        return urn.to_owned();
    };
    // Generic arguments (`Fault[[Ns:Arg]]`) keep their own form.
    let head = name.find('[').unwrap_or(name.len());
    match name[..head].rfind(':') {
        Some(colon) => format!("{}.{}", &name[..colon], &name[colon + 1..]),
        None => name.to_owned(),
    }
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "messageType")]
    message_type: Option<serde_json::Value>,
}

/// The first `messageType` of a JSON envelope.
fn envelope_type(body: Option<&str>, f: &mut Fields<'_>) -> Option<String> {
    let body = body.map(str::trim_start).filter(|b| b.starts_with('{'))?;
    if body.len() > MAX_BODY_BYTES {
        return None;
    }
    let envelope: Envelope = serde_json::from_str(body).ok()?;
    match envelope.message_type? {
        serde_json::Value::Array(types) => match types.first() {
            Some(serde_json::Value::String(urn)) => non_blank(Some(urn_type(urn))),
            None => None,
            Some(_) => {
                f.problems
                    .push("the envelope's messageType holds no URN".into());
                None
            }
        },
        serde_json::Value::Null => None,
        _ => {
            f.problems
                .push("the envelope's messageType is not a list of URNs".into());
            None
        }
    }
}

#[cfg(test)]
#[path = "masstransit_tests.rs"]
mod tests;

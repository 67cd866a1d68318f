//! Reading a framework's headers leniently (pure): names matched without regard to ASCII
//! case, text taken from long strings and byte arrays alike (clients disagree on which one
//! text becomes), bounded in size, and every value that cannot be read said in words.

use std::borrow::Cow;
use std::fmt;

use crate::message::death::ReplayTarget;
use crate::message::headers::{AmqpValue, Table};

/// Longest message, type or name kept (NServiceBus keeps messages of 16,384 characters).
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Longest stack trace kept (Spring cuts its own at `frame_max` − 20,000: 111,072 by default).
pub const MAX_TRACE_BYTES: usize = 128 * 1024;
/// Longest body read for a convention's fields (JSON parsed, PHP-serialized data scanned).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// AMQP's limit on an exchange name and a routing key (both are short strings).
const MAX_NAME_BYTES: usize = 255;

/// Why a header gave no text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    Absent,
    Void,
    NotText(&'static str),
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unread::Absent => f.write_str("is missing"),
            Unread::Void => f.write_str("is void"),
            Unread::NotText(kind) => write!(f, "is not text ({kind})"),
        }
    }
}

/// A delivery's headers, and what reading them found wrong.
pub struct Fields<'a> {
    headers: Option<&'a Table>,
    pub problems: Vec<String>,
}

impl<'a> Fields<'a> {
    pub fn new(headers: Option<&'a Table>) -> Self {
        Fields {
            headers,
            problems: Vec::new(),
        }
    }

    /// The first value whose name is `name`, ignoring ASCII case.
    pub fn get(&self, name: &str) -> Option<&'a AmqpValue> {
        self.headers?
            .iter()
            .find(|(k, _)| k.as_bytes().eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The header's text, at most `limit` bytes. Text that is not UTF-8 is read with
    /// replacement characters and a cut one is kept cut; both are said.
    pub fn text(&mut self, name: &str, limit: usize) -> Result<String, Unread> {
        let bytes = match self.get(name) {
            None => return Err(Unread::Absent),
            Some(AmqpValue::Void) => return Err(Unread::Void),
            Some(
                AmqpValue::LongString(b) | AmqpValue::ShortString(b) | AmqpValue::ByteArray(b),
            ) => b.as_bytes(),
            Some(other) => return Err(Unread::NotText(other.type_name())),
        };
        let text = String::from_utf8_lossy(bytes);
        if let Cow::Owned(_) = text {
            self.problems.push(format!(
                "{name} is not UTF-8; read with replacement characters"
            ));
        }
        Ok(self.bounded(name, &text, limit))
    }

    /// [`Fields::text`] where the header is optional: a value that is not text is said,
    /// a missing or void one is not.
    pub fn optional(&mut self, name: &str, limit: usize) -> Option<String> {
        match self.text(name, limit) {
            Ok(text) => Some(text),
            Err(unread @ Unread::NotText(_)) => {
                self.problems.push(format!("{name} {unread}"));
                None
            }
            Err(_) => None,
        }
    }

    /// `text` cut to `limit` bytes (at a character boundary), saying so when it was.
    pub fn bounded(&mut self, what: &str, text: &str, limit: usize) -> String {
        let kept = cut(text, limit);
        if kept.len() < text.len() {
            self.problems.push(format!(
                "{what} is {} bytes; the first {} are read",
                text.len(),
                kept.len()
            ));
        }
        kept.to_owned()
    }

    /// A replay target, when AMQP can publish to it; otherwise why not.
    pub fn target(
        &mut self,
        exchange: &str,
        routing_key: &str,
        from: &str,
    ) -> Option<ReplayTarget> {
        for (what, name) in [("exchange", exchange), ("routing key", routing_key)] {
            if name.len() > MAX_NAME_BYTES {
                self.problems.push(format!(
                    "target unknown: the {what} from {from} is {} bytes; AMQP allows {MAX_NAME_BYTES}",
                    name.len()
                ));
                return None;
            }
        }
        Some(ReplayTarget {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        })
    }
}

/// The start of `text`, at most `limit` bytes, cut at a character boundary.
pub fn cut(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A value quoted for a problem, its start only.
pub fn quoted(text: &str) -> String {
    let start = cut(text, 80);
    match start.len() < text.len() {
        true => format!("{start:?}…"),
        false => format!("{start:?}"),
    }
}

/// Some non-empty text, trimmed; `None` for blank.
pub fn non_blank(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

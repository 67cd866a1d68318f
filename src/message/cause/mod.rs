//! A failure's cause, derived from what the failing consumer left (pure): the exception type
//! that names the bug, its message, the message's template (what varies between failures of
//! one bug replaced by placeholders) and the top frame of the application's own code — from
//! an error line, a stack trace of any common runtime, or a framework's separate type,
//! message and trace headers. The raw text is kept beside it; this is derived.

mod template;
mod trace;

pub use template::{template, MAX_TEMPLATE_CHARS};
pub use trace::{is_type, split_type, Runtime};

/// Longest exception type kept.
const MAX_TYPE_CHARS: usize = 200;
/// Longest message and frame kept.
const MAX_TEXT_CHARS: usize = 300;

/// What a failure says of its cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cause {
    /// The exception type, as the runtime names it (`com.acme.CustomerNotFoundException`).
    pub error_type: Option<String>,
    /// The exception's message (its first line).
    pub message: String,
    /// [`template`] of the message.
    pub template: String,
    /// The top frame of the application's own code, when a stack trace gave one.
    pub frame: Option<String>,
    /// The runtime whose stack trace it came from.
    pub runtime: Option<Runtime>,
}

impl Cause {
    /// The cause an error text gives: a stack trace's root cause, or a line `Type: message`.
    pub fn from_text(text: &str) -> Cause {
        Cause::from_parts(None, None, Some(text))
    }

    /// The cause from a framework's headers: a type, a message and a stack trace, each
    /// maybe missing. A trace with a chain decides (its root names the bug, where a header
    /// often holds the wrapper's type); the headers fill in what it does not say.
    pub fn from_parts(
        error_type: Option<&str>,
        message: Option<&str>,
        trace: Option<&str>,
    ) -> Cause {
        let given_type = error_type.map(str::trim).filter(|t| !t.is_empty());
        let given_message = message.map(first_line).filter(|m| !m.is_empty());
        let parsed = trace.and_then(trace::parse);
        let (mut kind, mut text, frame, runtime) = match parsed {
            Some((runtime, root)) => (root.error_type, root.message, root.frame, Some(runtime)),
            // Text that is no trace says less than a message given beside it.
            None if given_message.is_some() => (None, String::new(), None, None),
            None => {
                let line = trace.map(first_line).unwrap_or_default();
                let (kind, text) = split_type(&line);
                (kind, text, None, None)
            }
        };
        if kind.is_none() {
            kind = given_type.map(str::to_owned);
        }
        if text.is_empty() {
            if let Some(m) = given_message {
                // A message header may carry its type too (`Type: message`).
                let (in_message, rest) = split_type(&m);
                if kind.is_none() || in_message == kind {
                    kind = kind.or(in_message);
                    text = rest;
                } else {
                    text = m;
                }
            }
        }
        let message = cut(first_line(&text), MAX_TEXT_CHARS);
        Cause {
            template: template(&message),
            error_type: kind.map(|k| cut(k, MAX_TYPE_CHARS)),
            message,
            frame: frame.map(|f| cut(f, MAX_TEXT_CHARS)),
            runtime,
        }
    }

    /// What groups failures of one bug together: the type and the template
    /// (`CustomerNotFoundException: no customer with id C-<n>`).
    pub fn signature(&self) -> String {
        match &self.error_type {
            Some(kind) if self.template.is_empty() => kind.clone(),
            Some(kind) => format!("{kind}: {}", self.template),
            None => self.template.clone(),
        }
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

fn cut(text: String, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_its_type_and_template() {
        let cause = Cause::from_text("CustomerNotFoundException: no customer with id C-1007");
        assert_eq!(
            cause.error_type.as_deref(),
            Some("CustomerNotFoundException")
        );
        assert_eq!(cause.message, "no customer with id C-1007");
        assert_eq!(
            cause.signature(),
            "CustomerNotFoundException: no customer with id C-<n>"
        );
        let plain = Cause::from_text("tax service timed out after 30 s");
        assert_eq!(plain.error_type, None);
        assert_eq!(plain.signature(), "tax service timed out after <n> s");
    }

    #[test]
    fn a_message_beside_text_that_is_no_trace_is_the_message() {
        let cause = Cause::from_parts(
            None,
            Some("panic occurred: \"boom\""),
            Some("goroutine 23 [running]:\nmain.handle()\n\t/app/main.go:12 +0x1d\n"),
        );
        assert_eq!(cause.message, "panic occurred: \"boom\"");
    }

    #[test]
    fn headers_fill_in_what_the_trace_leaves_out() {
        let cause = Cause::from_parts(
            Some("System.TimeoutException"),
            Some("The operation timed out after 00:00:30"),
            None,
        );
        assert_eq!(cause.error_type.as_deref(), Some("System.TimeoutException"));
        assert_eq!(cause.template, "The operation timed out after <time>");
    }
}

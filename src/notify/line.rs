//! The line a notification reads as, kept as Lazarus's own words and what came from outside
//! (a message, the broker, a user: queue names, reasons, errors, job details) — and the one
//! place each format escapes the outside words (pure): Slack mrkdwn, the Adaptive Card's text
//! runs, and plain text for logs and the overview (which escapes HTML itself).
//!
//! What came from outside is shown, never obeyed: control, zero-width and bidi characters
//! are named (`[U+202E]`), a line break is `↵`; for a chat, links are defanged
//! (`https[://]evil[.]example`), Slack's `&`, `<` and `>` become entities (no `<!channel>`,
//! no `<url|text>`) and each value is a code span (no `*bold*`, no `_`, `~`; a backtick is
//! `ˋ`); a card's values are plain text runs (no Markdown, no `{{DATE()}}`). Each value is
//! cut to a length *as rendered*, so a message always fits its receiver's limits.

use serde_json::{json, Value};

/// At most this many characters of one name (queue, reason, actor) as rendered.
const NAME: usize = 200;
/// ...and of one long text (an error, a job's detail).
const TEXT: usize = 700;

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Ours(String),
    /// From outside, and how much of it may be shown.
    Theirs(String, usize),
}

/// One line a person reads in a chat channel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Line(Vec<Piece>);

impl Line {
    pub fn new() -> Self {
        Line::default()
    }

    /// Lazarus's own words (and numbers).
    pub fn ours(mut self, text: impl Into<String>) -> Self {
        self.0.push(Piece::Ours(text.into()));
        self
    }

    /// A name that came from outside.
    pub fn name(mut self, text: &str) -> Self {
        self.0.push(Piece::Theirs(text.to_owned(), NAME));
        self
    }

    /// A long text that came from outside.
    pub fn text(mut self, text: &str) -> Self {
        self.0.push(Piece::Theirs(text.to_owned(), TEXT));
        self
    }

    /// Another line's pieces after these.
    pub fn then(mut self, other: Line) -> Self {
        self.0.extend(other.0);
        self
    }

    /// As plain text, for logs and the overview: outside values with their invisible
    /// characters named, nothing else changed.
    pub fn plain(&self) -> String {
        self.render(|piece, max| cut(shown(piece).into_iter(), max))
    }

    /// As Slack mrkdwn (Slack's `text` and a section's; Mattermost and Rocket.Chat read it too).
    pub fn slack(&self) -> String {
        self.render(|piece, max| {
            let units = defanged(piece).into_iter().map(|unit| {
                unit.chars()
                    .map(|c| match c {
                        '&' => "&amp;".to_owned(),
                        '<' => "&lt;".to_owned(),
                        '>' => "&gt;".to_owned(),
                        // A code span has no escape for its own delimiter.
                        '`' => "\u{2cb}".to_owned(),
                        c => c.to_string(),
                    })
                    .collect::<String>()
            });
            match cut(units, max) {
                code if code.is_empty() => code,
                code => format!("`{code}`"),
            }
        })
    }

    /// As the inlines of an Adaptive Card's `RichTextBlock`: text runs, which no renderer reads
    /// as Markdown; outside values in a monospace run of their own.
    pub fn teams(&self) -> Vec<Value> {
        let mut runs = Vec::new();
        for piece in &self.0 {
            match piece {
                Piece::Ours(text) => runs.push(json!({"type": "TextRun", "text": text})),
                Piece::Theirs(text, max) => {
                    let text = cut(defanged(text).into_iter(), *max);
                    // The card's date functions want `{{DATE(` exactly.
                    let text = text
                        .replace("{{DATE(", "{ {DATE(")
                        .replace("{{TIME(", "{ {TIME(");
                    if !text.is_empty() {
                        runs.push(
                            json!({"type": "TextRun", "text": text, "fontType": "Monospace"}),
                        );
                    }
                }
            }
        }
        runs
    }

    fn render(&self, theirs: impl Fn(&str, usize) -> String) -> String {
        self.0
            .iter()
            .map(|piece| match piece {
                Piece::Ours(text) => text.clone(),
                Piece::Theirs(text, max) => theirs(text, *max),
            })
            .collect()
    }
}

/// `units` joined, at most `max` characters (`max` > 0): whole units only, `…` when cut.
fn cut(units: impl Iterator<Item = String>, max: usize) -> String {
    let mut out = String::new();
    let mut len = 0;
    let mut units = units.peekable();
    while let Some(unit) = units.next() {
        let n = unit.chars().count();
        // Room is kept for the `…` while more may follow.
        let room = if units.peek().is_some() {
            max.saturating_sub(1)
        } else {
            max
        };
        if len + n > room {
            out.push('…');
            break;
        }
        len += n;
        out.push_str(&unit);
    }
    out
}

/// Each character of `text` as shown: itself, or named when it would not be seen (controls,
/// zero-width and bidi formatting), `↵` for a line break (CR LF is one), a space for a tab.
fn shown(text: &str) -> Vec<String> {
    let mut after_cr = false;
    text.chars()
        .map(|c| {
            let unit = match c {
                '\n' if after_cr => String::new(),
                '\n' | '\r' | '\u{2028}' | '\u{2029}' | '\u{85}' => "↵".to_owned(),
                '\t' => " ".to_owned(),
                c if invisible(c) => format!("[U+{:04X}]", c as u32),
                c => c.to_string(),
            };
            after_cr = c == '\r';
            unit
        })
        .collect()
}

/// Control characters, and the format characters that change how text around them reads
/// without being seen (Unicode's Cf: zero-width, joiners, bidi embeddings and isolates,
/// the byte-order mark, tags).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
            | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{3164}' | '\u{feff}' | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}' | '\u{1d173}'..='\u{1d17a}' | '\u{e0000}'..='\u{e0fff}')
}

/// Characters that end the host of a link.
fn ends_host(c: char) -> bool {
    c.is_whitespace()
        || invisible(c)
        || matches!(
            c,
            '/' | '?'
                | '#'
                | '<'
                | '>'
                | '"'
                | '\''
                | '`'
                | '('
                | ')'
                | '['
                | ']'
                | '{'
                | '}'
                | '|'
                | '\\'
                | '^'
                | '*'
                | '_'
                | '~'
                | ','
                | ';'
                | '!'
        )
}

/// Dots a host may be written with (IDNA reads the ideographic and full-width ones as dots).
fn dot(c: char) -> bool {
    matches!(c, '.' | '\u{3002}' | '\u{ff0e}' | '\u{ff61}')
}

/// Schemes a chat links without `//` after them.
const BARE_SCHEMES: [&str; 11] = [
    "mailto", "tel", "sms", "callto", "skype", "slack", "msteams", "sip", "xmpp", "magnet", "file",
];

/// Each character of `text` as shown, with what a chat could make a link of defanged: a
/// scheme's `://` is `[://]` (a `//` without one `[//]`, a bare scheme's `:` `[:]`), and each
/// dot of the host after it, after `www.` or after an `@` is `[.]`. Bare domains without any
/// of these are left as they are: the formats keep them from being linked (Slack's verbatim
/// section, the card's text runs, the code spans).
fn defanged(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut units = shown(text);
    let lower: Vec<char> = chars.iter().map(|c| c.to_ascii_lowercase()).collect();
    let at = |i: usize, s: &str| {
        s.chars()
            .enumerate()
            .all(|(k, c)| lower.get(i + k) == Some(&c))
    };
    let word_before = |i: usize| i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '.');
    let mut host_from = Vec::new();
    for i in 0..chars.len() {
        if at(i, "//") && !(i > 0 && chars[i - 1] == '/') {
            if i > 0 && chars[i - 1] == ':' {
                units[i - 1] = "[://]".into();
                units[i] = String::new();
            } else {
                units[i] = "[//]".into();
            }
            units[i + 1] = String::new();
            host_from.push(i + 2);
        } else if at(i, "www.") && !word_before(i) {
            host_from.push(i);
        } else if chars[i] == '@' {
            host_from.push(i + 1);
        } else if chars[i] == ':' && !at(i + 1, "//") {
            let scheme = BARE_SCHEMES
                .iter()
                .find(|s| i >= s.len() && at(i - s.len(), s) && !word_before(i - s.len()));
            if scheme.is_some() {
                units[i] = "[:]".into();
            }
        }
    }
    for start in host_from {
        for i in start..chars.len() {
            if ends_host(chars[i]) {
                break;
            }
            if dot(chars[i]) {
                units[i] = format!("[{}]", chars[i]);
            }
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slack(text: &str) -> String {
        Line::new().text(text).slack()
    }

    /// A `://` right after a scheme's last character.
    fn scheme_link(text: &str) -> bool {
        text.match_indices("://").any(|(i, _)| {
            text[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || "+-.".contains(c))
        })
    }

    #[test]
    fn slack_sees_no_mention_and_no_link() {
        assert_eq!(slack("<!channel> hi"), "`&lt;!channel&gt; hi`");
        assert_eq!(
            slack("<https://evil.example|Open in Lazarus>"),
            "`&lt;https[://]evil[.]example|Open in Lazarus&gt;`"
        );
        assert_eq!(slack("*bold* `x` a&b"), "`*bold* \u{2cb}x\u{2cb} a&amp;b`");
        assert_eq!(
            slack("see www.evil.example or bob@evil.example, mailto:x"),
            "`see www[.]evil[.]example or bob@evil[.]example, mailto[:]x`"
        );
        assert_eq!(slack("//evil.example/a.b"), "`[//]evil[.]example/a.b`");
        assert_eq!(slack(""), "");
    }

    #[test]
    fn what_cannot_be_seen_is_named() {
        let line = Line::new()
            .ours("a ")
            .name("x\u{202e}y\u{200b}z\n2\r\n\t3\u{7}");
        assert_eq!(line.plain(), "a x[U+202E]y[U+200B]z↵2↵ 3[U+0007]");
        assert_eq!(line.slack(), "a `x[U+202E]y[U+200B]z↵2↵ 3[U+0007]`");
    }

    #[test]
    fn ordinary_errors_read_as_written() {
        let error = "java.lang.IllegalStateException: queue orders.dlq: amount < 0";
        assert_eq!(Line::new().text(error).plain(), error);
        assert_eq!(
            slack(error),
            "`java.lang.IllegalStateException: queue orders.dlq: amount &lt; 0`"
        );
    }

    #[test]
    fn cards_get_text_runs_without_markdown_or_date_functions() {
        let runs = Line::new()
            .ours("New: ")
            .text("**x** [a](https://e.example) {{DATE(2017-02-14T06:08:00Z, SHORT)}}")
            .teams();
        assert_eq!(runs[0], json!({"type": "TextRun", "text": "New: "}));
        assert_eq!(
            runs[1]["text"],
            "**x** [a](https[://]e[.]example) { {DATE(2017-02-14T06:08:00Z, SHORT)}}"
        );
        assert_eq!(runs[1]["fontType"], "Monospace");
        assert_eq!(runs.len(), 2);
    }

    #[test]
    fn values_are_cut_as_rendered() {
        let long = slack(&"&".repeat(10_000));
        assert!(long.chars().count() <= TEXT + 2, "two backticks");
        assert!(long.chars().count() > TEXT - 5, "as much as fits");
        assert!(long.ends_with("&amp;…`"), "{long}");
        let named = Line::new().name(&"\u{200b}".repeat(1000)).plain();
        assert!(named.chars().count() <= NAME && named.ends_with('…'));
        assert_eq!(
            Line::new().name(&"x".repeat(NAME)).plain(),
            "x".repeat(NAME)
        );
    }

    proptest! {
        #[test]
        fn whatever_comes_in_slack_gets_one_inert_code_span(text in ".{1,400}") {
            let out = slack(&text);
            prop_assert!(out.starts_with('`') && out.ends_with('`') && out.len() >= 2);
            let inner = &out[1..out.len() - 1];
            prop_assert!(!inner.contains('`') && !inner.contains('<') && !inner.contains('>'));
            prop_assert!(!scheme_link(inner), "{inner}");
            prop_assert!(inner.chars().all(|c| !invisible(c) && c != '\n'));
            prop_assert!(inner.chars().count() <= TEXT);
            // Every & starts an entity.
            for (i, _) in inner.match_indices('&') {
                let rest = &inner[i..];
                prop_assert!(["&amp;", "&lt;", "&gt;"].iter().any(|e| rest.starts_with(e)));
            }
        }

        #[test]
        fn the_words_stay(words in proptest::collection::vec("[a-zA-Z0-9]{1,8}", 1..20), sep in "[ .:/@<>*_`\u{202e}\n]{1,3}") {
            let text = words.join(&sep);
            for out in [slack(&text), Line::new().text(&text).plain()] {
                let mut rest = out.as_str();
                for w in &words {
                    let at = rest.find(w.as_str());
                    prop_assert!(at.is_some(), "{w} missing from {out}");
                    rest = &rest[at.unwrap() + w.len()..];
                }
            }
        }
    }
}

//! The payload viewer (pure): bodies decoded as their headers say (gzip/deflate or kombu's
//! compression, charset; MessagePack, CBOR, AMQP 1.0 and protobuf as JSON), JSON pretty-printed and
//! split into highlight tokens, binary as a hex dump — always cut to a size a page can hold.
//! Everything here is text for the template to escape.

use crate::message::body;
use crate::message::structured::{self, DecodeError};

/// The most a page shows of a body; the download has the rest.
pub const DISPLAY_LIMIT: usize = 256 * 1024;
/// Bodies up to this size are parsed as JSON for pretty-printing.
const JSON_LIMIT: usize = 2 * 1024 * 1024;
/// How much of a stored body a page reads: what it can decode, and one byte to know there
/// is more.
pub const READ_LIMIT: usize = JSON_LIMIT + 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadKind {
    Empty,
    Json,
    Text,
    Hex,
}

impl PayloadKind {
    /// How the page describes what it shows.
    pub fn label(&self) -> &'static str {
        match self {
            PayloadKind::Empty => "empty",
            PayloadKind::Json => "JSON, pretty-printed",
            PayloadKind::Text => "text",
            PayloadKind::Hex => "hex dump",
        }
    }
}

/// A piece of pretty JSON with its highlight class (`j-key`, `j-str`, `j-num`, `j-lit`, or "").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub class: &'static str,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct PayloadView {
    pub kind: PayloadKind,
    /// JSON: the highlighted tokens. Text and hex: one token with the whole text.
    pub tokens: Vec<Token>,
    /// Whether the page shows only the start of the body.
    pub truncated: bool,
    /// How the bytes were turned into what is shown ("gzip-decoded, UTF-8 JSON", ...).
    pub notes: Vec<String>,
}

/// What a page shows of a body of `size` bytes whose start (or all) is `body`.
pub fn view(body: &[u8], size: u64, encoding: &body::Encoding<'_>) -> PayloadView {
    let content_type = encoding.content_type;
    let mut notes = Vec::new();
    // Only the start of a large body is read: what follows it is not known here.
    let stored_whole = body.len() as u64 >= size;
    if body.is_empty() && stored_whole {
        return PayloadView {
            kind: PayloadKind::Empty,
            tokens: vec![],
            truncated: false,
            notes,
        };
    }
    let (bytes, complete) = match body::decompress(body, encoding, JSON_LIMIT) {
        Ok(Some(decoded)) => {
            notes.push(format!(
                "{}-decoded from {size} stored bytes",
                decoded.codec
            ));
            (decoded.bytes, decoded.complete && stored_whole)
        }
        // Only what a page can use is copied, not a 16 MiB body.
        Ok(None) => (
            body[..body.len().min(JSON_LIMIT)].to_vec(),
            body.len() <= JSON_LIMIT && stored_whole,
        ),
        // The start of a compressed body cut before the decoder had the page's worth.
        Err(e) if !stored_whole => {
            notes.push(format!(
                "{e} (from the first {} of {size} stored bytes): they are shown",
                structured::size(body.len())
            ));
            return hex_view(body, notes);
        }
        Err(e) => {
            notes.push(format!("{e}: the stored bytes are shown"));
            return hex_view(body, notes);
        }
    };
    if let Some(format) = structured::Format::of(encoding) {
        // At most what a page shows is written: a body of a million one-byte values costs
        // the page's worth of JSON, not a million values.
        let decoded = complete.then(|| structured::to_json(&bytes, format, DISPLAY_LIMIT));
        match decoded {
            None => notes.push(format!(
                "{format} larger than {} decoded is not decoded: shown undecoded",
                structured::size(JSON_LIMIT)
            )),
            Some(Ok(json)) => {
                notes.push(format!("{format}, shown as JSON"));
                return json_view(&json, false, notes);
            }
            Some(Err(DecodeError::TooLarge { start, .. })) => {
                notes.push(format!(
                    "{format}, shown as JSON: its first {} (the download has it all)",
                    structured::size(DISPLAY_LIMIT)
                ));
                return json_view(&start, true, notes);
            }
            // Mislabelled (a JSON body whose `type` names a protobuf message, say): shown as
            // what its bytes are, text or hex, below.
            Some(Err(e)) => notes.push(format!("{e}: shown undecoded")),
        }
    }
    let charset = encoding.charset();
    let Some(text) = body::decode(&bytes, &charset, !complete) else {
        if charset != "utf-8" {
            notes.push(format!("charset {charset:?} is not one the viewer decodes"));
        }
        return hex_view(&bytes, notes);
    };
    if charset != "utf-8" {
        notes.push(format!("decoded from {charset}"));
    }
    let looks_json = content_type.is_some_and(|c| c.contains("json"))
        || matches!(text.trim_start().chars().next(), Some('{' | '['));
    if looks_json && complete && text.len() <= JSON_LIMIT {
        // Checked without building it (serde_json's `Value` is 80 bytes a value).
        if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
            return json_view(&text, false, notes);
        }
        notes.push("declared or shaped like JSON, but does not parse: shown as text".into());
    }
    let (shown, cut_here) = cut(&text);
    PayloadView {
        kind: PayloadKind::Text,
        tokens: vec![Token {
            class: "",
            text: shown.to_owned(),
        }],
        truncated: cut_here || !complete,
        notes,
    }
}

/// JSON text (valid, or a valid start: `cut`) pretty-printed and highlighted, cut to what a
/// page holds.
fn json_view(json: &str, cut: bool, notes: Vec<String>) -> PayloadView {
    let (pretty, truncated) = pretty(json, DISPLAY_LIMIT);
    PayloadView {
        kind: PayloadKind::Json,
        tokens: highlight(&pretty),
        truncated: truncated || cut,
        notes,
    }
}

/// JSON text laid out as serde_json's pretty printer lays it out (two-space indents), its
/// tokens as written, in one pass that stops at `max` bytes; whether it stopped short.
fn pretty(json: &str, max: usize) -> (String, bool) {
    let bytes = json.as_bytes();
    let mut out = String::new();
    let mut depth = 0usize;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    let skip_space = |mut i: usize| {
        while matches!(bytes.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            i += 1;
        }
        i
    };
    let mut i = skip_space(0);
    while i < bytes.len() {
        if out.len() >= max {
            break;
        }
        let start = i;
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                let token = json.get(start..i).unwrap_or_default();
                out.push_str(body::prefix(token, max.saturating_sub(out.len()) + 1));
            }
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                let next = skip_space(i + 1);
                if bytes.get(next) == Some(&close) {
                    out.push(char::from(open));
                    out.push(char::from(close));
                    i = next + 1;
                } else {
                    out.push(char::from(open));
                    depth += 1;
                    newline(&mut out, depth);
                    i += 1;
                }
            }
            close @ (b'}' | b']') => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(char::from(close));
                i += 1;
            }
            b',' => {
                out.push(',');
                newline(&mut out, depth);
                i += 1;
            }
            b':' => {
                out.push_str(": ");
                i += 1;
            }
            _ => {
                // A number or a literal, up to the next structural byte.
                while i < bytes.len()
                    && !matches!(
                        bytes[i],
                        b',' | b':'
                            | b'{'
                            | b'}'
                            | b'['
                            | b']'
                            | b'"'
                            | b' '
                            | b'\n'
                            | b'\r'
                            | b'\t'
                    )
                {
                    i += 1;
                }
                out.push_str(json.get(start..i).unwrap_or_default());
            }
        }
        i = skip_space(i);
    }
    let whole = i >= bytes.len() && out.len() <= max;
    out.truncate(body::prefix(&out, max).len());
    (out, !whole)
}

/// The first DISPLAY_LIMIT bytes, at a character boundary.
fn cut(text: &str) -> (&str, bool) {
    if text.len() <= DISPLAY_LIMIT {
        return (text, false);
    }
    (body::prefix(text, DISPLAY_LIMIT), true)
}

/// `offset  hex bytes  |ascii|`, 16 bytes a line, for the first 64 KiB.
fn hex_view(bytes: &[u8], notes: Vec<String>) -> PayloadView {
    const HEX_LIMIT: usize = 64 * 1024;
    let shown = &bytes[..bytes.len().min(HEX_LIMIT)];
    let mut out = String::with_capacity(shown.len() * 4 + 64);
    for (i, line) in shown.chunks(16).enumerate() {
        out.push_str(&format!("{:08x}  ", i * 16));
        for j in 0..16 {
            match line.get(j) {
                Some(b) => out.push_str(&format!("{b:02x} ")),
                None => out.push_str("   "),
            }
        }
        out.push_str(" |");
        out.extend(line.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    PayloadView {
        kind: PayloadKind::Hex,
        tokens: vec![Token {
            class: "",
            text: out,
        }],
        truncated: bytes.len() > HEX_LIMIT,
        notes,
    }
}

/// Splits pretty-printed JSON into highlight tokens.
fn highlight(json: &str) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::new();
    let mut push = |class: &'static str, text: &str| match tokens.last_mut() {
        Some(last) if last.class == class => last.text.push_str(text),
        _ => tokens.push(Token {
            class,
            text: text.to_owned(),
        }),
    };
    let bytes = json.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                let is_key = json[i..].trim_start().starts_with(':');
                push(if is_key { "j-key" } else { "j-str" }, &json[start..i]);
            }
            b'-' | b'0'..=b'9' => {
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                push("j-num", &json[start..i]);
            }
            b't' | b'f' | b'n' => {
                while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
                    i += 1;
                }
                push("j-lit", &json[start..i]);
            }
            _ => {
                // Whitespace and punctuation, up to the next token (ASCII: boundaries hold).
                while i < bytes.len()
                    && !matches!(bytes[i], b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n')
                {
                    i += 1;
                }
                push("", &json[start..i]);
            }
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The view of a whole body.
    fn view(body: &[u8], encoding: &body::Encoding<'_>) -> PayloadView {
        super::view(body, body.len() as u64, encoding)
    }

    fn shown(v: &PayloadView) -> String {
        v.tokens.iter().map(|t| t.text.as_str()).collect()
    }

    #[test]
    fn json_is_pretty_printed_in_its_own_key_order_and_highlighted() {
        let v = view(
            br#"{"z":1,"a":"x","ok":true,"n":null,"neg":-2.5e3}"#,
            &body::Encoding::new(Some("application/json"), None),
        );
        assert_eq!(v.kind, PayloadKind::Json);
        assert!(shown(&v).starts_with("{\n  \"z\": 1,"), "{}", shown(&v));
        let class_of = |text: &str| v.tokens.iter().find(|t| t.text == text).map(|t| t.class);
        assert_eq!(class_of("\"z\""), Some("j-key"));
        assert_eq!(class_of("\"x\""), Some("j-str"));
        assert_eq!(class_of("true"), Some("j-lit"));
        // Numbers as written.
        assert_eq!(class_of("-2.5e3"), Some("j-num"));
    }

    #[test]
    fn keys_with_escaped_quotes_stay_one_token() {
        let v = view(br#"{"a\"b": "c\\"}"#, &body::Encoding::new(None, None));
        assert_eq!(
            v.tokens.iter().find(|t| t.class == "j-key").unwrap().text,
            r#""a\"b""#
        );
    }

    #[test]
    fn gzip_is_decoded_when_content_encoding_says_so() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"invoice_id":"INV-1"}"#).unwrap();
        let v = view(
            &gz.finish().unwrap(),
            &body::Encoding::new(Some("application/json"), Some("gzip")),
        );
        assert_eq!(v.kind, PayloadKind::Json);
        assert!(shown(&v).contains("INV-1"));
        assert!(v.notes[0].starts_with("gzip-decoded"));
    }

    #[test]
    fn broken_gzip_falls_back_to_hex_with_a_note() {
        let v = view(b"not gzip at all", &body::Encoding::new(None, Some("gzip")));
        assert_eq!(v.kind, PayloadKind::Hex);
        assert!(v.notes[0].contains("does not decode"));
    }

    #[test]
    fn declared_charset_is_honoured() {
        let v = view(
            b"Caf\xe9",
            &body::Encoding::new(Some("text/plain; charset=ISO-8859-1"), None),
        );
        assert_eq!(shown(&v), "Café");
        let v = view(b"Caf\xe9", &body::Encoding::new(Some("text/plain"), None));
        assert_eq!(v.kind, PayloadKind::Hex);
    }

    #[test]
    fn binary_is_a_hex_dump() {
        let v = view(
            &[0, 1, 0xff, b'A'],
            &body::Encoding::new(Some("application/octet-stream"), None),
        );
        assert_eq!(
            shown(&v),
            "00000000  00 01 ff 41                                      |...A|\n"
        );
    }

    #[test]
    fn big_bodies_are_cut_for_the_page() {
        let big = "é".repeat(DISPLAY_LIMIT);
        let v = view(
            big.as_bytes(),
            &body::Encoding::new(Some("text/plain"), None),
        );
        assert!(v.truncated);
        assert!(shown(&v).len() <= DISPLAY_LIMIT);
        let huge = vec![7u8; 5 * 1024 * 1024];
        let v = view(&huge, &body::Encoding::new(None, None));
        assert!(v.truncated && shown(&v).len() < 400 * 1024);
    }

    #[test]
    fn invalid_json_is_text_with_a_note() {
        let v = view(
            b"{not json",
            &body::Encoding::new(Some("application/json"), None),
        );
        assert_eq!(v.kind, PayloadKind::Text);
        assert_eq!(v.notes.len(), 1);
    }

    #[test]
    fn empty_is_empty() {
        assert_eq!(
            view(b"", &body::Encoding::new(None, None)).kind,
            PayloadKind::Empty
        );
    }

    #[test]
    fn a_mislabelled_body_is_shown_as_what_it_is_with_a_note() {
        // JSON sent with a MessagePack content type (or a `type` naming a protobuf message).
        let v = view(
            br#"{"order": "O-1"}"#,
            &body::Encoding::new(Some("application/x-msgpack"), None),
        );
        assert_eq!(v.kind, PayloadKind::Json);
        assert!(
            v.notes[0].contains("MessagePack does not decode"),
            "{:?}",
            v.notes
        );
        let v = view(
            &[0xc1, 0xff],
            &body::Encoding::new(Some("application/x-msgpack"), None),
        );
        assert_eq!(v.kind, PayloadKind::Hex);
    }
}

#[cfg(test)]
mod starts {
    use super::*;

    #[test]
    fn the_start_of_a_large_body_is_shown_as_a_start() {
        let start = br#"{"order": "O-1", "pad": "xxxxxxxx"#;
        let v = view(
            start,
            100 << 20,
            &body::Encoding::new(Some("application/json"), None),
        );
        assert_eq!(v.kind, PayloadKind::Text);
        assert!(v.truncated);
        // The start of a gzip body: what it decodes to, cut.
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for i in 0..200_000 {
            write!(gz, "{i:08x}").unwrap();
        }
        let gz = gz.finish().unwrap();
        let v = view(
            &gz[..gz.len() / 2],
            gz.len() as u64,
            &body::Encoding::new(None, Some("gzip")),
        );
        assert!(v.truncated, "{:?}", v.notes);
        let v = view(
            &gz[..10],
            gz.len() as u64,
            &body::Encoding::new(None, Some("gzip")),
        );
        assert_eq!(v.kind, PayloadKind::Hex, "{:?}", v.notes);
    }
}

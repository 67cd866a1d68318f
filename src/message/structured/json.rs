//! JSON text written as a decoder reads its input, within a budget (pure): what a decode
//! produces is the text itself, never a tree of values, and never more bytes of it than the
//! budget — a body of one-byte values (MessagePack `nil`s, protobuf fields) costs its output,
//! not 80 bytes of `serde_json::Value` per value. Past the budget, writing fails and the text
//! so far (a start of the JSON, cut between tokens) is what the caller may keep.

use super::malformed::{Malformed, Stop};

/// A byte count as people read it: `8 MiB`, `256 KiB`, `100 bytes`.
pub fn size(bytes: usize) -> String {
    match bytes {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// A token written, or why not.
pub type Written = Result<(), Stop>;

/// Compact JSON text, built token by token, never longer than its limit.
#[derive(Debug)]
pub struct JsonText {
    text: String,
    limit: usize,
    /// Bytes held aside for the decoder's own bookkeeping (protobuf's field order), counted
    /// against the limit as the text is.
    aside: usize,
    /// The open containers: the byte that closes each, and whether it holds an item yet.
    open: Vec<(u8, bool)>,
    /// A member name was just written: its value follows without a comma.
    after_key: bool,
}

impl JsonText {
    pub fn new(limit: usize) -> Self {
        JsonText {
            text: String::new(),
            limit,
            aside: 0,
            open: Vec::new(),
            after_key: false,
        }
    }

    /// The bytes still free.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.text.len() + self.aside)
    }

    fn reserve(&mut self, n: usize) -> Written {
        match n <= self.room() {
            true => Ok(()),
            false => Err(Stop::Full),
        }
    }

    /// Counts `n` bytes the decoder holds for itself against the budget, until
    /// [`JsonText::release`].
    pub fn hold(&mut self, n: usize) -> Written {
        self.reserve(n)?;
        self.aside += n;
        Ok(())
    }

    pub fn release(&mut self, n: usize) {
        self.aside -= n.min(self.aside);
    }

    /// A comma before every item of a container but its first.
    fn item(&mut self) -> Written {
        if std::mem::take(&mut self.after_key) {
            return Ok(());
        }
        if let Some((_, has_items)) = self.open.last_mut() {
            if std::mem::replace(has_items, true) {
                self.reserve(1)?;
                self.text.push(',');
            }
        }
        Ok(())
    }

    /// A value already written as JSON text (a number, a literal, a decoded key's text).
    pub fn raw(&mut self, json: &str) -> Written {
        self.item()?;
        self.reserve(json.len())?;
        self.text.push_str(json);
        Ok(())
    }

    pub fn null(&mut self) -> Written {
        self.raw("null")
    }

    pub fn bool(&mut self, b: bool) -> Written {
        self.raw(if b { "true" } else { "false" })
    }

    pub fn u64(&mut self, n: u64) -> Written {
        self.raw(&n.to_string())
    }

    pub fn i64(&mut self, n: i64) -> Written {
        self.raw(&n.to_string())
    }

    /// A number JSON can hold; NaN and the infinities as their names.
    pub fn f64(&mut self, f: f64) -> Written {
        match serde_json::Number::from_f64(f) {
            Some(n) => self.raw(&n.to_string()),
            None => self.str(&f.to_string()),
        }
    }

    pub fn str(&mut self, s: &str) -> Written {
        self.item()?;
        self.quoted(s)
    }

    /// Bytes as text, a replacement character for each invalid sequence.
    pub fn lossy(&mut self, bytes: &[u8]) -> Written {
        self.item()?;
        let len: usize = 2 + bytes
            .utf8_chunks()
            .map(|c| escaped_len(c.valid()) + if c.invalid().is_empty() { 0 } else { 3 })
            .sum::<usize>();
        self.reserve(len)?;
        self.text.push('"');
        for chunk in bytes.utf8_chunks() {
            escape_into(&mut self.text, chunk.valid());
            if !chunk.invalid().is_empty() {
                self.text.push(char::REPLACEMENT_CHARACTER);
            }
        }
        self.text.push('"');
        Ok(())
    }

    /// Bytes as a string of lower-case hex digits.
    pub fn hex(&mut self, bytes: &[u8]) -> Written {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        self.item()?;
        self.reserve(2 + 2 * bytes.len())?;
        self.text.push('"');
        for b in bytes {
            self.text.push(char::from(DIGITS[usize::from(b >> 4)]));
            self.text.push(char::from(DIGITS[usize::from(b & 15)]));
        }
        self.text.push('"');
        Ok(())
    }

    /// Bytes as a base64 string (protobuf's JSON writes `bytes` so).
    pub fn base64(&mut self, bytes: &[u8]) -> Written {
        use base64::Engine;
        self.item()?;
        self.reserve(2 + bytes.len().div_ceil(3) * 4)?;
        self.text.push('"');
        base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut self.text);
        self.text.push('"');
        Ok(())
    }

    fn quoted(&mut self, s: &str) -> Written {
        self.reserve(2 + escaped_len(s))?;
        self.text.push('"');
        escape_into(&mut self.text, s);
        self.text.push('"');
        Ok(())
    }

    pub fn begin_array(&mut self) -> Written {
        self.begin(b'[', b']')
    }

    pub fn begin_object(&mut self) -> Written {
        self.begin(b'{', b'}')
    }

    fn begin(&mut self, open: u8, close: u8) -> Written {
        self.item()?;
        // The closing byte is reserved with the opening one: a cut text can always be closed.
        self.reserve(2)?;
        self.text.push(char::from(open));
        self.aside += 1;
        self.open.push((close, false));
        Ok(())
    }

    /// Closes the innermost array or object.
    pub fn end(&mut self) -> Written {
        let (close, _) = self.open.pop().ok_or(Malformed::Unbalanced)?;
        self.aside -= 1;
        self.text.push(char::from(close));
        Ok(())
    }

    /// A member name in the innermost object.
    pub fn key(&mut self, name: &str) -> Written {
        self.item()?;
        self.quoted(name)?;
        self.reserve(1)?;
        self.text.push(':');
        self.after_key = true;
        Ok(())
    }

    /// A member name from bytes, as [`JsonText::lossy`] reads them.
    pub fn key_lossy(&mut self, bytes: &[u8]) -> Written {
        self.lossy(bytes)?;
        self.reserve(1)?;
        self.text.push(':');
        self.after_key = true;
        Ok(())
    }

    /// A member name for a value that is not text: a string as it is, anything else as its
    /// JSON text. `json` is the key's value as [`JsonText`] wrote it.
    pub fn key_json(&mut self, json: &str) -> Written {
        match json.starts_with('"') {
            // Already a quoted, escaped string: the name as it is.
            true => {
                self.item()?;
                self.reserve(json.len() + 1)?;
                self.text.push_str(json);
                self.text.push(':');
                self.after_key = true;
                Ok(())
            }
            false => self.key(json),
        }
    }

    /// Where the next byte goes, for [`JsonText::wrap_in_array`].
    pub fn mark(&self) -> usize {
        self.text.len()
    }

    /// Makes the one value written since `mark` the first item of an array, to which more
    /// may be written (AMQP 1.0: one body section is its value, several an array of them).
    pub fn wrap_in_array(&mut self, mark: usize) -> Written {
        self.reserve(2)?;
        self.text.insert(mark, '[');
        self.aside += 1;
        self.open.push((b']', true));
        Ok(())
    }

    /// The text written so far.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

/// How long `s` is once escaped for a JSON string (its quotes left out).
fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// `s` escaped as serde_json escapes it.
fn escape_into(out: &mut String, s: &str) {
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        match escape {
            "" => out.push_str(&format!("\\u{b:04x}")),
            e => out.push_str(e),
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_make_compact_json_with_escapes_as_serde_writes_them() {
        let mut j = JsonText::new(1000);
        j.begin_object().unwrap();
        j.key("a\"b").unwrap();
        j.begin_array().unwrap();
        for s in ["x\u{1}\n", "é"] {
            j.str(s).unwrap();
        }
        j.null().unwrap();
        j.f64(1.5).unwrap();
        j.f64(f64::NAN).unwrap();
        j.hex(&[0xde, 0xad]).unwrap();
        j.base64(b"hi").unwrap();
        j.lossy(b"ok\xff").unwrap();
        j.end().unwrap();
        j.key_json("7").unwrap();
        j.bool(true).unwrap();
        j.key_json("\"k\"").unwrap();
        j.i64(-3).unwrap();
        j.end().unwrap();
        let text = j.into_string();
        let expected = serde_json::json!({
            "a\"b": ["x\u{1}\n", "é", null, 1.5, "NaN", "dead", "aGk=", "ok\u{fffd}"],
            "7": true,
            "k": -3,
        });
        assert_eq!(text, expected.to_string());
    }

    #[test]
    fn past_the_limit_writing_fails_and_what_was_written_stays_within_it() {
        for limit in 0..70 {
            let mut j = JsonText::new(limit);
            let written = (|| {
                j.begin_array()?;
                for _ in 0..10 {
                    j.str("abc")?;
                }
                j.end()
            })();
            assert!(j.as_str().len() <= limit, "{limit}: {}", j.as_str());
            // ["abc",…] ten times is 61 bytes.
            assert_eq!(written.is_ok(), limit >= 61, "{limit}");
        }
        let mut j = JsonText::new(10);
        j.hold(8).unwrap();
        assert!(j.str("abc").is_err(), "held bytes count");
        j.release(8);
        j.str("abc").unwrap();
        assert_eq!(size(8 << 20), "8 MiB");
        assert_eq!(size(256 << 10), "256 KiB");
    }

    #[test]
    fn one_value_becomes_the_first_of_an_array() {
        let mut j = JsonText::new(100);
        let mark = j.mark();
        j.str("a").unwrap();
        j.wrap_in_array(mark).unwrap();
        j.u64(2).unwrap();
        j.end().unwrap();
        assert_eq!(j.as_str(), r#"["a",2]"#);
    }
}

//! PHP's `serialize()` format, read (pure), for Symfony Messenger's default `PhpSerializer`
//! bodies: `addslashes(serialize($envelope))`, base64-encoded when not UTF-8. Values are
//! read into a tree, bounded in depth; references and custom-serialized objects are kept as
//! opaque values, and nothing is ever instantiated.

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};

/// Nesting read at most (an envelope's stamps and exceptions sit well within it).
const MAX_DEPTH: usize = 48;

/// A serialized PHP value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(String),
    Str(Vec<u8>),
    /// An array's entries, in order.
    Array(Vec<(Value, Value)>),
    /// An object: its class and its properties, named as PHP serializes them
    /// (`\0Class\0name` private, `\0*\0name` protected, `name` public).
    Object(String, Vec<(Value, Value)>),
    /// A reference, an enum case or a custom-serialized object: not read further.
    Opaque,
}

impl Value {
    /// The property or entry named `name` (whatever its visibility), the last if repeated.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let entries = match self {
            Value::Array(e) | Value::Object(_, e) => e,
            _ => return None,
        };
        entries.iter().rev().find_map(|(k, v)| {
            let Value::Str(key) = k else { return None };
            let bare = key.rsplit(|b| *b == 0).next().unwrap_or(key);
            (bare == name.as_bytes()).then_some(v)
        })
    }

    pub fn text(&self) -> Option<String> {
        match self {
            Value::Str(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Value::Int(n) => Some(n.to_string()),
            _ => None,
        }
    }

    pub fn class(&self) -> Option<&str> {
        match self {
            Value::Object(class, _) => Some(class),
            _ => None,
        }
    }

    /// An array's values, in order.
    pub fn values(&self) -> impl Iterator<Item = &Value> {
        let entries = match self {
            Value::Array(e) => e.as_slice(),
            _ => &[],
        };
        entries.iter().map(|(_, v)| v)
    }
}

/// Symfony's transport encoding undone: base64 unless it is serialized data already
/// (Symfony asks whether it ends with `}`; the start says it of a cut body too), then
/// `stripslashes` where `addslashes` was applied (its first quote is escaped).
pub fn transport_decode(body: &str) -> Option<Vec<u8>> {
    let body = body.trim();
    let raw = match body.starts_with("O:") || body.ends_with('}') {
        true => body.as_bytes().to_vec(),
        false => BASE64.decode(body).ok()?,
    };
    let quote = raw.iter().position(|b| *b == b'"');
    match quote.is_some_and(|at| at > 0 && raw[at - 1] == b'\\') {
        true => Some(strip_slashes(&raw)),
        false => Some(raw),
    }
}

/// PHP's `stripslashes`: `\0` is NUL, `\x` is `x`.
fn strip_slashes(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'0')) => out.push(0),
            (b'\\', Some(&escaped)) => out.push(escaped),
            (b'\\', None) => {}
            (b, _) => {
                out.push(b);
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    out
}

/// Why bytes are not a serialized value: how, and the byte offset where it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{why} at byte {at}")]
pub struct UnserializeError {
    pub at: usize,
    pub why: Unreadable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// The bytes end inside a value (`at`: where the part that is cut starts).
    #[error("cut short")]
    CutShort,
    #[error("nested more than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("unknown type {0:?}")]
    UnknownType(char),
    /// A length, count or integer that is not a number (of its type's range).
    #[error("a bad number")]
    BadNumber,
    #[error("{found:?} where {want:?} belongs")]
    Unexpected { found: char, want: char },
}

/// Reads one serialized value from the start of `bytes`.
pub fn unserialize(bytes: &[u8]) -> Result<Value, UnserializeError> {
    let mut reader = Reader { bytes, at: 0 };
    reader.value(0)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(at: usize, why: Unreadable) -> UnserializeError {
        UnserializeError { at, why }
    }

    fn value(&mut self, depth: usize) -> Result<Value, UnserializeError> {
        if depth > MAX_DEPTH {
            return Err(Self::error(self.at, Unreadable::TooDeep));
        }
        let kind = self.byte()?;
        if kind == b'N' {
            self.expect(b';')?;
            return Ok(Value::Null);
        }
        self.expect(b':')?;
        match kind {
            b'b' => Ok(Value::Bool(self.until(b';')? == b"1")),
            b'i' => Ok(Value::Int(self.number(b';')?)),
            b'd' => Ok(Value::Float(
                String::from_utf8_lossy(self.until(b';')?).into_owned(),
            )),
            b's' => {
                let s = self.string()?;
                self.expect(b';')?;
                Ok(Value::Str(s))
            }
            b'a' => Ok(Value::Array(self.entries(depth)?)),
            b'O' => {
                let class = String::from_utf8_lossy(&self.string()?).into_owned();
                self.expect(b':')?;
                Ok(Value::Object(class, self.entries(depth)?))
            }
            b'r' | b'R' => self.until(b';').map(|_| Value::Opaque),
            b'E' => {
                self.string()?;
                self.expect(b';').map(|_| Value::Opaque)
            }
            b'C' => {
                self.string()?;
                self.expect(b':')?;
                let len = self.number(b':')?;
                self.expect(b'{')?;
                self.take(len)?;
                self.expect(b'}').map(|_| Value::Opaque)
            }
            other => Err(Self::error(
                self.at - 2,
                Unreadable::UnknownType(other as char),
            )),
        }
    }

    /// `n:{key;value;…}`
    fn entries(&mut self, depth: usize) -> Result<Vec<(Value, Value)>, UnserializeError> {
        let n = self.number(b':')?;
        self.expect(b'{')?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push((self.value(depth + 1)?, self.value(depth + 1)?));
        }
        self.expect(b'}')?;
        Ok(out)
    }

    /// `n:"bytes"` (the length in bytes).
    fn string(&mut self) -> Result<Vec<u8>, UnserializeError> {
        let len = self.number(b':')?;
        self.expect(b'"')?;
        let s = self.take(len)?.to_vec();
        self.expect(b'"')?;
        Ok(s)
    }

    /// A number up to `end` (`at`: where its digits start).
    fn number<T: std::str::FromStr>(&mut self, end: u8) -> Result<T, UnserializeError> {
        let at = self.at;
        let digits = self.until(end)?;
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or(Self::error(at, Unreadable::BadNumber))
    }

    fn until(&mut self, end: u8) -> Result<&[u8], UnserializeError> {
        let rest = &self.bytes[self.at..];
        let len = rest
            .iter()
            .position(|b| *b == end)
            .ok_or(Self::error(self.at, Unreadable::CutShort))?;
        self.at += len + 1;
        Ok(&rest[..len])
    }

    fn take(&mut self, len: usize) -> Result<&[u8], UnserializeError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|e| *e <= self.bytes.len())
            .ok_or(Self::error(self.at, Unreadable::CutShort))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, UnserializeError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or(Self::error(self.at, Unreadable::CutShort))?;
        self.at += 1;
        Ok(b)
    }

    fn expect(&mut self, want: u8) -> Result<(), UnserializeError> {
        match self.byte()? {
            b if b == want => Ok(()),
            b => Err(Self::error(
                self.at - 1,
                Unreadable::Unexpected {
                    found: b as char,
                    want: want as char,
                },
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_every_kind_are_read() {
        let v = unserialize(br#"a:6:{i:0;N;s:1:"b";b:1;i:2;d:0.5;s:3:"o\0";O:3:"Foo":1:{s:3:"bar";s:2:"hi";}i:4;r:1;i:5;E:7:"Suit:Up";}"#);
        let v = v.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.get("b"), Some(&Value::Bool(true)));
        assert_eq!(v.values().count(), 6);
    }

    #[test]
    fn private_properties_are_found_by_name() {
        let bytes = b"O:3:\"Foo\":2:{s:8:\"\0Foo\0bar\";s:2:\"hi\";s:6:\"\0*\0baz\";i:7;}".to_vec();
        let v = unserialize(&bytes).unwrap();
        assert_eq!(v.class(), Some("Foo"));
        assert_eq!(v.get("bar").and_then(Value::text).as_deref(), Some("hi"));
        assert_eq!(v.get("baz").and_then(Value::text).as_deref(), Some("7"));
        assert_eq!(v.get("qux"), None);
    }

    #[test]
    fn broken_input_is_an_error_never_a_panic() {
        use Unreadable::*;
        for (bad, at, why) in [
            (&b""[..], 0, CutShort),
            (b"s:5:\"ab\";", 5, CutShort),
            (b"a:9:{", 5, CutShort),
            // A count no array has (past i32).
            (b"a:99999999999:{", 2, BadNumber),
            (b"O:1:\"A\":1:{s:1:\"a\";", 19, CutShort),
            (b"x:1;", 0, UnknownType('x')),
            (b"i:abc;", 2, BadNumber),
            (b"s:-1:\"\";", 2, BadNumber),
            (
                b"s:1:\"ab\";",
                6,
                Unexpected {
                    found: 'b',
                    want: '"',
                },
            ),
        ] {
            assert_eq!(
                unserialize(bad),
                Err(UnserializeError { at, why }),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "a:1:{i:0;".repeat(100) + "N;" + &"}".repeat(100);
        let err = unserialize(deep.as_bytes()).unwrap_err();
        assert_eq!(err.why, TooDeep);
        assert_eq!(
            err.to_string(),
            format!("nested more than 48 levels at byte {}", err.at)
        );
        assert_eq!(
            unserialize(b"s:1:\"ab\";").unwrap_err().to_string(),
            r#"'b' where '"' belongs at byte 6"#
        );
    }

    #[test]
    fn slashes_and_base64_are_undone() {
        assert_eq!(strip_slashes(br#"a\"b\\c\0d\"#), b"a\"b\\c\0d");
        let encoded = BASE64.encode(br#"O:1:\"A\":0:{}"#);
        assert_eq!(transport_decode(&encoded).unwrap(), br#"O:1:"A":0:{}"#);
        assert_eq!(
            transport_decode(r#"O:1:"A\B":0:{}"#).unwrap(),
            br#"O:1:"A\B":0:{}"#
        );
        assert_eq!(transport_decode("not base64!"), None);
    }
}

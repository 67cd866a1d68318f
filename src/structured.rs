//! MessagePack, CBOR, AMQP 1.0 and Protocol Buffers bodies as JSON values (pure), so that the
//! viewer, search, business fields and masks treat them as the JSON they stand for (Celery's
//! `msgpack` serializer, `application/x-msgpack`, `application/cbor`, what RabbitMQ 4 marks
//! `type: amqp-1.0`, in `amqp10`, and protobuf messages of configured schemas, in
//! `protobuf`). Decoding is bounded: nesting depth, and no allocation larger than the bytes
//! left, whatever a length prefix claims. Byte strings become hex strings (base64 in
//! protobuf, as its JSON has them), extension types `{"ext": type, "hex": …}`, non-text map
//! keys their JSON text.

use std::fmt;

use serde_json::{Map, Number, Value};

use crate::body::Encoding;

mod amqp10;
pub mod protobuf;

/// Deepest nesting decoded (serde_json reads the text back with a limit of 128).
pub const MAX_DEPTH: usize = 100;

/// The binary formats decoded.
#[derive(Debug, Clone, Copy)]
pub enum Format<'a> {
    MessagePack,
    Cbor,
    /// AMQP 1.0 body sections, as RabbitMQ 4 passes them to 0-9-1 consumers.
    Amqp10,
    /// A protobuf message of a configured type (its full name).
    Protobuf(&'a protobuf::Schemas, &'a str),
    /// A body declared protobuf whose type is not known: fields by number, as `protoc
    /// --decode_raw` shows them.
    RawProtobuf,
}

impl<'a> Format<'a> {
    /// The format of a body: a protobuf message its headers or `type` name, else what its
    /// content type or `type` property names, if one of these.
    pub fn of(encoding: &Encoding<'a>) -> Option<Format<'a>> {
        let (content_type, message_type) = (encoding.content_type, encoding.message_type);
        if let Some(schemas) = encoding.schemas {
            if let Some(name) = schemas.message_for(message_type, content_type, encoding.headers) {
                return Some(Format::Protobuf(schemas, name));
            }
        }
        if message_type.is_some_and(|t| t.eq_ignore_ascii_case("amqp-1.0")) {
            return Some(Format::Amqp10);
        }
        let essence = content_type?.split(';').next()?.trim().to_ascii_lowercase();
        match essence.as_str() {
            "application/x-msgpack" | "application/msgpack" | "application/vnd.msgpack" => {
                Some(Format::MessagePack)
            }
            "application/cbor" => Some(Format::Cbor),
            "application/x-protobuf"
            | "application/protobuf"
            | "application/vnd.google.protobuf"
            | "application/x-google-protobuf" => Some(Format::RawProtobuf),
            _ => None,
        }
    }
}

impl fmt::Display for Format<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::MessagePack => f.write_str("MessagePack"),
            Format::Cbor => f.write_str("CBOR"),
            Format::Amqp10 => f.write_str("AMQP 1.0"),
            Format::Protobuf(_, name) => write!(f, "Protocol Buffers message {name}"),
            Format::RawProtobuf => f.write_str("Protocol Buffers (type unknown, fields by number)"),
        }
    }
}

/// The one value `bytes` hold, or why they do not hold one.
pub fn to_json(bytes: &[u8], format: Format<'_>) -> Result<Value, String> {
    let mut reader = Reader { bytes, at: 0 };
    let value = match format {
        Format::MessagePack => reader.msgpack(0),
        Format::Cbor => reader.cbor(0),
        Format::Amqp10 => amqp10::sections(&mut reader),
        Format::Protobuf(schemas, name) => {
            reader.at = bytes.len();
            schemas.to_json(bytes, name)
        }
        Format::RawProtobuf => {
            reader.at = bytes.len();
            protobuf::Schemas::default().to_json(bytes, "")
        }
    }
    .map_err(|e| format!("{format} does not decode: {e}"))?;
    if reader.at != bytes.len() {
        return Err(format!(
            "{format} does not decode: {} bytes after the value",
            bytes.len() - reader.at
        ));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

pub(crate) type Decoded = Result<Value, String>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!(
                "{n} bytes claimed at byte {}, {left} left",
                self.at
            ));
        }
        let out = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, size: usize) -> Result<u64, String> {
        Ok(self
            .take(size as u64)?
            .iter()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    }

    /// How many items of at least one byte each may follow: never more than the bytes left.
    fn capacity(&self, claimed: u64) -> usize {
        claimed.min((self.bytes.len() - self.at) as u64) as usize
    }

    fn nested(depth: usize) -> Result<usize, String> {
        match depth < MAX_DEPTH {
            true => Ok(depth + 1),
            false => Err(format!("nested deeper than {MAX_DEPTH} levels")),
        }
    }

    fn msgpack(&mut self, depth: usize) -> Decoded {
        let b = self.byte()?;
        Ok(match b {
            0x00..=0x7f => Value::from(b),
            0xe0..=0xff => Value::from(b as i8),
            0x80..=0x8f => return self.msgpack_map(u64::from(b & 0x0f), depth),
            0x90..=0x9f => return self.msgpack_array(u64::from(b & 0x0f), depth),
            0xa0..=0xbf => text(self.take(u64::from(b & 0x1f))?),
            0xc0 => Value::Null,
            0xc1 => return Err("the never-used byte 0xc1".into()),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (b - 0xc4))?;
                Value::String(hex(self.take(n)?))
            }
            0xc7..=0xc9 => {
                let n = self.uint(1 << (b - 0xc7))?;
                let kind = self.byte()? as i8;
                ext(kind, self.take(n)?)
            }
            0xca => float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::from(self.uint(1 << (b - 0xcc))?),
            0xd0..=0xd3 => {
                let size = 1 << (b - 0xd0);
                let n = self.uint(size)?;
                // Sign-extend from `size` bytes.
                let shift = 64 - 8 * size as u32;
                Value::from(((n << shift) as i64) >> shift)
            }
            0xd4..=0xd8 => {
                let kind = self.byte()? as i8;
                ext(kind, self.take(1 << (b - 0xd4))?)
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (b - 0xd9))?;
                text(self.take(n)?)
            }
            0xdc | 0xdd => {
                let n = self.uint(2 << (b - 0xdc))?;
                return self.msgpack_array(n, depth);
            }
            0xde | 0xdf => {
                let n = self.uint(2 << (b - 0xde))?;
                return self.msgpack_map(n, depth);
            }
        })
    }

    fn msgpack_array(&mut self, n: u64, depth: usize) -> Decoded {
        let depth = Self::nested(depth)?;
        let mut items = Vec::with_capacity(self.capacity(n));
        for _ in 0..n {
            items.push(self.msgpack(depth)?);
        }
        Ok(Value::Array(items))
    }

    fn msgpack_map(&mut self, n: u64, depth: usize) -> Decoded {
        let depth = Self::nested(depth)?;
        let mut map = Map::new();
        for _ in 0..n {
            let key = key(self.msgpack(depth)?);
            map.insert(key, self.msgpack(depth)?);
        }
        Ok(Value::Object(map))
    }

    /// A CBOR head's argument: the length, count or value its additional information says.
    fn argument(&mut self, info: u8) -> Result<Option<u64>, String> {
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24..=27 => self.uint(1 << (info - 24))?,
            31 => return Ok(None), // indefinite length
            _ => return Err(format!("reserved additional information {info}")),
        }))
    }

    fn cbor(&mut self, depth: usize) -> Decoded {
        let b = self.byte()?;
        let (major, info) = (b >> 5, b & 0x1f);
        if major == 7 {
            return Ok(match info {
                20 => Value::Bool(false),
                21 => Value::Bool(true),
                22 | 23 => Value::Null,
                25 => float(half(self.uint(2)? as u16)),
                26 => float(f64::from(f32::from_bits(self.uint(4)? as u32))),
                27 => float(f64::from_bits(self.uint(8)?)),
                24 => Value::from(self.byte()?),
                0..=19 => Value::from(info),
                _ => {
                    return Err(format!(
                        "unexpected simple value {info} at byte {}",
                        self.at
                    ))
                }
            });
        }
        let argument = self.argument(info)?;
        match (major, argument) {
            (0, Some(n)) => Ok(Value::from(n)),
            (1, Some(n)) => Ok(match i64::try_from(n) {
                Ok(n) => Value::from(-1 - n),
                Err(_) => float(-1.0 - n as f64),
            }),
            (2 | 3, Some(n)) => {
                let bytes = self.take(n)?;
                Ok(if major == 3 {
                    text(bytes)
                } else {
                    Value::String(hex(bytes))
                })
            }
            (2 | 3, None) => {
                // Chunks of the same major type, up to a break.
                let mut all = Vec::new();
                loop {
                    if self.bytes.get(self.at) == Some(&0xff) {
                        self.at += 1;
                        break;
                    }
                    let head = self.byte()?;
                    if head >> 5 != major {
                        return Err("a chunk of another type in an indefinite string".into());
                    }
                    let n = self
                        .argument(head & 0x1f)?
                        .ok_or("a nested indefinite string")?;
                    all.extend_from_slice(self.take(n)?);
                }
                Ok(if major == 3 {
                    text(&all)
                } else {
                    Value::String(hex(&all))
                })
            }
            (4, n) => {
                let depth = Self::nested(depth)?;
                let mut items = Vec::with_capacity(self.capacity(n.unwrap_or(0)));
                while self.more(n, items.len())? {
                    items.push(self.cbor(depth)?);
                }
                Ok(Value::Array(items))
            }
            (5, n) => {
                let depth = Self::nested(depth)?;
                let mut map = Map::new();
                let mut count = 0;
                while self.more(n, count)? {
                    let key = key(self.cbor(depth)?);
                    map.insert(key, self.cbor(depth)?);
                    count += 1;
                }
                Ok(Value::Object(map))
            }
            // A tag (a date, a big number, …): its content as it is.
            (6, Some(_)) => self.cbor(Self::nested(depth)?),
            _ => Err(format!("malformed head 0x{b:02x} at byte {}", self.at - 1)),
        }
    }

    /// Whether another item follows: `count` of `n`, or until a break when `n` is indefinite.
    fn more(&mut self, n: Option<u64>, count: usize) -> Result<bool, String> {
        match n {
            Some(n) => Ok((count as u64) < n),
            None if self.bytes.get(self.at) == Some(&0xff) => {
                self.at += 1;
                Ok(false)
            }
            None if self.at < self.bytes.len() => Ok(true),
            None => Err("an indefinite array or map without its break".into()),
        }
    }
}

fn text(bytes: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ext(kind: i8, data: &[u8]) -> Value {
    serde_json::json!({"ext": kind, "hex": hex(data)})
}

/// A number JSON can hold; NaN and the infinities as their names.
pub(crate) fn float(f: f64) -> Value {
    Number::from_f64(f).map_or_else(|| Value::String(f.to_string()), Value::Number)
}

/// An IEEE 754 half-precision float.
fn half(bits: u16) -> f64 {
    let (sign, exponent, fraction) = (bits >> 15, (bits >> 10) & 0x1f, f64::from(bits & 0x3ff));
    let magnitude = match exponent {
        0 => fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(i32::from(e) - 15),
    };
    if sign == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// A map key as JSON holds one: text as it is, anything else as its JSON text.
fn key(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_come_from_the_content_type() {
        let format = |content_type, message_type| {
            let encoding = Encoding::new(content_type, None).with_message_type(message_type);
            Format::of(&encoding).map(|f| f.to_string())
        };
        assert_eq!(
            format(Some("application/x-msgpack"), None).as_deref(),
            Some("MessagePack")
        );
        assert_eq!(
            format(Some("Application/CBOR; x=1"), None).as_deref(),
            Some("CBOR")
        );
        assert_eq!(format(None, Some("amqp-1.0")).as_deref(), Some("AMQP 1.0"));
        assert!(format(Some("application/x-protobuf"), None)
            .unwrap()
            .contains("type unknown"));
        assert_eq!(format(Some("application/json"), None), None);
        assert_eq!(format(None, Some("order.created")), None);
    }

    #[test]
    fn messagepack_as_celery_sends_it() {
        // {"task": "tasks.add", "n": 1}, as kombu's msgpack serializer wrote it.
        let bytes = b"\x82\xa4task\xa9tasks.add\xa1n\x01";
        assert_eq!(
            to_json(bytes, Format::MessagePack).unwrap(),
            json!({"task": "tasks.add", "n": 1})
        );
    }

    #[test]
    fn messagepack_numbers_binaries_and_extensions() {
        let bytes = [
            0x97, 0xd0, 0x80, 0xe0, 0xcd, 0x01, 0x00, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xc4,
            0x02, 0xde, 0xad, 0xd4, 0x05, 0x07, 0xc0,
        ];
        assert_eq!(
            to_json(&bytes, Format::MessagePack).unwrap(),
            json!([-128, -32, 256, 1.5, "dead", {"ext": 5, "hex": "07"}, null])
        );
        // A non-text key.
        assert_eq!(
            to_json(&[0x81, 0x01, 0xc3], Format::MessagePack).unwrap(),
            json!({"1": true})
        );
    }

    #[test]
    fn cbor_values_as_json() {
        // {"a": [1, -2, "x", h'0102', 1.5 (half), true, null], "t": 0("2026-12-04")}
        let bytes = [
            0xa2, 0x61, b'a', 0x87, 0x01, 0x21, 0x61, b'x', 0x42, 0x01, 0x02, 0xf9, 0x3e, 0x00,
            0xf5, 0xf6, 0x61, b't', 0xc0, 0x6a, b'2', b'0', b'2', b'6', b'-', b'1', b'2', b'-',
            b'0', b'4',
        ];
        assert_eq!(
            to_json(&bytes, Format::Cbor).unwrap(),
            json!({"a": [1, -2, "x", "0102", 1.5, true, null], "t": "2026-12-04"})
        );
        // Indefinite lengths: [_ "ab" "c"] as one text in an indefinite array.
        let bytes = [0x9f, 0x7f, 0x62, b'a', b'b', 0x61, b'c', 0xff, 0xff];
        assert_eq!(to_json(&bytes, Format::Cbor).unwrap(), json!(["abc"]));
    }

    #[test]
    fn lies_and_depth_are_errors_not_allocations_or_crashes() {
        // An array claiming 4 billion items, with none.
        let err = to_json(&[0xdd, 0xff, 0xff, 0xff, 0xff], Format::MessagePack).unwrap_err();
        assert!(err.contains("left"), "{err}");
        let err = to_json(
            &[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            Format::Cbor,
        )
        .unwrap_err();
        assert!(err.contains("left"), "{err}");
        let deep = vec![0x91; 500];
        assert!(to_json(&deep, Format::MessagePack)
            .unwrap_err()
            .contains("nested deeper than 100"));
        let deep = vec![0x81; 500];
        assert!(to_json(&deep, Format::Cbor)
            .unwrap_err()
            .contains("nested deeper"));
        assert!(to_json(b"\x01\x02", Format::MessagePack)
            .unwrap_err()
            .contains("1 bytes after"));
        assert!(to_json(b"", Format::Cbor).is_err());
        assert!(to_json(&[0xc1], Format::MessagePack).is_err());
    }
}

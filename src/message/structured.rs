//! MessagePack, CBOR, AMQP 1.0 and Protocol Buffers bodies as JSON text (pure), so that the
//! viewer, search, business fields and masks treat them as the JSON they stand for (Celery's
//! `msgpack` serializer, `application/x-msgpack`, `application/cbor`, what RabbitMQ 4 marks
//! `type: amqp-1.0`, in `amqp10`, and protobuf messages of configured schemas, in
//! `protobuf`). Decoding is bounded by what it produces, not what it reads: the JSON is
//! written token by token within the caller's budget (`json`), never built as a tree, so a
//! body of one-byte values — or an AMQP 1.0 array of zero-byte ones — costs the budget at
//! most; nesting is bounded too, and a length prefix never allocates. Byte strings become hex
//! strings (base64 in protobuf, as its JSON has them), extension types `{"ext": type, "hex":
//! …}`, non-text map keys their JSON text; a repeated map key is written each time.
//!
//! Why not `rmpv` or `ciborium` (issue 34; measured by
//! `cargo bench --bench decoders --features decoder-crates`, figures in docs/benchmarks.md): each builds its value tree before any JSON is written, so 16 MiB
//! of MessagePack nils cost rmpv 960 MiB of peak heap and 43× our time (ours stops at the
//! 8 MiB budget with 12 MiB), CBOR nulls ciborium 768 MiB and 51×; their depth limits and
//! capped preallocation do hold against deep nesting and 4 GiB length prefixes, as ours do.
//! Streamed instead, through their serde deserializers and `serde-transcode` into a writer
//! that stops at the budget: rmp-serde does as well as ours (the same peak, 0.8–1.2× the
//! time), ciborium takes 1.8–4× our time and re-escapes a failing value's error at every level
//! it wraps (21 bytes, 20 arrays deep and cut short, cost 56 MiB; 100,000 deep, over 6 GiB).
//! What keeps our MessagePack is then what both crates write: byte strings and extension
//! types as arrays of numbers, text that is not UTF-8 as numbers (CBOR: refused), a map with
//! an array key refused whole — and the few lines saved beside the `JsonText` writer that
//! protobuf and AMQP 1.0 need anyway.

use std::fmt;

pub use self::encoding::{charset, compression_header, Encoding};

mod amqp10;
pub mod encoding;
mod json;
mod malformed;
pub mod protobuf;

pub use json::{size, JsonText, Written};
pub use malformed::{DecodeError, Malformed, Stop};

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

/// The one value `bytes` hold as compact JSON text of at most `limit` bytes, or why not:
/// [`DecodeError::TooLarge`] (with the text's start) when it would be longer.
pub fn to_json(bytes: &[u8], format: Format<'_>, limit: usize) -> Result<String, DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    let mut out = JsonText::new(limit);
    let written = match format {
        Format::MessagePack => reader.msgpack(&mut out, 0),
        Format::Cbor => reader.cbor(&mut out, 0),
        Format::Amqp10 => amqp10::sections(&mut reader, &mut out),
        Format::Protobuf(schemas, name) => {
            reader.at = bytes.len();
            schemas.write_json(bytes, name, &mut out)
        }
        Format::RawProtobuf => {
            reader.at = bytes.len();
            protobuf::Schemas::default().write_json(bytes, "", &mut out)
        }
    };
    let why = match written {
        Ok(()) if reader.at == bytes.len() => return Ok(out.into_string()),
        Ok(()) => Malformed::Trailing {
            count: bytes.len() - reader.at,
        },
        Err(Stop::Malformed(why)) => why,
        Err(Stop::Full) => {
            return Err(DecodeError::TooLarge {
                what: format.to_string(),
                limit,
                start: out.into_string(),
            })
        }
    };
    Err(DecodeError::Invalid {
        what: format.to_string(),
        why,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], Malformed> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(Malformed::Truncated {
                claimed: n,
                at: self.at,
                left,
            });
        }
        let out = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn uint(&mut self, size: usize) -> Result<u64, Malformed> {
        Ok(self
            .take(size as u64)?
            .iter()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    }

    /// One level deeper than `depth`, within [`MAX_DEPTH`].
    fn nested(depth: usize) -> Result<usize, Malformed> {
        match depth < MAX_DEPTH {
            true => Ok(depth + 1),
            false => Err(Malformed::TooDeep),
        }
    }

    /// A map key that is not text: the value `decode` writes, as its JSON text (within what
    /// is left of the budget).
    fn key(
        &mut self,
        out: &mut JsonText,
        depth: usize,
        decode: fn(&mut Self, &mut JsonText, usize) -> Written,
    ) -> Written {
        let mut key = JsonText::new(out.room());
        decode(self, &mut key, depth)?;
        out.key_json(key.as_str())
    }

    fn msgpack(&mut self, out: &mut JsonText, depth: usize) -> Written {
        let b = self.byte()?;
        match b {
            0x00..=0x7f => out.u64(u64::from(b)),
            0xe0..=0xff => out.i64(i64::from(b as i8)),
            0x80..=0x8f => self.msgpack_map(out, u64::from(b & 0x0f), depth),
            0x90..=0x9f => self.msgpack_array(out, u64::from(b & 0x0f), depth),
            0xa0..=0xbf => out.lossy(self.take(u64::from(b & 0x1f))?),
            0xc0 => out.null(),
            0xc1 => Err(Malformed::NeverUsed.into()),
            0xc2 => out.bool(false),
            0xc3 => out.bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (b - 0xc4))?;
                out.hex(self.take(n)?)
            }
            0xc7..=0xc9 => {
                let n = self.uint(1 << (b - 0xc7))?;
                let kind = self.byte()? as i8;
                ext(out, kind, self.take(n)?)
            }
            0xca => out.f64(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => out.f64(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => out.u64(self.uint(1 << (b - 0xcc))?),
            0xd0..=0xd3 => {
                let size = 1 << (b - 0xd0);
                let n = self.uint(size)?;
                // Sign-extend from `size` bytes.
                let shift = 64 - 8 * size as u32;
                out.i64(((n << shift) as i64) >> shift)
            }
            0xd4..=0xd8 => {
                let kind = self.byte()? as i8;
                ext(out, kind, self.take(1 << (b - 0xd4))?)
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (b - 0xd9))?;
                out.lossy(self.take(n)?)
            }
            0xdc | 0xdd => {
                let n = self.uint(2 << (b - 0xdc))?;
                self.msgpack_array(out, n, depth)
            }
            0xde | 0xdf => {
                let n = self.uint(2 << (b - 0xde))?;
                self.msgpack_map(out, n, depth)
            }
        }
    }

    fn msgpack_array(&mut self, out: &mut JsonText, n: u64, depth: usize) -> Written {
        let depth = Self::nested(depth)?;
        out.begin_array()?;
        for _ in 0..n {
            self.msgpack(out, depth)?;
        }
        out.end()
    }

    fn msgpack_map(&mut self, out: &mut JsonText, n: u64, depth: usize) -> Written {
        let depth = Self::nested(depth)?;
        out.begin_object()?;
        for _ in 0..n {
            // Text keys (nearly all) as they are; others as their JSON text.
            let text = match self.peek() {
                Some(b @ 0xa0..=0xbf) => {
                    self.at += 1;
                    Some(u64::from(b & 0x1f))
                }
                Some(b @ 0xd9..=0xdb) => {
                    self.at += 1;
                    Some(self.uint(1 << (b - 0xd9))?)
                }
                _ => None,
            };
            match text {
                Some(n) => out.key_lossy(self.take(n)?)?,
                None => self.key(out, depth, Self::msgpack)?,
            }
            self.msgpack(out, depth)?;
        }
        out.end()
    }

    /// A CBOR head's argument: the length, count or value its additional information says.
    fn argument(&mut self, info: u8) -> Result<Option<u64>, Malformed> {
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24..=27 => self.uint(1 << (info - 24))?,
            31 => return Ok(None), // indefinite length
            _ => return Err(Malformed::ReservedInfo { info }),
        }))
    }

    fn cbor(&mut self, out: &mut JsonText, depth: usize) -> Written {
        let b = self.byte()?;
        let (major, info) = (b >> 5, b & 0x1f);
        if major == 7 {
            return match info {
                20 => out.bool(false),
                21 => out.bool(true),
                22 | 23 => out.null(),
                25 => out.f64(half(self.uint(2)? as u16)),
                26 => out.f64(f64::from(f32::from_bits(self.uint(4)? as u32))),
                27 => out.f64(f64::from_bits(self.uint(8)?)),
                24 => out.u64(u64::from(self.byte()?)),
                0..=19 => out.u64(u64::from(info)),
                _ => Err(Malformed::SimpleValue {
                    value: info,
                    at: self.at,
                }
                .into()),
            };
        }
        let argument = self.argument(info)?;
        match (major, argument) {
            (0, Some(n)) => out.u64(n),
            (1, Some(n)) => match i64::try_from(n) {
                Ok(n) => out.i64(-1 - n),
                Err(_) => out.f64(-1.0 - n as f64),
            },
            (2, Some(n)) => out.hex(self.take(n)?),
            (3, Some(n)) => out.lossy(self.take(n)?),
            (2 | 3, None) => {
                let all = self.chunks(major)?;
                match major {
                    3 => out.lossy(&all),
                    _ => out.hex(&all),
                }
            }
            (4, n) => {
                let depth = Self::nested(depth)?;
                out.begin_array()?;
                let mut count = 0;
                while self.more(n, count)? {
                    self.cbor(out, depth)?;
                    count += 1;
                }
                out.end()
            }
            (5, n) => {
                let depth = Self::nested(depth)?;
                out.begin_object()?;
                let mut count = 0;
                while self.more(n, count)? {
                    match self.peek() {
                        // A text key of a definite length, as it is.
                        Some(head) if head >> 5 == 3 && head & 0x1f != 31 => {
                            self.at += 1;
                            let len = self.argument(head & 0x1f)?.unwrap_or(0);
                            out.key_lossy(self.take(len)?)?;
                        }
                        _ => self.key(out, depth, Self::cbor)?,
                    }
                    self.cbor(out, depth)?;
                    count += 1;
                }
                out.end()
            }
            // A tag (a date, a big number, …): its content as it is.
            (6, Some(_)) => self.cbor(out, Self::nested(depth)?),
            _ => Err(Malformed::Head {
                head: b,
                at: self.at - 1,
            }
            .into()),
        }
    }

    /// An indefinite string's chunks of the same major type, up to a break, joined (never
    /// longer than the bytes they were read from).
    fn chunks(&mut self, major: u8) -> Result<Vec<u8>, Malformed> {
        let mut all = Vec::new();
        loop {
            if self.peek() == Some(0xff) {
                self.at += 1;
                return Ok(all);
            }
            let head = self.byte()?;
            if head >> 5 != major {
                return Err(Malformed::ChunkType);
            }
            let n = self
                .argument(head & 0x1f)?
                .ok_or(Malformed::NestedIndefinite)?;
            all.extend_from_slice(self.take(n)?);
        }
    }

    /// Whether another item follows: `count` of `n`, or until a break when `n` is indefinite.
    fn more(&mut self, n: Option<u64>, count: u64) -> Result<bool, Malformed> {
        match n {
            Some(n) => Ok(count < n),
            None if self.peek() == Some(0xff) => {
                self.at += 1;
                Ok(false)
            }
            None if self.at < self.bytes.len() => Ok(true),
            None => Err(Malformed::NoBreak),
        }
    }
}

/// A MessagePack extension value: `{"ext": type, "hex": …}`.
fn ext(out: &mut JsonText, kind: i8, data: &[u8]) -> Written {
    out.begin_object()?;
    out.key("ext")?;
    out.i64(i64::from(kind))?;
    out.key("hex")?;
    out.hex(data)?;
    out.end()
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON value a decode writes (its text parsed back), or why not.
    pub(crate) fn decode(
        bytes: &[u8],
        format: Format<'_>,
    ) -> Result<serde_json::Value, DecodeError> {
        to_json(bytes, format, 1 << 20)
            .map(|text| serde_json::from_str(&text).expect("a decode writes JSON"))
    }

    /// How `bytes` are not `format` (they must not decode).
    pub(crate) fn malformed(bytes: &[u8], format: Format<'_>) -> Malformed {
        match decode(bytes, format) {
            Err(DecodeError::Invalid { what, why }) => {
                assert_eq!(what, format.to_string());
                why
            }
            other => panic!("{format} decoded: {other:?}"),
        }
    }

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
            decode(bytes, Format::MessagePack).unwrap(),
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
            decode(&bytes, Format::MessagePack).unwrap(),
            json!([-128, -32, 256, 1.5, "dead", {"ext": 5, "hex": "07"}, null])
        );
        // A non-text key.
        assert_eq!(
            decode(&[0x81, 0x01, 0xc3], Format::MessagePack).unwrap(),
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
            decode(&bytes, Format::Cbor).unwrap(),
            json!({"a": [1, -2, "x", "0102", 1.5, true, null], "t": "2026-12-04"})
        );
        // Indefinite lengths: [_ "ab" "c"] as one text in an indefinite array.
        let bytes = [0x9f, 0x7f, 0x62, b'a', b'b', 0x61, b'c', 0xff, 0xff];
        assert_eq!(decode(&bytes, Format::Cbor).unwrap(), json!(["abc"]));
    }

    #[test]
    fn lies_and_depth_are_errors_not_allocations_or_crashes() {
        // An array claiming 4 billion items, with none: its first is missing.
        let truncated = |at| Malformed::Truncated {
            claimed: 1,
            at,
            left: 0,
        };
        let lie = [0xdd, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(malformed(&lie, Format::MessagePack), truncated(5));
        let lie = [0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(malformed(&lie, Format::Cbor), truncated(9));
        assert_eq!(
            malformed(&[0x91; 500], Format::MessagePack),
            Malformed::TooDeep
        );
        assert_eq!(malformed(&[0x81; 500], Format::Cbor), Malformed::TooDeep);
        assert_eq!(
            malformed(b"\x01\x02", Format::MessagePack),
            Malformed::Trailing { count: 1 }
        );
        assert_eq!(malformed(b"", Format::Cbor), truncated(0));
        assert_eq!(
            malformed(&[0xc1], Format::MessagePack),
            Malformed::NeverUsed
        );
        // As the viewer says it.
        assert_eq!(
            decode(&[0x91; 500], Format::MessagePack)
                .unwrap_err()
                .to_string(),
            "MessagePack does not decode: nested deeper than 100 levels"
        );
        assert_eq!(
            decode(&lie, Format::Cbor).unwrap_err().to_string(),
            "CBOR does not decode: 1 bytes claimed at byte 9, 0 left"
        );
    }
}

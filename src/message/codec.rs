//! AMQP 0-9-1 field tables, values and basic properties ⇄ bytes, exactly as RabbitMQ writes
//! them (pure). Decoding never recurses deeper than [`MAX_DEPTH`]: a table or array below
//! that is kept as its encoded bytes (tables and arrays carry their byte length, so skipping
//! one costs nothing), and short strings are bytes, so every frame the broker can deliver
//! decodes, and encoding the result gives the same bytes back.

use crate::message::headers::{AmqpValue, Bytes, JsonFloat, MessageProperties, Table, MAX_DEPTH};

/// Frames larger than this are refused. RabbitMQ does not split a content header, and
/// dead-lettering can grow one past the negotiated frame size.
pub const MAX_INBOUND_FRAME: usize = 64 * 1024 * 1024;

/// Why bytes are not a well-formed AMQP value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} ends early")]
    Truncated(&'static str),
    #[error("unknown field type {0:?}")]
    UnknownType(char),
    #[error("{0}")]
    Invalid(String),
}

/// Why a value cannot be written as AMQP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what} is {len} bytes; AMQP short strings hold at most 255")]
    ShortStringTooLong { what: String, len: usize },
    #[error("a table or value of {0} bytes is larger than AMQP can carry")]
    TooLarge(usize),
}

/// Reads AMQP primitives from a byte slice.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or(DecodeError::Truncated(what))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1, "an octet")?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(
            self.take(2, "a short")?.try_into().unwrap(),
        ))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(
            self.take(4, "a long")?.try_into().unwrap(),
        ))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(
            self.take(8, "a long long")?.try_into().unwrap(),
        ))
    }

    pub fn short_string(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u8()? as usize;
        Ok(Bytes(self.take(len, "a short string")?.to_vec()))
    }

    pub fn long_string(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        Ok(Bytes(self.take(len, "a long string")?.to_vec()))
    }

    /// A field table (its byte length first).
    pub fn table(&mut self) -> Result<Table, DecodeError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len, "a table")?;
        decode_table_entries(bytes, 1)
    }
}

fn decode_table_entries(bytes: &[u8], depth: usize) -> Result<Table, DecodeError> {
    let mut r = Reader::new(bytes);
    let mut entries = Vec::new();
    while !r.is_empty() {
        let name = r.short_string()?;
        let value = value(&mut r, depth)?;
        entries.push((name, value));
    }
    Ok(entries.into_iter().collect())
}

fn decode_array_items(bytes: &[u8], depth: usize) -> Result<Vec<AmqpValue>, DecodeError> {
    let mut r = Reader::new(bytes);
    let mut items = Vec::new();
    while !r.is_empty() {
        items.push(value(&mut r, depth)?);
    }
    Ok(items)
}

/// One typed value (type tag first). `depth` is the nesting level of the table or array
/// holding it; a table or array that would be one level too deep stays encoded.
fn value(r: &mut Reader<'_>, depth: usize) -> Result<AmqpValue, DecodeError> {
    let start = r.pos;
    let tag = r.u8()?;
    Ok(match tag {
        b't' => AmqpValue::Boolean(r.u8()? != 0),
        b'b' => AmqpValue::ShortShortInt(r.u8()? as i8),
        b'B' => AmqpValue::ShortShortUint(r.u8()?),
        // RabbitMQ's `s` is a signed short (the spec's `U`), not a short string.
        b's' | b'U' => AmqpValue::ShortInt(r.u16()? as i16),
        b'u' => AmqpValue::ShortUint(r.u16()?),
        b'I' => AmqpValue::LongInt(r.u32()? as i32),
        b'i' => AmqpValue::LongUint(r.u32()?),
        b'l' | b'L' => AmqpValue::LongLongInt(r.u64()? as i64),
        b'f' => AmqpValue::Float(JsonFloat(f32::from_bits(r.u32()?))),
        b'd' => AmqpValue::Double(JsonFloat(f64::from_bits(r.u64()?))),
        b'D' => AmqpValue::Decimal {
            scale: r.u8()?,
            value: r.u32()?,
        },
        b'S' => AmqpValue::LongString(r.long_string()?),
        b'x' => AmqpValue::ByteArray(r.long_string()?),
        b'T' => AmqpValue::Timestamp(r.u64()?),
        b'V' => AmqpValue::Void,
        b'F' | b'A' => {
            let len = r.u32()? as usize;
            let bytes = r.take(len, if tag == b'F' { "a table" } else { "an array" })?;
            if depth >= MAX_DEPTH {
                AmqpValue::Encoded(r.buf[start..r.pos].to_vec())
            } else if tag == b'F' {
                AmqpValue::Table(decode_table_entries(bytes, depth + 1)?)
            } else {
                AmqpValue::Array(decode_array_items(bytes, depth + 1)?)
            }
        }
        other => return Err(DecodeError::UnknownType(other as char)),
    })
}

/// Decodes a field table from its bytes (without the length prefix).
pub fn decode_table(bytes: &[u8]) -> Result<Table, DecodeError> {
    decode_table_entries(bytes, 1)
}

/// Appends AMQP primitives to a buffer.
pub trait Writer {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_short_string(&mut self, what: &str, v: &[u8]) -> Result<(), EncodeError>;
    fn put_long_string(&mut self, v: &[u8]) -> Result<(), EncodeError>;
    fn put_table(&mut self, t: &Table) -> Result<(), EncodeError>;
}

impl Writer for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }

    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }

    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }

    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }

    fn put_short_string(&mut self, what: &str, v: &[u8]) -> Result<(), EncodeError> {
        let len = u8::try_from(v.len()).map_err(|_| EncodeError::ShortStringTooLong {
            what: what.to_owned(),
            len: v.len(),
        })?;
        self.push(len);
        self.extend_from_slice(v);
        Ok(())
    }

    fn put_long_string(&mut self, v: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(v.len()).map_err(|_| EncodeError::TooLarge(v.len()))?;
        self.put_u32(len);
        self.extend_from_slice(v);
        Ok(())
    }

    fn put_table(&mut self, t: &Table) -> Result<(), EncodeError> {
        let at = self.len();
        self.put_u32(0);
        for (name, v) in t {
            self.put_short_string(
                &format!("header name {:?}", name.to_text()),
                name.as_bytes(),
            )?;
            put_value(self, v)?;
        }
        patch_length(self, at)
    }
}

/// Writes the byte length of what follows `at` into the four bytes at `at`.
fn patch_length(out: &mut [u8], at: usize) -> Result<(), EncodeError> {
    let len = out.len() - at - 4;
    let len32 = u32::try_from(len).map_err(|_| EncodeError::TooLarge(len))?;
    out[at..at + 4].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

/// Reads a table's typed JSON as the archive stores it. Archives written before nesting was
/// bounded may hold tables too deep for serde_json's limit (128): those are read on a thread
/// with a stack for them, and their deep parts encoded as [`decode_table`] leaves them (see
/// [`MAX_DEPTH`]).
pub fn table_from_stored_json(text: &str) -> Result<Table, serde_json::Error> {
    match serde_json::from_str(text) {
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            let text = text.to_owned();
            std::thread::Builder::new()
                .name("lazarus-deep-json".into())
                .stack_size(DEEP_JSON_STACK)
                .spawn(move || {
                    let mut de = serde_json::Deserializer::from_str(&text);
                    de.disable_recursion_limit();
                    let mut table = <Table as serde::Deserialize>::deserialize(&mut de)?;
                    bound_depth(&mut table, 1);
                    Ok(table)
                })
                .expect("a thread can be started")
                .join()
                .unwrap_or_else(|_| Err(serde::de::Error::custom("the table is too deep to read")))
        }
        other => other,
    }
}

/// Enough stack to read typed JSON of any table a 128 KiB frame can carry (measured: the
/// deepest, ~26,000 levels, needs about 60 MiB in a debug build). Reserved, not committed.
const DEEP_JSON_STACK: usize = 256 * 1024 * 1024;

/// Encodes the tables and arrays nested [`MAX_DEPTH`] levels or deeper, as the decoder leaves
/// them (`depth`: the level of this table's entries).
fn bound_depth(table: &mut Table, depth: usize) {
    for v in table.values_mut() {
        bound_value(v, depth);
    }
}

fn bound_value(v: &mut AmqpValue, depth: usize) {
    match v {
        AmqpValue::Table(_) | AmqpValue::Array(_) if depth >= MAX_DEPTH => {
            if let Ok(bytes) = encode_value(v) {
                *v = AmqpValue::Encoded(bytes);
            }
        }
        AmqpValue::Table(t) => bound_depth(t, depth + 1),
        AmqpValue::Array(items) => items.iter_mut().for_each(|i| bound_value(i, depth + 1)),
        _ => {}
    }
}

/// One value's wire encoding, type tag first (what [`AmqpValue::Encoded`] holds).
pub fn encode_value(v: &AmqpValue) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    put_value(&mut out, v)?;
    Ok(out)
}

fn put_value(out: &mut Vec<u8>, v: &AmqpValue) -> Result<(), EncodeError> {
    match v {
        AmqpValue::Boolean(b) => {
            out.put_u8(b't');
            out.put_u8(u8::from(*b));
        }
        AmqpValue::ShortShortInt(n) => {
            out.put_u8(b'b');
            out.put_u8(*n as u8);
        }
        AmqpValue::ShortShortUint(n) => {
            out.put_u8(b'B');
            out.put_u8(*n);
        }
        AmqpValue::ShortInt(n) => {
            out.put_u8(b's');
            out.put_u16(*n as u16);
        }
        AmqpValue::ShortUint(n) => {
            out.put_u8(b'u');
            out.put_u16(*n);
        }
        AmqpValue::LongInt(n) => {
            out.put_u8(b'I');
            out.put_u32(*n as u32);
        }
        AmqpValue::LongUint(n) => {
            out.put_u8(b'i');
            out.put_u32(*n);
        }
        AmqpValue::LongLongInt(n) => {
            out.put_u8(b'l');
            out.put_u64(*n as u64);
        }
        AmqpValue::Float(f) => {
            out.put_u8(b'f');
            out.put_u32(f.0.to_bits());
        }
        AmqpValue::Double(f) => {
            out.put_u8(b'd');
            out.put_u64(f.0.to_bits());
        }
        AmqpValue::Decimal { scale, value } => {
            out.put_u8(b'D');
            out.put_u8(*scale);
            out.put_u32(*value);
        }
        AmqpValue::ShortString(b) | AmqpValue::LongString(b) => {
            out.put_u8(b'S');
            out.put_long_string(&b.0)?;
        }
        AmqpValue::ByteArray(b) => {
            out.put_u8(b'x');
            out.put_long_string(&b.0)?;
        }
        AmqpValue::Timestamp(t) => {
            out.put_u8(b'T');
            out.put_u64(*t);
        }
        AmqpValue::Void => out.put_u8(b'V'),
        AmqpValue::Table(t) => {
            out.put_u8(b'F');
            out.put_table(t)?;
        }
        AmqpValue::Array(items) => {
            out.put_u8(b'A');
            let at = out.len();
            out.put_u32(0);
            for item in items {
                put_value(out, item)?;
            }
            patch_length(out, at)?;
        }
        AmqpValue::Encoded(bytes) => out.extend_from_slice(bytes),
    }
    Ok(())
}

/// The properties of a content header: what the message said about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContentHeader {
    pub body_size: u64,
    pub properties: MessageProperties,
    /// `None` when the message had no header table at all, which is not the same as empty.
    pub headers: Option<Table>,
}

// Property flags of the basic class, in wire order.
const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
const DELIVERY_MODE: u16 = 1 << 12;
const PRIORITY: u16 = 1 << 11;
const CORRELATION_ID: u16 = 1 << 10;
const REPLY_TO: u16 = 1 << 9;
const EXPIRATION: u16 = 1 << 8;
const MESSAGE_ID: u16 = 1 << 7;
const TIMESTAMP: u16 = 1 << 6;
const TYPE: u16 = 1 << 5;
const USER_ID: u16 = 1 << 4;
const APP_ID: u16 = 1 << 3;
const CLUSTER_ID: u16 = 1 << 2;

/// Decodes the payload of a content header frame. A header table that does not decode is
/// no reason to refuse the message: its bytes are kept (see [`UNDECODED_HEADERS`]) and the
/// problem is returned beside the rest.
pub fn decode_content_header(
    payload: &[u8],
) -> Result<(ContentHeader, Option<String>), DecodeError> {
    let mut r = Reader::new(payload);
    let _class = r.u16()?;
    let _weight = r.u16()?;
    let body_size = r.u64()?;
    let flags = r.u16()?;
    let mut flag_words = flags;
    while flag_words & 1 != 0 {
        // Continuation words name no property of the basic class.
        flag_words = r.u16()?;
    }
    let has = |f: u16| flags & f != 0;
    let short = |r: &mut Reader<'_>, f: u16| -> Result<Option<Bytes>, DecodeError> {
        if has(f) {
            r.short_string().map(Some)
        } else {
            Ok(None)
        }
    };
    let mut p = MessageProperties {
        content_type: short(&mut r, CONTENT_TYPE)?,
        content_encoding: short(&mut r, CONTENT_ENCODING)?,
        ..Default::default()
    };
    let mut problem = None;
    let headers = if has(HEADERS) {
        let len = r.u32()? as usize;
        let bytes = r.take(len, "the header table")?;
        match decode_table(bytes) {
            Ok(t) => Some(t),
            Err(e) => {
                problem = Some(format!(
                    "the header table could not be decoded ({e}); its {len} bytes are kept as {UNDECODED_HEADERS}"
                ));
                let mut raw = vec![b'F'];
                raw.put_u32(len as u32);
                raw.extend_from_slice(bytes);
                Some(Table::from([(UNDECODED_HEADERS, AmqpValue::Encoded(raw))]))
            }
        }
    } else {
        None
    };
    if has(DELIVERY_MODE) {
        p.delivery_mode = Some(r.u8()?);
    }
    if has(PRIORITY) {
        p.priority = Some(r.u8()?);
    }
    p.correlation_id = short(&mut r, CORRELATION_ID)?;
    p.reply_to = short(&mut r, REPLY_TO)?;
    p.expiration = short(&mut r, EXPIRATION)?;
    p.message_id = short(&mut r, MESSAGE_ID)?;
    if has(TIMESTAMP) {
        p.timestamp = Some(r.u64()?);
    }
    p.kind = short(&mut r, TYPE)?;
    p.user_id = short(&mut r, USER_ID)?;
    p.app_id = short(&mut r, APP_ID)?;
    p.cluster_id = short(&mut r, CLUSTER_ID)?;
    Ok((
        ContentHeader {
            body_size,
            properties: p,
            headers,
        },
        problem,
    ))
}

/// The name under which a header table that did not decode keeps its bytes. Written back
/// on replay as the header table itself.
pub const UNDECODED_HEADERS: &str = "x-lazarus-undecoded-headers";

/// Encodes the payload of a basic-class content header frame.
pub fn encode_content_header(
    out: &mut Vec<u8>,
    body_size: u64,
    p: &MessageProperties,
    headers: Option<&Table>,
) -> Result<(), EncodeError> {
    out.put_u16(60);
    out.put_u16(0);
    out.put_u64(body_size);
    let mut flags = 0u16;
    let set = |flags: &mut u16, present: bool, f: u16| {
        if present {
            *flags |= f;
        }
    };
    set(&mut flags, p.content_type.is_some(), CONTENT_TYPE);
    set(&mut flags, p.content_encoding.is_some(), CONTENT_ENCODING);
    set(&mut flags, headers.is_some(), HEADERS);
    set(&mut flags, p.delivery_mode.is_some(), DELIVERY_MODE);
    set(&mut flags, p.priority.is_some(), PRIORITY);
    set(&mut flags, p.correlation_id.is_some(), CORRELATION_ID);
    set(&mut flags, p.reply_to.is_some(), REPLY_TO);
    set(&mut flags, p.expiration.is_some(), EXPIRATION);
    set(&mut flags, p.message_id.is_some(), MESSAGE_ID);
    set(&mut flags, p.timestamp.is_some(), TIMESTAMP);
    set(&mut flags, p.kind.is_some(), TYPE);
    set(&mut flags, p.user_id.is_some(), USER_ID);
    set(&mut flags, p.app_id.is_some(), APP_ID);
    set(&mut flags, p.cluster_id.is_some(), CLUSTER_ID);
    out.put_u16(flags);
    let short = |out: &mut Vec<u8>, what: &str, v: &Option<Bytes>| match v {
        Some(v) => out.put_short_string(what, &v.0),
        None => Ok(()),
    };
    short(out, "content-type", &p.content_type)?;
    short(out, "content-encoding", &p.content_encoding)?;
    if let Some(h) = headers {
        match (h.len(), h.get(UNDECODED_HEADERS)) {
            // A table kept undecoded goes back as it came (its bytes hold the length).
            (1, Some(AmqpValue::Encoded(raw))) if raw.first() == Some(&b'F') => {
                out.extend_from_slice(&raw[1..])
            }
            _ => out.put_table(h)?,
        }
    }
    if let Some(v) = p.delivery_mode {
        out.put_u8(v);
    }
    if let Some(v) = p.priority {
        out.put_u8(v);
    }
    short(out, "correlation-id", &p.correlation_id)?;
    short(out, "reply-to", &p.reply_to)?;
    short(out, "expiration", &p.expiration)?;
    short(out, "message-id", &p.message_id)?;
    if let Some(v) = p.timestamp {
        out.put_u64(v);
    }
    short(out, "type", &p.kind)?;
    short(out, "user-id", &p.user_id)?;
    short(out, "app-id", &p.app_id)?;
    short(out, "cluster-id", &p.cluster_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded_table(t: &Table) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_table(t).unwrap();
        out
    }

    fn nested_arrays(depth: usize) -> Vec<u8> {
        // 'A' + length, `depth` times, innermost empty: built from the inside out.
        let mut value = vec![b'A', 0, 0, 0, 0];
        for _ in 1..depth {
            let mut outer = vec![b'A'];
            outer.put_u32(value.len() as u32);
            outer.extend_from_slice(&value);
            value = outer;
        }
        let mut table = Vec::new();
        table.put_short_string("", b"deep").unwrap();
        table.extend_from_slice(&value);
        table
    }

    #[test]
    fn tables_round_trip_byte_for_byte() {
        let t = Table::from([
            ("s", AmqpValue::text("x")),
            ("i16", AmqpValue::ShortInt(-2)),
            ("f", AmqpValue::Float(JsonFloat(1.5))),
            ("d", AmqpValue::Double(JsonFloat(f64::NAN))),
            ("dec", AmqpValue::Decimal { scale: 2, value: 7 }),
            ("ts", AmqpValue::Timestamp(1)),
            ("x", AmqpValue::ByteArray(Bytes(vec![0, 255]))),
            ("v", AmqpValue::Void),
            (
                "a",
                AmqpValue::Array(vec![AmqpValue::Boolean(true), AmqpValue::LongUint(3)]),
            ),
            (
                "t",
                AmqpValue::Table(Table::from([("k", AmqpValue::LongLongInt(-1))])),
            ),
        ]);
        let bytes = encoded_table(&t);
        let back = decode_table(&bytes[4..]).unwrap();
        assert_eq!(back, t);
        assert_eq!(encoded_table(&back), bytes);
    }

    #[test]
    fn deep_nesting_is_kept_encoded_and_written_back_unchanged() {
        // About what a 131,072-byte frame can hold: no recursion follows it.
        let bytes = nested_arrays(26_000);
        let t = decode_table(&bytes).unwrap();
        let mut v = t.get("deep").unwrap();
        let mut levels = 1;
        while let AmqpValue::Array(items) = v {
            v = &items[0];
            levels += 1;
        }
        assert!(matches!(v, AmqpValue::Encoded(_)));
        assert_eq!(levels, MAX_DEPTH);
        let mut again = Vec::new();
        again.put_table(&t).unwrap();
        assert_eq!(&again[4..], &bytes[..]);
        // The typed JSON of it is shallow enough for serde_json's default limit.
        let json = serde_json::to_string(&t).unwrap();
        let parsed: Table = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, t);
    }

    #[test]
    fn names_and_short_strings_that_are_not_utf8_decode_as_bytes() {
        let mut payload = Vec::new();
        payload.put_u16(60);
        payload.put_u16(0);
        payload.put_u64(3);
        payload.put_u16(HEADERS | MESSAGE_ID);
        let mut table = Vec::new();
        table.put_short_string("", b"na\xffme").unwrap();
        table.put_u8(b'S');
        table.put_long_string(b"v\0").unwrap();
        payload.put_long_string(&table).unwrap();
        payload.put_short_string("", b"bad-\xff\xfe-id").unwrap();
        let (header, problem) = decode_content_header(&payload).unwrap();
        assert_eq!(problem, None);
        assert_eq!(header.body_size, 3);
        assert_eq!(
            header.properties.message_id,
            Some(Bytes(b"bad-\xff\xfe-id".to_vec()))
        );
        let h = header.headers.as_ref().unwrap();
        assert_eq!(h.keys().next().unwrap().as_bytes(), b"na\xffme");
        let mut again = Vec::new();
        encode_content_header(&mut again, 3, &header.properties, header.headers.as_ref()).unwrap();
        assert_eq!(again, payload);
    }

    #[test]
    fn a_table_that_does_not_decode_is_kept_and_written_back() {
        let mut payload = Vec::new();
        payload.put_u16(60);
        payload.put_u16(0);
        payload.put_u64(0);
        payload.put_u16(HEADERS);
        payload.put_long_string(b"\x01kZ???").unwrap();
        let (header, problem) = decode_content_header(&payload).unwrap();
        assert!(problem.unwrap().contains("unknown field type 'Z'"));
        let mut again = Vec::new();
        encode_content_header(&mut again, 0, &header.properties, header.headers.as_ref()).unwrap();
        assert_eq!(again, payload);
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let bytes = encoded_table(&Table::from([("k", AmqpValue::text("value"))]));
        for cut in 0..bytes.len() - 4 {
            let _ = decode_table(&bytes[4..4 + cut]);
        }
        assert!(matches!(
            decode_table(&bytes[4..bytes.len() - 1]),
            Err(DecodeError::Truncated(_))
        ));
    }

    #[test]
    fn long_short_strings_are_refused_on_encode() {
        let t = Table::from([("k".repeat(300), AmqpValue::Void)]);
        assert!(matches!(
            Vec::new().put_table(&t),
            Err(EncodeError::ShortStringTooLong { .. })
        ));
    }

    #[test]
    fn tables_archived_too_deep_for_serde_are_read_and_bounded() {
        let depth = 3_000;
        let mut json = String::new();
        for _ in 0..depth {
            json.push_str(r#"{"a":{"type":"table","value":"#);
        }
        json.push_str("{}");
        for _ in 0..depth {
            json.push_str("}}");
        }
        let t = table_from_stored_json(&json).unwrap();
        let mut v = t.get("a").unwrap();
        let mut levels = 1;
        while let AmqpValue::Table(inner) = v {
            v = inner.get("a").unwrap();
            levels += 1;
        }
        assert!(matches!(v, AmqpValue::Encoded(_)), "{v:?}");
        assert_eq!(levels, MAX_DEPTH);
        assert!(table_from_stored_json("{").is_err());
    }
}

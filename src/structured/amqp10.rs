//! AMQP 1.0 bodies as JSON values (pure). RabbitMQ 4 hands a message published over AMQP 1.0
//! with an `amqp-value` or `amqp-sequence` body to a 0-9-1 consumer as the encoded body
//! sections, with `type: amqp-1.0`: here they are read with the AMQP 1.0 type system (one
//! section as its value, several as an array of them; `data` sections as text when they are
//! UTF-8, hex otherwise). Binary values become hex, symbols strings, timestamps milliseconds,
//! described values `{"descriptor": …, "value": …}`.

use serde_json::{Map, Value};

use super::{float, hex, key, text, Reader, MAX_DEPTH};

type Decoded = Result<Value, String>;

/// The body sections `bytes` hold, as JSON.
pub(super) fn sections(reader: &mut Reader<'_>) -> Decoded {
    let mut out = Vec::new();
    while reader.at < reader.bytes.len() {
        if reader.take(2)? != [0x00, 0x53] {
            return Err(format!("no body section at byte {}", reader.at - 2));
        }
        let section = match reader.byte()? {
            // data: bytes; text where they are UTF-8.
            0x75 => match value(reader, 0)? {
                Value::String(hex_bytes) => data_text(&hex_bytes),
                other => other,
            },
            0x76 | 0x77 => value(reader, 0)?,
            other => return Err(format!("section descriptor 0x{other:02x} is not a body")),
        };
        out.push(section);
    }
    match out.len() {
        0 => Err("no body section".into()),
        1 => Ok(out.remove(0)),
        _ => Ok(Value::Array(out)),
    }
}

/// A data section's bytes (read as hex) as text when they are UTF-8.
fn data_text(hex_bytes: &str) -> Value {
    let bytes: Option<Vec<u8>> = (0..hex_bytes.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex_bytes.get(i..i + 2)?, 16).ok())
        .collect();
    match bytes.map(String::from_utf8) {
        Some(Ok(text)) => Value::String(text),
        _ => Value::String(hex_bytes.to_owned()),
    }
}

fn value(r: &mut Reader<'_>, depth: usize) -> Decoded {
    let code = r.byte()?;
    if code == 0x00 {
        let depth = nested(depth)?;
        let descriptor = value(r, depth)?;
        let value = value(r, depth)?;
        return Ok(serde_json::json!({"descriptor": descriptor, "value": value}));
    }
    encoded(r, code, depth)
}

fn nested(depth: usize) -> Result<usize, String> {
    match depth < MAX_DEPTH {
        true => Ok(depth + 1),
        false => Err(format!("nested deeper than {MAX_DEPTH} levels")),
    }
}

/// A value whose constructor (format code) was read already: arrays share one.
fn encoded(r: &mut Reader<'_>, code: u8, depth: usize) -> Decoded {
    let signed = |n: u64, size: u32| {
        let shift = 64 - 8 * size;
        Value::from(((n << shift) as i64) >> shift)
    };
    Ok(match code {
        0x40 => Value::Null,
        0x41 => Value::Bool(true),
        0x42 => Value::Bool(false),
        0x56 => Value::Bool(r.byte()? != 0),
        0x43 | 0x44 => Value::from(0),
        0x50 | 0x52 | 0x53 => Value::from(r.byte()?),
        0x60 => Value::from(r.uint(2)?),
        0x70 | 0x80 => Value::from(r.uint(if code == 0x70 { 4 } else { 8 })?),
        0x51 | 0x54 | 0x55 => signed(u64::from(r.byte()?), 1),
        0x61 => signed(r.uint(2)?, 2),
        0x71 => signed(r.uint(4)?, 4),
        0x81 => signed(r.uint(8)?, 8),
        0x72 => float(f64::from(f32::from_bits(r.uint(4)? as u32))),
        0x82 => float(f64::from_bits(r.uint(8)?)),
        // Timestamps: milliseconds since the Unix epoch.
        0x83 => signed(r.uint(8)?, 8),
        0x73 => match char::from_u32(r.uint(4)? as u32) {
            Some(c) => Value::String(c.to_string()),
            None => return Err("a char that is not a Unicode scalar".into()),
        },
        0x74 => Value::String(hex(r.take(4)?)),
        0x84 => Value::String(hex(r.take(8)?)),
        0x94 | 0x98 => Value::String(hex(r.take(16)?)),
        0xa0 | 0xb0 => {
            let n = r.uint(if code == 0xa0 { 1 } else { 4 })?;
            Value::String(hex(r.take(n)?))
        }
        0xa1 | 0xa3 | 0xb1 | 0xb3 => {
            let n = r.uint(if code & 0xf0 == 0xa0 { 1 } else { 4 })?;
            text(r.take(n)?)
        }
        0x45 => Value::Array(Vec::new()),
        0xc0 | 0xd0 | 0xc1 | 0xd1 => {
            let width = if code & 0xf0 == 0xc0 { 1 } else { 4 };
            let size = r.uint(width)?;
            let body_end = r.at as u64 + size;
            let count = r.uint(width)?;
            let depth = nested(depth)?;
            let out = if code & 0x0f == 0 {
                let mut items = Vec::with_capacity(r.capacity(count));
                for _ in 0..count {
                    items.push(value(r, depth)?);
                }
                Value::Array(items)
            } else {
                if count % 2 != 0 {
                    return Err(format!("a map of {count} elements, not pairs"));
                }
                let mut map = Map::new();
                for _ in 0..count / 2 {
                    let k = key(value(r, depth)?);
                    map.insert(k, value(r, depth)?);
                }
                Value::Object(map)
            };
            if r.at as u64 != body_end {
                return Err(format!(
                    "a compound that does not end at its size (byte {})",
                    r.at
                ));
            }
            out
        }
        0xe0 | 0xf0 => {
            let width = if code == 0xe0 { 1 } else { 4 };
            let _size = r.uint(width)?;
            let count = r.uint(width)?;
            let depth = nested(depth)?;
            let mut element = r.byte()?;
            let mut descriptor = None;
            if element == 0x00 {
                descriptor = Some(value(r, depth)?);
                element = r.byte()?;
            }
            let mut items = Vec::with_capacity(r.capacity(count));
            for _ in 0..count {
                let item = encoded(r, element, depth)?;
                items.push(match &descriptor {
                    Some(d) => serde_json::json!({"descriptor": d, "value": item}),
                    None => item,
                });
            }
            Value::Array(items)
        }
        other => {
            return Err(format!(
                "unknown format code 0x{other:02x} at byte {}",
                r.at - 1
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::{to_json, Format};
    use serde_json::json;

    #[test]
    fn an_amqp_value_map_as_python_qpid_proton_sent_it_through_rabbitmq_4() {
        let body = b"\x00Sw\xd1\x00\x00\x00H\x00\x00\x00\n\xa1\x04task\xa1\x06charge\xa1\x07invoice\xa1\x05INV-9\xa1\x01nU\x03\xa1\x02okA\xa1\x05items\xd0\x00\x00\x00\x10\x00\x00\x00\x03U\x01\x82@\x04\x00\x00\x00\x00\x00\x00@";
        assert_eq!(
            to_json(body, Format::Amqp10).unwrap(),
            json!({"task": "charge", "invoice": "INV-9", "n": 3, "ok": true, "items": [1, 2.5, null]})
        );
        let string = b"\x00Sw\xa1\x13plain string \xe6\xad\xbb\xe4\xbf\xa1";
        assert_eq!(
            to_json(string, Format::Amqp10).unwrap(),
            json!("plain string 死信")
        );
    }

    #[test]
    fn sequences_data_arrays_and_described_values() {
        // amqp-sequence [1, "a"], then a data section "hi".
        let body = b"\x00Sv\xc0\x06\x02T\x01\xa1\x01a\x00Su\xa0\x02hi";
        assert_eq!(
            to_json(body, Format::Amqp10).unwrap(),
            json!([[1, "a"], "hi"])
        );
        // An array of three ints, one constructor for all; a described symbol.
        let body = b"\x00Sw\xe0\x0e\x03\x71\x00\x00\x00\x01\x00\x00\x00\x02\xff\xff\xff\xff";
        assert_eq!(to_json(body, Format::Amqp10).unwrap(), json!([1, 2, -1]));
        let body = b"\x00Sw\x00\xa3\x03x:y\xa1\x01v";
        assert_eq!(
            to_json(body, Format::Amqp10).unwrap(),
            json!({"descriptor": "x:y", "value": "v"})
        );
    }

    #[test]
    fn what_is_not_an_amqp_body_is_an_error() {
        assert!(to_json(b"{}", Format::Amqp10).is_err());
        assert!(to_json(b"\x00Sp\x45", Format::Amqp10).is_err(), "a header");
        assert!(to_json(
            b"\x00Sw\xd0\xff\xff\xff\xff\xff\xff\xff\xff",
            Format::Amqp10
        )
        .is_err());
        assert!(
            to_json(b"\x00Sw", Format::Amqp10).is_err(),
            "a section without its value"
        );
        let deep: Vec<u8> = [0x00, 0x53, 0x77]
            .into_iter()
            .chain(std::iter::repeat_n([0x00, 0x40], 300).flatten())
            .collect();
        assert!(to_json(&deep, Format::Amqp10)
            .unwrap_err()
            .contains("nested deeper"));
    }
}

//! AMQP 1.0 bodies as JSON text (pure). RabbitMQ 4 hands a message published over AMQP 1.0
//! with an `amqp-value` or `amqp-sequence` body to a 0-9-1 consumer as the encoded body
//! sections, with `type: amqp-1.0`: here they are read with the AMQP 1.0 type system (one
//! section as its value, several as an array of them; `data` sections as text when they are
//! UTF-8, hex otherwise). Binary values become hex, symbols strings, timestamps milliseconds,
//! described values `{"descriptor": …, "value": …}`.

use super::{JsonText, Malformed, Reader, Written};

/// The body sections `bytes` hold, as JSON.
pub(super) fn sections(reader: &mut Reader<'_>, out: &mut JsonText) -> Written {
    let first = out.mark();
    let mut count = 0;
    while reader.at < reader.bytes.len() {
        if reader.take(2)? != [0x00, 0x53] {
            return Err(Malformed::NotASection { at: reader.at - 2 }.into());
        }
        if count == 1 {
            // A second section: the first becomes the first item of an array.
            out.wrap_in_array(first)?;
        }
        match reader.byte()? {
            // data: bytes; text where they are UTF-8.
            0x75 => match reader.peek() {
                Some(code @ (0xa0 | 0xb0)) => {
                    reader.at += 1;
                    let n = reader.uint(if code == 0xa0 { 1 } else { 4 })?;
                    let bytes = reader.take(n)?;
                    match std::str::from_utf8(bytes) {
                        Ok(text) => out.str(text)?,
                        Err(_) => out.hex(bytes)?,
                    }
                }
                _ => value(reader, out, 0)?,
            },
            0x76 | 0x77 => value(reader, out, 0)?,
            descriptor => return Err(Malformed::NotABody { descriptor }.into()),
        }
        count += 1;
    }
    match count {
        0 => Err(Malformed::NoSection.into()),
        1 => Ok(()),
        _ => out.end(),
    }
}

fn value(r: &mut Reader<'_>, out: &mut JsonText, depth: usize) -> Written {
    let code = r.byte()?;
    if code == 0x00 {
        let depth = Reader::nested(depth)?;
        out.begin_object()?;
        out.key("descriptor")?;
        value(r, out, depth)?;
        out.key("value")?;
        value(r, out, depth)?;
        return out.end();
    }
    encoded(r, out, code, depth)
}

/// A value whose constructor (format code) was read already: arrays share one.
fn encoded(r: &mut Reader<'_>, out: &mut JsonText, code: u8, depth: usize) -> Written {
    let signed = |n: u64, size: u32| {
        let shift = 64 - 8 * size;
        ((n << shift) as i64) >> shift
    };
    match code {
        0x40 => out.null(),
        0x41 => out.bool(true),
        0x42 => out.bool(false),
        0x56 => out.bool(r.byte()? != 0),
        0x43 | 0x44 => out.u64(0),
        0x50 | 0x52 | 0x53 => out.u64(u64::from(r.byte()?)),
        0x60 => out.u64(r.uint(2)?),
        0x70 | 0x80 => out.u64(r.uint(if code == 0x70 { 4 } else { 8 })?),
        0x51 | 0x54 | 0x55 => out.i64(signed(u64::from(r.byte()?), 1)),
        0x61 => out.i64(signed(r.uint(2)?, 2)),
        0x71 => out.i64(signed(r.uint(4)?, 4)),
        0x81 => out.i64(signed(r.uint(8)?, 8)),
        0x72 => out.f64(f64::from(f32::from_bits(r.uint(4)? as u32))),
        0x82 => out.f64(f64::from_bits(r.uint(8)?)),
        // Timestamps: milliseconds since the Unix epoch.
        0x83 => out.i64(signed(r.uint(8)?, 8)),
        0x73 => match char::from_u32(r.uint(4)? as u32) {
            Some(c) => out.str(c.encode_utf8(&mut [0; 4])),
            None => Err(Malformed::NotAChar.into()),
        },
        0x74 => out.hex(r.take(4)?),
        0x84 => out.hex(r.take(8)?),
        0x94 | 0x98 => out.hex(r.take(16)?),
        0xa0 | 0xb0 => {
            let n = r.uint(if code == 0xa0 { 1 } else { 4 })?;
            out.hex(r.take(n)?)
        }
        0xa1 | 0xa3 | 0xb1 | 0xb3 => {
            let n = r.uint(if code & 0xf0 == 0xa0 { 1 } else { 4 })?;
            out.lossy(r.take(n)?)
        }
        0x45 => {
            out.begin_array()?;
            out.end()
        }
        0xc0 | 0xd0 | 0xc1 | 0xd1 => {
            let width = if code & 0xf0 == 0xc0 { 1 } else { 4 };
            let size = r.uint(width)?;
            let body_end = r.at as u64 + size;
            let count = r.uint(width)?;
            let depth = Reader::nested(depth)?;
            if code & 0x0f == 0 {
                out.begin_array()?;
                for _ in 0..count {
                    value(r, out, depth)?;
                }
            } else {
                if count % 2 != 0 {
                    return Err(Malformed::OddMap { count }.into());
                }
                out.begin_object()?;
                for _ in 0..count / 2 {
                    let mut key = JsonText::new(out.room());
                    value(r, &mut key, depth)?;
                    out.key_json(key.as_str())?;
                    value(r, out, depth)?;
                }
            }
            out.end()?;
            if r.at as u64 != body_end {
                return Err(Malformed::CompoundSize { at: r.at }.into());
            }
            Ok(())
        }
        0xe0 | 0xf0 => {
            let width = if code == 0xe0 { 1 } else { 4 };
            let _size = r.uint(width)?;
            let count = r.uint(width)?;
            let depth = Reader::nested(depth)?;
            let mut element = r.byte()?;
            // The descriptor of every element, as JSON text (within what is left).
            let mut descriptor = None;
            if element == 0x00 {
                let mut text = JsonText::new(out.room());
                value(r, &mut text, depth)?;
                descriptor = Some(text.into_string());
                element = r.byte()?;
            }
            out.begin_array()?;
            for _ in 0..count {
                match &descriptor {
                    Some(d) => {
                        out.begin_object()?;
                        out.key("descriptor")?;
                        out.raw(d)?;
                        out.key("value")?;
                        encoded(r, out, element, depth)?;
                        out.end()?;
                    }
                    None => encoded(r, out, element, depth)?,
                }
            }
            out.end()
        }
        code => Err(Malformed::FormatCode { code, at: r.at - 1 }.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{decode as to_json, malformed};
    use super::super::{Format, Malformed};
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
        assert_eq!(
            malformed(b"{}", Format::Amqp10),
            Malformed::NotASection { at: 0 }
        );
        assert_eq!(
            malformed(b"\x00Sp\x45", Format::Amqp10),
            Malformed::NotABody { descriptor: 0x70 },
            "a header"
        );
        assert!(matches!(
            malformed(
                b"\x00Sw\xd0\xff\xff\xff\xff\xff\xff\xff\xff",
                Format::Amqp10
            ),
            Malformed::Truncated { at: 12, .. }
        ));
        assert!(
            matches!(
                malformed(b"\x00Sw", Format::Amqp10),
                Malformed::Truncated { at: 3, .. }
            ),
            "a section without its value"
        );
        let deep: Vec<u8> = [0x00, 0x53, 0x77]
            .into_iter()
            .chain(std::iter::repeat_n([0x00, 0x40], 300).flatten())
            .collect();
        assert_eq!(malformed(&deep, Format::Amqp10), Malformed::TooDeep);
    }
}

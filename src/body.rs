//! Message bodies as text (pure): `content-encoding` (gzip, deflate) or kombu's `compression`
//! header undone, the declared charset decoded (MessagePack, CBOR and AMQP 1.0 turned into
//! JSON text), always within a byte limit so that a huge or hostile body costs little.

use std::io::Read;

/// How a body's bytes become its content: its content type (charset) and content-encoding,
/// and kombu's `compression` header (Celery's `compression='zlib'`), which says what a
/// content-encoding would; for Protocol Buffers, the schemas and what names the message.
#[derive(Debug, Clone, Copy, Default)]
pub struct Encoding<'a> {
    pub content_type: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub compression: Option<&'a str>,
    /// The `type` property: RabbitMQ 4 marks AMQP 1.0 bodies `amqp-1.0`; it may name a
    /// protobuf message.
    pub message_type: Option<&'a str>,
    /// The message's headers (one may name its protobuf message: `--proto-header`).
    pub headers: Option<&'a crate::amqp::headers::Table>,
    /// The protobuf message types configured (`--proto-descriptors`), if any.
    pub schemas: Option<&'a crate::structured::protobuf::Schemas>,
}

impl<'a> Encoding<'a> {
    pub fn new(content_type: Option<&'a str>, content_encoding: Option<&'a str>) -> Self {
        Encoding {
            content_type,
            content_encoding,
            compression: None,
            message_type: None,
            headers: None,
            schemas: None,
        }
    }

    /// With the message's headers: kombu's `compression`, and a header naming a protobuf
    /// message.
    pub fn with_headers(self, headers: Option<&'a crate::amqp::headers::Table>) -> Self {
        Encoding {
            headers,
            compression: compression_header(headers),
            ..self
        }
    }

    /// With the protobuf schemas bodies may be decoded with.
    pub fn with_schemas(self, schemas: Option<&'a crate::structured::protobuf::Schemas>) -> Self {
        Encoding {
            schemas: schemas.filter(|s| !s.is_empty()),
            ..self
        }
    }

    pub fn with_message_type(self, message_type: Option<&'a str>) -> Self {
        Encoding {
            message_type,
            ..self
        }
    }

    pub fn with_compression(self, compression: Option<&'a str>) -> Self {
        Encoding {
            compression,
            ..self
        }
    }

    /// The declared charset, UTF-8 when none is.
    pub fn charset(&self) -> String {
        self.content_type
            .and_then(charset)
            .unwrap_or_else(|| "utf-8".into())
    }
}

/// The `compression` header kombu sets (the header's name is matched as kombu writes it).
pub fn compression_header(headers: Option<&crate::amqp::headers::Table>) -> Option<&str> {
    headers?.get("compression")?.as_str()
}

/// A body decompressed as its `content-encoding` or `compression` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decompressed {
    pub bytes: Vec<u8>,
    /// Whether `bytes` is the whole decoded body (not cut at the limit).
    pub complete: bool,
    pub codec: &'static str,
}

/// Undoes gzip, deflate or kombu's zlib, reading no more than `limit` bytes (a compression
/// bomb cannot fill memory). `Ok(None)`: no encoding this can undo was declared; an error
/// for a compression that does not decode or that Lazarus does not know.
pub fn decompress(
    body: &[u8],
    encoding: &Encoding<'_>,
    limit: usize,
) -> Result<Option<Decompressed>, String> {
    let lower = |s: Option<&str>| s.map(|e| e.trim().to_ascii_lowercase());
    let (content_encoding, compression) = (
        lower(encoding.content_encoding),
        lower(encoding.compression),
    );
    let codec = match (content_encoding.as_deref(), compression.as_deref()) {
        (Some("gzip" | "x-gzip"), _) => "gzip",
        (Some("deflate"), _) => "deflate",
        // kombu names zlib's format `application/x-gzip`: the bytes tell which it is.
        (
            _,
            Some(
                "application/x-gzip" | "application/gzip" | "gzip" | "zlib" | "application/zlib"
                | "application/x-zlib",
            ),
        ) => match body.starts_with(&[0x1f, 0x8b]) {
            true => "gzip",
            false => "zlib",
        },
        (_, Some(other)) => {
            return Err(format!(
                "compressed as {other:?} (its compression header), which Lazarus does not decode"
            ))
        }
        _ => return Ok(None),
    };
    let reader: Box<dyn Read + '_> = match codec {
        "gzip" => Box::new(flate2::read::MultiGzDecoder::new(body)),
        _ => Box::new(flate2::read::ZlibDecoder::new(body)),
    };
    let mut bytes = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{codec} compression does not decode ({e})"))?;
    let complete = bytes.len() <= limit;
    bytes.truncate(limit);
    Ok(Some(Decompressed {
        bytes,
        complete,
        codec,
    }))
}

/// Whether a body is text to edit as it is: valid UTF-8, not compressed (a `compression`
/// header), and its `content-encoding` (if any) does not transform its bytes. kombu and
/// Celery put the charset there (`utf-8`), Java publishers too (`UTF-8`); gzip, deflate and
/// any encoding not known to be a charset make the stored bytes something other than the text.
pub fn edits_as_text(bytes: &[u8], encoding: &Encoding<'_>) -> bool {
    let transformed = encoding.content_encoding.is_some_and(|e| {
        let e = e.trim().to_ascii_lowercase();
        !matches!(
            e.as_str(),
            "" | "identity" | "utf-8" | "utf8" | "us-ascii" | "ascii"
        )
    });
    !transformed && encoding.compression.is_none() && std::str::from_utf8(bytes).is_ok()
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The `charset` parameter of a content type, lower-cased.
pub fn charset(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').to_ascii_lowercase())
    })
}

/// Decodes bytes in a charset this knows (UTF-8 and ASCII, ISO-8859-1); `None` otherwise
/// or when they are not valid in it. A UTF-8 sequence cut at the end is dropped.
pub fn decode(bytes: &[u8], charset: &str, cut: bool) -> Option<String> {
    match charset {
        "utf-8" | "utf8" | "us-ascii" | "ascii" => match std::str::from_utf8(bytes) {
            Ok(s) => Some(s.to_owned()),
            // Cut inside a character: keep what precedes it.
            Err(e) if cut && e.error_len().is_none() => {
                Some(String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned())
            }
            Err(_) => None,
        },
        // Every byte is the code point of the same number.
        "iso-8859-1" | "latin1" | "latin-1" | "l1" => {
            Some(bytes.iter().map(|&b| char::from(b)).collect())
        }
        _ => None,
    }
}

/// Why a body cannot be had whole as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotText {
    /// It decodes to more than the limit (a compression bomb, or simply big).
    TooLarge,
    /// Its content-encoding does not decode, or its charset is unknown or not valid.
    Undecodable,
}

/// The whole body as text, decoded as its content-encoding and charset say, when it
/// decodes to at most `limit` bytes: never more than that is decompressed.
pub fn whole_text(body: &[u8], encoding: &Encoding<'_>, limit: usize) -> Result<String, NotText> {
    let decompressed = decompress(body, encoding, limit).map_err(|_| NotText::Undecodable)?;
    let bytes = match &decompressed {
        Some(d) if !d.complete => return Err(NotText::TooLarge),
        Some(d) => &d.bytes[..],
        None if body.len() > limit => return Err(NotText::TooLarge),
        None => body,
    };
    let text = content_text(bytes, encoding, false).ok_or(NotText::Undecodable)?;
    match text.len() <= limit {
        true => Ok(text),
        false => Err(NotText::TooLarge),
    }
}

/// The body as text, at most `limit` bytes of it, when it is text at all.
pub fn text(body: &[u8], encoding: &Encoding<'_>, limit: usize) -> Option<String> {
    let decompressed = decompress(body, encoding, limit).ok()?;
    let (bytes, cut) = match &decompressed {
        Some(d) => (&d.bytes[..], !d.complete),
        None => (&body[..body.len().min(limit)], body.len() > limit),
    };
    let mut text = content_text(bytes, encoding, cut)?;
    text.truncate(prefix(&text, limit).len());
    Some(text)
}

/// Decompressed bytes as text: MessagePack, CBOR and AMQP 1.0 as the JSON they stand for
/// (only whole: a cut one does not decode), anything else in its charset.
fn content_text(bytes: &[u8], encoding: &Encoding<'_>, cut: bool) -> Option<String> {
    match crate::structured::Format::of(encoding) {
        Some(_) if cut => None,
        Some(format) => crate::structured::to_json(bytes, format)
            .ok()
            .map(|value| value.to_string()),
        None => decode(bytes, &encoding.charset(), cut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_and_deflate_are_undone_within_the_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[b'a'; 1000]).unwrap();
        let d = decompress(
            &gz.finish().unwrap(),
            &Encoding::new(None, Some("GZIP")),
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!((d.bytes.len(), d.complete, d.codec), (100, false, "gzip"));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"hi").unwrap();
        assert_eq!(
            decompress(
                &z.finish().unwrap(),
                &Encoding::new(None, Some("deflate")),
                10
            )
            .unwrap()
            .unwrap()
            .bytes,
            b"hi"
        );
        assert!(decompress(b"nope", &Encoding::new(None, Some("gzip")), 10).is_err());
        assert_eq!(
            decompress(b"x", &Encoding::new(None, Some("br")), 10).unwrap(),
            None
        );
    }

    #[test]
    fn kombu_compression_is_zlib_or_gzip_whatever_its_name_says() {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(br#"{"task": "add"}"#).unwrap();
        let zlib = z.finish().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"task": "add"}"#).unwrap();
        let gzip = gz.finish().unwrap();
        for (bytes, codec) in [(&zlib, "zlib"), (&gzip, "gzip")] {
            for name in ["application/x-gzip", "zlib", "gzip"] {
                let e = Encoding::new(Some("application/json"), None).with_compression(Some(name));
                let d = decompress(bytes, &e, 100).unwrap().unwrap();
                assert_eq!((&d.bytes[..], d.codec), (&br#"{"task": "add"}"#[..], codec));
                assert_eq!(text(bytes, &e, 100).as_deref(), Some(r#"{"task": "add"}"#));
            }
        }
        let bz2 = Encoding::default().with_compression(Some("application/x-bz2"));
        let err = decompress(b"BZh9", &bz2, 100).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
        assert_eq!(text(b"BZh9", &bz2, 100), None, "not indexed as text");
    }

    #[test]
    fn a_charset_in_content_encoding_leaves_text_editable() {
        for encoding in [
            None,
            Some("utf-8"),
            Some("UTF-8"),
            Some(" utf8 "),
            Some("identity"),
        ] {
            assert!(
                edits_as_text(b"{\"n\": 1}", &Encoding::new(None, encoding)),
                "{encoding:?}"
            );
        }
        for encoding in ["gzip", "deflate", "br", "binary", "latin1"] {
            assert!(
                !edits_as_text(b"{}", &Encoding::new(None, Some(encoding))),
                "{encoding}"
            );
        }
        assert!(
            !edits_as_text(b"caf\xe9", &Encoding::new(None, Some("utf-8"))),
            "not UTF-8"
        );
        let kombu = Encoding::default().with_compression(Some("application/x-gzip"));
        assert!(!edits_as_text(b"{}", &kombu), "compressed");
    }

    #[test]
    fn charsets() {
        assert_eq!(
            charset("text/plain; charset=\"ISO-8859-1\"").as_deref(),
            Some("iso-8859-1")
        );
        assert_eq!(decode(b"Caf\xe9", "latin1", false).as_deref(), Some("Café"));
        assert_eq!(decode(b"Caf\xe9", "utf-8", false), None);
        assert_eq!(decode(b"x", "koi8-r", false), None);
    }

    #[test]
    fn whole_text_is_all_or_nothing() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[b'a'; 1000]).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(
            whole_text(&gz, &Encoding::new(None, Some("gzip")), 1000)
                .unwrap()
                .len(),
            1000
        );
        assert_eq!(
            whole_text(&gz, &Encoding::new(None, Some("gzip")), 999),
            Err(NotText::TooLarge)
        );
        assert_eq!(
            whole_text(b"abc", &Encoding::new(None, None), 2),
            Err(NotText::TooLarge)
        );
        assert_eq!(
            whole_text(b"\xff", &Encoding::new(None, None), 9),
            Err(NotText::Undecodable)
        );
        assert_eq!(
            whole_text(
                b"caf\xe9",
                &Encoding::new(Some("text/plain; charset=latin1"), None),
                9
            )
            .unwrap(),
            "café"
        );
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("aé", 9), "aé");
        let body = "é".repeat(10);
        assert_eq!(
            text(body.as_bytes(), &Encoding::new(None, None), 5).as_deref(),
            Some("éé")
        );
        assert_eq!(text(&[0xff, 0xfe], &Encoding::default(), 5), None);
    }
}

//! Message bodies as text (pure): `content-encoding` (gzip, deflate) or kombu's `compression`
//! header undone, the declared charset decoded (MessagePack, CBOR and AMQP 1.0 turned into
//! JSON text), always within a byte limit so that a huge or hostile body costs little.

use std::io::Read;

pub use super::structured::{charset, compression_header, Encoding};

/// A body decompressed as its `content-encoding` or `compression` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decompressed {
    pub bytes: Vec<u8>,
    /// Whether `bytes` is the whole decoded body (not cut at the limit).
    pub complete: bool,
    pub codec: &'static str,
}

/// Undoes gzip, deflate, brotli or zstd (`content-encoding`), or what kombu's `compression`
/// header names (zlib, bzip2, lzma/xz, zstd, brotli), reading no more than `limit` bytes (a
/// compression bomb cannot fill memory). `Ok(None)`: no encoding this can undo was declared;
/// an error for a compression that does not decode or that Lazarus does not know.
pub fn decompress(
    body: &[u8],
    encoding: &Encoding<'_>,
    limit: usize,
) -> Result<Option<Decompressed>, String> {
    let Some(codec) = codec(body, encoding)? else {
        return Ok(None);
    };
    let failed = |e: &dyn std::fmt::Display| format!("{codec} compression does not decode ({e})");
    let mut out = Capped {
        bytes: Vec::new(),
        limit: limit + 1,
    };
    // A decoder that panics on hostile bytes must not take ingest down with it: that would
    // stop the queue at this message for good.
    let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut input = body;
        match codec {
            "gzip" => copy(flate2::read::MultiGzDecoder::new(body), &mut out),
            "zlib" | "deflate" => copy(flate2::read::ZlibDecoder::new(body), &mut out),
            "bzip2" => copy(bzip2_rs::DecoderReader::new(body), &mut out),
            "brotli" => copy(brotli_decompressor::Decompressor::new(body, 4096), &mut out),
            "zstd" => ruzstd::decoding::StreamingDecoder::new(body)
                .map_err(|e| e.to_string())
                .and_then(|decoder| copy(decoder, &mut out)),
            "xz" => lzma_rs::xz_decompress(&mut input, &mut out).map_err(|e| e.to_string()),
            _ => lzma_rs::lzma_decompress(&mut input, &mut out).map_err(|e| e.to_string()),
        }
    }))
    .unwrap_or_else(|_| Err("the decoder failed".into()));
    let complete = out.bytes.len() <= limit;
    // Stopping at the limit is not a failure: the start is what was asked for.
    if let (Err(e), true) = (written, complete) {
        return Err(failed(&e));
    }
    let mut bytes = out.bytes;
    bytes.truncate(limit);
    Ok(Some(Decompressed {
        bytes,
        complete,
        codec,
    }))
}

/// The compression a body's `content-encoding` or `compression` header declares, as the
/// codec that undoes it (told apart by the bytes where one name covers two formats).
fn codec(body: &[u8], encoding: &Encoding<'_>) -> Result<Option<&'static str>, String> {
    let lower = |s: Option<&str>| s.map(|e| e.trim().to_ascii_lowercase());
    let content_encoding = lower(encoding.content_encoding);
    let codec = match content_encoding.as_deref() {
        Some("gzip" | "x-gzip") => Some("gzip"),
        Some("deflate") => Some("deflate"),
        Some("br") => Some("brotli"),
        Some("zstd") => Some("zstd"),
        _ => None,
    };
    let Some(compression) = lower(encoding.compression) else {
        return Ok(codec);
    };
    if codec.is_some() {
        return Ok(codec);
    }
    let name = compression.trim_start_matches("application/");
    let name = name.strip_prefix("x-").unwrap_or(name);
    Ok(Some(match name {
        // kombu names zlib's format `application/x-gzip`: the bytes tell which it is.
        "gzip" | "zlib" => match body.starts_with(&[0x1f, 0x8b]) {
            true => "gzip",
            false => "zlib",
        },
        "bz2" | "bzip2" => "bzip2",
        // Python's lzma module (kombu's) writes xz unless told otherwise.
        "lzma" | "xz" => match body.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            true => "xz",
            false => "lzma",
        },
        "zstd" | "zstandard" => "zstd",
        "brotli" | "br" => "brotli",
        _ => {
            return Err(format!(
            "compressed as {compression:?} (its compression header), which Lazarus does not decode"
        ))
        }
    }))
}

/// Decompressed bytes, kept up to a limit: past it, writing fails and the rest is not
/// decompressed.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.limit - self.bytes.len();
        if room == 0 && !buf.is_empty() {
            return Err(std::io::Error::other("the decompressed size limit"));
        }
        let n = buf.len().min(room);
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn copy(reader: impl Read, out: &mut Capped) -> Result<(), String> {
    let limit = (out.limit - out.bytes.len()) as u64;
    reader
        .take(limit)
        .read_to_end(&mut out.bytes)
        .map(drop)
        .map_err(|e| e.to_string())
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
/// decodes to at most `limit` bytes: never more than that is decompressed, nor written as
/// the JSON a MessagePack, CBOR, AMQP 1.0 or protobuf body stands for.
pub fn whole_text(body: &[u8], encoding: &Encoding<'_>, limit: usize) -> Result<String, NotText> {
    let decompressed = decompress(body, encoding, limit).map_err(|_| NotText::Undecodable)?;
    let bytes = match &decompressed {
        Some(d) if !d.complete => return Err(NotText::TooLarge),
        Some(d) => &d.bytes[..],
        None if body.len() > limit => return Err(NotText::TooLarge),
        None => body,
    };
    let text = match content_text(bytes, encoding, false, limit) {
        Some(Content::Whole(text)) => text,
        Some(Content::Start(_)) => return Err(NotText::TooLarge),
        None => return Err(NotText::Undecodable),
    };
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
    let mut text = match content_text(bytes, encoding, cut, limit)? {
        Content::Whole(text) | Content::Start(text) => text,
    };
    text.truncate(prefix(&text, limit).len());
    Some(text)
}

/// What a body's bytes read as.
enum Content {
    Whole(String),
    /// The start of the JSON a structured body stands for: the whole is longer than asked.
    Start(String),
}

/// Decompressed bytes as text: MessagePack, CBOR, AMQP 1.0 and protobuf as the JSON they
/// stand for (only whole: a cut one does not decode; at most `limit` bytes of it), anything
/// else in its charset.
fn content_text(bytes: &[u8], encoding: &Encoding<'_>, cut: bool, limit: usize) -> Option<Content> {
    use crate::message::structured::{to_json, DecodeError, Format};
    let structured = match Format::of(encoding) {
        Some(format) if !cut => match to_json(bytes, format, limit) {
            Ok(json) => Some(Content::Whole(json)),
            Err(DecodeError::TooLarge { start, .. }) => Some(Content::Start(start)),
            Err(DecodeError::Invalid { .. }) => None,
        },
        _ => None,
    };
    // One that does not decode (or is cut) is read as text when it is text: a mislabelled
    // JSON body stays findable.
    structured.or_else(|| decode(bytes, &encoding.charset(), cut).map(Content::Whole))
}

#[cfg(test)]
pub(crate) mod tests {
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
            decompress(b"x", &Encoding::new(None, Some("compress")), 10).unwrap(),
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
        assert!(err.contains("bzip2 compression does not decode"), "{err}");
        assert_eq!(text(b"BZh9", &bz2, 100), None, "not indexed as text");
        let unknown = Encoding::default().with_compression(Some("application/x-snappy"));
        let err = decompress(b"x", &unknown, 100).unwrap_err();
        assert!(err.contains("which Lazarus does not decode"), "{err}");
    }

    /// Bytes from the hex dump of a file.
    fn unhex(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `{"task": "add", "n": 1}` as bzip2, xz, lzma and zstd (the command-line tools) and
    /// Python's brotli wrote it: (compression header, codec, hex).
    const SAMPLES: [(&str, &str, &str); 5] = [
            ("application/x-bz2", "bzip2", "425a6839314159265359caa09bb200000a99805004201024090c0a2000229e93d099a0806800f844fdf8a587545a2c33345dc914e142432a826ec8"),
            ("application/x-lzma", "xz", "fd377a585a000004e6d6b4460200210116000000742fe5a30100167b227461736b223a2022616464222c20226e223a20317d00009dc5526cac3d369e00012f17810849b11fb6f37d010000000004595a"),
            ("lzma", "lzma", "5d00008000ffffffffffffffff003d888a86546c246361b6415b039e0364139ebd3be7154b87098adffdea8c00"),
            ("application/zstd", "zstd", "28b52ffd2417b900007b227461736b223a2022616464222c20226e223a20317d00585867"),
            ("application/x-brotli", "brotli", "0b0b807b227461736b223a2022616464222c20226e223a20317d03"),
        ];

    /// The samples as (compression header, bytes).
    pub(crate) fn samples() -> Vec<(&'static str, Vec<u8>)> {
        SAMPLES
            .iter()
            .map(|(header, _, hex)| (*header, unhex(hex)))
            .collect()
    }

    #[test]
    fn bzip2_lzma_xz_zstd_and_brotli_are_undone_within_the_limit() {
        let json = br#"{"task": "add", "n": 1}"#;
        let cases = SAMPLES;
        for (header, codec, hex) in cases {
            let bytes = unhex(hex);
            let kombu =
                Encoding::new(Some("application/json"), None).with_compression(Some(header));
            let d = decompress(&bytes, &kombu, 100).unwrap().unwrap();
            assert_eq!(
                (&d.bytes[..], d.complete, d.codec),
                (&json[..], true, codec)
            );
            // Cut at the limit: the start, not an error.
            let d = decompress(&bytes, &kombu, 5).unwrap().unwrap();
            assert_eq!((&d.bytes[..], d.complete), (&json[..5], false), "{codec}");
            // Damaged: an error naming the codec.
            let mut damaged = bytes.clone();
            damaged.truncate(bytes.len() / 2);
            if let Ok(Some(d)) = decompress(&damaged, &kombu, 100) {
                assert!(
                    !d.complete || d.bytes != json,
                    "{codec}: a half cannot be whole"
                );
            }
        }
        for (content_encoding, hex) in [("br", cases[4].2), ("zstd", cases[3].2)] {
            let d = decompress(
                &unhex(hex),
                &Encoding::new(None, Some(content_encoding)),
                100,
            );
            assert_eq!(d.unwrap().unwrap().bytes, json);
        }
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
    fn a_mislabelled_structured_body_is_still_read_as_text() {
        let msgpack = Encoding::new(Some("application/x-msgpack"), None);
        assert_eq!(
            text(br#"{"order": "O-1"}"#, &msgpack, 100).as_deref(),
            Some(r#"{"order": "O-1"}"#)
        );
        assert_eq!(text(&[0xc1, 0xff], &msgpack, 100), None);
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

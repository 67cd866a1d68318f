//! Message bodies as text (pure): `content-encoding` (gzip, deflate) undone and the declared
//! charset decoded, always within a byte limit so that a huge or hostile body costs little.

use std::io::Read;

/// A body decompressed as its `content-encoding` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decompressed {
    pub bytes: Vec<u8>,
    /// Whether `bytes` is the whole decoded body (not cut at the limit).
    pub complete: bool,
    pub codec: &'static str,
}

/// Undoes gzip or deflate, reading no more than `limit` bytes (a compression bomb cannot fill
/// memory). `Ok(None)`: no encoding this can undo was declared.
pub fn decompress(
    body: &[u8],
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<Option<Decompressed>, String> {
    let encoding = content_encoding.map(|e| e.trim().to_ascii_lowercase());
    let (reader, codec): (Box<dyn Read + '_>, &'static str) = match encoding.as_deref() {
        Some("gzip" | "x-gzip") => (Box::new(flate2::read::MultiGzDecoder::new(body)), "gzip"),
        Some("deflate") => (Box::new(flate2::read::ZlibDecoder::new(body)), "deflate"),
        _ => return Ok(None),
    };
    let mut bytes = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("content-encoding {codec} does not decode ({e})"))?;
    let complete = bytes.len() <= limit;
    bytes.truncate(limit);
    Ok(Some(Decompressed {
        bytes,
        complete,
        codec,
    }))
}

/// Whether a body is text to edit as it is: valid UTF-8, and its `content-encoding` (if any)
/// does not transform its bytes. kombu and Celery put the charset there (`utf-8`), Java
/// publishers too (`UTF-8`); gzip, deflate and any encoding not known to be a charset make
/// the stored bytes something other than the text.
pub fn edits_as_text(bytes: &[u8], content_encoding: Option<&str>) -> bool {
    let transformed = content_encoding.is_some_and(|e| {
        let e = e.trim().to_ascii_lowercase();
        !matches!(
            e.as_str(),
            "" | "identity" | "utf-8" | "utf8" | "us-ascii" | "ascii"
        )
    });
    !transformed && std::str::from_utf8(bytes).is_ok()
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
pub fn whole_text(
    body: &[u8],
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<String, NotText> {
    let decompressed =
        decompress(body, content_encoding, limit).map_err(|_| NotText::Undecodable)?;
    let bytes = match &decompressed {
        Some(d) if !d.complete => return Err(NotText::TooLarge),
        Some(d) => &d.bytes[..],
        None if body.len() > limit => return Err(NotText::TooLarge),
        None => body,
    };
    let charset = content_type
        .and_then(charset)
        .unwrap_or_else(|| "utf-8".into());
    decode(bytes, &charset, false).ok_or(NotText::Undecodable)
}

/// The body as text, at most `limit` bytes of it, when it is text at all.
pub fn text(
    body: &[u8],
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    limit: usize,
) -> Option<String> {
    let decompressed = decompress(body, content_encoding, limit).ok()?;
    let (bytes, cut) = match &decompressed {
        Some(d) => (&d.bytes[..], !d.complete),
        None => (&body[..body.len().min(limit)], body.len() > limit),
    };
    let charset = content_type
        .and_then(charset)
        .unwrap_or_else(|| "utf-8".into());
    decode(bytes, &charset, cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_and_deflate_are_undone_within_the_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[b'a'; 1000]).unwrap();
        let d = decompress(&gz.finish().unwrap(), Some("GZIP"), 100)
            .unwrap()
            .unwrap();
        assert_eq!((d.bytes.len(), d.complete, d.codec), (100, false, "gzip"));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"hi").unwrap();
        assert_eq!(
            decompress(&z.finish().unwrap(), Some("deflate"), 10)
                .unwrap()
                .unwrap()
                .bytes,
            b"hi"
        );
        assert!(decompress(b"nope", Some("gzip"), 10).is_err());
        assert_eq!(decompress(b"x", Some("br"), 10).unwrap(), None);
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
            assert!(edits_as_text(b"{\"n\": 1}", encoding), "{encoding:?}");
        }
        for encoding in ["gzip", "deflate", "br", "binary", "latin1"] {
            assert!(!edits_as_text(b"{}", Some(encoding)), "{encoding}");
        }
        assert!(!edits_as_text(b"caf\xe9", Some("utf-8")), "not UTF-8");
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
            whole_text(&gz, None, Some("gzip"), 1000).unwrap().len(),
            1000
        );
        assert_eq!(
            whole_text(&gz, None, Some("gzip"), 999),
            Err(NotText::TooLarge)
        );
        assert_eq!(whole_text(b"abc", None, None, 2), Err(NotText::TooLarge));
        assert_eq!(
            whole_text(b"\xff", None, None, 9),
            Err(NotText::Undecodable)
        );
        assert_eq!(
            whole_text(b"caf\xe9", Some("text/plain; charset=latin1"), None, 9).unwrap(),
            "café"
        );
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let body = "é".repeat(10);
        assert_eq!(text(body.as_bytes(), None, None, 5).as_deref(), Some("éé"));
        assert_eq!(text(&[0xff, 0xfe], None, None, 5), None);
    }
}

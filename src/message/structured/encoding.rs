//! How a body's bytes are to be read (pure): its content type and charset, its
//! content-encoding or kombu's `compression` header, the type that names an AMQP 1.0 or
//! protobuf body, and the protobuf schemas configured. The decoders here read it, and so
//! does `body` (text).

use super::protobuf::Schemas;
use crate::message::headers::Table;

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
    pub headers: Option<&'a Table>,
    /// The protobuf message types configured (`--proto-descriptors`), if any.
    pub schemas: Option<&'a Schemas>,
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
    pub fn with_headers(self, headers: Option<&'a Table>) -> Self {
        Encoding {
            headers,
            compression: compression_header(headers),
            ..self
        }
    }

    /// With the protobuf schemas bodies may be decoded with.
    pub fn with_schemas(self, schemas: Option<&'a Schemas>) -> Self {
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
pub fn compression_header(headers: Option<&Table>) -> Option<&str> {
    headers?.get("compression")?.as_str()
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

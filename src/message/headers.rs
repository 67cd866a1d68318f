//! AMQP field values and basic properties in a typed, lossless, serialisable form (pure).
//!
//! The archive stores headers as JSON in which every value carries its AMQP type, so a
//! replay can rebuild the exact table the broker delivered: `{"type":"long-int","value":7}`.
//! Nothing the wire can carry is refused: short strings and table keys that are not UTF-8
//! are kept as bytes, a table keeps its entries in wire order (duplicates too), and a table
//! or array nested deeper than [`MAX_DEPTH`] is kept as its exact encoding
//! ([`AmqpValue::Encoded`]), so no decoder, page or replay ever recurses without bound.

use std::borrow::Cow;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use serde::{Deserialize, Serialize};

/// Links a replayed copy to the archive record it came from: when the copy dies again, its
/// new record points back to the old one.
pub const REPLAY_OF_HEADER: &str = "x-lazarus-replay-of";
/// The replay job that published the copy, where there is one.
pub const REPLAY_JOB_HEADER: &str = "x-lazarus-replay-job";

/// Tables and arrays are decoded this many levels deep; deeper ones stay encoded. Typed
/// JSON takes two levels per AMQP level, so this stays well inside serde_json's limit of 128.
pub const MAX_DEPTH: usize = 32;

/// One AMQP field value with its wire type kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "kebab-case")]
pub enum AmqpValue {
    Boolean(bool),
    ShortShortInt(i8),
    ShortShortUint(u8),
    ShortInt(i16),
    ShortUint(u16),
    LongInt(i32),
    LongUint(u32),
    LongLongInt(i64),
    Float(JsonFloat<f32>),
    Double(JsonFloat<f64>),
    Decimal {
        scale: u8,
        value: u32,
    },
    /// Not a type RabbitMQ puts in tables (it reads `s` as a short int); kept for values
    /// typed by hand, and written as a long string.
    ShortString(Bytes),
    LongString(Bytes),
    Array(Vec<AmqpValue>),
    /// Seconds since the Unix epoch, as AMQP defines timestamps.
    Timestamp(u64),
    Table(Table),
    ByteArray(Bytes),
    Void,
    /// A table or array nested deeper than [`MAX_DEPTH`] (or one that could not be
    /// decoded): its exact wire encoding, type tag first, written back byte for byte.
    Encoded(#[serde(with = "base64_always")] Vec<u8>),
}

/// Bytes shown as text where they are UTF-8, as `{"base64": "..."}` otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// The bytes as text, when they are UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The bytes as text, with anything that is not UTF-8 replaced (for display and search).
    pub fn to_text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// For a page: the text, or, when the bytes are not UTF-8, their lossy text and base64.
    pub fn describe(&self) -> String {
        match self.as_str() {
            Some(text) => text.to_owned(),
            None => format!(
                "{} (not UTF-8; base64 {})",
                self.to_text(),
                BASE64.encode(&self.0)
            ),
        }
    }
}

impl From<&str> for Bytes {
    fn from(s: &str) -> Self {
        Bytes(s.as_bytes().to_vec())
    }
}

impl From<String> for Bytes {
    fn from(s: String) -> Self {
        Bytes(s.into_bytes())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(b: Vec<u8>) -> Self {
        Bytes(b)
    }
}

impl PartialEq<str> for Bytes {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Bytes {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum BytesRepr {
    Text(String),
    Base64 { base64: String },
}

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => BytesRepr::Text(text.to_owned()),
            Err(_) => BytesRepr::Base64 {
                base64: BASE64.encode(&self.0),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match BytesRepr::deserialize(d)? {
            BytesRepr::Text(text) => Ok(Bytes(text.into_bytes())),
            BytesRepr::Base64 { base64 } => BASE64
                .decode(base64)
                .map(Bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Encoded values are binary by nature: always `{"base64": "..."}`.
mod base64_always {
    use super::*;

    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        BytesRepr::Base64 {
            base64: BASE64.encode(bytes),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Bytes::deserialize(d).map(|b| b.0)
    }
}

/// A header table: entries in the order they came, each name with its typed value.
///
/// AMQP does not forbid repeated names, and a hostile producer may send them: they are
/// kept (and written back) as they came; lookups find the first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table(Vec<(Bytes, AmqpValue)>);

impl Table {
    pub fn new() -> Self {
        Table(Vec::new())
    }

    /// The first value under `name`.
    pub fn get(&self, name: &str) -> Option<&AmqpValue> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Replaces the first value under `name`, or appends it.
    pub fn insert(&mut self, name: impl Into<Bytes>, value: AmqpValue) {
        let name = name.into();
        match self.0.iter_mut().find(|(k, _)| *k == name) {
            Some(entry) => entry.1 = value,
            None => self.0.push((name, value)),
        }
    }

    /// Removes every entry for which `keep` is false.
    pub fn retain(&mut self, mut keep: impl FnMut(&Bytes, &AmqpValue) -> bool) {
        self.0.retain(|(k, v)| keep(k, v));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &AmqpValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &AmqpValue> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut AmqpValue> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Whether JSON can show it as an object: every name is text and none repeats.
    fn is_plain(&self) -> bool {
        let mut seen = std::collections::HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .all(|(k, _)| k.as_str().is_some() && seen.insert(k.as_bytes()))
    }
}

impl<K: Into<Bytes>> FromIterator<(K, AmqpValue)> for Table {
    fn from_iter<I: IntoIterator<Item = (K, AmqpValue)>>(iter: I) -> Self {
        Table(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl<K: Into<Bytes>, const N: usize> From<[(K, AmqpValue); N]> for Table {
    fn from(entries: [(K, AmqpValue); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl IntoIterator for Table {
    type Item = (Bytes, AmqpValue);
    type IntoIter = std::vec::IntoIter<(Bytes, AmqpValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Table {
    type Item = (&'a Bytes, &'a AmqpValue);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Bytes, AmqpValue)>,
        fn(&'a (Bytes, AmqpValue)) -> Self::Item,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

/// A table is a JSON object in order (the common case, and every table archived before
/// names could be bytes), or `[[name, value], ...]` when a name is not UTF-8 or repeats.
impl Serialize for Table {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        if self.is_plain() {
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                map.serialize_entry(k.as_str().expect("plain tables have text names"), v)?;
            }
            map.end()
        } else {
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for entry in &self.0 {
                seq.serialize_element(entry)?;
            }
            seq.end()
        }
    }
}

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TableVisitor;
        impl<'de> serde::de::Visitor<'de> for TableVisitor {
            type Value = Table;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a header table: an object, or a list of [name, value] pairs")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Table, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                while let Some((k, v)) = map.next_entry::<String, AmqpValue>()? {
                    entries.push((Bytes::from(k), v));
                }
                Ok(Table(entries))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Table, A::Error> {
                let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(entry) = seq.next_element::<(Bytes, AmqpValue)>()? {
                    entries.push(entry);
                }
                Ok(Table(entries))
            }
        }
        d.deserialize_any(TableVisitor)
    }
}

/// A float that survives JSON: finite values are numbers, NaN and infinities are strings.
#[derive(Debug, Clone, Copy)]
pub struct JsonFloat<F>(pub F);

impl<F: PartialEq + Copy + Into<f64>> PartialEq for JsonFloat<F> {
    /// Bitwise for NaN so that a round trip of NaN compares equal.
    fn eq(&self, other: &Self) -> bool {
        let (a, b): (f64, f64) = (self.0.into(), other.0.into());
        a == b || (a.is_nan() && b.is_nan())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum FloatRepr<F> {
    Number(F),
    Special(String),
}

macro_rules! json_float {
    ($f:ty) => {
        impl Serialize for JsonFloat<$f> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let v = self.0;
                if v.is_finite() {
                    FloatRepr::Number(v).serialize(s)
                } else if v.is_nan() {
                    FloatRepr::<$f>::Special("NaN".into()).serialize(s)
                } else if v > 0.0 {
                    FloatRepr::<$f>::Special("Infinity".into()).serialize(s)
                } else {
                    FloatRepr::<$f>::Special("-Infinity".into()).serialize(s)
                }
            }
        }
        impl<'de> Deserialize<'de> for JsonFloat<$f> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match FloatRepr::<$f>::deserialize(d)? {
                    FloatRepr::Number(v) => Ok(JsonFloat(v)),
                    FloatRepr::Special(s) => match s.as_str() {
                        "NaN" => Ok(JsonFloat(<$f>::NAN)),
                        "Infinity" => Ok(JsonFloat(<$f>::INFINITY)),
                        "-Infinity" => Ok(JsonFloat(<$f>::NEG_INFINITY)),
                        other => Err(serde::de::Error::custom(format!("not a float: {other}"))),
                    },
                }
            }
        }
    };
}
json_float!(f32);
json_float!(f64);

impl AmqpValue {
    /// The value as text when it is a string of either width that is UTF-8 (the common
    /// case for headers).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AmqpValue::ShortString(b) | AmqpValue::LongString(b) => b.as_str(),
            _ => None,
        }
    }

    /// A long string holding `text`.
    pub fn text(text: &str) -> Self {
        AmqpValue::LongString(Bytes::from(text))
    }

    /// The value as an integer when it has any integer type (or is a timestamp).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            AmqpValue::ShortShortInt(v) => Some(v.into()),
            AmqpValue::ShortShortUint(v) => Some(v.into()),
            AmqpValue::ShortInt(v) => Some(v.into()),
            AmqpValue::ShortUint(v) => Some(v.into()),
            AmqpValue::LongInt(v) => Some(v.into()),
            AmqpValue::LongUint(v) => Some(v.into()),
            AmqpValue::LongLongInt(v) => Some(v),
            AmqpValue::Timestamp(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The AMQP type name used in the JSON form (`long-string`, `table`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            AmqpValue::Boolean(_) => "boolean",
            AmqpValue::ShortShortInt(_) => "short-short-int",
            AmqpValue::ShortShortUint(_) => "short-short-uint",
            AmqpValue::ShortInt(_) => "short-int",
            AmqpValue::ShortUint(_) => "short-uint",
            AmqpValue::LongInt(_) => "long-int",
            AmqpValue::LongUint(_) => "long-uint",
            AmqpValue::LongLongInt(_) => "long-long-int",
            AmqpValue::Float(_) => "float",
            AmqpValue::Double(_) => "double",
            AmqpValue::Decimal { .. } => "decimal",
            AmqpValue::ShortString(_) => "short-string",
            AmqpValue::LongString(_) => "long-string",
            AmqpValue::Array(_) => "array",
            AmqpValue::Timestamp(_) => "timestamp",
            AmqpValue::Table(_) => "table",
            AmqpValue::ByteArray(_) => "byte-array",
            AmqpValue::Void => "void",
            AmqpValue::Encoded(_) => "encoded",
        }
    }
}

/// Every basic property except `headers`, which is kept as a typed [`Table`] beside it.
/// Short strings are bytes: a producer may put anything in a message-id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageProperties {
    pub content_type: Option<Bytes>,
    pub content_encoding: Option<Bytes>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<Bytes>,
    pub reply_to: Option<Bytes>,
    pub expiration: Option<Bytes>,
    pub message_id: Option<Bytes>,
    /// Seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    #[serde(rename = "type")]
    pub kind: Option<Bytes>,
    pub user_id: Option<Bytes>,
    pub app_id: Option<Bytes>,
    pub cluster_id: Option<Bytes>,
}

impl MessageProperties {
    /// A property as text for display and search: lossy where it is not UTF-8.
    pub fn text(value: &Option<Bytes>) -> Option<Cow<'_, str>> {
        value.as_ref().map(Bytes::to_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> Table {
        Table::from([
            ("bool", AmqpValue::Boolean(true)),
            ("i8", AmqpValue::ShortShortInt(-8)),
            ("u8", AmqpValue::ShortShortUint(8)),
            ("i16", AmqpValue::ShortInt(-16)),
            ("u16", AmqpValue::ShortUint(16)),
            ("i32", AmqpValue::LongInt(-32)),
            ("u32", AmqpValue::LongUint(32)),
            ("i64", AmqpValue::LongLongInt(-64)),
            ("f32", AmqpValue::Float(JsonFloat(1.1))),
            ("f64", AmqpValue::Double(JsonFloat(f64::NAN))),
            ("inf", AmqpValue::Double(JsonFloat(f64::NEG_INFINITY))),
            (
                "dec",
                AmqpValue::Decimal {
                    scale: 2,
                    value: 12345,
                },
            ),
            ("lstr", AmqpValue::text("long ünïcode")),
            (
                "binstr",
                AmqpValue::LongString(Bytes(vec![0xff, 0x00, 0xfe])),
            ),
            (
                "arr",
                AmqpValue::Array(vec![AmqpValue::text("a"), AmqpValue::Void]),
            ),
            ("ts", AmqpValue::Timestamp(1_700_000_000)),
            (
                "table",
                AmqpValue::Table(Table::from([("inner", AmqpValue::LongInt(-5))])),
            ),
            ("bytes", AmqpValue::ByteArray(Bytes(vec![1, 2, 3]))),
            ("void", AmqpValue::Void),
            ("deep", AmqpValue::Encoded(vec![b'A', 0, 0, 0, 0])),
        ])
    }

    #[test]
    fn every_amqp_type_survives_json_and_back() {
        let typed = every_type();
        let json = serde_json::to_string(&typed).unwrap();
        let parsed: Table = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, typed);
        assert_eq!(
            parsed.keys().map(|k| k.to_text()).collect::<Vec<_>>()[..3],
            ["bool", "i8", "u8"],
            "entries keep their order"
        );
    }

    #[test]
    fn json_shows_each_type_by_name() {
        let typed = every_type();
        let json = serde_json::to_value(&typed).unwrap();
        assert_eq!(
            json["i8"],
            serde_json::json!({"type": "short-short-int", "value": -8})
        );
        // f32 is written with its shortest exact form, not widened to f64 digits.
        let text = serde_json::to_string(&typed).unwrap();
        assert!(
            text.contains(r#""f32":{"type":"float","value":1.1}"#),
            "{text}"
        );
        assert_eq!(
            json["f64"],
            serde_json::json!({"type": "double", "value": "NaN"})
        );
        assert_eq!(
            json["binstr"],
            serde_json::json!({"type": "long-string", "value": {"base64": "/wD+"}})
        );
        assert_eq!(
            json["dec"],
            serde_json::json!({"type": "decimal", "value": {"scale": 2, "value": 12345}})
        );
        assert_eq!(json["void"], serde_json::json!({"type": "void"}));
        assert_eq!(json["table"]["value"]["inner"]["type"], "long-int");
        assert_eq!(
            json["deep"],
            serde_json::json!({"type": "encoded", "value": {"base64": "QQAAAAA="}})
        );
    }

    #[test]
    fn names_that_are_bytes_or_repeat_are_kept_as_pairs() {
        let t = Table(vec![
            (Bytes(b"bad-\xff".to_vec()), AmqpValue::LongInt(1)),
            (Bytes::from("dup"), AmqpValue::LongInt(2)),
            (Bytes::from("dup"), AmqpValue::LongInt(3)),
        ]);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json[0][0],
            serde_json::json!({"base64": BASE64.encode(b"bad-\xff")})
        );
        let back: Table = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.get("dup"), Some(&AmqpValue::LongInt(2)));
    }

    #[test]
    fn tables_archived_before_keep_reading() {
        let old =
            r#"{"x-death":{"type":"array","value":[]},"n":{"type":"short-string","value":"s"}}"#;
        let t: Table = serde_json::from_str(old).unwrap();
        assert_eq!(t.get("n"), Some(&AmqpValue::ShortString(Bytes::from("s"))));
        let props: MessageProperties =
            serde_json::from_str(r#"{"message_id":"m-1","content_type":null}"#).unwrap();
        assert_eq!(props.message_id, Some(Bytes::from("m-1")));
    }

    #[test]
    fn properties_that_are_not_utf8_round_trip() {
        let props = MessageProperties {
            message_id: Some(Bytes(b"bad-\xff\xfe-id".to_vec())),
            content_type: Some(Bytes::from("application/json")),
            ..Default::default()
        };
        let json = serde_json::to_string(&props).unwrap();
        let back: MessageProperties = serde_json::from_str(&json).unwrap();
        assert_eq!(back, props);
        assert_eq!(
            MessageProperties::text(&back.message_id).unwrap(),
            "bad-\u{fffd}\u{fffd}-id"
        );
    }
}

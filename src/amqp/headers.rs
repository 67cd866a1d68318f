//! AMQP field values and basic properties ⇄ a typed, lossless, serialisable form (pure).
//!
//! The archive stores headers as JSON in which every value carries its AMQP type, so a
//! replay can rebuild the exact `FieldTable` the broker delivered: `{"type":"long-int","value":7}`.

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use lapin::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, ShortString};
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};

/// A header table: names to typed values (AMQP tables have unique, unordered keys).
pub type Table = BTreeMap<String, AmqpValue>;

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
    ShortString(String),
    LongString(Bytes),
    Array(Vec<AmqpValue>),
    /// Seconds since the Unix epoch, as AMQP defines timestamps.
    Timestamp(u64),
    Table(Table),
    ByteArray(Bytes),
    Void,
}

/// Bytes shown as text where they are UTF-8, as `{"base64": "..."}` otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct Bytes(pub Vec<u8>);

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
    /// The value as text when it is a string of either width (the common case for headers).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AmqpValue::ShortString(s) => Some(s),
            AmqpValue::LongString(b) => std::str::from_utf8(&b.0).ok(),
            _ => None,
        }
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
        }
    }
}

impl From<&AMQPValue> for AmqpValue {
    fn from(value: &AMQPValue) -> Self {
        match value {
            AMQPValue::Boolean(v) => AmqpValue::Boolean(*v),
            AMQPValue::ShortShortInt(v) => AmqpValue::ShortShortInt(*v),
            AMQPValue::ShortShortUInt(v) => AmqpValue::ShortShortUint(*v),
            AMQPValue::ShortInt(v) => AmqpValue::ShortInt(*v),
            AMQPValue::ShortUInt(v) => AmqpValue::ShortUint(*v),
            AMQPValue::LongInt(v) => AmqpValue::LongInt(*v),
            AMQPValue::LongUInt(v) => AmqpValue::LongUint(*v),
            AMQPValue::LongLongInt(v) => AmqpValue::LongLongInt(*v),
            AMQPValue::Float(v) => AmqpValue::Float(JsonFloat(*v)),
            AMQPValue::Double(v) => AmqpValue::Double(JsonFloat(*v)),
            AMQPValue::DecimalValue(d) => AmqpValue::Decimal {
                scale: d.scale,
                value: d.value,
            },
            AMQPValue::ShortString(s) => AmqpValue::ShortString(s.as_str().to_owned()),
            AMQPValue::LongString(s) => AmqpValue::LongString(Bytes(s.as_bytes().to_vec())),
            AMQPValue::FieldArray(a) => {
                AmqpValue::Array(a.as_slice().iter().map(Into::into).collect())
            }
            AMQPValue::Timestamp(t) => AmqpValue::Timestamp(*t),
            AMQPValue::FieldTable(t) => AmqpValue::Table(table_from_amqp(t)),
            AMQPValue::ByteArray(b) => AmqpValue::ByteArray(Bytes(b.as_slice().to_vec())),
            AMQPValue::Void => AmqpValue::Void,
        }
    }
}

impl From<&AmqpValue> for AMQPValue {
    fn from(value: &AmqpValue) -> Self {
        match value {
            AmqpValue::Boolean(v) => AMQPValue::Boolean(*v),
            AmqpValue::ShortShortInt(v) => AMQPValue::ShortShortInt(*v),
            AmqpValue::ShortShortUint(v) => AMQPValue::ShortShortUInt(*v),
            AmqpValue::ShortInt(v) => AMQPValue::ShortInt(*v),
            AmqpValue::ShortUint(v) => AMQPValue::ShortUInt(*v),
            AmqpValue::LongInt(v) => AMQPValue::LongInt(*v),
            AmqpValue::LongUint(v) => AMQPValue::LongUInt(*v),
            AmqpValue::LongLongInt(v) => AMQPValue::LongLongInt(*v),
            AmqpValue::Float(v) => AMQPValue::Float(v.0),
            AmqpValue::Double(v) => AMQPValue::Double(v.0),
            AmqpValue::Decimal { scale, value } => AMQPValue::DecimalValue(DecimalValue {
                scale: *scale,
                value: *value,
            }),
            AmqpValue::ShortString(s) => AMQPValue::ShortString(s.as_str().into()),
            AmqpValue::LongString(b) => AMQPValue::LongString(b.0.clone().into()),
            AmqpValue::Array(a) => AMQPValue::FieldArray(FieldArray::from(
                a.iter().map(Into::into).collect::<Vec<_>>(),
            )),
            AmqpValue::Timestamp(t) => AMQPValue::Timestamp(*t),
            AmqpValue::Table(t) => AMQPValue::FieldTable(table_to_amqp(t)),
            AmqpValue::ByteArray(b) => AMQPValue::ByteArray(b.0.as_slice().into()),
            AmqpValue::Void => AMQPValue::Void,
        }
    }
}

/// A lapin `FieldTable` as a typed table.
pub fn table_from_amqp(table: &FieldTable) -> Table {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.into()))
        .collect()
}

/// A typed table back as the lapin `FieldTable` it came from.
pub fn table_to_amqp(table: &Table) -> FieldTable {
    let map: BTreeMap<ShortString, AMQPValue> = table
        .iter()
        .map(|(k, v)| (ShortString::from(k.as_str()), v.into()))
        .collect();
    FieldTable::from(map)
}

/// Every basic property except `headers`, which is kept as a typed [`Table`] beside it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageProperties {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    pub expiration: Option<String>,
    pub message_id: Option<String>,
    /// Seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub cluster_id: Option<String>,
}

fn owned(s: &Option<ShortString>) -> Option<String> {
    s.as_ref().map(|s| s.as_str().to_owned())
}

impl MessageProperties {
    /// Splits lapin's properties into the typed properties and the typed headers
    /// (`None` when the message had no header table at all, which is not the same as empty).
    pub fn from_amqp(p: &BasicProperties) -> (Self, Option<Table>) {
        let props = MessageProperties {
            content_type: owned(p.content_type()),
            content_encoding: owned(p.content_encoding()),
            delivery_mode: *p.delivery_mode(),
            priority: *p.priority(),
            correlation_id: owned(p.correlation_id()),
            reply_to: owned(p.reply_to()),
            expiration: owned(p.expiration()),
            message_id: owned(p.message_id()),
            timestamp: *p.timestamp(),
            kind: owned(p.kind()),
            user_id: owned(p.user_id()),
            app_id: owned(p.app_id()),
            cluster_id: owned(p.cluster_id()),
        };
        (props, p.headers().as_ref().map(table_from_amqp))
    }

    /// Rebuilds lapin's properties from the typed form, with the given headers.
    pub fn to_amqp(&self, headers: Option<&Table>) -> BasicProperties {
        let mut p = BasicProperties::default();
        let s = |v: &String| ShortString::from(v.as_str());
        if let Some(v) = &self.content_type {
            p = p.with_content_type(s(v));
        }
        if let Some(v) = &self.content_encoding {
            p = p.with_content_encoding(s(v));
        }
        if let Some(h) = headers {
            p = p.with_headers(table_to_amqp(h));
        }
        if let Some(v) = self.delivery_mode {
            p = p.with_delivery_mode(v);
        }
        if let Some(v) = self.priority {
            p = p.with_priority(v);
        }
        if let Some(v) = &self.correlation_id {
            p = p.with_correlation_id(s(v));
        }
        if let Some(v) = &self.reply_to {
            p = p.with_reply_to(s(v));
        }
        if let Some(v) = &self.expiration {
            p = p.with_expiration(s(v));
        }
        if let Some(v) = &self.message_id {
            p = p.with_message_id(s(v));
        }
        if let Some(v) = self.timestamp {
            p = p.with_timestamp(v);
        }
        if let Some(v) = &self.kind {
            p = p.with_type(s(v));
        }
        if let Some(v) = &self.user_id {
            p = p.with_user_id(s(v));
        }
        if let Some(v) = &self.app_id {
            p = p.with_app_id(s(v));
        }
        if let Some(v) = &self.cluster_id {
            p = p.with_cluster_id(s(v));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> FieldTable {
        let mut nested = FieldTable::default();
        nested.insert("inner".into(), AMQPValue::LongInt(-5));
        let mut t = FieldTable::default();
        t.insert("bool".into(), AMQPValue::Boolean(true));
        t.insert("i8".into(), AMQPValue::ShortShortInt(-8));
        t.insert("u8".into(), AMQPValue::ShortShortUInt(8));
        t.insert("i16".into(), AMQPValue::ShortInt(-16));
        t.insert("u16".into(), AMQPValue::ShortUInt(16));
        t.insert("i32".into(), AMQPValue::LongInt(-32));
        t.insert("u32".into(), AMQPValue::LongUInt(32));
        t.insert("i64".into(), AMQPValue::LongLongInt(-64));
        t.insert("f32".into(), AMQPValue::Float(1.1));
        t.insert("f64".into(), AMQPValue::Double(f64::NAN));
        t.insert("inf".into(), AMQPValue::Double(f64::NEG_INFINITY));
        t.insert(
            "dec".into(),
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 12345,
            }),
        );
        t.insert("sstr".into(), AMQPValue::ShortString("short".into()));
        t.insert("lstr".into(), AMQPValue::LongString("long ünïcode".into()));
        t.insert(
            "binstr".into(),
            AMQPValue::LongString(vec![0xff, 0x00, 0xfe].into()),
        );
        t.insert(
            "arr".into(),
            AMQPValue::FieldArray(vec![AMQPValue::LongString("a".into()), AMQPValue::Void].into()),
        );
        t.insert("ts".into(), AMQPValue::Timestamp(1_700_000_000));
        t.insert("table".into(), AMQPValue::FieldTable(nested));
        t.insert("bytes".into(), AMQPValue::ByteArray(vec![1, 2, 3].into()));
        t.insert("void".into(), AMQPValue::Void);
        t
    }

    #[test]
    fn every_amqp_type_survives_json_and_back() {
        let original = every_type();
        let typed = table_from_amqp(&original);
        let json = serde_json::to_string(&typed).unwrap();
        let parsed: Table = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, typed);
        let back = table_to_amqp(&parsed);
        // NaN != NaN, so compare everything but the NaN entry exactly and that one by kind.
        for (k, v) in original.inner() {
            let got = &back.inner()[k];
            match (v, got) {
                (AMQPValue::Double(a), AMQPValue::Double(b)) if a.is_nan() => assert!(b.is_nan()),
                _ => assert_eq!(v, got, "{k}"),
            }
        }
    }

    #[test]
    fn json_shows_each_type_by_name() {
        let typed = table_from_amqp(&every_type());
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
    }

    #[test]
    fn properties_round_trip_through_lapin() {
        let p = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_priority(7)
            .with_message_id("m-1".into())
            .with_timestamp(42)
            .with_type("invoice.created".into())
            .with_headers(every_type());
        let (props, headers) = MessageProperties::from_amqp(&p);
        assert_eq!(props.kind.as_deref(), Some("invoice.created"));
        let rebuilt = props.to_amqp(headers.as_ref());
        assert_eq!(rebuilt.message_id(), p.message_id());
        assert_eq!(rebuilt.priority(), p.priority());
        assert_eq!(MessageProperties::from_amqp(&rebuilt).0, props);
    }

    #[test]
    fn absent_headers_stay_absent() {
        let (_, headers) = MessageProperties::from_amqp(&BasicProperties::default());
        assert!(headers.is_none());
    }
}

//! Lazarus' typed values ⇄ lapin's, for the demo, the tests and the benchmarks, which use
//! lapin as an ordinary producer and consumer would. Lossy where lapin is narrower: names
//! and short strings that are not UTF-8 become text, encoded parts are decoded.

use lapin::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, ShortString};
use lapin::BasicProperties;

use crate::message::codec::{decode_table, Writer};
use crate::message::headers::{AmqpValue, Bytes, JsonFloat, MessageProperties, Table};

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
            AMQPValue::ShortString(s) => AmqpValue::ShortString(s.as_str().into()),
            AMQPValue::LongString(s) => AmqpValue::LongString(Bytes(s.as_bytes().to_vec())),
            AMQPValue::FieldArray(a) => {
                AmqpValue::Array(a.as_slice().iter().map(Into::into).collect())
            }
            AMQPValue::Timestamp(t) => AmqpValue::Timestamp(*t),
            AMQPValue::FieldTable(t) => AmqpValue::Table(table_from_lapin(t)),
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
            AmqpValue::ShortString(b) | AmqpValue::LongString(b) => {
                AMQPValue::LongString(b.0.clone().into())
            }
            AmqpValue::Array(a) => AMQPValue::FieldArray(FieldArray::from(
                a.iter().map(Into::into).collect::<Vec<_>>(),
            )),
            AmqpValue::Timestamp(t) => AMQPValue::Timestamp(*t),
            AmqpValue::Table(t) => AMQPValue::FieldTable(table_to_lapin(t)),
            AmqpValue::ByteArray(b) => AMQPValue::ByteArray(b.0.as_slice().into()),
            AmqpValue::Void => AMQPValue::Void,
            AmqpValue::Encoded(bytes) => {
                // Decode it through a one-entry table: lapin has no encoded form.
                let mut table = Vec::new();
                let _ = table.put_short_string("", b"v");
                table.extend_from_slice(bytes);
                match decode_table(&table).ok().and_then(|t| t.get("v").cloned()) {
                    Some(v) => (&v).into(),
                    None => AMQPValue::Void,
                }
            }
        }
    }
}

/// A lapin `FieldTable` as a typed table.
pub fn table_from_lapin(table: &FieldTable) -> Table {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str(), v.into()))
        .collect()
}

/// A typed table as a lapin `FieldTable`.
pub fn table_to_lapin(table: &Table) -> FieldTable {
    let mut out = FieldTable::default();
    for (k, v) in table {
        out.insert(ShortString::from(k.to_text().as_ref()), v.into());
    }
    out
}

impl MessageProperties {
    /// Splits lapin's properties into the typed properties and the typed headers.
    pub fn from_lapin(p: &BasicProperties) -> (Self, Option<Table>) {
        let b = |s: &Option<ShortString>| s.as_ref().map(|s| Bytes::from(s.as_str()));
        let props = MessageProperties {
            content_type: b(p.content_type()),
            content_encoding: b(p.content_encoding()),
            delivery_mode: *p.delivery_mode(),
            priority: *p.priority(),
            correlation_id: b(p.correlation_id()),
            reply_to: b(p.reply_to()),
            expiration: b(p.expiration()),
            message_id: b(p.message_id()),
            timestamp: *p.timestamp(),
            kind: b(p.kind()),
            user_id: b(p.user_id()),
            app_id: b(p.app_id()),
            cluster_id: b(p.cluster_id()),
        };
        (props, p.headers().as_ref().map(table_from_lapin))
    }

    /// lapin's properties from the typed form, with the given headers.
    pub fn to_lapin(&self, headers: Option<&Table>) -> BasicProperties {
        let s = |v: &Bytes| ShortString::from(v.to_text().as_ref());
        let mut p = BasicProperties::default();
        if let Some(v) = &self.content_type {
            p = p.with_content_type(s(v));
        }
        if let Some(v) = &self.content_encoding {
            p = p.with_content_encoding(s(v));
        }
        if let Some(h) = headers {
            p = p.with_headers(table_to_lapin(h));
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

    #[test]
    fn properties_round_trip_through_lapin() {
        let headers = Table::from([
            ("n", AmqpValue::LongInt(-5)),
            (
                "t",
                AmqpValue::Table(Table::from([("k", AmqpValue::text("v"))])),
            ),
        ]);
        let p = MessageProperties {
            content_type: Some("application/json".into()),
            delivery_mode: Some(2),
            priority: Some(7),
            message_id: Some("m-1".into()),
            timestamp: Some(42),
            kind: Some("invoice.created".into()),
            ..Default::default()
        };
        let lapin = p.to_lapin(Some(&headers));
        let (back, back_headers) = MessageProperties::from_lapin(&lapin);
        assert_eq!(back, p);
        assert_eq!(back_headers.as_ref(), Some(&headers));
    }
}

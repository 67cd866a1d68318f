//! Header round trip: one header of every AMQP type, archived and shown with its type.

use std::time::Duration;

use lapin::types::{AMQPValue, DecimalValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;

use crate::helpers::*;

/// One header of every AMQP type RabbitMQ carries, nested tables and arrays included.
pub(crate) fn every_header_type() -> FieldTable {
    let mut nested = FieldTable::default();
    nested.insert("level".into(), AMQPValue::ShortShortUInt(2));
    let mut inner = FieldTable::default();
    inner.insert("deeper".into(), AMQPValue::FieldTable(nested));
    inner.insert("ok".into(), AMQPValue::Boolean(false));
    let mut h = FieldTable::default();
    h.insert("bool".into(), AMQPValue::Boolean(true));
    h.insert("i8".into(), AMQPValue::ShortShortInt(-8));
    h.insert("u8".into(), AMQPValue::ShortShortUInt(200));
    h.insert("i16".into(), AMQPValue::ShortInt(-1600));
    h.insert("i32".into(), AMQPValue::LongInt(-320_000));
    h.insert("u32".into(), AMQPValue::LongUInt(4_000_000_000));
    h.insert("i64".into(), AMQPValue::LongLongInt(-6_400_000_000));
    h.insert("f32".into(), AMQPValue::Float(1.5));
    h.insert("f64".into(), AMQPValue::Double(2.25));
    h.insert(
        "decimal".into(),
        AMQPValue::DecimalValue(DecimalValue {
            scale: 2,
            value: 12345,
        }),
    );
    h.insert("longstr".into(), AMQPValue::LongString("héllo".into()));
    h.insert(
        "binary-longstr".into(),
        AMQPValue::LongString(vec![0u8, 159, 146, 150].into()),
    );
    h.insert(
        "array".into(),
        AMQPValue::FieldArray(
            vec![
                AMQPValue::LongInt(1),
                AMQPValue::LongString("two".into()),
                AMQPValue::Void,
            ]
            .into(),
        ),
    );
    h.insert("timestamp".into(), AMQPValue::Timestamp(1_764_669_600));
    h.insert("table".into(), AMQPValue::FieldTable(inner));
    h.insert(
        "bytes".into(),
        AMQPValue::ByteArray(vec![0xde, 0xad, 0xbe, 0xef].into()),
    );
    h.insert("void".into(), AMQPValue::Void);
    h
}

on_both_backends!(every_amqp_header_type_is_archived_with_its_type);
async fn every_amqp_header_type_is_archived_with_its_type() {
    let dlq = unique("headers");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;

    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("identity".into())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_correlation_id("corr-9".into())
        .with_reply_to("replies".into())
        .with_expiration("600000".into())
        .with_message_id("typed-1".into())
        .with_timestamp(1_764_669_600)
        .with_type("invoice.created".into())
        .with_user_id("guest".into())
        .with_app_id("billing".into())
        .with_headers(every_header_type());
    t.publish("", &dlq, b"{}", properties).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;

    let detail = app.detail_by_message_id(&dlq, "typed-1").await;
    let headers = &detail["headers"];
    // RabbitMQ 3.x carries every type below unchanged; short-uint and short-string are not
    // AMQP 0-9-1 table types RabbitMQ accepts, so they are covered by the unit tests.
    let expected = json!({
        "bool": {"type": "boolean", "value": true},
        "i8": {"type": "short-short-int", "value": -8},
        "u8": {"type": "short-short-uint", "value": 200},
        "i16": {"type": "short-int", "value": -1600},
        "i32": {"type": "long-int", "value": -320000},
        "u32": {"type": "long-uint", "value": 4000000000u32},
        "i64": {"type": "long-long-int", "value": -6400000000i64},
        "f32": {"type": "float", "value": 1.5},
        "f64": {"type": "double", "value": 2.25},
        "decimal": {"type": "decimal", "value": {"scale": 2, "value": 12345}},
        "longstr": {"type": "long-string", "value": "héllo"},
        "binary-longstr": {"type": "long-string", "value": {"base64": "AJ+Slg=="}},
        "array": {"type": "array", "value": [
            {"type": "long-int", "value": 1},
            {"type": "long-string", "value": "two"},
            {"type": "void"},
        ]},
        "timestamp": {"type": "timestamp", "value": 1764669600},
        "table": {"type": "table", "value": {
            "deeper": {"type": "table", "value": {"level": {"type": "short-short-uint", "value": 2}}},
            "ok": {"type": "boolean", "value": false},
        }},
        "bytes": {"type": "byte-array", "value": {"base64": "3q2+7w=="}},
        "void": {"type": "void"},
    });
    assert_eq!(headers, &expected);
    assert_eq!(
        detail["properties"],
        json!({
            "content_type": "application/json", "content_encoding": "identity", "delivery_mode": 2,
            "priority": 5, "correlation_id": "corr-9", "reply_to": "replies", "expiration": "600000",
            "message_id": "typed-1", "timestamp": 1764669600, "type": "invoice.created",
            "user_id": "guest", "app_id": "billing", "cluster_id": null,
        })
    );
    assert_eq!(detail["correlation_id"], "corr-9");
    t.cleanup().await;
}

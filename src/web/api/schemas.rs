//! The schemas of `/api/openapi.json` that a derive cannot say, written by hand: typed
//! headers ([`Bytes`], [`Table`], [`AmqpValue`], whose serde is hand-written too) and a
//! selection ([`SelectionRequest`]: `ids` or a `filter`, never both).

use std::borrow::Cow;

use serde_json::{json, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::archive::selection::ListParams;
use crate::message::headers::{AmqpValue, Bytes, Table};
use crate::replay::plan::{IdValue, SelectionRequest, MAX_IDS};

fn schema(value: Value) -> RefOr<Schema> {
    let schema: RefOr<Schema> = serde_json::from_value(value.clone())
        .expect("the hand-written schema is a valid OpenAPI schema");
    // utoipa's model ignores keywords it does not know: none may be lost on the way.
    debug_assert_eq!(
        serde_json::to_value(&schema).expect("a schema serializes"),
        value,
        "utoipa keeps every keyword of the hand-written schema"
    );
    schema
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The wire types a value may carry, with the JSON its `value` has.
fn typed_values() -> Vec<(&'static str, Value)> {
    let integer = json!({ "type": "integer" });
    let float = json!({ "oneOf": [
        { "type": "number" },
        { "type": "string", "enum": ["NaN", "Infinity", "-Infinity"] },
    ]});
    vec![
        ("boolean", json!({ "type": "boolean" })),
        ("short-short-int", integer.clone()),
        ("short-short-uint", integer.clone()),
        ("short-int", integer.clone()),
        ("short-uint", integer.clone()),
        ("long-int", integer.clone()),
        ("long-uint", integer.clone()),
        ("long-long-int", integer.clone()),
        ("float", float.clone()),
        ("double", float),
        (
            "decimal",
            json!({
                "type": "object",
                "required": ["scale", "value"],
                "properties": { "scale": integer, "value": integer },
            }),
        ),
        ("short-string", reference("Bytes")),
        ("long-string", reference("Bytes")),
        (
            "array",
            json!({ "type": "array", "items": reference("AmqpValue") }),
        ),
        ("timestamp", json!({ "type": "integer", "minimum": 0 })),
        ("table", reference("Table")),
        ("byte-array", reference("Bytes")),
        (
            "encoded",
            json!({
                "type": "object",
                "required": ["base64"],
                "properties": { "base64": { "type": "string" } },
            }),
        ),
    ]
}

impl PartialSchema for Bytes {
    fn schema() -> RefOr<Schema> {
        schema(json!({
            "description": "Text where the bytes are UTF-8, else {\"base64\": \"...\"}.",
            "oneOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "required": ["base64"],
                    "properties": { "base64": { "type": "string" } },
                },
            ],
        }))
    }
}

impl ToSchema for Bytes {
    fn name() -> Cow<'static, str> {
        "Bytes".into()
    }
}

impl PartialSchema for AmqpValue {
    fn schema() -> RefOr<Schema> {
        let mut variants: Vec<Value> = typed_values()
            .into_iter()
            .map(|(name, value)| {
                json!({
                    "type": "object",
                    "required": ["type", "value"],
                    "properties": { "type": { "type": "string", "enum": [name] }, "value": value },
                })
            })
            .collect();
        variants.push(json!({
            "type": "object",
            "required": ["type"],
            "properties": { "type": { "type": "string", "enum": ["void"] } },
        }));
        schema(json!({
            "description": "One AMQP field value with its wire type: {\"type\": \"long-int\", \"value\": 7}.",
            "oneOf": variants,
        }))
    }
}

impl ToSchema for AmqpValue {
    fn name() -> Cow<'static, str> {
        "AmqpValue".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(("Bytes".into(), Bytes::schema()));
        schemas.push(("Table".into(), Table::schema()));
    }
}

impl PartialSchema for Table {
    fn schema() -> RefOr<Schema> {
        schema(json!({
            "description": "A header table: an object in wire order, or [[name, value], ...] when a name is not UTF-8 or repeats.",
            "oneOf": [
                { "type": "object", "additionalProperties": reference("AmqpValue") },
                {
                    "type": "array",
                    "description": "[name, value] pairs: the name as Bytes, the value an AmqpValue.",
                    "items": {
                        "type": "array",
                        "items": { "oneOf": [reference("Bytes"), reference("AmqpValue")] },
                        "minItems": 2,
                        "maxItems": 2,
                    },
                },
            ],
        }))
    }
}

impl ToSchema for Table {
    fn name() -> Cow<'static, str> {
        "Table".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(("Bytes".into(), Bytes::schema()));
        schemas.push(("AmqpValue".into(), AmqpValue::schema()));
    }
}

impl PartialSchema for SelectionRequest {
    fn schema() -> RefOr<Schema> {
        let all = json!({
            "type": "boolean",
            "description": "Required with an empty filter: yes, the whole archive.",
        });
        schema(json!({
            "description": "The messages to act on: `ids` as the API gave them, or a `filter` with the list's fields.",
            "oneOf": [
                {
                    "type": "object",
                    "required": ["ids"],
                    "properties": {
                        "ids": {
                            "type": "array",
                            "items": reference("IdValue"),
                            "minItems": 1,
                            "maxItems": MAX_IDS,
                        },
                        "all": all,
                    },
                },
                {
                    "type": "object",
                    "required": ["filter"],
                    "properties": { "filter": reference("ListParams"), "all": all },
                },
            ],
        }))
    }
}

impl ToSchema for SelectionRequest {
    fn name() -> Cow<'static, str> {
        "SelectionRequest".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(("IdValue".into(), IdValue::schema()));
        schemas.push(("ListParams".into(), ListParams::schema()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::headers::JsonFloat;

    #[test]
    fn a_selection_is_ids_or_a_filter() {
        let schema = serde_json::to_value(SelectionRequest::schema()).unwrap();
        let alternatives = schema["oneOf"].as_array().unwrap();
        assert_eq!(alternatives[0]["required"], json!(["ids"]));
        assert_eq!(alternatives[1]["required"], json!(["filter"]));
        let given: SelectionRequest =
            serde_json::from_value(json!({ "ids": ["1", 2], "all": false })).unwrap();
        assert!(given.ids.is_some() && given.filter.is_none());
    }

    #[test]
    fn every_wire_type_has_a_schema_and_serializes_as_it_says() {
        let values = [
            AmqpValue::Boolean(true),
            AmqpValue::ShortShortInt(-1),
            AmqpValue::ShortShortUint(1),
            AmqpValue::ShortInt(-1),
            AmqpValue::ShortUint(1),
            AmqpValue::LongInt(-1),
            AmqpValue::LongUint(1),
            AmqpValue::LongLongInt(-1),
            AmqpValue::Float(JsonFloat(1.5)),
            AmqpValue::Double(JsonFloat(f64::NAN)),
            AmqpValue::Decimal { scale: 2, value: 1 },
            AmqpValue::ShortString(Bytes(b"s".to_vec())),
            AmqpValue::LongString(Bytes(vec![0xff])),
            AmqpValue::Array(vec![AmqpValue::Void]),
            AmqpValue::Timestamp(1),
            AmqpValue::Table(Table::new()),
            AmqpValue::ByteArray(Bytes(vec![1])),
            AmqpValue::Encoded(vec![b'A']),
        ];
        let named: Vec<&str> = typed_values().iter().map(|(name, _)| *name).collect();
        assert_eq!(named.len(), values.len());
        for value in values {
            let json = serde_json::to_value(&value).unwrap();
            assert_eq!(json["type"], value.type_name());
            assert!(named.contains(&value.type_name()), "{json} has no schema");
            assert!(json.get("value").is_some(), "{json} has a value");
        }
        let void = serde_json::to_value(AmqpValue::Void).unwrap();
        assert_eq!(void, json!({ "type": "void" }));
    }
}

//! Protocol Buffers bodies as JSON (pure): the message types of `FileDescriptorSet`s (what
//! `protoc --include_imports --descriptor_set_out` writes), which message a body holds (its
//! `type` property, a header or a content-type parameter, mapped or named directly), and the
//! wire format decoded with them into JSON: fields by their names in the `.proto` file, enums
//! by name, 64-bit integers as numbers, bytes as base64, maps as objects, `Timestamp` and
//! `Duration` as text, and fields the schema does not know kept under their numbers (the
//! writing in `decode`, the wire format in `wire`).
//!
//! Why not `prost-reflect` (issue 34; measured by
//! `cargo bench --bench decoders --features decoder-crates`, figures in docs/benchmarks.md): a `DynamicMessage` holds every value decoded before any JSON is
//! written, and it has no streamed way out. A 16 MiB packed field of one-byte numbers costs it
//! 1,344 MiB of peak heap and 7× our time (ours stops at the 8 MiB budget with 12 MiB);
//! an ordinary 3 KiB `OrderFailed` 3.2× our peak and 1.3× our time. Its recursion limit and
//! length checks hold against deep nesting and 4 GiB length prefixes, as ours do.

use std::collections::HashMap;

use crate::message::headers::Table;

use super::{JsonText, Malformed, Written, MAX_DEPTH};
use wire::{Item, Wire};

mod decode;
mod wire;

/// Why descriptor sets and `--proto-type` aliases do not load: the file or alias at fault,
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("{file} is not a FileDescriptorSet (protoc --descriptor_set_out): {why}")]
    NotASet { file: String, why: DescriptorError },
    #[error("{alias:?} is not TYPE=package.Message")]
    NotAnAlias { alias: String },
    /// `known`: the first few message names the sets hold (by name), of `total`.
    #[error("{alias:?}: no message {message} in the descriptor sets{}", held(.known, *.total))]
    NoMessage {
        alias: String,
        message: String,
        known: Vec<String>,
        total: usize,
    },
}

/// Why a descriptor set's bytes are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error(transparent)]
    Wire(#[from] Malformed),
    /// Nested message types deeper than [`MAX_DEPTH`], below `scope`.
    #[error("messages nested deeper than {MAX_DEPTH} levels in {scope}")]
    TooDeep { scope: String },
    #[error("field {field} of {message} has no type this knows")]
    FieldType { message: String, field: String },
}

/// The message names an error lists: ` (they hold a, b and 3 more)`.
fn held(known: &[String], total: usize) -> String {
    match total {
        0 => " (they hold no messages)".into(),
        n if n <= known.len() => format!(" (they hold {})", known.join(", ")),
        n => format!(
            " (they hold {} and {} more)",
            known.join(", "),
            n - known.len()
        ),
    }
}

/// The message types Lazarus can decode, and how it tells which one a body holds.
#[derive(Debug, Default)]
pub struct Schemas {
    messages: HashMap<String, MessageType>,
    enums: HashMap<String, HashMap<i32, String>>,
    /// `--proto-type`: a `type` property (or header) value → a message's full name.
    aliases: HashMap<String, String>,
    /// `--proto-header`: the header whose value names the message.
    header: Option<String>,
}

#[derive(Debug, Default)]
struct MessageType {
    fields: HashMap<u32, Field>,
    /// A map's entry type (`map<K, V>` in the `.proto` file): key 1, value 2.
    map_entry: bool,
}

#[derive(Debug)]
struct Field {
    name: String,
    kind: Kind,
    repeated: bool,
    /// The message or enum type, as a full name without the leading dot.
    type_name: String,
}

/// `FieldDescriptorProto.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Double,
    Float,
    Int64,
    UInt64,
    Int32,
    Fixed64,
    Fixed32,
    Bool,
    String,
    Group,
    Message,
    Bytes,
    UInt32,
    Enum,
    SFixed32,
    SFixed64,
    SInt32,
    SInt64,
}

impl Kind {
    fn of(n: u64) -> Option<Kind> {
        use Kind::*;
        const ALL: [Kind; 18] = [
            Double, Float, Int64, UInt64, Int32, Fixed64, Fixed32, Bool, String, Group, Message,
            Bytes, UInt32, Enum, SFixed32, SFixed64, SInt32, SInt64,
        ];
        ALL.get(usize::try_from(n).ok()?.checked_sub(1)?).copied()
    }
}

impl Schemas {
    /// Reads descriptor sets and the ways messages are named: `aliases` as `TYPE=MESSAGE`,
    /// `header` the name of a header that names the message. Errors say which file or alias.
    pub fn load(
        sets: &[(String, Vec<u8>)],
        aliases: &[String],
        header: Option<&str>,
    ) -> Result<Schemas, SchemaError> {
        let mut schemas = Schemas {
            header: header.map(str::to_owned),
            ..Schemas::default()
        };
        for (name, bytes) in sets {
            schemas.add_set(bytes).map_err(|why| SchemaError::NotASet {
                file: name.clone(),
                why,
            })?;
        }
        for alias in aliases {
            let (key, message) = alias
                .split_once('=')
                .ok_or_else(|| SchemaError::NotAnAlias {
                    alias: alias.clone(),
                })?;
            let message = message.trim().trim_start_matches('.');
            if !schemas.messages.contains_key(message) {
                let (known, total) = schemas.known();
                return Err(SchemaError::NoMessage {
                    alias: alias.clone(),
                    message: message.to_owned(),
                    known,
                    total,
                });
            }
            schemas
                .aliases
                .insert(key.trim().to_owned(), message.to_owned());
        }
        Ok(schemas)
    }

    /// The first few message names known (by name), for an error, and how many there are.
    fn known(&self) -> (Vec<String>, usize) {
        let mut names: Vec<&String> = self.messages.keys().collect();
        names.sort_unstable();
        let first = names.iter().take(8).map(|n| n.to_string()).collect();
        (first, names.len())
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The message a body holds, from (first found) the `--proto-header` header, a `proto=`
    /// or `messageType=` content-type parameter, or the `type` property: each either an alias
    /// (`--proto-type`) or a message's full name.
    pub fn message_for(
        &self,
        message_type: Option<&str>,
        content_type: Option<&str>,
        headers: Option<&Table>,
    ) -> Option<&str> {
        let header = self
            .header
            .as_deref()
            .and_then(|name| headers?.get(name)?.as_str());
        let parameter = content_type.and_then(|c| {
            c.split(';').skip(1).find_map(|param| {
                let (k, v) = param.split_once('=')?;
                let k = k.trim().to_ascii_lowercase();
                matches!(k.as_str(), "proto" | "messagetype" | "message-type")
                    .then(|| v.trim().trim_matches('"'))
            })
        });
        [header, parameter, message_type]
            .into_iter()
            .flatten()
            .find_map(|name| self.resolve(name))
    }

    fn resolve(&self, name: &str) -> Option<&str> {
        let name = name.trim();
        if let Some(full) = self.aliases.get(name) {
            return Some(full);
        }
        let (full, _) = self.messages.get_key_value(name.trim_start_matches('.'))?;
        Some(full)
    }

    /// The message `bytes` hold, read as the message type named `name`, written as JSON.
    pub fn write_json(&self, bytes: &[u8], name: &str, out: &mut JsonText) -> Written {
        self.message(out, &[bytes], name, 0)
    }

    fn add_set(&mut self, bytes: &[u8]) -> Result<(), DescriptorError> {
        for field in Wire::new(bytes) {
            if let (1, Item::Bytes(file)) = field? {
                self.add_file(file)?;
            }
        }
        Ok(())
    }

    fn add_file(&mut self, bytes: &[u8]) -> Result<(), DescriptorError> {
        let mut package = String::new();
        let (mut messages, mut enums) = (Vec::new(), Vec::new());
        for field in Wire::new(bytes) {
            match field? {
                (2, Item::Bytes(b)) => package = text(b),
                (4, Item::Bytes(b)) => messages.push(b),
                (5, Item::Bytes(b)) => enums.push(b),
                _ => {}
            }
        }
        for m in messages {
            self.add_message(&package, m, 0)?;
        }
        for e in enums {
            self.add_enum(&package, e)?;
        }
        Ok(())
    }

    fn add_message(
        &mut self,
        scope: &str,
        bytes: &[u8],
        depth: usize,
    ) -> Result<(), DescriptorError> {
        if depth > MAX_DEPTH {
            return Err(DescriptorError::TooDeep {
                scope: scope.to_owned(),
            });
        }
        let (mut name, mut fields, mut nested, mut enums) =
            (String::new(), Vec::new(), Vec::new(), Vec::new());
        let mut map_entry = false;
        for field in Wire::new(bytes) {
            match field? {
                (1, Item::Bytes(b)) => name = text(b),
                (2, Item::Bytes(b)) => fields.push(b),
                (3, Item::Bytes(b)) => nested.push(b),
                (4, Item::Bytes(b)) => enums.push(b),
                (7, Item::Bytes(options)) => {
                    for option in Wire::new(options) {
                        if let (7, Item::Varint(v)) = option? {
                            map_entry = v != 0;
                        }
                    }
                }
                _ => {}
            }
        }
        let full = qualify(scope, &name);
        let mut message = MessageType {
            map_entry,
            ..MessageType::default()
        };
        for bytes in fields {
            let (number, field) = field(&full, bytes)?;
            message.fields.insert(number, field);
        }
        for n in nested {
            self.add_message(&full, n, depth + 1)?;
        }
        for e in enums {
            self.add_enum(&full, e)?;
        }
        self.messages.insert(full, message);
        Ok(())
    }

    fn add_enum(&mut self, scope: &str, bytes: &[u8]) -> Result<(), DescriptorError> {
        let (mut name, mut values) = (String::new(), HashMap::new());
        for field in Wire::new(bytes) {
            match field? {
                (1, Item::Bytes(b)) => name = text(b),
                (2, Item::Bytes(value)) => {
                    let (mut value_name, mut number) = (String::new(), 0);
                    for f in Wire::new(value) {
                        match f? {
                            (1, Item::Bytes(b)) => value_name = text(b),
                            (2, Item::Varint(v)) => number = v as i32,
                            _ => {}
                        }
                    }
                    values.insert(number, value_name);
                }
                _ => {}
            }
        }
        self.enums.insert(qualify(scope, &name), values);
        Ok(())
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn qualify(scope: &str, name: &str) -> String {
    match scope {
        "" => name.to_owned(),
        scope => format!("{scope}.{name}"),
    }
}

/// A field of a `DescriptorProto` (of message `message`): its number and what it is.
fn field(message: &str, bytes: &[u8]) -> Result<(u32, Field), DescriptorError> {
    let (mut name, mut number, mut label, mut kind, mut type_name) =
        (String::new(), 0u32, 1u64, None, String::new());
    for item in Wire::new(bytes) {
        match item? {
            (1, Item::Bytes(b)) => name = text(b),
            (3, Item::Varint(n)) => number = n as u32,
            (4, Item::Varint(n)) => label = n,
            (5, Item::Varint(n)) => kind = Kind::of(n),
            (6, Item::Bytes(b)) => type_name = text(b).trim_start_matches('.').to_owned(),
            _ => {}
        }
    }
    let kind = kind.ok_or_else(|| DescriptorError::FieldType {
        message: message.to_owned(),
        field: name.clone(),
    })?;
    Ok((
        number,
        Field {
            name,
            kind,
            repeated: label == 3,
            type_name,
        },
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::message::structured::Stop;
    use serde_json::json;

    /// The JSON a message decodes to (parsed back), or how its bytes are malformed.
    fn json_of(
        schemas: &Schemas,
        bytes: &[u8],
        name: &str,
    ) -> Result<serde_json::Value, Malformed> {
        let mut out = JsonText::new(1 << 20);
        match schemas.write_json(bytes, name, &mut out) {
            Ok(()) => Ok(serde_json::from_str(out.as_str()).expect("a decode writes JSON")),
            Err(Stop::Malformed(why)) => Err(why),
            Err(Stop::Full) => panic!("{name} needs more than a MiB of JSON"),
        }
    }

    /// Protobuf wire format written by hand, for descriptors and bodies.
    #[derive(Default)]
    pub struct Out(pub Vec<u8>);

    impl Out {
        fn varint(&mut self, mut n: u64) -> &mut Self {
            while n >= 0x80 {
                self.0.push((n as u8) | 0x80);
                n >>= 7;
            }
            self.0.push(n as u8);
            self
        }
        pub fn int(&mut self, field: u32, n: u64) -> &mut Self {
            self.varint(u64::from(field) << 3).varint(n)
        }
        pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
            self.varint(u64::from(field) << 3 | 2)
                .varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        pub fn text(&mut self, field: u32, s: &str) -> &mut Self {
            self.bytes(field, s.as_bytes())
        }
        pub fn fixed64(&mut self, field: u32, n: u64) -> &mut Self {
            self.varint(u64::from(field) << 3 | 1);
            self.0.extend_from_slice(&n.to_le_bytes());
            self
        }
        pub fn done(&mut self) -> Vec<u8> {
            std::mem::take(&mut self.0)
        }
    }

    /// A `FieldDescriptorProto`: name, number, label (3 repeated), type, type name.
    fn field(name: &str, number: u64, label: u64, kind: u64, type_name: &str) -> Vec<u8> {
        let mut f = Out::default();
        f.text(1, name).int(3, number).int(4, label).int(5, kind);
        if !type_name.is_empty() {
            f.text(6, type_name);
        }
        f.done()
    }

    /// package shop; message Order { string order_id = 1; int64 cents = 2; repeated string
    /// tags = 3; Status status = 4; map<string, int32> counts = 5; Line line = 6; repeated
    /// sint32 deltas = 7; bytes blob = 8; double rate = 9; google.protobuf.Timestamp at = 10;
    /// message Line { string sku = 1; } enum Status { NEW = 0; FAILED = 2; } }
    pub fn shop() -> Schemas {
        let mut line = Out::default();
        line.text(1, "Line").bytes(2, &field("sku", 1, 1, 9, ""));
        let mut entry = Out::default();
        entry
            .text(1, "CountsEntry")
            .bytes(2, &field("key", 1, 1, 9, ""))
            .bytes(2, &field("value", 2, 1, 5, ""))
            .bytes(7, &Out::default().int(7, 1).done());
        let mut status = Out::default();
        status
            .text(1, "Status")
            .bytes(2, &Out::default().text(1, "NEW").int(2, 0).done())
            .bytes(2, &Out::default().text(1, "FAILED").int(2, 2).done());
        let mut order = Out::default();
        order
            .text(1, "Order")
            .bytes(2, &field("order_id", 1, 1, 9, ""))
            .bytes(2, &field("cents", 2, 1, 3, ""))
            .bytes(2, &field("tags", 3, 3, 9, ""))
            .bytes(2, &field("status", 4, 1, 14, ".shop.Order.Status"))
            .bytes(2, &field("counts", 5, 3, 11, ".shop.Order.CountsEntry"))
            .bytes(2, &field("line", 6, 1, 11, ".shop.Order.Line"))
            .bytes(2, &field("deltas", 7, 3, 17, ""))
            .bytes(2, &field("blob", 8, 1, 12, ""))
            .bytes(2, &field("rate", 9, 1, 1, ""))
            .bytes(2, &field("at", 10, 1, 11, ".google.protobuf.Timestamp"))
            .bytes(3, &line.done())
            .bytes(3, &entry.done())
            .bytes(4, &status.done());
        let mut file = Out::default();
        file.text(1, "shop.proto")
            .text(2, "shop")
            .bytes(4, &order.done());
        let set = Out::default().bytes(1, &file.done()).done();
        Schemas::load(
            &[("shop.pb".into(), set)],
            &["order.failed=shop.Order".into()],
            Some("proto-message"),
        )
        .unwrap()
    }

    fn order_bytes() -> Vec<u8> {
        let mut o = Out::default();
        o.text(1, "ORD-7")
            .int(2, (-5i64) as u64)
            .text(3, "a")
            .text(3, "b")
            .int(4, 2)
            .bytes(5, &Out::default().text(1, "x").int(2, 3).done())
            .bytes(5, &Out::default().text(1, "y").int(2, 4).done())
            .bytes(6, &Out::default().text(1, "SKU-1").done())
            // Packed: zigzag 1 → -1, 4 → 2.
            .bytes(7, &[1, 4])
            // Unpacked, as older writers send them.
            .int(7, 6)
            .bytes(8, &[0xde, 0xad])
            .fixed64(9, 1.5f64.to_bits())
            .bytes(
                10,
                &Out::default()
                    .int(1, 1_796_342_400)
                    .int(2, 500_000_000)
                    .done(),
            )
            // A field this schema does not know.
            .int(99, 7);
        o.done()
    }

    #[test]
    fn a_message_reads_as_its_schema_says() {
        let schemas = shop();
        assert_eq!(
            json_of(&schemas, &order_bytes(), "shop.Order").unwrap(),
            json!({
                "order_id": "ORD-7",
                "cents": -5,
                "tags": ["a", "b"],
                "status": "FAILED",
                "counts": {"x": 3, "y": 4},
                "line": {"sku": "SKU-1"},
                "deltas": [-1, 2, 3],
                "blob": "3q0=",
                "rate": 1.5,
                "at": "2026-12-04T00:00:00.5Z",
                "99": [7]
            })
        );
    }

    #[test]
    fn the_message_is_named_by_header_content_type_or_type() {
        let schemas = shop();
        let headers = Table::from([(
            "proto-message",
            crate::message::headers::AmqpValue::LongString("shop.Order.Line".into()),
        )]);
        assert_eq!(
            schemas.message_for(Some("shop.Order"), None, Some(&headers)),
            Some("shop.Order.Line"),
            "the header first"
        );
        assert_eq!(
            schemas.message_for(None, Some("application/x-protobuf; proto=shop.Order"), None),
            Some("shop.Order")
        );
        assert_eq!(
            schemas.message_for(Some("order.failed"), None, None),
            Some("shop.Order"),
            "an alias"
        );
        assert_eq!(
            schemas.message_for(Some(".shop.Order"), None, None),
            Some("shop.Order")
        );
        assert_eq!(schemas.message_for(Some("shop.Unknown"), None, None), None);
        assert_eq!(
            schemas.message_for(None, Some("application/x-protobuf"), None),
            None
        );
    }

    #[test]
    fn bad_aliases_and_descriptor_sets_are_refused_with_the_reason() {
        let err = Schemas::load(&[], &["x=shop.Nope".into()], None).unwrap_err();
        assert_eq!(
            err,
            SchemaError::NoMessage {
                alias: "x=shop.Nope".into(),
                message: "shop.Nope".into(),
                known: Vec::new(),
                total: 0
            }
        );
        assert_eq!(
            err.to_string(),
            r#""x=shop.Nope": no message shop.Nope in the descriptor sets (they hold no messages)"#
        );
        let err = Schemas::load(&[("a.pb".into(), vec![0x0a, 0x05, 0x01])], &[], None).unwrap_err();
        let cut = Malformed::Truncated {
            claimed: 5,
            at: 2,
            left: 1,
        };
        assert_eq!(
            err,
            SchemaError::NotASet {
                file: "a.pb".into(),
                why: DescriptorError::Wire(cut)
            }
        );
        assert_eq!(
            err.to_string(),
            "a.pb is not a FileDescriptorSet (protoc --descriptor_set_out): 5 bytes claimed at \
             byte 2, 1 left"
        );
        assert_eq!(
            Schemas::load(&[], &["no-equals".into()], None).unwrap_err(),
            SchemaError::NotAnAlias {
                alias: "no-equals".into()
            }
        );
        // A field of a type protobuf does not have, named with its message; the names held.
        let mut names = Out::default();
        for name in ["A", "B", "C", "D", "E", "F", "G", "H", "I"] {
            names.bytes(4, &Out::default().text(1, name).done());
        }
        let bad = Out::default()
            .text(1, "Bad")
            .bytes(2, &field("odd", 1, 1, 99, ""))
            .done();
        // A file of package p holding `messages` (its field 4s).
        let set = |messages: Vec<u8>| {
            let mut file = Out::default();
            file.text(2, "p").0.extend(messages);
            Out::default().bytes(1, &file.done()).done()
        };
        let bad = set(Out::default().bytes(4, &bad).done());
        let err = Schemas::load(&[("bad.pb".into(), bad)], &[], None).unwrap_err();
        assert_eq!(
            err,
            SchemaError::NotASet {
                file: "bad.pb".into(),
                why: DescriptorError::FieldType {
                    message: "p.Bad".into(),
                    field: "odd".into()
                }
            }
        );
        let err = Schemas::load(
            &[("n.pb".into(), set(names.done()))],
            &["t=p.Z".into()],
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""t=p.Z": no message p.Z in the descriptor sets (they hold p.A, p.B, p.C, p.D, p.E, p.F, p.G, p.H and 1 more)"#
        );
    }

    #[test]
    fn well_known_types_read_as_protobuf_json_has_them() {
        assert_eq!(decode::duration(3, 0), "3s");
        assert_eq!(decode::duration(1, 500_000_000), "1.500s");
        assert_eq!(decode::duration(-1, -1), "-1.000000001s");
        let wrapped = Out::default().text(1, "hi").done();
        let none = Schemas::default();
        assert_eq!(
            json_of(&none, &wrapped, "google.protobuf.StringValue").unwrap(),
            json!("hi")
        );
        assert_eq!(
            json_of(&none, &[], "google.protobuf.Int64Value").unwrap(),
            json!(0)
        );
    }

    #[test]
    fn without_a_schema_fields_read_by_number() {
        let bytes = Out::default().int(1, 150).text(2, "testing").done();
        assert_eq!(
            json_of(&Schemas::default(), &bytes, "").unwrap(),
            json!({"1": [150], "2": ["testing"]})
        );
        // Groups are skipped, nested ones too.
        let group = [0x0b, 0x13, 0x08, 0x01, 0x14, 0x0c, 0x10, 0x02];
        assert_eq!(
            json_of(&Schemas::default(), &group, "").unwrap(),
            json!({"1": ["(group)"], "2": [2]})
        );
        // Out of number order: each field's values together, fields as they first appear.
        let bytes = Out::default()
            .int(3, 1)
            .text(2, "a")
            .int(3, 2)
            .int(1, 7)
            .text(2, "b")
            .done();
        let text = {
            let mut out = JsonText::new(1 << 10);
            Schemas::default().write_json(&bytes, "", &mut out).unwrap();
            out.into_string()
        };
        assert_eq!(text, r#"{"3":[1,2],"2":["a","b"],"1":[7]}"#);
    }

    #[test]
    fn a_field_seen_twice_is_the_last_or_the_merge_as_protobuf_says() {
        let schemas = shop();
        let twice = [order_bytes(), order_bytes()].concat();
        let once = json_of(&schemas, &order_bytes(), "shop.Order").unwrap();
        let merged = json_of(&schemas, &twice, "shop.Order").unwrap();
        // Singular fields keep the last value; repeated ones hold both.
        for (key, value) in once.as_object().unwrap() {
            match value {
                serde_json::Value::Array(items) => {
                    assert_eq!(
                        merged[key].as_array().unwrap().len(),
                        2 * items.len(),
                        "{key}"
                    )
                }
                serde_json::Value::Object(map) if !map.is_empty() => {
                    // A map field's entries, the same keys twice: one each.
                    assert_eq!(merged[key].as_object().unwrap().len(), map.len(), "{key}")
                }
                _ => assert_eq!(&merged[key], value, "{key}"),
            }
        }
    }

    #[test]
    fn lies_and_depth_are_errors_not_allocations_or_crashes() {
        let schemas = shop();
        // A length beyond the end.
        let err = json_of(&schemas, &[0x0a, 0xff, 0xff, 0xff, 0x0f], "shop.Order").unwrap_err();
        assert!(
            matches!(err, Malformed::Truncated { at: 5, left: 0, .. }),
            "{err}"
        );
        // A varint that never ends, an 11-byte one, field 0, wire type 7.
        let malformed = |bytes: &[u8]| json_of(&schemas, bytes, "shop.Order").unwrap_err();
        assert_eq!(malformed(&[0x10, 0xff]), Malformed::VarintCut { at: 2 });
        let mut long = vec![0x10];
        long.extend([0xff; 11]);
        assert_eq!(malformed(&long), Malformed::VarintOver64Bits { at: 11 });
        assert_eq!(
            malformed(&[0x00, 0x01]),
            Malformed::FieldNumber { number: 0, at: 1 }
        );
        assert_eq!(
            malformed(&[0x0f]),
            Malformed::WireType {
                wire_type: 7,
                at: 1
            }
        );
        // A string field sent as a number.
        assert_eq!(
            malformed(&[0x08, 0x01]).to_string(),
            "field order_id (String) has the wire type of another kind"
        );
        // Lines nested in lines, deeper than the limit (field 6 of Order is a Line: a Line
        // holding field 6 reads as unknown, so nest Orders through an unknown type instead).
        let mut deep = Vec::new();
        for _ in 0..200 {
            deep = Out::default().bytes(6, &deep).done();
        }
        assert!(
            json_of(&schemas, &deep, "shop.Order").is_ok(),
            "unknown bytes are not parsed"
        );
        let mut deep = vec![0x0b; 300];
        deep.extend([0x0c; 300]);
        assert!(
            matches!(
                json_of(&Schemas::default(), &deep, ""),
                Err(Malformed::Group { .. })
            ),
            "groups nested too deep"
        );
    }
}

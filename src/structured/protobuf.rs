//! Protocol Buffers bodies as JSON (pure): the message types of `FileDescriptorSet`s (what
//! `protoc --include_imports --descriptor_set_out` writes), which message a body holds (its
//! `type` property, a header or a content-type parameter, mapped or named directly), and the
//! wire format decoded with them into JSON: fields by their names in the `.proto` file, enums
//! by name, 64-bit integers as numbers, bytes as base64, maps as objects, `Timestamp` and
//! `Duration` as text, and fields the schema does not know kept under their numbers.

use std::collections::HashMap;

use crate::amqp::headers::Table;

use super::{DecodeError, JsonText, Reader, Written, MAX_DEPTH};

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
    ) -> Result<Schemas, String> {
        let mut schemas = Schemas {
            header: header.map(str::to_owned),
            ..Schemas::default()
        };
        for (name, bytes) in sets {
            schemas.add_set(bytes).map_err(|e| {
                format!("{name} is not a FileDescriptorSet (protoc --descriptor_set_out): {e}")
            })?;
        }
        for alias in aliases {
            let (key, message) = alias
                .split_once('=')
                .ok_or_else(|| format!("{alias:?} is not TYPE=package.Message"))?;
            let message = message.trim().trim_start_matches('.');
            if !schemas.messages.contains_key(message) {
                return Err(format!(
                    "{alias:?}: no message {message} in the descriptor sets{}",
                    schemas.known()
                ));
            }
            schemas
                .aliases
                .insert(key.trim().to_owned(), message.to_owned());
        }
        Ok(schemas)
    }

    /// A few of the message names known, for an error message.
    fn known(&self) -> String {
        let mut names: Vec<&str> = self.messages.keys().map(String::as_str).collect();
        names.sort_unstable();
        match names.len() {
            0 => " (they hold no messages)".into(),
            n if n <= 8 => format!(" (they hold {})", names.join(", ")),
            n => format!(" (they hold {} and {} more)", names[..8].join(", "), n - 8),
        }
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

    fn add_set(&mut self, bytes: &[u8]) -> Result<(), String> {
        for field in Wire::new(bytes) {
            if let (1, Item::Bytes(file)) = field? {
                self.add_file(file)?;
            }
        }
        Ok(())
    }

    fn add_file(&mut self, bytes: &[u8]) -> Result<(), String> {
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

    fn add_message(&mut self, scope: &str, bytes: &[u8], depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("messages nested deeper than {MAX_DEPTH} levels"));
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
            let (number, field) = field(bytes)?;
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

    fn add_enum(&mut self, scope: &str, bytes: &[u8]) -> Result<(), String> {
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

    /// A message whose encoding is `parts` one after another (a message seen twice is the
    /// merge of both, as protobuf says), each field's values together in the order the
    /// fields first appear.
    fn message(&self, out: &mut JsonText, parts: &[&[u8]], name: &str, depth: usize) -> Written {
        if depth >= MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels").into());
        }
        if self.well_known(out, parts, name)? {
            return Ok(());
        }
        let message = self.messages.get(name);
        // The wire format checked, and whether each field's items lie together (encoders
        // write fields in number order): then they are written as they come, else picked out.
        let (mut count, mut in_order, mut last) = (0usize, true, 0u32);
        for item in parts.iter().flat_map(|p| Wire::new(p)) {
            let (number, _) = item?;
            in_order &= number >= last;
            (count, last) = (count + 1, number);
        }
        out.begin_object()?;
        if in_order {
            let mut current = None;
            for (i, part) in parts.iter().enumerate() {
                let mut wire = Wire::new(part);
                loop {
                    let at = wire.reader.at;
                    let Some(item) = wire.next() else { break };
                    let (number, _) = item?;
                    if current.replace(number) != Some(number) {
                        let run = Items::Run {
                            parts: &parts[i..],
                            at,
                            number,
                        };
                        self.group(out, message, number, &run, depth)?;
                    }
                }
            }
        } else {
            // Each item is held (counted against the budget) to sort them by field.
            let held = count * std::mem::size_of::<(u32, u32, Item<'_>)>();
            out.hold(held)?;
            let mut items = Vec::with_capacity(count);
            for (seq, item) in parts.iter().flat_map(|p| Wire::new(p)).enumerate() {
                let (number, item) = item?;
                items.push((number, seq as u32, item));
            }
            items.sort_by_key(|(number, _, _)| *number);
            // The fields, by where each first appears: (first position, start, end).
            let mut groups: Vec<(u32, usize, usize)> = Vec::new();
            for (i, (number, seq, _)) in items.iter().enumerate() {
                match groups.last_mut() {
                    Some(g) if items[g.1].0 == *number => g.2 = i + 1,
                    _ => groups.push((*seq, i, i + 1)),
                }
            }
            let held_groups = groups.len() * std::mem::size_of::<(u32, usize, usize)>();
            out.hold(held_groups)?;
            groups.sort_unstable();
            for (_, start, end) in groups {
                let number = items[start].0;
                self.group(
                    out,
                    message,
                    number,
                    &Items::Picked(&items[start..end]),
                    depth,
                )?;
            }
            out.release(held + held_groups);
        }
        out.end()
    }

    /// One field's values: by its name when the message type knows it, else by number.
    fn group(
        &self,
        out: &mut JsonText,
        message: Option<&MessageType>,
        number: u32,
        items: &Items<'_, '_>,
        depth: usize,
    ) -> Written {
        let Some(field) = message.and_then(|m| m.fields.get(&number)) else {
            out.key(&number.to_string())?;
            out.begin_array()?;
            for item in items.iter() {
                unknown(out, item)?;
            }
            return out.end();
        };
        out.key(&field.name)?;
        let map_entry = (field.kind == Kind::Message && field.repeated)
            .then(|| self.messages.get(&field.type_name))
            .flatten()
            .filter(|m| m.map_entry);
        if let Some(entry) = map_entry {
            out.begin_object()?;
            for item in items.iter() {
                self.map_entry(out, field, entry, item, depth)?;
            }
            return out.end();
        }
        if field.repeated {
            out.begin_array()?;
            for item in items.iter() {
                self.values(out, field, item, depth)?;
            }
            return out.end();
        }
        if field.kind == Kind::Message {
            // Seen more than once: the merge of all, their encodings one after another.
            let held = items.iter().count() * std::mem::size_of::<&[u8]>();
            out.hold(held)?;
            let parts = items
                .iter()
                .map(|item| match item {
                    Item::Bytes(b) => Ok(b),
                    _ => Err(wrong(field)),
                })
                .collect::<Result<Vec<&[u8]>, String>>()?;
            self.message(out, &parts, &field.type_name, depth + 1)?;
            out.release(held);
            return Ok(());
        }
        // A singular field seen more than once: the last one counts.
        match items.iter().last() {
            Some(item) => self.values(out, field, item, depth),
            None => out.null(),
        }
    }

    /// A `map<K, V>` entry as a member: its key as the name (text as it is, else its JSON
    /// text), its value as the value.
    fn map_entry(
        &self,
        out: &mut JsonText,
        field: &Field,
        entry: &MessageType,
        item: Item<'_>,
        depth: usize,
    ) -> Written {
        let Item::Bytes(bytes) = item else {
            return Err(wrong(field).into());
        };
        let depth = depth + 1;
        if depth >= MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels").into());
        }
        let (mut key, mut value) = (None, None);
        for item in Wire::new(bytes) {
            match item? {
                (1, item) => key = Some(item),
                (2, item) => value = Some(item),
                _ => {}
            }
        }
        let mut name = JsonText::new(out.room());
        match (key, entry.fields.get(&1)) {
            (Some(item), Some(f)) => self.values(&mut name, f, item, depth)?,
            (Some(item), None) => unknown(&mut name, item)?,
            (None, _) => name.str("")?,
        }
        out.key_json(name.as_str())?;
        match (value, entry.fields.get(&2)) {
            (Some(item), Some(f)) => self.values(out, f, item, depth),
            (Some(item), None) => unknown(out, item),
            (None, _) => out.null(),
        }
    }

    /// A field's values in one wire item: several when a repeated number field is packed.
    fn values(&self, out: &mut JsonText, field: &Field, item: Item<'_>, depth: usize) -> Written {
        match (field.kind, item) {
            (Kind::Message, Item::Bytes(b)) => self.message(out, &[b], &field.type_name, depth + 1),
            (Kind::String, Item::Bytes(b)) => out.lossy(b),
            (Kind::Bytes, Item::Bytes(b)) => out.base64(b),
            (Kind::Group, _) => unknown(out, item),
            // Packed: numbers one after another, each as its wire type would be.
            (_, Item::Bytes(packed)) if field.repeated => {
                let mut r = Reader {
                    bytes: packed,
                    at: 0,
                };
                while r.at < packed.len() {
                    let item = match wire_type(field.kind) {
                        1 => Item::Fixed64(r.fixed(8)?),
                        5 => Item::Fixed32(r.fixed(4)? as u32),
                        _ => Item::Varint(r.varint()?),
                    };
                    self.scalar(out, field, item)?;
                }
                Ok(())
            }
            (_, item) => self.scalar(out, field, item),
        }
    }

    fn scalar(&self, out: &mut JsonText, field: &Field, item: Item<'_>) -> Written {
        match (field.kind, item) {
            (Kind::Double, Item::Fixed64(n)) => out.f64(f64::from_bits(n)),
            (Kind::Float, Item::Fixed32(n)) => out.f64(f64::from(f32::from_bits(n))),
            (Kind::Int64, Item::Varint(n)) => out.i64(n as i64),
            (Kind::UInt64, Item::Varint(n)) => out.u64(n),
            (Kind::Int32, Item::Varint(n)) => out.i64(i64::from(n as i32)),
            (Kind::UInt32, Item::Varint(n)) => out.u64(u64::from(n as u32)),
            (Kind::Fixed64, Item::Fixed64(n)) => out.u64(n),
            (Kind::SFixed64, Item::Fixed64(n)) => out.i64(n as i64),
            (Kind::Fixed32, Item::Fixed32(n)) => out.u64(u64::from(n)),
            (Kind::SFixed32, Item::Fixed32(n)) => out.i64(i64::from(n as i32)),
            (Kind::Bool, Item::Varint(n)) => out.bool(n != 0),
            (Kind::SInt32, Item::Varint(n)) => out.i64(i64::from(zigzag(n) as i32)),
            (Kind::SInt64, Item::Varint(n)) => out.i64(zigzag(n)),
            (Kind::Enum, Item::Varint(n)) => {
                let n = n as i32;
                match self.enums.get(&field.type_name).and_then(|e| e.get(&n)) {
                    Some(name) => out.str(name),
                    None => out.i64(i64::from(n)),
                }
            }
            _ => Err(wrong(field).into()),
        }
    }

    /// `google.protobuf.Timestamp`, `Duration` and the wrappers, as protobuf's JSON writes
    /// them; `false` (nothing written) for any other message.
    fn well_known(
        &self,
        out: &mut JsonText,
        parts: &[&[u8]],
        name: &str,
    ) -> Result<bool, DecodeError> {
        let Some(short) = name.strip_prefix("google.protobuf.") else {
            return Ok(false);
        };
        let items = || parts.iter().flat_map(|p| Wire::new(p));
        if matches!(short, "Timestamp" | "Duration") {
            let (mut first, mut second) = (None, None);
            for item in items() {
                match item? {
                    (1, Item::Varint(n)) => first = Some(n as i64),
                    (2, Item::Varint(n)) => second = Some(n as i32),
                    _ => return Ok(false),
                }
            }
            let (seconds, nanos) = (first.unwrap_or(0), second.unwrap_or(0));
            let text = match short {
                "Timestamp" => {
                    let at = time::OffsetDateTime::from_unix_timestamp(seconds)
                        .ok()
                        .and_then(|t| t.replace_nanosecond(nanos.max(0) as u32).ok());
                    match at.and_then(|t| {
                        t.format(&time::format_description::well_known::Rfc3339)
                            .ok()
                    }) {
                        Some(text) => text,
                        None => return Ok(false),
                    }
                }
                _ => duration(seconds, nanos),
            };
            out.str(&text)?;
            return Ok(true);
        }
        let kind = match short {
            "DoubleValue" => Kind::Double,
            "FloatValue" => Kind::Float,
            "Int64Value" => Kind::Int64,
            "UInt64Value" => Kind::UInt64,
            "Int32Value" => Kind::Int32,
            "UInt32Value" => Kind::UInt32,
            "BoolValue" => Kind::Bool,
            "StringValue" => Kind::String,
            "BytesValue" => Kind::Bytes,
            _ => return Ok(false),
        };
        let field = Field {
            name: "value".into(),
            kind,
            repeated: false,
            type_name: String::new(),
        };
        let mut value = None;
        for item in items() {
            match item? {
                (1, item) => value = Some(item),
                _ => return Ok(false),
            }
        }
        // An absent value is the default one.
        match value {
            Some(item) => Schemas::default().values(out, &field, item, 0)?,
            None => match kind {
                Kind::Bool => out.bool(false)?,
                Kind::String | Kind::Bytes => out.str("")?,
                _ => out.u64(0)?,
            },
        }
        Ok(true)
    }
}

/// Where a field's items are: a run of them as they came, or picked out of wire order.
enum Items<'s, 'a> {
    /// The items of `number` from byte `at` of the first of `parts` on, while they last.
    Run {
        parts: &'s [&'a [u8]],
        at: usize,
        number: u32,
    },
    Picked(&'s [(u32, u32, Item<'a>)]),
}

impl<'a> Items<'_, 'a> {
    fn iter(&self) -> Box<dyn Iterator<Item = Item<'a>> + '_> {
        match *self {
            Items::Run { parts, at, number } => Box::new(
                parts
                    .iter()
                    .enumerate()
                    .flat_map(move |(i, part)| {
                        let mut wire = Wire::new(part);
                        if i == 0 {
                            wire.reader.at = at;
                        }
                        wire
                    })
                    .map_while(Result::ok)
                    .take_while(move |(n, _)| *n == number)
                    .map(|(_, item)| item),
            ),
            Items::Picked(items) => Box::new(items.iter().map(|(_, _, item)| *item)),
        }
    }
}

fn wrong(field: &Field) -> String {
    format!(
        "field {} ({:?}) has the wire type of another kind",
        field.name, field.kind
    )
}

/// A field the schema does not know: numbers as they are, length-delimited bytes as text
/// when they are UTF-8, else base64.
fn unknown(out: &mut JsonText, item: Item<'_>) -> Written {
    match item {
        Item::Varint(n) | Item::Fixed64(n) => out.u64(n),
        Item::Fixed32(n) => out.u64(u64::from(n)),
        Item::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => out.str(s),
            Err(_) => out.base64(b),
        },
        Item::Group => out.str("(group)"),
    }
}

/// A `Duration` as protobuf's JSON writes it: seconds with 0, 3, 6 or 9 decimals, then `s`.
fn duration(seconds: i64, nanos: i32) -> String {
    let sign = if seconds < 0 || nanos < 0 { "-" } else { "" };
    let mut fraction = format!("{:09}", nanos.unsigned_abs());
    while fraction.ends_with("000") {
        fraction.truncate(fraction.len() - 3);
    }
    match fraction.is_empty() {
        true => format!("{sign}{}s", seconds.unsigned_abs()),
        false => format!("{sign}{}.{fraction}s", seconds.unsigned_abs()),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn zigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

fn qualify(scope: &str, name: &str) -> String {
    match scope {
        "" => name.to_owned(),
        scope => format!("{scope}.{name}"),
    }
}

/// The wire type a packed number of this kind has.
fn wire_type(kind: Kind) -> u8 {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::SFixed64 => 1,
        Kind::Float | Kind::Fixed32 | Kind::SFixed32 => 5,
        _ => 0,
    }
}

/// A field of a `DescriptorProto`: its number and what it is.
fn field(bytes: &[u8]) -> Result<(u32, Field), String> {
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
    let kind = kind.ok_or_else(|| format!("field {name} has no type this knows"))?;
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

/// One field of the wire format as it arrives.
#[derive(Debug, Clone, Copy)]
enum Item<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
    /// A (deprecated) group, skipped.
    Group,
}

/// The wire format's numbers and groups, on the reader the other binary formats share.
impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut n = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self
                .bytes
                .get(self.at)
                .ok_or_else(|| format!("a number cut at byte {}", self.at))?;
            self.at += 1;
            if shift == 63 && b > 1 {
                return Err(format!("a number longer than 64 bits at byte {}", self.at));
            }
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(format!("a number longer than 10 bytes at byte {}", self.at))
    }

    fn fixed(&mut self, size: u64) -> Result<u64, String> {
        Ok(self
            .take(size)?
            .iter()
            .rev()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    }

    /// Skips a group up to its end tag, nested groups included (at most [`MAX_DEPTH`]).
    fn skip_group(&mut self, number: u32) -> Result<(), String> {
        let mut open = vec![number];
        while let Some(&innermost) = open.last() {
            let key = self.varint()?;
            let (n, wire) = ((key >> 3) as u32, key & 7);
            match wire {
                0 => drop(self.varint()?),
                1 => drop(self.take(8)?),
                2 => {
                    let len = self.varint()?;
                    self.take(len)?;
                }
                3 if open.len() < MAX_DEPTH => open.push(n),
                4 if n == innermost => drop(open.pop()),
                5 => drop(self.take(4)?),
                _ => return Err(format!("a malformed group at byte {}", self.at)),
            }
        }
        Ok(())
    }
}

/// The fields of one message, in wire order: `(number, item)` or an error, then nothing.
struct Wire<'a> {
    reader: Reader<'a>,
    failed: bool,
}

impl<'a> Wire<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Wire {
            reader: Reader { bytes, at: 0 },
            failed: false,
        }
    }

    fn next_item(&mut self) -> Result<(u32, Item<'a>), String> {
        let r = &mut self.reader;
        let key = r.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0 && *n < 1 << 29)
            .ok_or_else(|| format!("field number {} at byte {}", key >> 3, r.at))?;
        let item = match key & 7 {
            0 => Item::Varint(r.varint()?),
            1 => Item::Fixed64(r.fixed(8)?),
            2 => {
                let len = r.varint()?;
                Item::Bytes(r.take(len)?)
            }
            3 => {
                r.skip_group(number)?;
                Item::Group
            }
            5 => Item::Fixed32(r.fixed(4)? as u32),
            other => return Err(format!("wire type {other} at byte {}", r.at)),
        };
        Ok((number, item))
    }
}

impl<'a> Iterator for Wire<'a> {
    type Item = Result<(u32, Item<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.reader.at >= self.reader.bytes.len() {
            return None;
        }
        let item = self.next_item();
        self.failed = item.is_err();
        Some(item)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON a message decodes to (parsed back), or the error's text.
    fn json_of(schemas: &Schemas, bytes: &[u8], name: &str) -> Result<serde_json::Value, String> {
        let mut out = JsonText::new(1 << 20);
        schemas
            .write_json(bytes, name, &mut out)
            .map_err(|e| e.to_string())?;
        Ok(serde_json::from_str(out.as_str()).expect("a decode writes JSON"))
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
            crate::amqp::headers::AmqpValue::LongString("shop.Order.Line".into()),
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
        assert!(err.contains("no message shop.Nope"), "{err}");
        let err = Schemas::load(&[("a.pb".into(), vec![0x0a, 0x05, 0x01])], &[], None).unwrap_err();
        assert!(err.contains("a.pb is not a FileDescriptorSet"), "{err}");
        assert!(Schemas::load(&[], &["no-equals".into()], None).is_err());
    }

    #[test]
    fn well_known_types_read_as_protobuf_json_has_them() {
        assert_eq!(duration(3, 0), "3s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(-1, -1), "-1.000000001s");
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
        assert!(err.contains("left"), "{err}");
        // A varint that never ends, an 11-byte one, field 0, wire type 7.
        assert!(json_of(&schemas, &[0x10, 0xff], "shop.Order").is_err());
        let mut long = vec![0x10];
        long.extend([0xff; 11]);
        assert!(json_of(&schemas, &long, "shop.Order").is_err());
        assert!(json_of(&schemas, &[0x00, 0x01], "shop.Order").is_err());
        assert!(json_of(&schemas, &[0x0f], "shop.Order").is_err());
        // A string field sent as a number.
        let err = json_of(&schemas, &[0x08, 0x01], "shop.Order").unwrap_err();
        assert!(err.contains("order_id"), "{err}");
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
            json_of(&Schemas::default(), &deep, "").is_err(),
            "groups nested too deep"
        );
    }
}

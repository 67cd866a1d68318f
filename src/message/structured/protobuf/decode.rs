//! A protobuf message written as JSON (pure), within the writer's budget: fields by name (or
//! number, when the schema does not know them), each field's values together in the order
//! the fields first appear — as they come when the encoder wrote them in number order, as
//! nearly all do, else picked out with an index the budget pays for.

use super::wire::{Item, Wire};
use super::{Field, Kind, MessageType, Schemas};
use crate::message::structured::{JsonText, Malformed, Reader, Stop, Written, MAX_DEPTH};

impl Schemas {
    /// A message whose encoding is `parts` one after another (a message seen twice is the
    /// merge of both, as protobuf says), each field's values together in the order the
    /// fields first appear.
    pub(super) fn message(
        &self,
        out: &mut JsonText,
        parts: &[&[u8]],
        name: &str,
        depth: usize,
    ) -> Written {
        if depth >= MAX_DEPTH {
            return Err(Malformed::TooDeep.into());
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
                    let at = wire.at();
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
                .collect::<Result<Vec<&[u8]>, Malformed>>()?;
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
            return Err(Malformed::TooDeep.into());
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
    fn well_known(&self, out: &mut JsonText, parts: &[&[u8]], name: &str) -> Result<bool, Stop> {
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
                    .flat_map(move |(i, part)| match i {
                        0 => Wire::starting_at(part, at),
                        _ => Wire::new(part),
                    })
                    .map_while(Result::ok)
                    .take_while(move |(n, _)| *n == number)
                    .map(|(_, item)| item),
            ),
            Items::Picked(items) => Box::new(items.iter().map(|(_, _, item)| *item)),
        }
    }
}

fn wrong(field: &Field) -> Malformed {
    Malformed::WrongWireType {
        field: field.name.clone(),
        kind: format!("{:?}", field.kind),
    }
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
pub(super) fn duration(seconds: i64, nanos: i32) -> String {
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

fn zigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// The wire type a packed number of this kind has.
fn wire_type(kind: Kind) -> u8 {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::SFixed64 => 1,
        Kind::Float | Kind::Fixed32 | Kind::SFixed32 => 5,
        _ => 0,
    }
}

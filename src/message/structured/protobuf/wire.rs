//! The protobuf wire format (pure): a message's fields one after another, each a number and
//! what its wire type holds, on the reader the other binary formats share.

use crate::message::structured::{Malformed, Reader, MAX_DEPTH};

/// One field of the wire format as it arrives.
#[derive(Debug, Clone, Copy)]
pub(super) enum Item<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
    /// A (deprecated) group, skipped.
    Group,
}

/// The wire format's numbers and groups, on the reader the other binary formats share.
impl Reader<'_> {
    pub(super) fn varint(&mut self) -> Result<u64, Malformed> {
        let mut n = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self
                .bytes
                .get(self.at)
                .ok_or(Malformed::VarintCut { at: self.at })?;
            self.at += 1;
            if shift == 63 && b > 1 {
                return Err(Malformed::VarintOver64Bits { at: self.at });
            }
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(Malformed::VarintOver10Bytes { at: self.at })
    }

    pub(super) fn fixed(&mut self, size: u64) -> Result<u64, Malformed> {
        Ok(self
            .take(size)?
            .iter()
            .rev()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    }

    /// Skips a group up to its end tag, nested groups included (at most [`MAX_DEPTH`]).
    fn skip_group(&mut self, number: u32) -> Result<(), Malformed> {
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
                _ => return Err(Malformed::Group { at: self.at }),
            }
        }
        Ok(())
    }
}

/// The fields of one message, in wire order: `(number, item)` or an error, then nothing.
pub(super) struct Wire<'a> {
    reader: Reader<'a>,
    failed: bool,
}

impl<'a> Wire<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Wire {
            reader: Reader { bytes, at: 0 },
            failed: false,
        }
    }

    /// The fields from byte `at` on (where an earlier reading stopped).
    pub(super) fn starting_at(bytes: &'a [u8], at: usize) -> Self {
        let mut wire = Wire::new(bytes);
        wire.reader.at = at;
        wire
    }

    /// Where the next field starts.
    pub(super) fn at(&self) -> usize {
        self.reader.at
    }

    fn next_item(&mut self) -> Result<(u32, Item<'a>), Malformed> {
        let r = &mut self.reader;
        let key = r.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0 && *n < 1 << 29)
            .ok_or(Malformed::FieldNumber {
                number: key >> 3,
                at: r.at,
            })?;
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
            wire_type => {
                return Err(Malformed::WireType {
                    wire_type,
                    at: r.at,
                })
            }
        };
        Ok((number, item))
    }
}

impl<'a> Iterator for Wire<'a> {
    type Item = Result<(u32, Item<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.reader.at >= self.reader.bytes.len() {
            return None;
        }
        let item = self.next_item();
        self.failed = item.is_err();
        Some(item)
    }
}

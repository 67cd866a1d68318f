//! Why a binary body does not decode (pure): the JSON would outgrow its budget, or the bytes
//! are not the format they are said to be — and then how and where ([`Malformed`]: a length
//! past the end, nesting too deep, a byte no encoder writes, …), one variant each, written as
//! the viewer says it.

use super::{size, MAX_DEPTH};

/// Why a decode stopped, as [`super::to_json`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The JSON would be longer than the budget; `start` is the text written before it ran
    /// out (not valid JSON on its own: cut between two tokens), `what` the format.
    #[error("{what} decodes to more than {} of JSON", size(*.limit))]
    TooLarge {
        what: String,
        limit: usize,
        start: String,
    },
    /// The bytes are not what the format (`what`) says.
    #[error("{what} does not decode: {why}")]
    Invalid { what: String, why: Malformed },
}

/// Why writing stopped inside a decoder: the budget is spent (the caller keeps the text so
/// far), or the bytes are malformed. [`super::to_json`] makes it a [`DecodeError`] that names
/// the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    Full,
    Malformed(Malformed),
}

impl From<Malformed> for Stop {
    fn from(why: Malformed) -> Self {
        Stop::Malformed(why)
    }
}

/// How bytes are not the format they are said to be; `at` is a byte offset in them (in the
/// enclosing bytes being read: a protobuf field's own, a packed field's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    // Any format.
    /// A length, or a value's size, claims more bytes than are left.
    #[error("{claimed} bytes claimed at byte {at}, {left} left")]
    Truncated { claimed: u64, at: usize, left: u64 },
    #[error("nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Bytes after the one value the body holds.
    #[error("{count} bytes after the value")]
    Trailing { count: usize },
    /// Not the bytes' fault but a decoder's: it closed a container it had not opened
    /// (reported, not panicked on; the property tests hold every decode to balanced JSON).
    #[error("a container closed twice")]
    Unbalanced,

    // MessagePack.
    #[error("the never-used byte 0xc1")]
    NeverUsed,

    // CBOR.
    #[error("reserved additional information {info}")]
    ReservedInfo { info: u8 },
    #[error("unexpected simple value {value} at byte {at}")]
    SimpleValue { value: u8, at: usize },
    #[error("malformed head 0x{head:02x} at byte {at}")]
    Head { head: u8, at: usize },
    #[error("a chunk of another type in an indefinite string")]
    ChunkType,
    #[error("a nested indefinite string")]
    NestedIndefinite,
    #[error("an indefinite array or map without its break")]
    NoBreak,

    // AMQP 1.0.
    /// Bytes where a body section (its descriptor) belongs.
    #[error("no body section at byte {at}")]
    NotASection { at: usize },
    #[error("section descriptor 0x{descriptor:02x} is not a body")]
    NotABody { descriptor: u8 },
    #[error("no body section")]
    NoSection,
    #[error("a char that is not a Unicode scalar")]
    NotAChar,
    #[error("a map of {count} elements, not pairs")]
    OddMap { count: u64 },
    #[error("a compound that does not end at its size (byte {at})")]
    CompoundSize { at: usize },
    #[error("unknown format code 0x{code:02x} at byte {at}")]
    FormatCode { code: u8, at: usize },

    // Protobuf.
    #[error("a number cut at byte {at}")]
    VarintCut { at: usize },
    #[error("a number longer than 64 bits at byte {at}")]
    VarintOver64Bits { at: usize },
    #[error("a number longer than 10 bytes at byte {at}")]
    VarintOver10Bytes { at: usize },
    #[error("a malformed group at byte {at}")]
    Group { at: usize },
    /// Zero, or past protobuf's largest (2^29 − 1).
    #[error("field number {number} at byte {at}")]
    FieldNumber { number: u64, at: usize },
    #[error("wire type {wire_type} at byte {at}")]
    WireType { wire_type: u64, at: usize },
    /// A field whose item is not of the wire type its declared kind has (a schema that is
    /// not the writer's, or bytes that are not this message).
    #[error("field {field} ({kind}) has the wire type of another kind")]
    WrongWireType { field: String, kind: String },
}

//! Archived bodies read as they are replayed: a body over a MiB is published a piece at a
//! time straight from the archive ([`ReplayBody::Read`]), so that a replay of a 128 MiB dead
//! letter — single or in a job, several at once — holds a piece of it, not all of it.

use crate::amqp::publisher::{BodySource, ReplayBody};
use crate::archive::{MessageStore, OutgoingBody};

/// The largest body a replay holds whole; a larger one is read as it is published.
pub const IN_HAND_BYTES: usize = 1024 * 1024;

/// The archive, as where replayed bodies are read from.
pub struct ArchivedBodies<'a>(pub &'a dyn MessageStore);

#[async_trait::async_trait]
impl BodySource for ArchivedBodies<'_> {
    async fn read(&self, archive_id: i64, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        match self.0.body_part(archive_id, offset, len).await {
            Ok(Some(piece)) => Ok(piece),
            Ok(None) => Err(format!("message {archive_id} is no longer archived")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A handed-out message's body, as it is published.
pub fn replay_body<'a>(body: &'a OutgoingBody, bodies: &'a ArchivedBodies<'a>) -> ReplayBody<'a> {
    match body {
        OutgoingBody::Held(bytes) => ReplayBody::Bytes(bytes),
        OutgoingBody::Archived { size } => ReplayBody::Read {
            size: *size,
            source: bodies,
        },
    }
}

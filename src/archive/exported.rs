//! One exported message as its line of NDJSON, a piece at a time: a body the export left in
//! the archive ([`UnreadBody`], one over a MiB) is read and base64-encoded as the line is
//! written, so that exporting a 128 MiB dead letter — to a file, as a download, for the
//! checksum of `lazarus migrate` — holds a piece of it, not the body and its base64 text.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use super::{ArchiveError, ExportedMessage, MessageStore, UnreadBody};

/// Body bytes read and encoded at a time: a multiple of 3, so that the pieces' base64 texts
/// follow each other as the whole body's would.
const PIECE_BYTES: u64 = 3 * 256 * 1024;

/// A message's line (its line feed included), written a piece at a time ([`ExportLine::next`]).
pub struct ExportLine {
    /// What comes before the body's text (the whole line, for a body in hand).
    head: Option<Vec<u8>>,
    /// A body left in the archive, and how much of it is written.
    unread: Option<(UnreadBody, u64)>,
    /// From the body's closing quote on.
    tail: Option<Vec<u8>>,
    len: u64,
}

impl ExportLine {
    pub fn new(m: &mut ExportedMessage) -> Self {
        let Some(unread) = m.unread_body else {
            let mut line = serde_json::to_vec(&*m).expect("records serialize");
            line.push(b'\n');
            return ExportLine {
                len: line.len() as u64,
                head: Some(line),
                unread: None,
                tail: None,
            };
        };
        // Written with a body no record can hold in its text (random bytes, 24 characters of
        // base64 without padding), and cut there.
        let mut placeholder = [0u8; 18];
        argon2::password_hash::rand_core::RngCore::fill_bytes(
            &mut argon2::password_hash::rand_core::OsRng,
            &mut placeholder,
        );
        let body = std::mem::replace(&mut m.body, placeholder.to_vec());
        let line = serde_json::to_vec(&*m);
        m.body = body;
        let line = line.expect("records serialize");
        let quoted = format!("\"{}\"", STANDARD.encode(placeholder));
        let at = line
            .windows(quoted.len())
            .position(|w| w == quoted.as_bytes())
            .expect("the body is in its line");
        let head = line[..at + 1].to_vec();
        let mut tail = line[at + quoted.len() - 1..].to_vec();
        tail.push(b'\n');
        ExportLine {
            len: (head.len() + tail.len()) as u64 + unread.size.div_ceil(3) * 4,
            head: Some(head),
            unread: Some((unread, 0)),
            tail: Some(tail),
        }
    }

    /// Its length in bytes, before it is written.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its next piece, reading a body left in the archive from `store`; `None` once all of it
    /// was given.
    pub async fn next(
        &mut self,
        store: &dyn MessageStore,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        if let Some(head) = self.head.take() {
            return Ok(Some(head));
        }
        if let Some((body, written)) = self.unread.as_mut().filter(|(b, w)| *w < b.size) {
            let want = (body.size - *written).min(PIECE_BYTES);
            let piece = store
                .body_part(body.message_id, *written, want as usize)
                .await?
                .filter(|piece| piece.len() as u64 == want)
                .ok_or_else(|| ArchiveError::Corrupt {
                    id: body.message_id,
                    reason: format!(
                        "its body ended (or was deleted) before its {} bytes were exported",
                        body.size
                    ),
                })?;
            *written += want;
            return Ok(Some(STANDARD.encode(piece).into_bytes()));
        }
        Ok(self.tail.take())
    }
}

/// Reads the body `m`'s export left in the archive into `m` (for a caller that needs it
/// whole: `lazarus migrate` stores it again).
pub async fn read_unread_body(
    store: &dyn MessageStore,
    m: &mut ExportedMessage,
) -> Result<(), ArchiveError> {
    let Some(unread) = m.unread_body else {
        return Ok(());
    };
    let body = store
        .get_body(unread.message_id)
        .await?
        .filter(|b| b.bytes.len() as u64 == unread.size)
        .ok_or_else(|| ArchiveError::Corrupt {
            id: unread.message_id,
            reason: "its body was deleted or changed while it was exported".into(),
        })?;
    m.body = body.bytes;
    m.unread_body = None;
    Ok(())
}

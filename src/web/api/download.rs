//! A stored body as a download, streamed from the archive a piece at a time: a 100 MiB dead
//! letter costs a download one piece (and the one the connection is sending), not its size.
//! The first piece is read before the answer starts, so that a failing archive is a proper
//! error; a later failure (the message purged meanwhile) cuts the stream short, which the
//! client sees as an incomplete transfer.

use std::sync::Arc;

use axum::body::Body;
use tokio::sync::OwnedSemaphorePermit;

use crate::archive::Console;

/// How much of a body one read takes.
pub const PIECE_BYTES: usize = 1024 * 1024;

/// What the stream reads next.
struct Reading {
    archive: Arc<dyn Console>,
    id: i64,
    offset: u64,
    size: u64,
    /// The permit the download holds until its last piece is sent.
    _permit: OwnedSemaphorePermit,
}

/// Message `id`'s body of `size` bytes, whose first piece is `first`, as a response body of
/// exactly `size` bytes.
pub fn stream(
    archive: Arc<dyn Console>,
    id: i64,
    size: u64,
    first: Vec<u8>,
    permit: OwnedSemaphorePermit,
) -> Body {
    let reading = Reading {
        archive,
        id,
        offset: first.len() as u64,
        size,
        _permit: permit,
    };
    let rest = futures_util::stream::unfold(Some(reading), |reading| async move {
        let mut r = reading?;
        if r.offset >= r.size {
            return None;
        }
        match r.archive.body_part(r.id, r.offset, PIECE_BYTES).await {
            Ok(Some(piece)) if !piece.is_empty() => {
                r.offset += piece.len() as u64;
                Some((Ok(piece), Some(r)))
            }
            outcome => {
                let why = match outcome {
                    Err(e) => e.to_string(),
                    _ => "the message is no longer archived".to_owned(),
                };
                tracing::warn!(id = r.id, offset = r.offset, error = %why, "body download cut short");
                let cut = std::io::Error::other(format!("the download is cut short: {why}"));
                Some((Err(cut), None))
            }
        }
    });
    let first = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) });
    Body::from_stream(futures_util::StreamExt::chain(first, rest))
}

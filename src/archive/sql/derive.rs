//! What the indexer and the background reindex share: stored messages read back as ingest
//! received them and derived again, a few MiB of bodies at a time, off the async workers; and
//! rows of an id and two texts written a few hundred a statement.

use std::panic::AssertUnwindSafe;

use super::bodies;
use super::rows::message_from_row;
use super::{ArchiveRow, Arg, Conn, SqlArchive};
use crate::archive::{ArchiveError, IncomingMessage};

/// Body bytes read at once for a batch (a larger body alone).
const BODY_BYTES_AT_ONCE: usize = 8 * 1024 * 1024;

/// Rows of three values a statement writes at most ([`insert_rows`]).
const FIELDS_PER_STATEMENT: usize = 300;

/// What `derive` makes of every stored message of `rows` (read with the summary and detail
/// columns) and its whole body, as ingest had it, where it makes anything. Bodies are read a
/// few MiB at a time (a larger one alone), within what the process holds of bodies at once;
/// each group is derived on a blocking thread, as decoding a body is CPU work that would hold
/// up the requests served beside it. A row that cannot be read, or whose derivation panics,
/// makes nothing (with a warning naming it), so one bad row never holds up every message
/// after it: the message stays archived and listed, without search entries.
pub(super) async fn derive_each<T: SqlArchive, R: Send + 'static>(
    archive: &T,
    rows: &[super::Row],
    derive: impl Fn(crate::archive::ArchivedMessage, Vec<u8>) -> Option<R> + Clone + Send + 'static,
) -> Result<Vec<R>, ArchiveError> {
    let stored: Vec<_> = rows
        .iter()
        .filter_map(|row| match message_from_row(row, Default::default()) {
            Ok(message) => Some(message),
            Err(e) => {
                let id: Option<i64> = row.column("id").ok();
                tracing::warn!(id, error = %e, "a stored message cannot be read: no search entries for it");
                None
            }
        })
        .collect();
    let mut derived = Vec::with_capacity(stored.len());
    let mut stored = stored.into_iter().peekable();
    while stored.peek().is_some() {
        let mut group = Vec::new();
        let mut bytes = 0usize;
        while let Some(next) = stored.peek() {
            let size = next.summary.body_size.max(0) as usize;
            if !group.is_empty() && bytes + size > BODY_BYTES_AT_ONCE {
                break;
            }
            bytes += size;
            group.push(stored.next().expect("peeked"));
        }
        let _held = crate::support::memory::hold_bodies(bytes).await;
        let ids: Vec<i64> = group.iter().map(|m| m.summary.id).collect();
        let mut body_of = bodies::whole(archive, &ids).await?;
        let group: Vec<_> = group
            .into_iter()
            .map(|message| {
                let body = body_of.remove(&message.summary.id).unwrap_or_default();
                (message, body)
            })
            .collect();
        let derive = derive.clone();
        let part = tokio::task::spawn_blocking(move || {
            group
                .into_iter()
                .filter_map(|(message, body)| {
                    let id = message.summary.id;
                    let derived =
                        std::panic::catch_unwind(AssertUnwindSafe(|| derive(message, body)));
                    derived.unwrap_or_else(|_| {
                        tracing::warn!(
                            id,
                            "deriving a stored message's search entries failed: none for it"
                        );
                        None
                    })
                })
                .collect::<Vec<R>>()
        });
        match part.await {
            Ok(part) => derived.extend(part),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    Ok(derived)
}

/// A stored message as ingest received it (what deriving its search entries reads).
pub(super) fn incoming(stored: crate::archive::ArchivedMessage, body: Vec<u8>) -> IncomingMessage {
    IncomingMessage {
        broker: stored.summary.broker.clone(),
        vhost: stored.summary.vhost.clone(),
        queue: stored.summary.queue,
        exchange: stored.delivered_exchange,
        routing_key: stored.delivered_routing_key,
        redelivered: stored.redelivered,
        properties: stored.properties,
        headers: stored.headers,
        body,
        received_at: stored.summary.archived_at,
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

/// Rows of three values (an id and two texts) into `table_and_columns`, a few hundred a
/// statement; a row already there is left as it is.
pub(super) async fn insert_rows(
    conn: &mut Conn<'_>,
    table_and_columns: &str,
    rows: &[(i64, &str, &str)],
) -> Result<(), sqlx::Error> {
    for chunk in rows.chunks(FIELDS_PER_STATEMENT) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
            .collect();
        let mut bound: Vec<Arg<'_>> = Vec::with_capacity(chunk.len() * 3);
        for (id, a, b) in chunk {
            bound.extend([Arg::from(*id), Arg::from(*a), Arg::from(*b)]);
        }
        conn.execute(
            &format!(
                "INSERT INTO {table_and_columns} VALUES {} ON CONFLICT DO NOTHING",
                values.join(", ")
            ),
            &bound,
        )
        .await?;
    }
    Ok(())
}

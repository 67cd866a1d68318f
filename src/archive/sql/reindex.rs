//! Reindexing messages archived before the search index last changed, one algorithm for both
//! backends: a cursor row per index version (`search_reindex`, made by the migration that
//! changed the index) walks the messages up to the newest one archived then; each batch's
//! search text is derived again as ingest derives it, and only the entries that differ from
//! before are written, by the backend ([`SqlArchive::rewrite_search`]): version 1 indexes CJK
//! runs as bigrams, and reads compressed (kombu), MessagePack, CBOR and AMQP 1.0 bodies and
//! JSON's `\u` escapes; version 2 reads bzip2, lzma/xz, zstd and brotli bodies and protobuf.
//! Version 3 gives stored business field values the keys `field:value` finds them by
//! ([`crate::message::field_match`]), from the values alone: no body is read.
//! The regroup of failures by cause walks a cursor of its own (`regroup`).

use std::panic::AssertUnwindSafe;

use async_trait::async_trait;

use super::bodies;
use super::columns::{summary_columns, DETAIL_COLUMNS};
use super::rows::message_from_row;
use super::{args, ArchiveRow, SqlArchive};
use crate::archive::{
    ArchiveError, IncomingMessage, IngestRules, Reindex, ReindexProgress, SearchText,
};

/// Body bytes read at once for a batch (a larger body alone).
const BODY_BYTES_AT_ONCE: usize = 8 * 1024 * 1024;

#[async_trait]
impl<T: SqlArchive> Reindex for T {
    async fn reindex_batch(
        &self,
        rules: &IngestRules,
        limit: u32,
    ) -> Result<Option<ReindexProgress>, ArchiveError> {
        let db = self.db();
        let Some(cursor) = db
            .fetch_optional(
                "SELECT version, next_id, last_id FROM search_reindex ORDER BY version LIMIT 1",
                args![],
            )
            .await?
        else {
            return Ok(None);
        };
        let version: i64 = cursor.column("version")?;
        let (next_id, last_id): (i64, i64) = (cursor.column("next_id")?, cursor.column("last_id")?);
        if next_id > last_id {
            db.execute(
                "DELETE FROM search_reindex WHERE version = $1",
                args![version],
            )
            .await?;
            return Ok(Some(ReindexProgress {
                done_through: last_id,
                last_id,
                rewritten: 0,
            }));
        }
        if version == FIELD_KEYS {
            return field_keys_batch(self, next_id, last_id, limit)
                .await
                .map(Some);
        }
        let sql = format!(
            // Messages appended but not indexed yet are the indexer's: it writes their
            // entries as ingest derives them today.
            "SELECT {}, {DETAIL_COLUMNS} FROM messages WHERE id >= $1 AND id <= $2 \
             AND id NOT IN (SELECT id FROM index_pending) ORDER BY id LIMIT $3",
            summary_columns(db.dialect())
        );
        let rows = db
            .fetch_all(&sql, args![next_id, last_id, i64::from(limit.max(1))])
            .await?;
        let done_through = match rows.last() {
            Some(row) => row.column("id")?,
            None => last_id,
        };
        // Derived outside the transaction: it is the slow part, and SQLite's writers wait.
        let rules = rules.clone();
        let changed: Vec<(i64, SearchText)> = derive_each(self, &rows, move |message, body| {
            let id = message.summary.id;
            search_text(version, message, body, &rules).map(|text| (id, text))
        })
        .await?;
        let mut tx = db.begin().await?;
        let mut conn = tx.conn();
        self.rewrite_search(&mut conn, &changed).await?;
        conn.execute(
            "UPDATE search_reindex SET next_id = $1 WHERE version = $2 AND next_id < $1",
            args![done_through + 1, version],
        )
        .await?;
        tx.commit().await?;
        Ok(Some(ReindexProgress {
            done_through,
            last_id,
            rewritten: changed.len() as u64,
        }))
    }

    async fn regroup_batch(
        &self,
        rules: &IngestRules,
        limit: u32,
    ) -> Result<Option<ReindexProgress>, ArchiveError> {
        super::regroup::batch(self.db(), rules, limit).await
    }
}

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

/// The version of the reindex that gives business field values their keys.
const FIELD_KEYS: i64 = 3;

/// Keys for the business fields of the next `limit` messages that have any, up to `last_id`
/// (ingest writes them for later ones); keys already there are left as they are.
async fn field_keys_batch<T: SqlArchive>(
    archive: &T,
    next_id: i64,
    last_id: i64,
    limit: u32,
) -> Result<ReindexProgress, ArchiveError> {
    let db = archive.db();
    let ids: Vec<i64> = db
        .fetch_all(
            "SELECT DISTINCT message_id FROM message_fields WHERE message_id >= $1 \
             AND message_id <= $2 ORDER BY message_id LIMIT $3",
            args![next_id, last_id, i64::from(limit.max(1))],
        )
        .await?
        .iter()
        .map(|row| row.column("message_id"))
        .collect::<Result<_, _>>()?;
    let done_through = match ids.last() {
        Some(last) if ids.len() == limit.max(1) as usize => *last,
        _ => last_id,
    };
    let rows = db
        .fetch_all(
            "SELECT message_id, name, value FROM message_fields WHERE message_id >= $1 \
             AND message_id <= $2",
            args![next_id, done_through],
        )
        .await?;
    let mut keys: Vec<(i64, String, String)> = Vec::new();
    for row in &rows {
        let (id, name): (i64, String) = (row.column("message_id")?, row.column("name")?);
        let value: String = row.column("value")?;
        for key in crate::message::field_match::keys(&value) {
            keys.push((id, name.clone(), key));
        }
    }
    let mut tx = db.begin().await?;
    let mut conn = tx.conn();
    let keys: Vec<(i64, &str, &str)> = keys
        .iter()
        .map(|(id, name, key)| (*id, name.as_str(), key.as_str()))
        .collect();
    super::index::insert_rows(
        &mut conn,
        "message_field_keys (message_id, name, folded)",
        &keys,
    )
    .await?;
    conn.execute(
        "UPDATE search_reindex SET next_id = $1 WHERE version = $2 AND next_id < $1",
        args![done_through + 1, FIELD_KEYS],
    )
    .await?;
    tx.commit().await?;
    Ok(ReindexProgress {
        done_through,
        last_id,
        rewritten: keys.len() as u64,
    })
}

/// The search text ingest would derive for a stored message today (only that: no
/// fingerprint, no death history), where it differs from what earlier versions indexed.
fn search_text(
    version: i64,
    stored: crate::archive::ArchivedMessage,
    body: Vec<u8>,
    rules: &IngestRules,
) -> Option<SearchText> {
    let decoded_now = match version {
        1 => newly_decoded(&stored, &body, rules),
        _ => decoded_since_version_2(&stored, rules),
    };
    if version > 1 && !decoded_now {
        return None;
    }
    let message = incoming(stored, body);
    let (_, text) = crate::archive::record::searchable(&message, rules);
    if version > 1 {
        return Some(text);
    }
    let has_cjk = [&text.body, &text.ids, &text.headers]
        .iter()
        .any(|part| part.chars().any(crate::message::cjk::is_cjk));
    (decoded_now || has_cjk).then_some(text)
}

/// Whether the body is one that earlier versions did not read as text, or read otherwise:
/// compressed by kombu, MessagePack, CBOR, AMQP 1.0 or protobuf, or JSON with `\u` escapes.
/// (CJK runs, once single words, are bigrams now: see the caller.)
fn newly_decoded(
    stored: &crate::archive::ArchivedMessage,
    body: &[u8],
    rules: &IngestRules,
) -> bool {
    let encoding = stored.encoding().with_schemas(rules.schemas.as_deref());
    encoding.compression.is_some()
        || crate::message::structured::Format::of(&encoding).is_some()
        || body.windows(2).any(|w| w == b"\\u")
}

/// Whether the body is one version 2 reads and earlier ones did not: compressed other than
/// with gzip or zlib (a bzip2, lzma, zstd or brotli `compression` header, a `br` or `zstd`
/// content-encoding), or protobuf.
fn decoded_since_version_2(stored: &crate::archive::ArchivedMessage, rules: &IngestRules) -> bool {
    use crate::message::structured::Format;
    let encoding = stored.encoding().with_schemas(rules.schemas.as_deref());
    let new_encoding = encoding
        .content_encoding
        .is_some_and(|e| matches!(e.trim().to_ascii_lowercase().as_str(), "br" | "zstd"));
    encoding.compression.is_some()
        || new_encoding
        || matches!(
            Format::of(&encoding),
            Some(Format::Protobuf(..) | Format::RawProtobuf)
        )
}

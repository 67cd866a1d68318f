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

use async_trait::async_trait;

use super::columns::{summary_columns, DETAIL_COLUMNS};
use super::derive::{derive_each, incoming, insert_rows};
use super::{args, ArchiveRow, SqlArchive};
use crate::archive::{ArchiveError, IngestRules, Reindex, ReindexProgress, SearchText};

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
    insert_rows(
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

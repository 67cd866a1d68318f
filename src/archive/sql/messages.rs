//! Reading one message, its body, the totals and the failure groups: the same on both
//! backends (lists and search are each backend's own, in `MessageSearch`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::bodies::{self, STORED_SIZE};
use super::columns::{summary_columns, DETAIL_COLUMNS};
use super::rows::{count_from_row, hourly_from_row, message_from_row, summary_from_row};
use super::{args, ArchiveRow, Pool, SqlArchive};
use crate::archive::{
    ArchiveError, ArchivedMessage, BodyStart, FailureGroup, GroupBy, GroupMinute, GroupQuery,
    HourlyCount, MessagePage, MessageStore, QueueReasonCount, StoredBody,
};

/// Business field values of the given messages, by message.
pub async fn fields_of(
    db: Pool<'_>,
    ids: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<String, String>>, sqlx::Error> {
    let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let sql = format!(
        "SELECT message_id, name, value FROM message_fields WHERE {}",
        db.dialect().in_ids("message_id", 1)
    );
    for row in db.fetch_all(&sql, args![ids]).await? {
        out.entry(row.column("message_id")?)
            .or_default()
            .insert(row.column("name")?, row.column("value")?);
    }
    Ok(out)
}

/// A page of the list from its rows (one more than `limit` was asked for: whether there is a
/// next page), with the messages' business fields.
pub async fn page_of<R: ArchiveRow>(
    db: Pool<'_>,
    rows: &[R],
    limit: u32,
) -> Result<MessagePage, ArchiveError> {
    let mut messages = rows
        .iter()
        .map(summary_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let ids: Vec<i64> = messages.iter().map(|m| m.id).collect();
    let mut fields = fields_of(db, &ids).await?;
    for m in &mut messages {
        m.fields = fields.remove(&m.id).unwrap_or_default();
    }
    let next_cursor = if messages.len() > limit as usize {
        messages.truncate(limit as usize);
        messages.last().map(|m| m.id.to_string())
    } else {
        None
    };
    Ok(MessagePage {
        messages,
        next_cursor,
        indexing_behind: 0,
    })
}

#[async_trait]
impl<T: SqlArchive> MessageStore for T {
    async fn index_behind(&self) -> Result<u64, ArchiveError> {
        let sql = "SELECT count(*) AS n FROM index_pending";
        let behind: i64 = match self.db().fetch_optional(sql, args![]).await? {
            Some(row) => row.column("n")?,
            None => 0,
        };
        Ok(behind.max(0) as u64)
    }

    async fn get_message(&self, id: i64) -> Result<Option<ArchivedMessage>, ArchiveError> {
        let db = self.db();
        let sql = format!(
            "SELECT {}, {DETAIL_COLUMNS} FROM messages WHERE id = $1",
            summary_columns(db.dialect())
        );
        let Some(row) = db.fetch_optional(&sql, args![id]).await? else {
            return Ok(None);
        };
        let fields = fields_of(db, &[id]).await?.remove(&id);
        message_from_row(&row, fields.unwrap_or_default()).map(Some)
    }

    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                "SELECT content_type, content_encoding FROM messages WHERE id = $1",
                args![id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let Some(bytes) = bodies::whole(self, &[id]).await?.remove(&id) else {
            return Ok(None);
        };
        Ok(Some(StoredBody {
            bytes,
            content_type: row.column("content_type")?,
            content_encoding: row.column("content_encoding")?,
            headers: None,
            message_type: None,
        }))
    }

    async fn body_start(&self, id: i64, max: usize) -> Result<Option<BodyStart>, ArchiveError> {
        let row = self
            .db()
            .fetch_optional(
                &format!(
                    "SELECT {STORED_SIZE} AS size, m.content_type, m.content_encoding \
                     FROM messages m JOIN message_bodies b ON b.message_id = m.id WHERE m.id = $1"
                ),
                args![id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let size: i64 = row.column("size")?;
        let Some(bytes) = self.read_body_part(id, 0, max).await? else {
            return Ok(None);
        };
        Ok(Some(BodyStart {
            body: StoredBody {
                bytes,
                content_type: row.column("content_type")?,
                content_encoding: row.column("content_encoding")?,
                headers: None,
                message_type: None,
            },
            size: size.max(0) as u64,
        }))
    }

    async fn body_part(
        &self,
        id: i64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        Ok(self.read_body_part(id, offset, len).await?)
    }

    async fn field_values_in(
        &self,
        name: &str,
        low: &str,
        high: &str,
        limit: u32,
    ) -> Result<Vec<String>, ArchiveError> {
        // A few hundred keys in order, then their values: the same value of many messages
        // is offered once.
        let rows = self
            .db()
            .fetch_all(
                "SELECT DISTINCT f.value FROM (SELECT message_id FROM message_field_keys \
                 WHERE name = $1 AND folded >= $2 AND folded < $3 ORDER BY folded LIMIT 200) k \
                 JOIN message_fields f ON f.message_id = k.message_id AND f.name = $1 \
                 ORDER BY f.value LIMIT $4",
                args![name, low, high, i64::from(limit)],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| row.column("value"))
            .collect::<Result<_, _>>()?)
    }

    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError> {
        let db = self.db();
        let d = db.dialect();
        let sql = format!(
            "SELECT queue, broker, reason, messages, open_messages, oldest_at, newest_at FROM queue_reason_counts \
             ORDER BY {}, {}",
            d.byte_order("queue"),
            d.byte_order("reason")
        );
        let rows = db.fetch_all(&sql, args![]).await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        let db = self.db();
        let sql = format!(
            "SELECT queue, hour, messages FROM hourly_counts WHERE hour >= $1 ORDER BY {}, hour",
            db.dialect().byte_order("queue")
        );
        let rows = db
            .fetch_all(&sql, args![since.unix_timestamp().div_euclid(3600)])
            .await?;
        rows.iter().map(hourly_from_row).collect()
    }

    async fn recent_counts(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<(String, i64)>, ArchiveError> {
        let db = self.db();
        let sql = format!(
            "SELECT queue, CAST(sum(messages) AS BIGINT) AS n FROM minute_counts WHERE minute >= $1 \
             GROUP BY queue ORDER BY {}",
            db.dialect().byte_order("queue")
        );
        let rows = db
            .fetch_all(&sql, args![since.unix_timestamp().div_euclid(60)])
            .await?;
        rows.iter()
            .map(|r| Ok((r.column("queue")?, r.column("n")?)))
            .collect()
    }

    async fn groups(&self, query: &GroupQuery) -> Result<Vec<FailureGroup>, ArchiveError> {
        super::groups::read(self.db(), query, None).await
    }

    async fn group_minutes(
        &self,
        by: GroupBy,
        newest: i64,
        span: i64,
        spans: usize,
    ) -> Result<Vec<GroupMinute>, ArchiveError> {
        super::groups::minutes(self.db(), by, newest, span, spans).await
    }

    async fn settling_by_dlq(&self) -> Result<Vec<(String, i64)>, ArchiveError> {
        super::groups::settling_by_dlq(self.db()).await
    }

    async fn default_keys_with_colon(&self) -> Result<Vec<String>, ArchiveError> {
        // The same condition as the index `messages_default_colon`'s, for it to serve.
        let rows = self
            .db()
            .fetch_all(
                "SELECT DISTINCT queue FROM messages \
                 WHERE broker = 'default' AND queue LIKE '%:%'",
                args![],
            )
            .await?;
        rows.iter().map(|row| Ok(row.column("queue")?)).collect()
    }

    async fn ping(&self) -> Result<(), ArchiveError> {
        self.db().fetch_all("SELECT 1", args![]).await?;
        Ok(())
    }
}

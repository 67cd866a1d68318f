//! Reading the archive on SQLite: lists and search through the FTS5 index, one message, its
//! body, totals, failure groups and related records.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};
use time::OffsetDateTime;

use super::SqliteArchive;
use crate::archive::sql::columns::{DETAIL_COLUMNS, SUMMARY_COLUMNS};
use crate::archive::sql::filter::{push_conditions, StatusIn};
use crate::archive::sql::rows::{
    count_from_row, group_from_row, hourly_from_row, message_from_row, summary_from_row,
};
use crate::archive::{
    ArchiveError, ArchivedMessage, FailureGroup, HourlyCount, MessageFilter, MessagePage,
    MessageStore, MessageSummary, PageRequest, QueueReasonCount, Selection, StoredBody,
    MAX_PAGE_SIZE,
};

/// ` FROM messages ... WHERE ...`: the messages a list filter selects. A text search joins
/// the FTS index, whose rowid is the message id.
pub(super) fn push_filter<'a>(q: &mut QueryBuilder<'a, Sqlite>, filter: &'a MessageFilter) {
    match &filter.text {
        Some(text) => {
            q.push(" FROM messages JOIN messages_fts ON messages_fts.rowid = messages.id WHERE messages_fts MATCH ")
                .push_bind(text.fts5());
        }
        None => {
            q.push(" FROM messages WHERE 1 = 1");
        }
    }
    push_conditions(q, filter, StatusIn::Column);
}

/// ` AND messages.id IN (...)` or the filter's conditions, after `SELECT ...`.
pub(super) fn push_selection<'a>(q: &mut QueryBuilder<'a, Sqlite>, selection: &'a Selection) {
    match selection {
        Selection::Ids(ids) => {
            q.push(" FROM messages WHERE messages.id IN (SELECT value FROM json_each(")
                .push_bind(serde_json::to_string(ids).expect("ids serialize"))
                .push("))");
        }
        Selection::Filter(filter) => push_filter(q, filter),
    }
}

/// Business field values of the given messages, by message.
async fn fields_of(
    pool: &SqlitePool,
    ids: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<String, String>>, sqlx::Error> {
    let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut q = QueryBuilder::<Sqlite>::new(
        "SELECT message_id, name, value FROM message_fields WHERE message_id IN (",
    );
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    q.push(")");
    for row in q.build().fetch_all(pool).await? {
        out.entry(row.try_get("message_id")?)
            .or_default()
            .insert(row.try_get("name")?, row.try_get("value")?);
    }
    Ok(out)
}

#[async_trait]
impl MessageStore for SqliteArchive {
    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        let mut q = QueryBuilder::<Sqlite>::new(format!("SELECT {SUMMARY_COLUMNS}"));
        push_filter(&mut q, filter);
        // With a text search the FTS index drives, in its own rowid (= id) order.
        let order = if filter.text.is_some() {
            "messages_fts.rowid"
        } else {
            "id"
        };
        if let Some(before) = page.before {
            q.push(format!(" AND {order} < ")).push_bind(before);
        }
        let limit = page.limit.clamp(1, MAX_PAGE_SIZE);
        q.push(format!(" ORDER BY {order} DESC LIMIT "))
            .push_bind(i64::from(limit) + 1);
        let rows = q.build().fetch_all(&self.pool).await?;
        let mut messages = rows
            .iter()
            .map(summary_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<i64> = messages.iter().map(|m| m.id).collect();
        let mut fields = fields_of(&self.pool, &ids).await?;
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
        })
    }

    async fn get_message(&self, id: i64) -> Result<Option<ArchivedMessage>, ArchiveError> {
        let row = sqlx::query(&format!(
            "SELECT {SUMMARY_COLUMNS}, {DETAIL_COLUMNS} FROM messages WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let fields = fields_of(&self.pool, &[id]).await?.remove(&id);
        message_from_row(&row, fields.unwrap_or_default()).map(Some)
    }

    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError> {
        let row = sqlx::query(
            "SELECT b.body, m.content_type, m.content_encoding FROM messages m JOIN message_bodies b ON b.message_id = m.id WHERE m.id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(StoredBody {
                bytes: row.try_get("body")?,
                content_type: row.try_get("content_type")?,
                content_encoding: row.try_get("content_encoding")?,
            })
        })
        .transpose()
    }

    /// Totals by DLQ and first-death reason, kept incrementally (no table scan).
    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, messages, oldest_at, newest_at FROM queue_reason_counts ORDER BY queue, reason",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(count_from_row).collect()
    }

    /// Archived messages per DLQ and hour, from `since` on.
    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, hour, messages FROM hourly_counts WHERE hour >= ? ORDER BY queue, hour",
        )
        .bind(since.unix_timestamp().div_euclid(3600))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hourly_from_row).collect()
    }

    /// The largest failure groups, most recent activity first.
    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, error, messages, first_seen, last_seen FROM failure_groups ORDER BY last_seen DESC LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(group_from_row).collect()
    }

    /// Other records of the same message: the same message-id, the record it is a replayed
    /// copy of, and the copies of it that died again; newest first.
    async fn related(&self, message: &MessageSummary) -> Result<Vec<MessageSummary>, ArchiveError> {
        let replay_of: Option<i64> =
            sqlx::query_scalar("SELECT replay_of FROM messages WHERE id = ?")
                .bind(message.id)
                .fetch_optional(&self.pool)
                .await?
                .flatten();
        // Each kind of relative through its own index, then their rows. Left to choose, SQLite
        // walks the whole table by id for `ORDER BY id DESC LIMIT` (0.5 s at 1,000,000
        // messages, `cargo bench --bench pages`): the statistics say nearly every row has the
        // same `replay_of` (none). INDEXED BY and CROSS JOIN fix the plan.
        let rows = sqlx::query(&format!(
            "WITH related(rid) AS MATERIALIZED ( \
             SELECT id FROM (SELECT id FROM messages INDEXED BY messages_message_id \
             WHERE message_id = ? ORDER BY id DESC LIMIT 21) \
             UNION SELECT id FROM (SELECT id FROM messages INDEXED BY messages_replay_of \
             WHERE replay_of = ? ORDER BY id DESC LIMIT 21) \
             UNION SELECT ?) \
             SELECT {SUMMARY_COLUMNS} FROM related CROSS JOIN messages ON messages.id = related.rid \
             WHERE messages.id != ? ORDER BY messages.id DESC LIMIT 20"
        ))
        .bind(&message.message_id)
        .bind(message.id)
        .bind(replay_of)
        .bind(message.id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(summary_from_row).collect()
    }

    /// Checks the database answers.
    async fn ping(&self) -> Result<(), ArchiveError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

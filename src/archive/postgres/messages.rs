//! Reading the archive on PostgreSQL: lists and search through the `tsvector` column, one
//! message, its body, totals, failure groups and related records.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, QueryBuilder, Row};
use time::OffsetDateTime;

use super::search;
use super::PostgresArchive;
use crate::archive::sql::columns::{DETAIL_COLUMNS, SUMMARY_WITH_STATUS_TABLE as SUMMARY};
use crate::archive::sql::filter::{push_conditions, StatusIn};
use crate::archive::sql::rows::{
    count_from_row, group_from_row, hourly_from_row, message_from_row, summary_from_row,
};
use crate::archive::{
    ArchiveError, ArchivedMessage, FailureGroup, HourlyCount, MessageFilter, MessagePage,
    MessageStore, MessageSummary, PageRequest, QueueReasonCount, Selection, StoredBody,
    MAX_PAGE_SIZE,
};

/// ` FROM messages WHERE ...`: the messages a list filter selects.
pub(super) fn push_filter<'a>(q: &mut QueryBuilder<'a, Postgres>, filter: &'a MessageFilter) {
    match filter.text.as_ref().map(search::query) {
        Some(Some(query)) => {
            q.push(" FROM messages WHERE search @@ ")
                .push_bind(query)
                .push("::tsquery");
        }
        // Words without a letter or digit in them: FTS5 finds nothing either.
        Some(None) => {
            q.push(" FROM messages WHERE FALSE");
        }
        None => {
            q.push(" FROM messages WHERE TRUE");
        }
    }
    push_conditions(q, filter, StatusIn::Table);
}

/// ` FROM messages WHERE ...`: the messages of a selection, after `SELECT ...`.
pub(super) fn push_selection<'a>(q: &mut QueryBuilder<'a, Postgres>, selection: &'a Selection) {
    match selection {
        Selection::Ids(ids) => {
            q.push(" FROM messages WHERE messages.id = ANY(")
                .push_bind(ids)
                .push(")");
        }
        Selection::Filter(filter) => push_filter(q, filter),
    }
}

/// Business field values of the given messages, by message.
async fn fields_of(
    pool: &PgPool,
    ids: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<String, String>>, sqlx::Error> {
    let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let rows = sqlx::query(
        "SELECT message_id, name, value FROM message_fields WHERE message_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    for row in rows {
        out.entry(row.try_get("message_id")?)
            .or_default()
            .insert(row.try_get("name")?, row.try_get("value")?);
    }
    Ok(out)
}

#[async_trait]
impl MessageStore for PostgresArchive {
    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        let mut q = QueryBuilder::<Postgres>::new(format!("SELECT {}", SUMMARY));
        push_filter(&mut q, filter);
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before);
        }
        let limit = page.limit.clamp(1, MAX_PAGE_SIZE);
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        // Planned with its values every time (an unnamed statement), never from a cached
        // generic plan: the right plan depends on how common the words and values are. A word
        // in most messages is found fastest by walking the newest ids with the filter, a rare
        // one through the GIN index then a sort; a generic plan picks one for all, and the
        // other then takes seconds at a million messages (see BENCHMARKS.md).
        let rows = q.build().persistent(false).fetch_all(&self.pool).await?;
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
            "SELECT {}, {} FROM messages WHERE id = $1",
            SUMMARY, DETAIL_COLUMNS
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
            "SELECT b.body, m.content_type, m.content_encoding FROM messages m JOIN message_bodies b ON b.message_id = m.id WHERE m.id = $1",
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
            "SELECT queue, reason, messages, oldest_at, newest_at FROM queue_reason_counts ORDER BY queue COLLATE \"C\", reason COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(count_from_row).collect()
    }

    /// Archived messages per DLQ and hour, from `since` on.
    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, hour, messages FROM hourly_counts WHERE hour >= $1 ORDER BY queue COLLATE \"C\", hour",
        )
        .bind(since.unix_timestamp().div_euclid(3600))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hourly_from_row).collect()
    }

    /// The largest failure groups, most recent activity first.
    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, error, messages, first_seen, last_seen FROM failure_groups ORDER BY last_seen DESC LIMIT $1",
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
            sqlx::query_scalar("SELECT replay_of FROM messages WHERE id = $1")
                .bind(message.id)
                .fetch_optional(&self.pool)
                .await?
                .flatten();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE id != $1 AND (message_id = $2 OR replay_of = $1 OR id = $3) ORDER BY id DESC LIMIT 20",
            SUMMARY
        ))
        .bind(message.id)
        .bind(&message.message_id)
        .bind(replay_of)
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

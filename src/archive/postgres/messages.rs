//! Finding messages on PostgreSQL: lists and search through `message_search`'s `tsvector`, and
//! related records.

use async_trait::async_trait;
use sqlx::{Postgres, QueryBuilder};

use super::search;
use super::PostgresArchive;
use crate::archive::sql::columns::SUMMARY_WITH_STATUS_TABLE as SUMMARY;
use crate::archive::sql::filter::{push_conditions, push_dlqs, StatusIn};
use crate::archive::sql::page_of;
use crate::archive::sql::rows::summary_from_row;
use crate::archive::sql::{lifecycle, SqlArchive};
use crate::archive::{
    ArchiveError, MessageFilter, MessagePage, MessageSearch, MessageSummary, PageRequest,
    Selection, MAX_PAGE_SIZE,
};

/// ` FROM messages WHERE ...`: the messages a list filter selects.
pub(super) fn push_filter<'a>(q: &mut QueryBuilder<'a, Postgres>, filter: &'a MessageFilter) {
    match filter.text.as_ref().map(search::query) {
        Some(Some(query)) => {
            // Bounded by the newest message indexed: while a drain is being indexed, the
            // newest tens of thousands have no search document yet, and a list of a common
            // word read backwards from the newest message would step over each of them.
            q.push(
                " FROM messages WHERE messages.id <= (SELECT max(id) FROM message_search) \
                 AND messages.id IN (SELECT id FROM message_search WHERE search @@ ",
            )
            .push_bind(query)
            .push("::tsquery)");
        }
        // Words without a letter or digit in them: FTS5 finds nothing either.
        Some(None) => {
            q.push(" FROM messages WHERE FALSE");
        }
        None => {
            q.push(" FROM messages WHERE TRUE");
        }
    }
    push_conditions(q, filter, StatusIn::Table, None);
}

/// ` FROM messages WHERE ...`: the messages of a selection, after `SELECT ...`.
pub(super) fn push_selection<'a>(q: &mut QueryBuilder<'a, Postgres>, selection: &'a Selection) {
    match selection {
        Selection::Ids(ids) => {
            q.push(" FROM messages WHERE messages.id = ANY(")
                .push_bind(ids)
                .push(")");
        }
        Selection::IdsWithin(ids, dlqs) => {
            q.push(" FROM messages WHERE messages.id = ANY(")
                .push_bind(ids)
                .push(")");
            push_dlqs(q, dlqs);
        }
        Selection::Filter(filter) => push_filter(q, filter),
    }
}

/// `SELECT id FROM message_status WHERE` a failure group's open messages (`group`: its id):
/// through the partial index of open messages by group, however much of the group is
/// resolved. The group's key is read from its row, each part compared as the index holds it.
fn push_open_group<'a>(q: &mut QueryBuilder<'a, Postgres>, group: &'a str) {
    q.push("SELECT s.id FROM message_status s WHERE ");
    for (column, held) in [
        ("queue", "s.group_queue"),
        ("reason", "s.group_reason"),
        ("cause", "s.group_cause"),
    ] {
        q.push(format!(
            "{held} = (SELECT {column} FROM failure_groups WHERE id = CAST("
        ))
        .push_bind(group)
        .push(" AS BIGINT)) AND ");
    }
    q.push(format!("s.status IN ({})", lifecycle::open_list()));
    // Its DLQ, the last part of the key: as good as always the failing queue's own.
    q.push(
        " AND (SELECT m.queue FROM messages m WHERE m.id = s.id) = \
         (SELECT dlq FROM failure_groups WHERE id = CAST(",
    )
    .push_bind(group)
    .push(" AS BIGINT))");
}

#[async_trait]
impl MessageSearch for PostgresArchive {
    async fn count_ids(&self, selection: &Selection) -> Result<u64, ArchiveError> {
        let mut q = QueryBuilder::<Postgres>::new("SELECT count(*)");
        push_selection(&mut q, selection);
        let n: i64 = q
            .build_query_scalar()
            .persistent(false)
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    async fn count_messages(&self, filter: &MessageFilter, cap: u64) -> Result<u64, ArchiveError> {
        let mut q = QueryBuilder::<Postgres>::new("SELECT count(*) FROM (");
        match filter.open_group() {
            Some(group) => push_open_group(&mut q, group),
            None => {
                q.push("SELECT messages.id");
                push_filter(&mut q, filter);
            }
        }
        q.push(" LIMIT ").push_bind(cap as i64).push(") AS found");
        let n: i64 = q
            .build_query_scalar()
            .persistent(false)
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        let mut q = QueryBuilder::<Postgres>::new(format!("SELECT {}", SUMMARY));
        let limit = page.limit.clamp(1, MAX_PAGE_SIZE);
        if let Some(group) = filter.open_group() {
            // The page's ids from the status table's index, then their rows.
            q.push(" FROM messages WHERE id IN (");
            push_open_group(&mut q, group);
            if let Some(before) = page.before {
                q.push(" AND s.id < ").push_bind(before);
            }
            q.push(" ORDER BY s.id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1)
                .push(") ORDER BY id DESC");
            let rows = q.build().persistent(false).fetch_all(&self.pool).await?;
            return page_of(self.db(), &rows, limit).await;
        }
        push_filter(&mut q, filter);
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before);
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        // Planned with its values every time (an unnamed statement), never from a cached
        // generic plan: the right plan depends on how common the words and values are. A word
        // in most messages is found fastest by walking the newest ids with the filter, a rare
        // one through the GIN index then a sort; a generic plan picks one for all, and the
        // other then takes seconds at a million messages (see docs/lab-notebook.md).
        let rows = q.build().persistent(false).fetch_all(&self.pool).await?;
        page_of(self.db(), &rows, limit).await
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
}

//! Finding messages on SQLite: lists and search through the FTS5 index, and related records.

use async_trait::async_trait;
use sqlx::{QueryBuilder, Sqlite};

use super::SqliteArchive;
use crate::archive::sql::columns::SUMMARY_COLUMNS;
use crate::archive::sql::filter::{push_conditions, push_dlqs, GroupParts, StatusIn};
use crate::archive::sql::page_of;
use crate::archive::sql::rows::summary_from_row;
use crate::archive::sql::Conn;
use crate::archive::sql::SqlArchive;
use crate::archive::{
    ArchiveError, MessageFilter, MessagePage, MessageSearch, MessageSummary, PageRequest,
    Selection, MAX_PAGE_SIZE,
};

/// ` FROM messages ... WHERE ...`: the messages a list filter selects (`group`: the key of
/// its group, [`GroupParts`]). A text search joins the FTS index, whose rowid is the message id.
pub(super) fn push_filter<'a>(
    q: &mut QueryBuilder<'a, Sqlite>,
    filter: &'a MessageFilter,
    group: Option<&'a GroupParts>,
) {
    push_filter_matching(
        q,
        filter,
        filter.text.as_ref().map(|text| text.fts5()),
        group,
    );
}

/// [`push_filter`] with the FTS5 query for its text (the list's expands prefixes).
fn push_filter_matching<'a>(
    q: &mut QueryBuilder<'a, Sqlite>,
    filter: &'a MessageFilter,
    fts5: Option<String>,
    group: Option<&'a GroupParts>,
) {
    match fts5 {
        Some(fts5) => {
            q.push(" FROM messages JOIN messages_fts ON messages_fts.rowid = messages.id WHERE messages_fts MATCH ")
                .push_bind(fts5);
        }
        None => {
            q.push(" FROM messages WHERE 1 = 1");
        }
    }
    push_conditions(q, filter, StatusIn::Column, group);
}

/// ` AND messages.id IN (...)` or the filter's conditions, after `SELECT ...` (`group`: the
/// key of the filter's group, [`GroupParts::of_selection`]).
pub(super) fn push_selection<'a>(
    q: &mut QueryBuilder<'a, Sqlite>,
    selection: &'a Selection,
    group: Option<&'a GroupParts>,
) {
    match selection {
        Selection::Ids(ids) | Selection::IdsWithin(ids, _) => {
            q.push(" FROM messages WHERE messages.id IN (SELECT value FROM json_each(")
                .push_bind(serde_json::to_string(ids).expect("ids serialize"))
                .push("))");
            if let Selection::IdsWithin(_, dlqs) = selection {
                push_dlqs(q, dlqs);
            }
        }
        Selection::Filter(filter) => push_filter(q, filter, group),
    }
}

#[async_trait]
impl MessageSearch for SqliteArchive {
    async fn count_ids(&self, selection: &Selection) -> Result<u64, ArchiveError> {
        let mut q = QueryBuilder::<Sqlite>::new("SELECT count(*)");
        push_selection(&mut q, selection, None);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    async fn count_messages(&self, filter: &MessageFilter, cap: u64) -> Result<u64, ArchiveError> {
        let mut conn = self.pool.acquire().await?;
        let fts5 = match &filter.text {
            Some(text) => Some(super::terms::list_query(&mut conn, text).await?),
            None => None,
        };
        let group = GroupParts::of(&mut Conn::Sqlite(&mut conn), filter).await?;
        let mut q = QueryBuilder::<Sqlite>::new("SELECT count(*) FROM (SELECT messages.id");
        push_filter_matching(&mut q, filter, fts5, group.as_ref());
        q.push(" LIMIT ").push_bind(cap as i64).push(")");
        let n: i64 = q.build_query_scalar().fetch_one(&mut *conn).await?;
        Ok(n as u64)
    }

    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        let mut conn = self.pool.acquire().await?;
        let fts5 = match &filter.text {
            Some(text) => Some(super::terms::list_query(&mut conn, text).await?),
            None => None,
        };
        let group = GroupParts::of(&mut Conn::Sqlite(&mut conn), filter).await?;
        let mut q = QueryBuilder::<Sqlite>::new(format!("SELECT {SUMMARY_COLUMNS}"));
        push_filter_matching(&mut q, filter, fts5, group.as_ref());
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
        let rows = q.build().fetch_all(&mut *conn).await?;
        drop(conn);
        page_of(self.db(), &rows, limit).await
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
}

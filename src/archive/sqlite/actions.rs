//! Acting on a selection at once on SQLite: dismissing messages with a note, and purging
//! them for good with everything derived from them.

use async_trait::async_trait;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use super::messages::push_selection;
use super::SqliteArchive;
use crate::archive::audit_text::{action_summary, single_message};
use crate::archive::sql::columns::{HELD_BY_UNFINISHED_JOB, OF_TOTAL};
use crate::archive::sql::filter::GroupParts;
use crate::archive::sql::{audit, lifecycle, recount, Conn};
use crate::archive::{Actions, Actor, ArchiveError, Selection};

/// The selected messages' contribution to a running total, subtracted: `key` groups the
/// messages as `table` keys its rows (on `on`); `open`: the table keeps `open_messages` too
/// (and `bytes`, or the failure groups' `settling_messages`).
async fn subtract_totals(
    conn: &mut SqliteConnection,
    table: &str,
    key: &str,
    on: &str,
    open: bool,
) -> Result<(), sqlx::Error> {
    let open_too = match (open, table) {
        (true, "queue_reason_counts") => {
            format!(", open_messages = {table}.open_messages - d.o, bytes = {table}.bytes - d.b")
        }
        (true, "failure_groups") => format!(
            ", open_messages = {table}.open_messages - d.o, \
             settling_messages = {table}.settling_messages - d.s"
        ),
        (true, _) => format!(", open_messages = {table}.open_messages - d.o"),
        (false, _) => String::new(),
    };
    let groups = key.split(" AS ").count() - 1;
    let by: Vec<String> = (1..=groups).map(|i| i.to_string()).collect();
    sqlx::query(&format!(
        "UPDATE {table} SET messages = {table}.messages - d.n{open_too} FROM \
         (SELECT {key}, count(*) AS n, sum(status IN ({})) AS o, sum(status = 'replayed') AS s, \
          sum(body_size) AS b FROM messages \
          WHERE id IN (SELECT id FROM purge_ids) GROUP BY {}) AS d \
         WHERE {on}",
        lifecycle::open_list(),
        by.join(", ")
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(&format!("DELETE FROM {table} WHERE messages <= 0"))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Deletes the messages in the temporary table `purge_ids` for good, with everything derived
/// from them — bodies, search entries, replay records, totals — inside the transaction `conn`
/// is in; how many, and their body bytes. The caller leaves out what an unfinished job holds.
pub(super) async fn delete_purge_ids(
    conn: &mut SqliteConnection,
) -> Result<(u64, i64), sqlx::Error> {
    let (purged, bytes): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(body_size), 0) FROM messages WHERE id IN (SELECT id FROM purge_ids)",
    )
    .fetch_one(&mut *conn)
    .await?;
    if purged == 0 {
        return Ok((0, 0));
    }
    // The totals kept at ingest lose what goes.
    subtract_totals(
        conn,
        "queue_reason_counts",
        "queue AS q, coalesce(first_death_reason, 'none') AS r",
        "queue_reason_counts.queue = d.q AND queue_reason_counts.reason = d.r",
        true,
    )
    .await?;
    subtract_totals(
        conn,
        "hourly_counts",
        "queue AS q, archived_at / 3600000 AS h",
        "hourly_counts.queue = d.q AND hourly_counts.hour = d.h",
        false,
    )
    .await?;
    subtract_totals(
        conn,
        "failure_groups",
        "queue AS d, coalesce(first_death_queue, failed_queue, queue) AS q, coalesce(first_death_reason, 'none') AS r, \
         coalesce(cause, error, '') AS c, coalesce(message_type, '') AS t",
        "failure_groups.dlq = d.d AND failure_groups.queue = d.q AND failure_groups.reason = d.r \
         AND failure_groups.cause = d.c AND failure_groups.message_type = d.t",
        true,
    )
    .await?;
    let jobs: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT job_id FROM replay_job_items WHERE message_id IN (SELECT id FROM purge_ids)",
    )
    .fetch_all(&mut *conn)
    .await?;
    for statement in [
        "DELETE FROM messages_fts WHERE rowid IN (SELECT id FROM purge_ids)",
        "DELETE FROM message_fields WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM message_field_keys WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM index_pending WHERE id IN (SELECT id FROM purge_ids)",
        "DELETE FROM message_body_chunks WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM message_bodies WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM replays WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM replay_job_items WHERE message_id IN (SELECT id FROM purge_ids)",
        "DELETE FROM messages WHERE id IN (SELECT id FROM purge_ids)",
    ] {
        sqlx::query(statement).execute(&mut *conn).await?;
    }
    for job in jobs {
        recount(&mut Conn::Sqlite(&mut *conn), job).await?;
    }
    // The oldest and newest of what is left: the first and last in archive order, each a walk
    // of the (queue, id) index that stops at the first row of the reason — not a scan of the
    // queue, which a retention pass would repeat every batch.
    sqlx::query(&format!(
        "UPDATE queue_reason_counts SET \
         oldest_at = coalesce((SELECT archived_at FROM messages m {OF_TOTAL} ORDER BY m.id LIMIT 1), oldest_at), \
         newest_at = coalesce((SELECT archived_at FROM messages m {OF_TOTAL} ORDER BY m.id DESC LIMIT 1), newest_at)",
    ))
    .execute(&mut *conn)
    .await?;
    Ok((purged as u64, bytes))
}

/// An empty temporary table `purge_ids`, for the ids about to be deleted.
pub(super) async fn clear_purge_ids(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY)")
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM purge_ids")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

#[async_trait]
impl Actions for SqliteArchive {
    /// Marks the selected messages resolved without replaying, with a note; returns how many.
    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let group = GroupParts::of_selection(&mut Conn::from(&mut tx), selection).await?;
        let mut q = QueryBuilder::<Sqlite>::new("SELECT messages.id");
        push_selection(&mut q, selection, group.as_ref());
        let ids: Vec<i64> = q.build_query_scalar().fetch_all(&mut *tx).await?;
        let dismissed = lifecycle::dismiss(&mut Conn::from(&mut tx), &ids, note).await?;
        let only = single_message(selection);
        let summary = action_summary("dismissed", dismissed, selection_text, note);
        audit(&mut tx, actor, "dismiss", None, only, &summary).await?;
        tx.commit().await?;
        Ok(dismissed)
    }

    /// Deletes the selected messages from the archive for good — bodies, search entries,
    /// replay records, totals — except those an unfinished job still holds; returns how
    /// many. Audited with the note.
    async fn purge(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        clear_purge_ids(&mut tx).await?;
        let group = GroupParts::of_selection(&mut Conn::from(&mut tx), selection).await?;
        let mut q = QueryBuilder::<Sqlite>::new("INSERT INTO purge_ids SELECT messages.id");
        push_selection(&mut q, selection, group.as_ref());
        q.push(" AND NOT ").push(HELD_BY_UNFINISHED_JOB);
        q.build().execute(&mut *tx).await?;
        let (purged, _) = delete_purge_ids(&mut tx).await?;
        let summary = action_summary("purged", purged, selection_text, note);
        audit(&mut tx, actor, "purge", None, None, &summary).await?;
        tx.commit().await?;
        Ok(purged)
    }
}

//! Acting on a selection at once on SQLite: dismissing messages with a note, and purging
//! them for good with everything derived from them.

use async_trait::async_trait;
use sqlx::{QueryBuilder, Sqlite, Transaction};

use super::messages::push_selection;
use super::SqliteArchive;
use crate::archive::audit_text::{action_summary, single_message};
use crate::archive::sql::columns::HELD_BY_UNFINISHED_JOB;
use crate::archive::sql::{audit, lifecycle, recount, Conn};
use crate::archive::{Actions, Actor, ArchiveError, Selection};

/// The selected messages' contribution to a running total, subtracted: `key` groups the
/// messages as `table` keys its rows (on `on`); `open`: the table keeps `open_messages` too.
async fn subtract_totals(
    tx: &mut Transaction<'_, Sqlite>,
    table: &str,
    key: &str,
    on: &str,
    open: bool,
) -> Result<(), sqlx::Error> {
    let open_too = match open {
        true => format!(", open_messages = {table}.open_messages - d.o"),
        false => String::new(),
    };
    let groups = key.split(" AS ").count() - 1;
    let by: Vec<String> = (1..=groups).map(|i| i.to_string()).collect();
    sqlx::query(&format!(
        "UPDATE {table} SET messages = {table}.messages - d.n{open_too} FROM \
         (SELECT {key}, count(*) AS n, sum(status IN ({})) AS o FROM messages \
          WHERE id IN (SELECT id FROM purge_ids) GROUP BY {}) AS d \
         WHERE {on}",
        lifecycle::open_list(),
        by.join(", ")
    ))
    .execute(&mut **tx)
    .await?;
    sqlx::query(&format!("DELETE FROM {table} WHERE messages <= 0"))
        .execute(&mut **tx)
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
        let mut q = QueryBuilder::<Sqlite>::new("SELECT messages.id");
        push_selection(&mut q, selection);
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
        sqlx::query("CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY)")
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM purge_ids")
            .execute(&mut *tx)
            .await?;
        let mut q = QueryBuilder::<Sqlite>::new("INSERT INTO purge_ids SELECT messages.id");
        push_selection(&mut q, selection);
        q.push(" AND NOT ").push(HELD_BY_UNFINISHED_JOB);
        let purged = q.build().execute(&mut *tx).await?.rows_affected();

        // The totals kept at ingest lose what goes.
        subtract_totals(
            &mut tx,
            "queue_reason_counts",
            "queue AS q, coalesce(first_death_reason, 'none') AS r",
            "queue_reason_counts.queue = d.q AND queue_reason_counts.reason = d.r",
            true,
        )
        .await?;
        subtract_totals(
            &mut tx,
            "hourly_counts",
            "queue AS q, archived_at / 3600000 AS h",
            "hourly_counts.queue = d.q AND hourly_counts.hour = d.h",
            false,
        )
        .await?;
        subtract_totals(
            &mut tx,
            "failure_groups",
            "coalesce(first_death_queue, queue) AS q, coalesce(first_death_reason, 'none') AS r, \
             coalesce(error, '') AS e",
            "failure_groups.queue = d.q AND failure_groups.reason = d.r AND failure_groups.error = d.e",
            true,
        )
        .await?;
        let jobs: Vec<i64> = sqlx::query_scalar(
            "SELECT DISTINCT job_id FROM replay_job_items WHERE message_id IN (SELECT id FROM purge_ids)",
        )
        .fetch_all(&mut *tx)
        .await?;
        for statement in [
            "DELETE FROM messages_fts WHERE rowid IN (SELECT id FROM purge_ids)",
            "DELETE FROM message_fields WHERE message_id IN (SELECT id FROM purge_ids)",
            "DELETE FROM message_bodies WHERE message_id IN (SELECT id FROM purge_ids)",
            "DELETE FROM replays WHERE message_id IN (SELECT id FROM purge_ids)",
            "DELETE FROM replay_job_items WHERE message_id IN (SELECT id FROM purge_ids)",
            "DELETE FROM messages WHERE id IN (SELECT id FROM purge_ids)",
        ] {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        for job in jobs {
            recount(&mut Conn::from(&mut tx), job).await?;
        }
        // The oldest and newest of what is left, where that changed.
        sqlx::query(
            "UPDATE queue_reason_counts SET \
             oldest_at = coalesce((SELECT min(archived_at) FROM messages m WHERE m.queue = queue_reason_counts.queue \
                 AND coalesce(m.first_death_reason, 'none') = queue_reason_counts.reason), oldest_at), \
             newest_at = coalesce((SELECT max(archived_at) FROM messages m WHERE m.queue = queue_reason_counts.queue \
                 AND coalesce(m.first_death_reason, 'none') = queue_reason_counts.reason), newest_at) \
             WHERE ? > 0",
        )
        .bind(purged as i64)
        .execute(&mut *tx)
        .await?;
        let summary = action_summary("purged", purged, selection_text, note);
        audit(&mut tx, actor, "purge", None, None, &summary).await?;
        tx.commit().await?;
        Ok(purged)
    }
}

//! Acting on a selection at once on PostgreSQL: dismissing messages with a note, and purging
//! them for good with everything derived from them (their search data is a column of the
//! message itself). Both lock the selected messages in id order, so they never deadlock on
//! each other; totals are locked in the key order ingest writes them in.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Postgres, QueryBuilder, Row};

use super::messages::push_selection;
use super::PostgresArchive;
use crate::archive::audit_text::{action_summary, single_message};
use crate::archive::sql::columns::{HELD_BY_UNFINISHED_JOB, OF_TOTAL};
use crate::archive::sql::{audit, lifecycle, recount, Conn};
use crate::archive::{Actions, Actor, ArchiveError, Selection};

/// The purged messages' contribution to a running total, subtracted: `key` is the value of
/// `columns` (the table's key) for a message, `order` the order ingest takes the rows in.
/// `open`: the table keeps `open_messages` (and `queue_reason_counts` `bytes`, the failure
/// groups `settling_messages`) too. Returns
/// the keys of the rows it changed (before those left empty are deleted).
async fn subtract_totals(
    tx: &mut PgConnection,
    ids: &[i64],
    table: &str,
    columns: &[&str],
    key: &str,
    order: &str,
    open: bool,
) -> Result<Vec<PgRow>, sqlx::Error> {
    let list = columns.join(", ");
    let rows = sqlx::query(&format!(
        "SELECT {list} FROM {table} WHERE ({list}) IN (SELECT {key} FROM messages WHERE id = ANY($1)) \
         ORDER BY {order} FOR UPDATE"
    ))
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    let positions: Vec<String> = (1..=columns.len()).map(|i| i.to_string()).collect();
    let on: Vec<String> = columns
        .iter()
        .map(|c| format!("{table}.{c} = d.{c}"))
        .collect();
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
    sqlx::query(&format!(
        "UPDATE {table} SET messages = {table}.messages - d.n{open_too} FROM \
         (SELECT {key}, count(*), count(*) FILTER (WHERE id IN \
          (SELECT id FROM message_status WHERE id = ANY($1) AND status IN ({}))), \
          count(*) FILTER (WHERE id IN \
          (SELECT id FROM message_status WHERE id = ANY($1) AND status = 'replayed')), sum(body_size) \
          FROM messages WHERE id = ANY($1) GROUP BY {}) AS d ({list}, n, o, s, b) \
         WHERE {}",
        lifecycle::open_list(),
        positions.join(", "),
        on.join(" AND "),
    ))
    .bind(ids)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!("DELETE FROM {table} WHERE messages <= 0"))
        .execute(&mut *tx)
        .await?;
    Ok(rows)
}

/// Deletes these messages (those no unfinished job holds, once locked) for good, with
/// everything derived from them — bodies, search data, replay records, totals — inside the
/// transaction `tx` is in; how many, and their body bytes. The messages are locked in id
/// order, as every writer of them locks them, then the jobs that hold any.
pub(super) async fn delete_messages(
    tx: &mut PgConnection,
    candidates: &[i64],
) -> Result<(u64, i64), sqlx::Error> {
    // The selected messages no unfinished job holds, locked: from now on a job freezing
    // one of them waits for this transaction (it takes `FOR KEY SHARE` of each row).
    let locked: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM messages WHERE id = ANY($1) AND NOT {HELD_BY_UNFINISHED_JOB} \
         ORDER BY id FOR UPDATE OF messages"
    ))
    .bind(candidates)
    .fetch_all(&mut *tx)
    .await?;
    // The jobs that hold them are locked too, so none is started meanwhile; then what a job
    // took or started holding while we waited for those locks is left alone after all.
    sqlx::query(
        "SELECT id FROM replay_jobs WHERE id IN \
         (SELECT job_id FROM replay_job_items WHERE message_id = ANY($1)) ORDER BY id FOR UPDATE",
    )
    .bind(&locked)
    .execute(&mut *tx)
    .await?;
    let ids: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM messages WHERE id = ANY($1) AND NOT {HELD_BY_UNFINISHED_JOB} ORDER BY id"
    ))
    .bind(&locked)
    .fetch_all(&mut *tx)
    .await?;
    let purged = ids.len() as u64;
    let bytes: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(body_size), 0)::bigint FROM messages WHERE id = ANY($1)",
    )
    .bind(&ids)
    .fetch_one(&mut *tx)
    .await?;

    if !ids.is_empty() {
        // The totals kept at ingest lose what goes.
        let counted = subtract_totals(
            tx,
            &ids,
            "queue_reason_counts",
            &["queue", "reason"],
            "queue, coalesce(first_death_reason, 'none')",
            "queue COLLATE \"C\", reason COLLATE \"C\"",
            true,
        )
        .await?;
        subtract_totals(
            tx,
            &ids,
            "hourly_counts",
            &["queue", "hour"],
            "queue, archived_at / 3600000",
            "queue COLLATE \"C\", hour",
            false,
        )
        .await?;
        subtract_totals(
            tx,
            &ids,
            "failure_groups",
            &["dlq", "queue", "reason", "cause", "message_type"],
            "queue, coalesce(first_death_queue, failed_queue, queue), coalesce(first_death_reason, 'none'), \
             coalesce(cause, error, ''), coalesce(message_type, '')",
            "dlq COLLATE \"C\", queue COLLATE \"C\", reason COLLATE \"C\", cause COLLATE \"C\", \
             message_type COLLATE \"C\"",
            true,
        )
        .await?;
        let jobs: Vec<i64> = sqlx::query_scalar(
            "SELECT DISTINCT job_id FROM replay_job_items WHERE message_id = ANY($1) ORDER BY job_id",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        for statement in [
            "DELETE FROM message_fields WHERE message_id = ANY($1)",
            "DELETE FROM message_field_keys WHERE message_id = ANY($1)",
            "DELETE FROM index_pending WHERE id = ANY($1)",
            "DELETE FROM message_search WHERE id = ANY($1)",
            "DELETE FROM message_body_chunks WHERE message_id = ANY($1)",
            "DELETE FROM message_bodies WHERE message_id = ANY($1)",
            "DELETE FROM replays WHERE message_id = ANY($1)",
            "DELETE FROM replay_job_items WHERE message_id = ANY($1)",
            "DELETE FROM message_status WHERE id = ANY($1)",
            "DELETE FROM messages WHERE id = ANY($1)",
        ] {
            sqlx::query(statement).bind(&ids).execute(&mut *tx).await?;
        }
        for job in jobs {
            recount(&mut Conn::Postgres(&mut *tx), job).await?;
        }
        // The oldest and newest of what is left, where that changed.
        let queues: Vec<String> = counted
            .iter()
            .map(|r| r.try_get("queue"))
            .collect::<Result<_, _>>()?;
        let reasons: Vec<String> = counted
            .iter()
            .map(|r| r.try_get("reason"))
            .collect::<Result<_, _>>()?;
        sqlx::query(&format!(
            "UPDATE queue_reason_counts SET \
             oldest_at = coalesce((SELECT archived_at FROM messages m {OF_TOTAL} ORDER BY m.id LIMIT 1), \
                 queue_reason_counts.oldest_at), \
             newest_at = coalesce((SELECT archived_at FROM messages m {OF_TOTAL} ORDER BY m.id DESC LIMIT 1), \
                 queue_reason_counts.newest_at) \
             FROM UNNEST($1::text[], $2::text[]) AS k (queue, reason) \
             WHERE queue_reason_counts.queue = k.queue AND queue_reason_counts.reason = k.reason",
        ))
        .bind(&queues)
        .bind(&reasons)
        .execute(&mut *tx)
        .await?;
    }
    Ok((purged, bytes))
}

#[async_trait]
impl Actions for PostgresArchive {
    /// Marks the selected messages resolved without replaying, with a note; returns how many.
    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        let mut tx = self.pool.begin().await?;
        Conn::from(&mut tx).lift_bounds().await?;
        // The selected messages, locked in id order; then those not dismissed yet. A message
        // dismissed meanwhile by someone else is read after their commit (a statement of its
        // own), and left alone.
        let mut q = QueryBuilder::<Postgres>::new("SELECT messages.id");
        push_selection(&mut q, selection);
        q.push(" ORDER BY messages.id FOR UPDATE OF messages");
        let locked: Vec<i64> = q.build_query_scalar().fetch_all(&mut *tx).await?;
        let dismissed = lifecycle::dismiss(&mut Conn::from(&mut tx), &locked, note).await?;
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
        let mut tx = self.pool.begin().await?;
        Conn::from(&mut tx).lift_bounds().await?;
        let mut q = QueryBuilder::<Postgres>::new("SELECT messages.id");
        push_selection(&mut q, selection);
        q.push(" AND NOT ").push(HELD_BY_UNFINISHED_JOB);
        let selected: Vec<i64> = q.build_query_scalar().fetch_all(&mut *tx).await?;
        let (purged, _) = delete_messages(&mut tx, &selected).await?;
        let summary = action_summary("purged", purged, selection_text, note);
        audit(&mut tx, actor, "purge", None, None, &summary).await?;
        tx.commit().await?;
        Ok(purged)
    }
}

//! Retention's side of the archive, the same on both backends: runs recorded in
//! `retention_runs` (one at a time: PostgreSQL's instances take turns through a table lock),
//! what is due read in id order, deleted in small transactions through the backend's purge
//! ([`SqlArchive::delete_messages`]), each counted in its run in the same transaction, and
//! the run audited once when it ends — or, if it was interrupted, by the next run.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::columns::HELD_BY_UNFINISHED_JOB;
use super::{args, audit, from_millis, millis, now, ArchiveRow, Conn, Dialect, SqlArchive};
use crate::archive::audit_text::retention_summary;
use crate::archive::{
    Actor, ArchiveError, MessageStatus, QueueTotals, Retention, RetentionCount, RetentionLog,
    RetentionRun, Scan, Space,
};

/// `'dismissed', 'settled', 'died_again'`: the resolved statuses, for `IN (...)`, in the
/// order SQLite's partial index `messages_resolved` writes them.
pub fn resolved_list() -> String {
    MessageStatus::ALL
        .into_iter()
        .filter(|s| !s.is_open())
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Who audits a retention run.
fn actor() -> Actor {
    Actor::system("retention")
}

async fn run_of(conn: &mut Conn<'_>, id: i64) -> Result<Option<RetentionRun>, sqlx::Error> {
    let Some(row) = conn
        .fetch_optional(
            "SELECT id, owner, started_at, finished_at, next_at, deleted FROM retention_runs \
             WHERE id = $1",
            args![id],
        )
        .await?
    else {
        return Ok(None);
    };
    let counts = conn
        .fetch_all(
            &format!(
                "SELECT queue, rule, messages, bytes FROM retention_run_counts WHERE run_id = $1 \
                 ORDER BY {}, {}",
                conn.dialect().byte_order("queue"),
                conn.dialect().byte_order("rule")
            ),
            args![id],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(RetentionCount {
                queue: r.column("queue")?,
                rule: r.column("rule")?,
                messages: r.column("messages")?,
                bytes: r.column("bytes")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some(RetentionRun {
        id: row.column("id")?,
        owner: row.column("owner")?,
        started_at: from_millis(row.column("started_at")?),
        finished_at: row.column::<Option<i64>>("finished_at")?.map(from_millis),
        next_at: row.column::<Option<i64>>("next_at")?.map(from_millis),
        deleted: row.column("deleted")?,
        counts,
    }))
}

/// Ends run `id`, and audits what it deleted (if anything), in the transaction `conn` is in.
async fn end_run(
    conn: &mut Conn<'_>,
    id: i64,
    next_at: Option<i64>,
    interrupted: bool,
) -> Result<(), sqlx::Error> {
    conn.execute(
        "UPDATE retention_runs SET finished_at = $1, next_at = $2 WHERE id = $3",
        args![now(), next_at, id],
    )
    .await?;
    if let Some(run) = run_of(conn, id).await? {
        if run.deleted > 0 {
            let summary = retention_summary(run.deleted, &run.counts, interrupted);
            audit(&mut *conn, &actor(), "retention", None, None, &summary).await?;
        }
    }
    Ok(())
}

#[async_trait]
impl<T: SqlArchive> Retention for T {
    async fn queue_totals(&self) -> Result<Vec<QueueTotals>, ArchiveError> {
        let d = self.db().dialect();
        let rows = self
            .db()
            .fetch_all(
                &format!(
                    "SELECT queue, CAST(sum(messages) AS BIGINT) AS messages, CAST(sum(bytes) AS BIGINT) AS bytes, \
                     min(oldest_at) AS oldest_at FROM queue_reason_counts GROUP BY queue ORDER BY {}",
                    d.byte_order("queue")
                ),
                args![],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(QueueTotals {
                    queue: r.column("queue")?,
                    messages: r.column::<Option<i64>>("messages")?.unwrap_or(0),
                    bytes: r.column::<Option<i64>>("bytes")?.unwrap_or(0),
                    oldest_at: r.column("oldest_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(ArchiveError::from)
    }

    async fn retention_scan(
        &self,
        queue: &str,
        scan: Scan,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, i64)>, ArchiveError> {
        let d = self.db().dialect();
        let held = HELD_BY_UNFINISHED_JOB;
        let limit = i64::from(limit);
        let rows = match scan {
            // Up to the first message archived since `before`: a walk of the (queue, id)
            // index that ends where the young messages begin.
            Scan::ArchivedBefore(before) => {
                self.db()
                    .fetch_all(
                        &format!(
                            "SELECT id, body_size FROM messages WHERE queue = $1 AND id > $2 \
                             AND id < coalesce((SELECT id FROM messages WHERE archived_at >= $3 \
                                 ORDER BY archived_at LIMIT 1), 9223372036854775807) \
                             AND archived_at < $3 AND NOT {held} ORDER BY id LIMIT $4"
                        ),
                        args![queue, after, before, limit],
                    )
                    .await?
            }
            Scan::ResolvedBefore(before) => {
                let sql = match d {
                    Dialect::Sqlite => format!(
                        "SELECT id, body_size FROM messages WHERE queue = $1 \
                         AND status IN ({}) AND id > $2 AND status_at < $3 AND NOT {held} \
                         ORDER BY id LIMIT $4",
                        resolved_list()
                    ),
                    Dialect::Postgres => format!(
                        "SELECT messages.id, messages.body_size FROM messages \
                         JOIN message_status s ON s.id = messages.id \
                         WHERE messages.queue = $1 AND s.status IN ({}) AND messages.id > $2 \
                         AND s.status_at < $3 AND NOT {held} ORDER BY messages.id LIMIT $4",
                        resolved_list()
                    ),
                };
                self.db()
                    .fetch_all(&sql, args![queue, after, before, limit])
                    .await?
            }
            Scan::Oldest => {
                self.db()
                    .fetch_all(
                        &format!(
                            "SELECT id, body_size FROM messages WHERE queue = $1 AND id > $2 \
                             AND NOT {held} ORDER BY id LIMIT $3"
                        ),
                        args![queue, after, limit],
                    )
                    .await?
            }
        };
        rows.iter()
            .map(|r| Ok((r.column("id")?, r.column("body_size")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(ArchiveError::from)
    }

    async fn begin_retention(
        &self,
        owner: &str,
        stale_ms: i64,
    ) -> Result<Option<i64>, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        if conn.dialect() == Dialect::Postgres {
            // Instances starting a run take turns (SQLite's BEGIN IMMEDIATE already does).
            conn.execute(
                "LOCK TABLE retention_runs IN SHARE ROW EXCLUSIVE MODE",
                args![],
            )
            .await?;
        }
        let unfinished = conn
            .fetch_all(
                "SELECT id, alive_at FROM retention_runs WHERE finished_at IS NULL ORDER BY id",
                args![],
            )
            .await?;
        let now = now();
        let mut interrupted = Vec::new();
        for row in &unfinished {
            if row.column::<i64>("alive_at")? >= now - stale_ms {
                return Ok(None);
            }
            interrupted.push(row.column::<i64>("id")?);
        }
        for id in interrupted {
            end_run(&mut conn, id, None, true).await?;
        }
        let id: i64 = conn
            .fetch_one(
                "INSERT INTO retention_runs (owner, started_at, alive_at) VALUES ($1, $2, $2) \
                 RETURNING id",
                args![owner, now],
            )
            .await?
            .column("id")?;
        tx.commit().await?;
        Ok(Some(id))
    }

    async fn expire(
        &self,
        run: i64,
        queue: &str,
        rule: &str,
        ids: &[i64],
    ) -> Result<u64, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        // The run first: one another instance has ended meanwhile (it thought this one gone)
        // deletes nothing more, so that everything deleted is in an audited run.
        let ours = conn
            .execute(
                "UPDATE retention_runs SET alive_at = $1 WHERE id = $2 AND finished_at IS NULL",
                args![now(), run],
            )
            .await?;
        if ours == 0 {
            return Err(ArchiveError::Conflict(format!(
                "retention run {run} was ended by another instance"
            )));
        }
        let (deleted, bytes) = self.delete_messages(&mut conn, ids).await?;
        if deleted > 0 {
            conn.execute(
                "UPDATE retention_runs SET deleted = deleted + $1 WHERE id = $2",
                args![deleted as i64, run],
            )
            .await?;
            conn.execute(
                "INSERT INTO retention_run_counts (run_id, queue, rule, messages, bytes) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, queue, rule) DO UPDATE SET \
                 messages = retention_run_counts.messages + excluded.messages, \
                 bytes = retention_run_counts.bytes + excluded.bytes",
                args![run, queue, rule, deleted as i64, bytes],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }

    async fn finish_retention(
        &self,
        run: i64,
        next_at: OffsetDateTime,
    ) -> Result<RetentionRun, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        end_run(&mut conn, run, Some(millis(next_at)), false).await?;
        let record = run_of(&mut conn, run)
            .await?
            .ok_or_else(|| ArchiveError::Conflict(format!("no retention run {run}")))?;
        tx.commit().await?;
        Ok(record)
    }
}

#[async_trait]
impl<T: SqlArchive> Space for T {
    async fn reclaim_space(&self) -> Result<u64, ArchiveError> {
        let db = self.db();
        if db.dialect() != Dialect::Sqlite {
            return Ok(0);
        }
        let mode = db.fetch_optional("PRAGMA auto_vacuum", args![]).await?;
        // 2: incremental (archives created before retention are 0: VACUUM converts them).
        if mode.map(|r| r.column::<i64>("auto_vacuum")).transpose()? != Some(2) {
            return Ok(0);
        }
        let free = |row: Option<super::Row>| -> Result<i64, sqlx::Error> {
            row.map(|r| r.column::<i64>("freelist_count"))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let before = free(db.fetch_optional("PRAGMA freelist_count", args![]).await?)?;
        let mut left = before;
        // Small steps, each its own short write, so that ingest waits for none for long.
        while left > 0 {
            db.execute("PRAGMA incremental_vacuum(512)", args![])
                .await?;
            let now_free = free(db.fetch_optional("PRAGMA freelist_count", args![]).await?)?;
            if now_free >= left {
                break;
            }
            left = now_free;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok((before - left).max(0) as u64)
    }
}

#[async_trait]
impl<T: SqlArchive> RetentionLog for T {
    async fn last_retention(&self) -> Result<Option<RetentionRun>, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let last = conn
            .fetch_optional(
                "SELECT id FROM retention_runs WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1",
                args![],
            )
            .await?;
        let run = match last {
            Some(row) => run_of(&mut conn, row.column("id")?).await?,
            None => None,
        };
        tx.commit().await?;
        Ok(run)
    }
}

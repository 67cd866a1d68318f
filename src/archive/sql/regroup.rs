//! Regrouping messages archived before failures were grouped by cause, one algorithm for both
//! backends: the cursor row `regroup` (made by the migration that keyed groups on causes) walks
//! the messages up to the newest one archived then. Each batch's failure is derived again
//! from the stored headers (and the stored error, where the headers hold none: it came from
//! the body or from a header no longer read), as ingest derives it; each message is updated
//! and its counts moved from the group it counted in to its cause group, in one transaction
//! — so the open counts of every group and DLQ stay exact at every batch boundary.

use std::collections::BTreeMap;

use super::lifecycle::{group_of, GroupKeyOwned, GROUP_COLUMNS};
use super::{args, corrupt, ArchiveRow, Conn, Dialect, Pool};
use crate::amqp::headers::{MessageProperties, Table};
use crate::archive::{failure, ArchiveError, Failure, IngestRules, MessageStatus, ReindexProgress};

/// What a batch moves into (positive) or out of (negative) one group.
#[derive(Debug, Default)]
struct Move {
    messages: i64,
    open: i64,
    settling: i64,
    first: Option<i64>,
    last: Option<i64>,
    /// What a group made by the move says of itself.
    error_type: Option<String>,
    example: Option<String>,
}

/// Regroups the next `limit` messages of the cursor; `None` once there is no cursor.
pub async fn batch(
    db: Pool<'_>,
    rules: &IngestRules,
    limit: u32,
) -> Result<Option<ReindexProgress>, ArchiveError> {
    let Some(cursor) = db
        .fetch_optional("SELECT next_id, last_id FROM regroup", args![])
        .await?
    else {
        return Ok(None);
    };
    let (next_id, last_id): (i64, i64) = (cursor.column("next_id")?, cursor.column("last_id")?);
    if next_id > last_id {
        db.execute("DELETE FROM regroup", args![]).await?;
        return Ok(Some(ReindexProgress {
            done_through: last_id,
            last_id,
            rewritten: 0,
        }));
    }
    let rows = db
        .fetch_all(
            "SELECT id, properties, headers, error FROM messages WHERE id >= $1 AND id <= $2 \
             ORDER BY id LIMIT $3",
            args![next_id, last_id, i64::from(limit.max(1))],
        )
        .await?;
    let done_through = match rows.last() {
        Some(row) => row.column("id")?,
        None => last_id,
    };
    // Derived outside the transaction: it is the slow part, and SQLite's writers wait.
    let mut derived: BTreeMap<i64, Failure> = BTreeMap::new();
    for row in &rows {
        let id: i64 = row.column("id")?;
        let properties: String = row.column("properties")?;
        let properties: MessageProperties =
            serde_json::from_str(&properties).map_err(corrupt(id))?;
        let headers: Option<Table> = row
            .column::<Option<String>>("headers")?
            .map(|h| serde_json::from_str(&h))
            .transpose()
            .map_err(corrupt(id))?;
        let stored: Option<String> = row.column("error")?;
        derived.insert(
            id,
            failure(
                headers.as_ref(),
                &properties,
                &rules.error_headers,
                stored.as_deref(),
            ),
        );
    }
    let ids: Vec<i64> = derived.keys().copied().collect();
    let mut tx = db.begin().await?;
    let mut conn = tx.conn();
    let rewritten = regroup(&mut conn, &ids, &derived).await?;
    conn.execute(
        "UPDATE regroup SET next_id = $1 WHERE next_id < $1",
        args![done_through + 1],
    )
    .await?;
    tx.commit().await?;
    Ok(Some(ReindexProgress {
        done_through,
        last_id,
        rewritten,
    }))
}

/// Gives the messages `ids` their `derived` failure and moves each one's counts from the group
/// it counts in now to the one it belongs in, inside the transaction `conn` is in; how many it
/// moved. On PostgreSQL the messages are locked in id order first, as status changes and
/// purges lock them, and read again once locked; the groups are then changed in key order, as
/// ingest writes them.
async fn regroup(
    conn: &mut Conn<'_>,
    ids: &[i64],
    derived: &BTreeMap<i64, Failure>,
) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let d = conn.dialect();
    if d == Dialect::Postgres {
        conn.execute(
            "SELECT id FROM messages WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
            args![ids],
        )
        .await?;
    }
    let rows = conn
        .fetch_all(
            &format!(
                "SELECT m.id, s.status, m.archived_at, {GROUP_COLUMNS} FROM messages m \
                 JOIN {} s ON s.id = m.id WHERE {}",
                d.status_table(),
                d.in_ids("m.id", 1)
            ),
            args![ids],
        )
        .await?;
    let mut moves: BTreeMap<GroupKeyOwned, Move> = BTreeMap::new();
    let mut changed: Vec<(i64, &Failure)> = Vec::new();
    for row in &rows {
        let id: i64 = row.column("id")?;
        let Some(failure) = derived.get(&id) else {
            continue;
        };
        let status: String = row.column("status")?;
        let status = MessageStatus::parse(&status);
        let open = i64::from(status.is_some_and(MessageStatus::is_open));
        let settling = i64::from(status == Some(MessageStatus::Replayed));
        let at: i64 = row.column("archived_at")?;
        let from = group_of(row)?;
        let to: GroupKeyOwned = (
            from.0.clone(),
            from.1.clone(),
            from.2.clone(),
            failure.cause.clone(),
            failure.message_type.clone().unwrap_or_default(),
        );
        changed.push((id, failure));
        if from == to {
            continue;
        }
        let out = moves.entry(from).or_default();
        out.messages -= 1;
        out.open -= open;
        out.settling -= settling;
        let into = moves.entry(to).or_default();
        into.messages += 1;
        into.open += open;
        into.settling += settling;
        into.first = Some(into.first.map_or(at, |f| f.min(at)));
        into.last = Some(into.last.map_or(at, |l| l.max(at)));
        if into.example.is_none() {
            into.error_type = failure.error_type.clone();
            into.example = failure.error.clone();
        }
    }
    rewrite(conn, &changed).await?;
    for (key, m) in &moves {
        let (dlq, queue, reason, cause, message_type) = key;
        if m.messages > 0 {
            conn.execute(
                &format!(
                    "INSERT INTO failure_groups (dlq, queue, reason, cause, message_type, error_type, \
                     example, messages, open_messages, settling_messages, first_seen, last_seen) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (dlq, queue, reason, cause, message_type) DO UPDATE SET \
                     messages = failure_groups.messages + excluded.messages, \
                     open_messages = failure_groups.open_messages + excluded.open_messages, \
                     settling_messages = failure_groups.settling_messages + excluded.settling_messages, \
                     first_seen = {}, last_seen = {}",
                    d.least("failure_groups.first_seen", "excluded.first_seen"),
                    d.greatest("failure_groups.last_seen", "excluded.last_seen"),
                ),
                args![
                    dlq,
                    queue,
                    reason,
                    cause,
                    message_type,
                    m.error_type.as_deref(),
                    m.example.as_deref(),
                    m.messages,
                    m.open,
                    m.settling,
                    m.first,
                    m.last
                ],
            )
            .await?;
        } else {
            conn.execute(
                "UPDATE failure_groups SET messages = messages + $1, \
                 open_messages = open_messages + $2, settling_messages = settling_messages + $3 \
                 WHERE dlq = $4 AND queue = $5 AND reason = $6 AND cause = $7 AND message_type = $8",
                args![m.messages, m.open, m.settling, dlq, queue, reason, cause, message_type],
            )
            .await?;
            conn.execute(
                "DELETE FROM failure_groups WHERE dlq = $1 AND queue = $2 AND reason = $3 \
                 AND cause = $4 AND message_type = $5 AND messages <= 0",
                args![dlq, queue, reason, cause, message_type],
            )
            .await?;
        }
    }
    Ok(changed.len() as u64)
}

/// Writes each message's derived failure (and, on PostgreSQL, its group's cause beside its
/// status).
async fn rewrite(conn: &mut Conn<'_>, changed: &[(i64, &Failure)]) -> Result<(), sqlx::Error> {
    match conn {
        Conn::Sqlite(c) => {
            for (id, f) in changed {
                sqlx::query(
                    "UPDATE messages SET error = ?, error_type = ?, cause = ?, message_type = ? \
                     WHERE id = ?",
                )
                .bind(&f.error)
                .bind(&f.error_type)
                .bind(&f.cause)
                .bind(&f.message_type)
                .bind(id)
                .execute(&mut **c)
                .await?;
            }
        }
        Conn::Postgres(c) => {
            let column = |get: fn(&Failure) -> Option<&str>| -> Vec<Option<&str>> {
                changed.iter().map(|(_, f)| get(f)).collect()
            };
            let ids: Vec<i64> = changed.iter().map(|(id, _)| *id).collect();
            sqlx::query(
                "WITH t AS (SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], \
                 $5::text[]) AS t (id, error, error_type, cause, message_type)), \
                 status AS (UPDATE message_status s SET group_cause = t.cause FROM t \
                 WHERE s.id = t.id) \
                 UPDATE messages m SET error = t.error, error_type = t.error_type, cause = t.cause, \
                 message_type = t.message_type FROM t WHERE m.id = t.id",
            )
            .bind(&ids)
            .bind(column(|f| f.error.as_deref()))
            .bind(column(|f| f.error_type.as_deref()))
            .bind(column(|f| Some(f.cause.as_str())))
            .bind(column(|f| f.message_type.as_deref()))
            .execute(&mut **c)
            .await?;
        }
    }
    Ok(())
}

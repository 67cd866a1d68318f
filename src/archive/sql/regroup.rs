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
use crate::archive::record::{body_text, stored_failure, Stored};
use crate::archive::{ArchiveError, Failure, IngestRules, MessageStatus, ReindexProgress};
use crate::message::headers::{MessageProperties, Table};

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

/// A message of a batch as stored.
struct StoredRow {
    id: i64,
    queue: String,
    vhost: String,
    broker: String,
    routing_key: String,
    properties: MessageProperties,
    headers: Option<Table>,
    error: Option<String>,
    /// Its body's start, read only where a convention reads bodies.
    body: Option<Vec<u8>>,
}

/// How much of each body is looked at to tell whether a convention reads it.
const HEAD_BYTES: i64 = 4096;

/// Reads the bodies a convention reads (Dramatiq's, Symfony envelopes): each body's head
/// first, and only the bodies whose head says so whole (as stored beside the message: at most
/// its first MiB), so that a batch never holds every body.
async fn read_bodies(
    db: Pool<'_>,
    rules: &IngestRules,
    stored: &mut [StoredRow],
) -> Result<(), sqlx::Error> {
    let Some(d) = stored.first().map(|_| db.dialect()) else {
        return Ok(());
    };
    let ids: Vec<i64> = stored.iter().map(|m| m.id).collect();
    let heads = db
        .fetch_all(
            &format!(
                "SELECT message_id, substr(body, 1, {HEAD_BYTES}) AS head FROM message_bodies \
                 WHERE {}",
                d.in_ids("message_id", 1)
            ),
            args![&ids],
        )
        .await?;
    let mut wanted: Vec<i64> = Vec::new();
    for row in &heads {
        let id: i64 = row.column("message_id")?;
        let head: Option<Vec<u8>> = row.column("head")?;
        let Some(m) = stored.iter().find(|m| m.id == id) else {
            continue;
        };
        let name = crate::message::dlq::Dlq::from_stored(&m.queue, &m.broker, &m.vhost).name;
        let text = head.and_then(|h| {
            body_text(
                &m.properties,
                m.headers.as_ref(),
                &h,
                rules,
                HEAD_BYTES as usize,
            )
        });
        if text.is_some_and(|t| crate::message::conventions::reads_body(&name, &t)) {
            wanted.push(id);
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let bodies = db
        .fetch_all(
            &format!(
                "SELECT message_id, body FROM message_bodies WHERE {}",
                d.in_ids("message_id", 1)
            ),
            args![&wanted],
        )
        .await?;
    for row in &bodies {
        let id: i64 = row.column("message_id")?;
        if let Some(m) = stored.iter_mut().find(|m| m.id == id) {
            m.body = row.column("body")?;
        }
    }
    Ok(())
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
            "SELECT id, queue, vhost, broker, routing_key, properties, headers, error FROM messages \
             WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3",
            args![next_id, last_id, i64::from(limit.max(1))],
        )
        .await?;
    let done_through = match rows.last() {
        Some(row) => row.column("id")?,
        None => last_id,
    };
    // Derived outside the transaction: it is the slow part, and SQLite's writers wait.
    let mut stored = Vec::with_capacity(rows.len());
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
        stored.push(StoredRow {
            id,
            queue: row.column("queue")?,
            vhost: row.column("vhost")?,
            broker: row.column("broker")?,
            routing_key: row.column("routing_key")?,
            properties,
            headers,
            error: row.column("error")?,
            body: None,
        });
    }
    read_bodies(db, rules, &mut stored).await?;
    let mut derived: BTreeMap<i64, Failure> = BTreeMap::new();
    for m in &stored {
        let failure = stored_failure(
            &Stored {
                queue: &m.queue,
                vhost: &m.vhost,
                broker: &m.broker,
                routing_key: &m.routing_key,
                properties: &m.properties,
                headers: m.headers.as_ref(),
                body: m.body.as_deref(),
                error: m.error.as_deref(),
            },
            rules,
        );
        derived.insert(m.id, failure);
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
                "SELECT m.id, s.status, m.archived_at, m.first_death_queue, {GROUP_COLUMNS} \
                 FROM messages m \
                 JOIN {} s ON s.id = m.id WHERE {}",
                d.status_table(),
                d.in_ids("m.id", 1)
            ),
            args![ids],
        )
        .await?;
    let mut moves: BTreeMap<GroupKeyOwned, Move> = BTreeMap::new();
    let mut changed: Vec<(i64, &Failure, String)> = Vec::new();
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
        // The queue it failed in: its first death's, else its framework's, else the DLQ.
        let first_death_queue: Option<String> = row.column("first_death_queue")?;
        let queue = first_death_queue
            .or_else(|| failure.framework.as_ref()?.failed_queue.clone())
            .unwrap_or_else(|| from.0.clone());
        let to: GroupKeyOwned = (
            from.0.clone(),
            queue,
            from.2.clone(),
            failure.cause.clone(),
            failure.message_type.clone().unwrap_or_default(),
        );
        changed.push((id, failure, to.1.clone()));
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

fn convention(f: &Failure) -> Option<&str> {
    f.framework.as_ref().map(|c| c.convention.name())
}

fn failed_queue(f: &Failure) -> Option<&str> {
    f.framework.as_ref()?.failed_queue.as_deref()
}

fn target(f: &Failure) -> Option<&crate::message::death::ReplayTarget> {
    f.framework.as_ref()?.target.as_ref()
}

fn target_from(f: &Failure) -> Option<&str> {
    f.framework.as_ref()?.target_from.as_deref()
}

/// The convention's problems as stored: a JSON array, none when there are none.
fn problems(f: &Failure) -> Option<String> {
    f.framework
        .as_ref()
        .filter(|c| !c.problems.is_empty())
        .map(|c| serde_json::to_string(&c.problems).expect("text serializes"))
}

/// Writes each message's derived failure, its convention and (where it had none) the
/// convention's replay target — and, on PostgreSQL, its group's queue and cause beside its
/// status.
async fn rewrite(
    conn: &mut Conn<'_>,
    changed: &[(i64, &Failure, String)],
) -> Result<(), sqlx::Error> {
    match conn {
        Conn::Sqlite(c) => {
            for (id, f, _) in changed {
                sqlx::query(
                    "UPDATE messages SET error = ?, error_type = ?, cause = ?, message_type = ?, \
                     convention = ?, failed_queue = ?, replay_target_from = ?, \
                     convention_problems = ?, replay_exchange = coalesce(replay_exchange, ?), \
                     replay_routing_key = coalesce(replay_routing_key, ?) WHERE id = ?",
                )
                .bind(&f.error)
                .bind(&f.error_type)
                .bind(&f.cause)
                .bind(&f.message_type)
                .bind(convention(f))
                .bind(failed_queue(f))
                .bind(target_from(f))
                .bind(problems(f))
                .bind(target(f).map(|t| t.exchange.as_str()))
                .bind(target(f).map(|t| t.routing_key.as_str()))
                .bind(id)
                .execute(&mut **c)
                .await?;
            }
        }
        Conn::Postgres(c) => {
            let column = |get: for<'f> fn(&'f Failure) -> Option<&'f str>| -> Vec<Option<&str>> {
                changed.iter().map(|(_, f, _)| get(f)).collect()
            };
            let ids: Vec<i64> = changed.iter().map(|(id, _, _)| *id).collect();
            let queues: Vec<&str> = changed.iter().map(|(_, _, q)| q.as_str()).collect();
            let problems: Vec<Option<String>> =
                changed.iter().map(|(_, f, _)| problems(f)).collect();
            sqlx::query(
                "WITH t AS (SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
                 $11::text[], $12::text[]) AS t (id, error, error_type, cause, message_type, \
                 convention, failed_queue, target_from, problems, exchange, routing_key, \
                 group_queue)), \
                 status AS (UPDATE message_status s SET group_cause = t.cause, \
                 group_queue = t.group_queue FROM t WHERE s.id = t.id) \
                 UPDATE messages m SET error = t.error, error_type = t.error_type, cause = t.cause, \
                 message_type = t.message_type, convention = t.convention, \
                 failed_queue = t.failed_queue, replay_target_from = t.target_from, \
                 convention_problems = t.problems, \
                 replay_exchange = coalesce(m.replay_exchange, t.exchange), \
                 replay_routing_key = coalesce(m.replay_routing_key, t.routing_key) \
                 FROM t WHERE m.id = t.id",
            )
            .bind(&ids)
            .bind(column(|f| f.error.as_deref()))
            .bind(column(|f| f.error_type.as_deref()))
            .bind(column(|f| Some(f.cause.as_str())))
            .bind(column(|f| f.message_type.as_deref()))
            .bind(column(convention))
            .bind(column(failed_queue))
            .bind(column(target_from))
            .bind(&problems)
            .bind(column(|f| target(f).map(|t| t.exchange.as_str())))
            .bind(column(|f| target(f).map(|t| t.routing_key.as_str())))
            .bind(&queues)
            .execute(&mut **c)
            .await?;
        }
    }
    Ok(())
}

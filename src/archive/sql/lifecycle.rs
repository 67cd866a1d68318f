//! Open and resolved: every change of a message's status goes through [`set_status`], which
//! keeps the open counts of its DLQ and failure group (`open_messages`, and the group's
//! `settling_messages`) in the same transaction; [`Upkeep::settle`] resolves replayed messages whose copy did not come back in time.
//!
//! A message is open while archived, replayed and settling, or its replay failed; it is
//! resolved once dismissed, settled, or died again (its copy, archived back, is the open
//! record then). The counts are kept, never recounted: the overview and its groups stay reads
//! of a few rows at any archive size.

use std::collections::BTreeMap;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{args, millis, ArchiveRow, Conn, Dialect, SqlArchive};
use crate::archive::{ArchiveError, MessageStatus, Upkeep};

/// Messages whose status one statement reads and changes at most.
const CHUNK: usize = 5_000;

/// `'archived', 'replayed', 'replay_failed'`: the open statuses, for `IN (...)`.
pub fn open_list() -> String {
    MessageStatus::open_ones(true)
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a status change may move from: `to` is taken by the messages whose status `from`
/// accepts (and is not `to` already).
pub type FromStatus = fn(MessageStatus) -> bool;

/// Any status.
pub fn any(_: MessageStatus) -> bool {
    true
}

/// Sets the status of these messages (those whose status `from` accepts), and when it changed
/// (`status_at`: how long a resolved message has been, for retention), with the time of the
/// replay that published them when `to` is [`MessageStatus::Replayed`]; keeps the open
/// counts of their DLQs and groups. Returns the messages it changed.
///
/// On PostgreSQL the messages are locked in id order first, as dismissals, purges and runner
/// steps lock them, so that none of those deadlock on each other; the counts are then updated
/// in key order, as ingest takes them.
pub async fn set_status(
    conn: &mut Conn<'_>,
    ids: &[i64],
    to: MessageStatus,
    from: FromStatus,
    replayed_at: Option<i64>,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut changed = Vec::new();
    // Open and settling messages gained (or lost) per group, by [`GroupKey`] order.
    let mut groups: BTreeMap<GroupKeyOwned, (i64, i64)> = BTreeMap::new();
    let mut queues: BTreeMap<(String, String), i64> = BTreeMap::new();
    let d = conn.dialect();
    for chunk in ids.chunks(CHUNK) {
        if d == Dialect::Postgres {
            // Locked first, then read by a statement of its own: one that waited for a lock
            // would see the status as it was when it began.
            conn.execute(
                "SELECT id FROM messages WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
                args![chunk],
            )
            .await?;
        }
        let rows = conn
            .fetch_all(
                &format!(
                    "SELECT m.id, s.status, m.queue, {GROUP_COLUMNS} \
                     FROM messages m JOIN {} s ON s.id = m.id WHERE {}",
                    d.status_table(),
                    d.in_ids("m.id", 1)
                ),
                args![chunk],
            )
            .await?;
        let mut mine = Vec::new();
        for row in &rows {
            let status: String = row.column("status")?;
            let Some(status) = MessageStatus::parse(&status) else {
                continue;
            };
            if status == to || !from(status) {
                continue;
            }
            mine.push(row.column::<i64>("id")?);
            let delta = i64::from(to.is_open()) - i64::from(status.is_open());
            let settling = i64::from(to == MessageStatus::Replayed)
                - i64::from(status == MessageStatus::Replayed);
            if delta != 0 {
                let reason: String = row.column("reason")?;
                *queues
                    .entry((row.column("queue")?, reason.clone()))
                    .or_default() += delta;
            }
            if delta != 0 || settling != 0 {
                let counts = groups.entry(group_of(row)?).or_default();
                counts.0 += delta;
                counts.1 += settling;
            }
        }
        if mine.is_empty() {
            continue;
        }
        conn.execute(
            &format!(
                "UPDATE {} SET status = $1, replayed_at = coalesce($2, replayed_at), status_at = $4 \
                 WHERE {}",
                d.status_table(),
                d.in_ids("id", 3)
            ),
            args![to.as_str(), replayed_at, &mine, super::now()],
        )
        .await?;
        changed.extend(mine);
    }
    for ((queue, reason), delta) in queues.into_iter().filter(|(_, n)| *n != 0) {
        conn.execute(
            "UPDATE queue_reason_counts SET open_messages = open_messages + $1 \
             WHERE queue = $2 AND reason = $3",
            args![delta, queue.as_str(), reason.as_str()],
        )
        .await?;
    }
    for (key, (open, settling)) in groups {
        if (open, settling) == (0, 0) {
            continue;
        }
        let (dlq, queue, reason, cause, message_type) = &key;
        conn.execute(
            "UPDATE failure_groups SET open_messages = open_messages + $1, \
             settling_messages = settling_messages + $2 \
             WHERE dlq = $3 AND queue = $4 AND reason = $5 AND cause = $6 AND message_type = $7",
            args![open, settling, dlq, queue, reason, cause, message_type],
        )
        .await?;
    }
    Ok(changed)
}

/// A message's failure group ([`GroupKey`](crate::archive::GroupKey)), owned, in its order.
pub type GroupKeyOwned = (String, String, String, String, String);

/// What `m` (messages) says of its failure group: `dlq`, `group_queue`, `reason`, `cause` and
/// `message_type`, as ingest keyed it (a message of an earlier version, until it is
/// regrouped, under its error).
pub const GROUP_COLUMNS: &str =
    "m.queue AS dlq, coalesce(m.first_death_queue, m.failed_queue, m.queue) AS group_queue, \
     coalesce(m.first_death_reason, 'none') AS reason, coalesce(m.cause, m.error, '') AS cause, \
     coalesce(m.message_type, '') AS message_type";

/// The group a row read with [`GROUP_COLUMNS`] counts in.
pub fn group_of(row: &impl ArchiveRow) -> Result<GroupKeyOwned, sqlx::Error> {
    Ok((
        row.column("dlq")?,
        row.column("group_queue")?,
        row.column("reason")?,
        row.column("cause")?,
        row.column("message_type")?,
    ))
}

/// The messages of `published` (just confirmed by a replay that began at `since`) whose copy
/// has been archived back already — it died again before the outcome was written down. A
/// second's margin covers instances whose clocks differ a little.
pub async fn died_already(
    conn: &mut Conn<'_>,
    published: &[i64],
    since: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    if published.is_empty() {
        return Ok(Vec::new());
    }
    let d = conn.dialect();
    conn.fetch_all(
        &format!(
            "SELECT DISTINCT replay_of FROM messages WHERE {} AND archived_at >= $2",
            d.in_ids("replay_of", 1)
        ),
        args![published, since - 1_000],
    )
    .await?
    .iter()
    .map(|row| row.column("replay_of"))
    .collect()
}

/// Records what a replay's publish did to these messages: published ones are replayed
/// (settling from `now`) — or died again already, if their copy is archived back since
/// `since` — and those the broker did not take are open again, `replay_failed`.
pub async fn replayed(
    conn: &mut Conn<'_>,
    ids: &[i64],
    published: bool,
    since: i64,
    now: i64,
) -> Result<(), sqlx::Error> {
    if !published {
        set_status(conn, ids, MessageStatus::ReplayFailed, any, None).await?;
        return Ok(());
    }
    let died = died_already(conn, ids, since).await?;
    let settling: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !died.contains(id))
        .collect();
    set_status(conn, &settling, MessageStatus::Replayed, any, Some(now)).await?;
    set_status(conn, &died, MessageStatus::DiedAgain, any, Some(now)).await?;
    Ok(())
}

/// The originals of copies being archived: replayed (settling or settled) ones died again.
/// Called before the copies are written, so a batch takes status rows before counts, as
/// every other writer does.
pub async fn copies_died(conn: &mut Conn<'_>, originals: &[i64]) -> Result<(), sqlx::Error> {
    set_status(
        conn,
        originals,
        MessageStatus::DiedAgain,
        |s| matches!(s, MessageStatus::Replayed | MessageStatus::Settled),
        None,
    )
    .await?;
    Ok(())
}

/// Dismisses these messages with a note (those not dismissed already); how many.
pub async fn dismiss(conn: &mut Conn<'_>, ids: &[i64], note: &str) -> Result<u64, sqlx::Error> {
    let changed = set_status(conn, ids, MessageStatus::Dismissed, any, None).await?;
    let d = conn.dialect();
    for chunk in changed.chunks(CHUNK) {
        conn.execute(
            &format!(
                "UPDATE messages SET status_note = $1 WHERE {}",
                d.in_ids("id", 2)
            ),
            args![note, chunk],
        )
        .await?;
    }
    Ok(changed.len() as u64)
}

#[async_trait]
impl<T: SqlArchive> Upkeep for T {
    async fn prune_minutes(&self) -> Result<(), ArchiveError> {
        let before = super::now() / 60_000 - super::overview::MINUTES_KEPT;
        self.db()
            .execute("DELETE FROM minute_counts WHERE minute < $1", args![before])
            .await?;
        let before = super::now() / 60_000 - super::overview::GROUP_MINUTES_KEPT;
        self.db()
            .execute("DELETE FROM group_minutes WHERE minute < $1", args![before])
            .await?;
        Ok(())
    }

    async fn refresh_statistics(&self) -> Result<Vec<String>, ArchiveError> {
        super::statistics::refresh(self.db()).await
    }

    async fn settle(&self, before: OffsetDateTime, limit: u32) -> Result<u64, ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let d = conn.dialect();
        // Through the partial index of settling messages. Another instance settling the same
        // ones meanwhile is waited for by set_status, which then finds them settled.
        let ids: Vec<i64> = conn
            .fetch_all(
                &format!(
                    "SELECT id FROM {} WHERE status = 'replayed' AND replayed_at < $1 \
                     ORDER BY id LIMIT $2",
                    d.status_table(),
                ),
                args![millis(before), i64::from(limit)],
            )
            .await?
            .iter()
            .map(|row| row.column("id"))
            .collect::<Result<_, _>>()?;
        let settled = set_status(
            &mut conn,
            &ids,
            MessageStatus::Settled,
            |s| s == MessageStatus::Replayed,
            None,
        )
        .await?;
        tx.commit().await?;
        Ok(settled.len() as u64)
    }
}

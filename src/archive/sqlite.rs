//! The SQLite archive: WAL with `synchronous=FULL`, so a committed batch survives power loss.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};
use time::OffsetDateTime;

use super::rows::ArchiveRow;
use super::sqlite_accounts;
use super::sqlite_actions;
use super::sqlite_audit::{self, audit};
use super::sqlite_jobs;
use super::{without_copies, ArchivedCopies};
use super::{
    Actor, AuditEntry, ChunkLimit, ItemOutcome, JobAction, JobItem, JobSpec, JobState, JobStep,
    ReplayEdit, ReplayJob, Role, Selection, TokenRecord, TokenSpec, UserRecord,
};
use super::{
    Archive, ArchiveError, ArchivedMessage, FailureGroup, HourlyCount, MessageFilter, MessagePage,
    MessageStatus, MessageSummary, NameLock, PageRequest, PreparedMessage, QueueReasonCount,
    ReplayRecord, ReplayStart, StoreOutcome, StoredBody, NO_REASON,
};
use crate::amqp::headers::Table;
use crate::death::{FirstDeath, ReplayTarget};

#[derive(Debug, Clone)]
pub struct SqliteArchive {
    pool: SqlitePool,
}

impl SqliteArchive {
    pub async fn open(url: &str) -> Result<Self, ArchiveError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL syncs the WAL on every commit: an acked message is on disk.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        // Every body is in these files: the owner's alone, before SQLite first writes them.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let file = (!in_memory).then(|| options.get_filename().to_path_buf());
        if let Some(file) = &file {
            super::sqlite_file::make_private(file).map_err(sqlx::Error::Io)?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .after_release(|conn, _| Box::pin(release_only_if_idle(conn)))
            .connect_with(options)
            .await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        if let Some(file) = &file {
            super::sqlite_file::make_private(file).map_err(sqlx::Error::Io)?;
        }
        Ok(SqliteArchive { pool })
    }

    /// The pool, for tests and tools that inspect the file directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Whether a connection given back to the pool may be used again: not if it is still in a
/// transaction. When a write fails with `database or disk is full` (or an I/O error), SQLite
/// may roll the whole transaction back by itself; the ROLLBACK that sqlx then sends for the
/// dropped transaction fails ("no transaction is active"), sqlx's count of open transactions
/// on the connection stays at one, and every later `BEGIN` on it fails ("attempted to call
/// begin_with at non-zero transaction depth") until the process restarts. Closing such a
/// connection (which also ends any transaction SQLite did keep) lets every write path recover
/// as soon as the disk has room again.
async fn release_only_if_idle(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    // The connection's worker runs commands in order: once the ping returns, the rollback a
    // dropped transaction queued has been tried.
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}

pub(super) fn millis(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

pub(super) fn from_millis(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

pub(super) const SUMMARY_COLUMNS: &str = "id, queue, archived_at, message_id, correlation_id, content_type, content_encoding, body_size, deaths, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, replay_routing_key, status";

/// How many rows are archived with each fingerprint that a possible copy in the batch has, by
/// queue (through the `messages_fingerprint` index).
async fn archived_copies(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    batch: &[PreparedMessage],
) -> Result<ArchivedCopies, sqlx::Error> {
    let candidates: Vec<&PreparedMessage> = batch.iter().filter(|m| m.may_be_archived()).collect();
    let mut archived = ArchivedCopies::new();
    for chunk in candidates.chunks(ROWS_PER_STATEMENT) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT queue, fingerprint, count(*) AS n FROM messages WHERE fingerprint IN (",
        );
        let mut list = q.separated(", ");
        for m in chunk {
            list.push_bind(&m.fingerprint[..]);
        }
        q.push(") GROUP BY queue, fingerprint");
        for row in q.build().fetch_all(&mut **tx).await? {
            let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
            if let Ok(fingerprint) = fingerprint.try_into() {
                archived.insert((row.try_get("queue")?, fingerprint), row.try_get("n")?);
            }
        }
    }
    Ok(archived)
}

/// ` FROM messages ... WHERE ...`: the messages a list filter selects. A text search joins
/// the FTS index, whose rowid is the message id.
pub(super) fn push_filter<'a>(q: &mut QueryBuilder<'a, Sqlite>, filter: &'a MessageFilter) {
    match &filter.text {
        Some(text) => {
            q.push(" FROM messages JOIN messages_fts ON messages_fts.rowid = messages.id WHERE messages_fts MATCH ")
                .push_bind(text);
        }
        None => {
            q.push(" FROM messages WHERE 1 = 1");
        }
    }
    push_conditions(q, filter, StatusIn::Column);
}

/// Where a backend keeps a message's status: a column of `messages` (SQLite), or a table of
/// its own (PostgreSQL's `message_status`, so that marking a message is not an update of its
/// wide row).
#[derive(Clone, Copy)]
pub(super) enum StatusIn {
    Column,
    Table,
}

/// ` AND ...` for every condition of the filter but its text.
pub(super) fn push_conditions<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    filter: &'a MessageFilter,
    status_in: StatusIn,
) where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    // The status is one of the conditions.
    for (field, value) in filter.conditions() {
        push_condition(q, field, value, status_in);
    }
    if let Some(since) = filter.since {
        q.push(" AND archived_at >= ").push_bind(millis(since));
    }
    if let Some(until) = filter.until {
        q.push(" AND archived_at < ").push_bind(millis(until));
    }
}

/// ` AND messages.id IN (...)` or the filter's conditions, after `SELECT ...`.
pub(super) fn push_selection<'a>(q: &mut QueryBuilder<'a, Sqlite>, selection: &'a Selection) {
    match selection {
        Selection::Ids(ids) => {
            q.push(" FROM messages WHERE messages.id IN (SELECT value FROM json_each(")
                .push_bind(serde_json::to_string(ids).expect("ids serialize"))
                .push("))");
        }
        Selection::Filter(filter) => push_filter(q, filter),
    }
}

/// `AND <field matches value>`, with the archive column each search field stands for.
pub(super) fn push_condition<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    field: &'a str,
    value: &'a str,
    status_in: StatusIn,
) where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let column = match field {
        "queue" => "queue",
        "reason" if value == NO_REASON => {
            q.push(" AND first_death_reason IS NULL");
            return;
        }
        "reason" => "first_death_reason",
        // Messages without history are grouped under the DLQ itself.
        "first_death_queue" => "coalesce(first_death_queue, queue)",
        "error" => "coalesce(error, '')",
        "exchange" => "first_death_exchange",
        "routing_key" => "replay_routing_key",
        "status" if matches!(status_in, StatusIn::Table) => {
            q.push(" AND messages.id IN (SELECT id FROM message_status WHERE status = ")
                .push_bind(value)
                .push(")");
            return;
        }
        "status" => "status",
        "message_id" => "message_id",
        "correlation_id" => "correlation_id",
        "content_type" => {
            // `application/json` also finds `application/json; charset=utf-8`: a range
            // (';' is followed by '<'), so the index still serves it.
            q.push(" AND (content_type = ")
                .push_bind(value)
                .push(" OR (content_type >= ")
                .push_bind(format!("{value};"))
                .push(" AND content_type < ")
                .push_bind(format!("{value}<"))
                .push("))");
            return;
        }
        business => {
            q.push(" AND id IN (SELECT message_id FROM message_fields WHERE name = ")
                .push_bind(business)
                .push(" AND value = ")
                .push_bind(value)
                .push(")");
            return;
        }
    };
    q.push(format!(" AND {column} = ")).push_bind(value);
}

/// Business field values of the given messages, by message.
async fn fields_of(
    pool: &SqlitePool,
    ids: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<String, String>>, sqlx::Error> {
    let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut q = QueryBuilder::<Sqlite>::new(
        "SELECT message_id, name, value FROM message_fields WHERE message_id IN (",
    );
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    q.push(")");
    for row in q.build().fetch_all(pool).await? {
        out.entry(row.try_get("message_id")?)
            .or_default()
            .insert(row.try_get("name")?, row.try_get("value")?);
    }
    Ok(out)
}

/// Rows per multi-row INSERT: 20 columns each stays far below SQLite's 32,766 parameters.
const ROWS_PER_STATEMENT: usize = 500;

async fn insert_messages(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    rows: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO messages (id, fingerprint, queue, archived_at, exchange, routing_key, redelivered, message_id, correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, replay_routing_key, error, replay_of) ",
    );
    q.push_values(rows, |mut b, (id, m)| {
        let msg = &m.message;
        let first = m.history.first_death.as_ref();
        let target = m.history.replay_target.as_ref();
        b.push_bind(*id)
            .push_bind(&m.fingerprint[..])
            .push_bind(&msg.queue)
            .push_bind(millis(msg.received_at))
            .push_bind(&m.columns.exchange)
            .push_bind(&m.columns.routing_key)
            .push_bind(msg.redelivered)
            .push_bind(&m.columns.message_id)
            .push_bind(&m.columns.correlation_id)
            .push_bind(&m.columns.content_type)
            .push_bind(&m.columns.content_encoding)
            .push_bind(msg.body.len() as i64)
            .push_bind(&m.properties_json)
            .push_bind(&m.headers_json)
            .push_bind(&m.deaths_json)
            .push_bind(&m.problems_json)
            .push_bind(first.map(|f| &f.queue))
            .push_bind(first.map(|f| &f.reason))
            .push_bind(first.map(|f| &f.exchange))
            .push_bind(target.map(|t| &t.exchange))
            .push_bind(target.map(|t| &t.routing_key))
            .push_bind(&m.error)
            .push_bind(m.replay_of);
    });
    q.build().execute(&mut **tx).await?;
    Ok(())
}

/// Messages per (DLQ, hour), and per failure group (queue, reason, error): how many, the
/// first and the last archive time; in key order, the order every backend writes them in.
pub(super) type Overview<'a> = (
    BTreeMap<(&'a str, i64), i64>,
    BTreeMap<(&'a str, &'a str, &'a str), (i64, i64, i64)>,
);

pub(super) fn overview<'a>(rows: &[(i64, &'a PreparedMessage)]) -> Overview<'a> {
    let mut hours: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut groups: BTreeMap<(&str, &str, &str), (i64, i64, i64)> = BTreeMap::new();
    for (_, m) in rows {
        let at = millis(m.message.received_at);
        *hours
            .entry((m.message.queue.as_str(), at / 3_600_000))
            .or_default() += 1;
        let entry = groups.entry(m.group()).or_insert((0, at, at));
        entry.0 += 1;
        entry.1 = entry.1.min(at);
        entry.2 = entry.2.max(at);
    }
    (hours, groups)
}

/// Keeps the sparkline's hourly counts and the failure groups up to date.
async fn record_overview(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    rows: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    let (hours, groups) = overview(rows);
    for ((queue, hour), messages) in hours {
        sqlx::query(
            "INSERT INTO hourly_counts (queue, hour, messages) VALUES (?, ?, ?) \
             ON CONFLICT (queue, hour) DO UPDATE SET messages = messages + excluded.messages",
        )
        .bind(queue)
        .bind(hour)
        .bind(messages)
        .execute(&mut **tx)
        .await?;
    }
    for ((queue, reason, error), (messages, first, last)) in groups {
        sqlx::query(
            "INSERT INTO failure_groups (queue, reason, error, messages, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT (queue, reason, error) DO UPDATE SET messages = messages + excluded.messages, \
             first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)",
        )
        .bind(queue)
        .bind(reason)
        .bind(error)
        .bind(messages)
        .bind(first)
        .bind(last)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Per DLQ and first-death reason: how many rows, the oldest and the newest archive time.
pub(super) fn totals<'a>(
    rows: &[(i64, &'a PreparedMessage)],
) -> BTreeMap<(&'a str, &'a str), (i64, i64, i64)> {
    let mut totals = BTreeMap::new();
    for (_, m) in rows {
        let reason = m
            .history
            .first_death
            .as_ref()
            .map_or(NO_REASON, |f| f.reason.as_str());
        let at = millis(m.message.received_at);
        let entry = totals
            .entry((m.message.queue.as_str(), reason))
            .or_insert((0, at, at));
        entry.0 += 1;
        entry.1 = entry.1.min(at);
        entry.2 = entry.2.max(at);
    }
    totals
}

#[async_trait]
impl Archive for SqliteArchive {
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError> {
        let mut outcome = StoreOutcome::default();
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout), so a batch never
        // fails half-way on a lock upgrade when several consumers write at once.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let (fresh, duplicates) = without_copies(batch, archived_copies(&mut tx, batch).await?);
        outcome.duplicates = duplicates;
        // Holding the write lock, the next ids are ours: number the rows up front so that
        // messages, bodies and search entries go in as a few multi-row statements.
        // AUTOINCREMENT's counter, so an id is never reused even after the newest rows are
        // deleted (an explicit id above it moves it on).
        let first_id: i64 = sqlx::query_scalar(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0), coalesce((SELECT max(id) FROM messages), 0)) + 1",
        )
            .fetch_one(&mut *tx)
            .await?;
        let rows: Vec<(i64, &PreparedMessage)> = (first_id..).zip(fresh).collect();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            insert_messages(&mut tx, chunk).await?;
            let mut bodies =
                QueryBuilder::<Sqlite>::new("INSERT INTO message_bodies (message_id, body) ");
            bodies.push_values(chunk, |mut b, (id, m)| {
                b.push_bind(*id).push_bind(&m.message.body[..]);
            });
            bodies.build().execute(&mut *tx).await?;
            let mut fts = QueryBuilder::<Sqlite>::new(
                "INSERT INTO messages_fts (rowid, body, ids, headers) ",
            );
            fts.push_values(chunk, |mut b, (id, m)| {
                let t = &m.search_text;
                b.push_bind(*id)
                    .push_bind(&t.body)
                    .push_bind(&t.ids)
                    .push_bind(&t.headers);
            });
            fts.build().execute(&mut *tx).await?;
            let fields: Vec<(i64, &(String, String))> = chunk
                .iter()
                .flat_map(|(id, m)| m.fields.iter().map(move |f| (*id, f)))
                .collect();
            // Three parameters a row: 5,000 rows stay under SQLite's 32,766.
            for fields in fields.chunks(5_000) {
                let mut q = QueryBuilder::<Sqlite>::new(
                    "INSERT OR IGNORE INTO message_fields (message_id, name, value) ",
                );
                q.push_values(fields, |mut b, (id, (name, value))| {
                    b.push_bind(*id).push_bind(name).push_bind(value);
                });
                q.build().execute(&mut *tx).await?;
            }
        }
        record_overview(&mut tx, &rows).await?;
        for ((queue, reason), (messages, oldest, newest)) in totals(&rows) {
            sqlx::query(
                "INSERT INTO queue_reason_counts (queue, reason, messages, oldest_at, newest_at) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (queue, reason) DO UPDATE SET messages = messages + excluded.messages, \
                 oldest_at = min(oldest_at, excluded.oldest_at), newest_at = max(newest_at, excluded.newest_at)",
            )
            .bind(queue)
            .bind(reason)
            .bind(messages)
            .bind(oldest)
            .bind(newest)
            .execute(&mut *tx)
            .await?;
        }
        for (queue, next) in super::stream_positions(batch) {
            sqlx::query(
                "INSERT INTO stream_offsets (queue, next_offset) VALUES (?, ?) \
                 ON CONFLICT (queue) DO UPDATE SET next_offset = max(next_offset, excluded.next_offset)",
            )
            .bind(queue)
            .bind(next)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        outcome.inserted = rows.len() as u64;
        Ok(outcome)
    }

    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_offset FROM stream_offsets WHERE queue = ?")
                .bind(queue)
                .fetch_optional(&self.pool)
                .await?;
        Ok(next.map(|n| n as u64))
    }

    async fn list_messages(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<MessagePage, ArchiveError> {
        let mut q = QueryBuilder::<Sqlite>::new(format!("SELECT {SUMMARY_COLUMNS}"));
        push_filter(&mut q, filter);
        // With a text search the FTS index drives, in its own rowid (= id) order.
        let order = if filter.text.is_some() {
            "messages_fts.rowid"
        } else {
            "id"
        };
        if let Some(before) = page.before {
            q.push(format!(" AND {order} < ")).push_bind(before);
        }
        let limit = page.limit.clamp(1, super::MAX_PAGE_SIZE);
        q.push(format!(" ORDER BY {order} DESC LIMIT "))
            .push_bind(i64::from(limit) + 1);
        let rows = q.build().fetch_all(&self.pool).await?;
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
            "SELECT {SUMMARY_COLUMNS}, {DETAIL_COLUMNS} FROM messages WHERE id = ?"
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
            "SELECT b.body, m.content_type, m.content_encoding FROM messages m JOIN message_bodies b ON b.message_id = m.id WHERE m.id = ?",
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

    async fn counts(&self) -> Result<Vec<QueueReasonCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, messages, oldest_at, newest_at FROM queue_reason_counts ORDER BY queue, reason",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, hour, messages FROM hourly_counts WHERE hour >= ? ORDER BY queue, hour",
        )
        .bind(since.unix_timestamp().div_euclid(3600))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hourly_from_row).collect()
    }

    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, error, messages, first_seen, last_seen FROM failure_groups ORDER BY last_seen DESC LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(group_from_row).collect()
    }

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

    async fn begin_replay(
        &self,
        message_id: i64,
        request_key: &str,
        actor: &Actor,
        target: &ReplayTarget,
        edit: Option<&ReplayEdit>,
    ) -> Result<ReplayStart, ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let edited_headers = edited_headers(message_id, edit)?;
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO replays (message_id, request_key, actor, requested_at, target_exchange, target_routing_key, outcome, edited_body, edited_headers) \
             VALUES (?, ?, ?, ?, ?, ?, 'publishing', ?, ?) ON CONFLICT (request_key) DO NOTHING RETURNING id",
        )
        .bind(message_id)
        .bind(request_key)
        .bind(&actor.name)
        .bind(millis(OffsetDateTime::now_utc()))
        .bind(&target.exchange)
        .bind(&target.routing_key)
        .bind(edit.and_then(|e| e.body.as_deref()))
        .bind(edited_headers)
        .fetch_optional(&mut *tx)
        .await?;
        let start = match inserted {
            Some(id) => {
                let (action, summary) = replay_audit(message_id, target, edit);
                audit(&mut tx, actor, action, None, Some(message_id), &summary).await?;
                ReplayStart::New(id)
            }
            None => {
                let row = sqlx::query(&format!(
                    "SELECT {REPLAY_COLUMNS} FROM replays WHERE request_key = ?"
                ))
                .bind(request_key)
                .fetch_one(&mut *tx)
                .await?;
                ReplayStart::Existing(replay_from_row(&row)?)
            }
        };
        tx.commit().await?;
        Ok(start)
    }

    async fn finish_replay(
        &self,
        replay_id: i64,
        outcome: &str,
        detail: Option<&str>,
        status: MessageStatus,
    ) -> Result<ReplayRecord, ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query(&format!(
            "UPDATE replays SET outcome = ?, detail = ?, finished_at = ? WHERE id = ? RETURNING {REPLAY_COLUMNS}"
        ))
        .bind(outcome)
        .bind(detail)
        .bind(millis(OffsetDateTime::now_utc()))
        .bind(replay_id)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("UPDATE messages SET status = ? WHERE id = (SELECT message_id FROM replays WHERE id = ?)")
            .bind(status.as_str())
            .bind(replay_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        replay_from_row(&row)
    }

    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError> {
        let rows = sqlx::query(&format!(
            "SELECT {REPLAY_COLUMNS} FROM replays WHERE message_id = ? ORDER BY id DESC"
        ))
        .bind(message_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(replay_from_row).collect()
    }

    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
        sqlite_jobs::create_job(&self.pool, spec).await
    }

    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
        sqlite_jobs::job(&self.pool, id).await
    }

    async fn jobs(&self, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
        sqlite_jobs::jobs(&self.pool, limit).await
    }

    async fn job_items(
        &self,
        id: i64,
        outcome: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobItem>, ArchiveError> {
        sqlite_jobs::job_items(&self.pool, id, outcome, after, limit).await
    }

    async fn control_job(
        &self,
        id: i64,
        action: JobAction,
        actor: &Actor,
    ) -> Result<ReplayJob, ArchiveError> {
        sqlite_jobs::control_job(&self.pool, id, action, actor).await
    }

    async fn claim_job(
        &self,
        owner: &str,
        instance: Option<&str>,
        lease_ms: u64,
        only: Option<i64>,
    ) -> Result<Option<ReplayJob>, ArchiveError> {
        sqlite_jobs::claim_job(&self.pool, owner, instance, lease_ms, only).await
    }

    async fn advance_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        outcomes: &[ItemOutcome],
        next: ChunkLimit,
    ) -> Result<JobStep, ArchiveError> {
        sqlite_jobs::advance_job(&self.pool, id, owner, lease_ms, outcomes, next).await
    }

    async fn release_job(
        &self,
        id: i64,
        owner: &str,
        state: JobState,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<(), ArchiveError> {
        sqlite_jobs::release_job(&self.pool, id, owner, state, detail, canary_done).await
    }

    async fn note_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, ArchiveError> {
        sqlite_jobs::note_job(&self.pool, id, owner, lease_ms, detail, canary_done).await
    }

    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError> {
        sqlite_jobs::canary_done(&self.pool, id).await
    }

    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError> {
        sqlite_jobs::canary_deaths(&self.pool, id, since).await
    }

    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        sqlite_actions::dismiss(&self.pool, selection, selection_text, note, actor).await
    }

    async fn purge(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        sqlite_actions::purge(&self.pool, selection, selection_text, note, actor).await
    }

    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        sqlite_audit::audit_log(&self.pool, before, limit).await
    }

    async fn audit_export(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        sqlite_audit::audit_export(&self.pool, after, limit).await
    }

    async fn put_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        by: &Actor,
    ) -> Result<(), ArchiveError> {
        sqlite_accounts::put_user(&self.pool, name, password_hash, role, by).await
    }

    async fn set_password(
        &self,
        name: &str,
        password_hash: &str,
        by: &Actor,
    ) -> Result<bool, ArchiveError> {
        sqlite_accounts::set_password(&self.pool, name, password_hash, by).await
    }

    async fn remove_user(&self, name: &str, by: &Actor) -> Result<bool, ArchiveError> {
        sqlite_accounts::remove_user(&self.pool, name, by).await
    }

    async fn user(&self, name: &str) -> Result<Option<UserRecord>, ArchiveError> {
        sqlite_accounts::user(&self.pool, name).await
    }

    async fn users(&self) -> Result<Vec<UserRecord>, ArchiveError> {
        sqlite_accounts::users(&self.pool).await
    }

    async fn create_session(&self, token_hash: &str, user: &str) -> Result<(), ArchiveError> {
        sqlite_accounts::create_session(&self.pool, token_hash, user).await
    }

    async fn session_user(
        &self,
        token_hash: &str,
        idle_ms: u64,
        max_ms: u64,
    ) -> Result<Option<UserRecord>, ArchiveError> {
        sqlite_accounts::session_user(&self.pool, token_hash, idle_ms, max_ms).await
    }

    async fn end_session(&self, token_hash: &str) -> Result<(), ArchiveError> {
        sqlite_accounts::end_session(&self.pool, token_hash).await
    }

    async fn create_token(&self, token: &TokenSpec<'_>, by: &Actor) -> Result<i64, ArchiveError> {
        sqlite_accounts::create_token(&self.pool, token, by).await
    }

    async fn token(&self, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError> {
        sqlite_accounts::token(&self.pool, token_hash).await
    }

    async fn revoke_token(&self, id: i64, by: &Actor) -> Result<bool, ArchiveError> {
        sqlite_accounts::revoke_token(&self.pool, id, by).await
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, ArchiveError> {
        sqlite_accounts::tokens(&self.pool).await
    }

    async fn record(&self, actor: &Actor, action: &str, summary: &str) -> Result<(), ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        audit(&mut tx, actor, action, None, None, summary).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), ArchiveError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn writable(&self) -> Result<(), ArchiveError> {
        // The write lock, taken and let go (within busy_timeout): what a batch needs first.
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn lock_instance_name(&self, name: &str) -> Result<Option<NameLock>, ArchiveError> {
        let options = self.pool.connect_options();
        let archive = options.get_filename();
        if archive.as_os_str().is_empty() || archive.as_os_str() == ":memory:" {
            return Ok(Some(NameLock::Private));
        }
        let mut path = archive.as_os_str().to_owned();
        path.push(".instance.lock");
        let path = std::path::PathBuf::from(path);
        lock_file(&path, name).map_err(|source| ArchiveError::InstanceLock {
            path: path.display().to_string(),
            source,
        })
    }
}

/// Takes the exclusive lock on `path` (created when missing) and writes who holds it; `None`
/// when another process holds it.
fn lock_file(path: &std::path::Path, name: &str) -> std::io::Result<Option<NameLock>> {
    use std::io::{Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    // For whoever looks: the name and the process that holds it.
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{name}\npid {}", std::process::id())?;
    Ok(Some(NameLock::File(file)))
}

/// The edited headers of a replay, as stored beside its record.
pub(super) fn edited_headers(
    message_id: i64,
    edit: Option<&ReplayEdit>,
) -> Result<Option<String>, ArchiveError> {
    edit.and_then(|e| e.headers.as_ref())
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| ArchiveError::Corrupt {
            id: message_id,
            reason: e.to_string(),
        })
}

/// The audit action and summary of a single replay.
pub(super) fn replay_audit(
    message_id: i64,
    target: &ReplayTarget,
    edit: Option<&ReplayEdit>,
) -> (&'static str, String) {
    let (action, what) = match edit {
        Some(_) => ("edit_replay", "edited and replayed"),
        None => ("replay", "replayed"),
    };
    (
        action,
        format!("{what} message {message_id} to {}", target.label()),
    )
}

/// What [`message_from_row`] reads besides [`SUMMARY_COLUMNS`].
pub(super) const DETAIL_COLUMNS: &str =
    "exchange, routing_key, redelivered, properties, headers, death_problems, status_note";

/// A whole archived message from a row of either backend.
pub(super) fn message_from_row<R: ArchiveRow>(
    row: &R,
    fields: BTreeMap<String, String>,
) -> Result<ArchivedMessage, ArchiveError> {
    let mut summary = summary_from_row(row)?;
    summary.fields = fields;
    let id = summary.id;
    let corrupt = |reason: serde_json::Error| ArchiveError::Corrupt {
        id,
        reason: reason.to_string(),
    };
    let properties: String = row.column("properties")?;
    let headers: Option<String> = row.column("headers")?;
    let problems: Option<String> = row.column("death_problems")?;
    Ok(ArchivedMessage {
        summary,
        delivered_exchange: row.column("exchange")?,
        delivered_routing_key: row.column("routing_key")?,
        redelivered: row.column("redelivered")?,
        properties: serde_json::from_str(&properties).map_err(corrupt)?,
        headers: headers
            .map(|h| Table::from_json(&h))
            .transpose()
            .map_err(corrupt)?,
        death_problems: problems
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(corrupt)?
            .unwrap_or_default(),
        status_note: row.column("status_note")?,
    })
}

pub(super) fn count_from_row(r: &impl ArchiveRow) -> Result<QueueReasonCount, ArchiveError> {
    Ok(QueueReasonCount {
        queue: r.column("queue")?,
        reason: r.column("reason")?,
        messages: r.column("messages")?,
        oldest: from_millis(r.column("oldest_at")?),
        newest: from_millis(r.column("newest_at")?),
    })
}

pub(super) fn hourly_from_row(r: &impl ArchiveRow) -> Result<HourlyCount, ArchiveError> {
    Ok(HourlyCount {
        queue: r.column("queue")?,
        hour: r.column("hour")?,
        messages: r.column("messages")?,
    })
}

pub(super) fn group_from_row(r: &impl ArchiveRow) -> Result<FailureGroup, ArchiveError> {
    Ok(FailureGroup {
        queue: r.column("queue")?,
        reason: r.column("reason")?,
        error: r.column("error")?,
        messages: r.column("messages")?,
        first_seen: from_millis(r.column("first_seen")?),
        last_seen: from_millis(r.column("last_seen")?),
    })
}

pub(super) const REPLAY_COLUMNS: &str =
    "id, message_id, request_key, actor, requested_at, target_exchange, target_routing_key, outcome, \
     detail, (edited_body IS NOT NULL OR edited_headers IS NOT NULL) AS edited";

/// The column types a row of either backend must decode for the shared row readers.
pub(super) fn replay_from_row<R: ArchiveRow>(row: &R) -> Result<ReplayRecord, ArchiveError> {
    Ok(ReplayRecord {
        id: row.column("id")?,
        message_id: row.column("message_id")?,
        request_key: row.column("request_key")?,
        actor: row.column("actor")?,
        requested_at: from_millis(row.column("requested_at")?),
        target: ReplayTarget {
            exchange: row.column("target_exchange")?,
            routing_key: row.column("target_routing_key")?,
        },
        outcome: row.column("outcome")?,
        detail: row.column("detail")?,
        edited: row.column("edited")?,
    })
}

pub(super) fn summary_from_row<R: ArchiveRow>(row: &R) -> Result<MessageSummary, ArchiveError> {
    let id: i64 = row.column("id")?;
    let deaths: String = row.column("deaths")?;
    let status: String = row.column("status")?;
    let first_death = match (
        row.column::<Option<String>>("first_death_queue")?,
        row.column::<Option<String>>("first_death_reason")?,
        row.column::<Option<String>>("first_death_exchange")?,
    ) {
        (Some(queue), Some(reason), Some(exchange)) => Some(FirstDeath {
            queue,
            reason,
            exchange,
        }),
        _ => None,
    };
    let replay_target = match (
        row.column::<Option<String>>("replay_exchange")?,
        row.column::<Option<String>>("replay_routing_key")?,
    ) {
        (Some(exchange), Some(routing_key)) => Some(ReplayTarget {
            exchange,
            routing_key,
        }),
        _ => None,
    };
    Ok(MessageSummary {
        id,
        queue: row.column("queue")?,
        archived_at: from_millis(row.column("archived_at")?),
        message_id: row.column("message_id")?,
        correlation_id: row.column("correlation_id")?,
        content_type: row.column("content_type")?,
        content_encoding: row.column("content_encoding")?,
        body_size: row.column("body_size")?,
        first_death,
        deaths: serde_json::from_str(&deaths).map_err(|e| ArchiveError::Corrupt {
            id,
            reason: e.to_string(),
        })?,
        replay_target,
        status: MessageStatus::parse(&status).ok_or_else(|| ArchiveError::Corrupt {
            id,
            reason: format!("unknown status {status:?}"),
        })?,
        fields: BTreeMap::new(),
    })
}

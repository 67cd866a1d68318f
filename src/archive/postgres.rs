//! The PostgreSQL archive: for many DLQs, months of failures, and several Lazarus instances
//! sharing one database. A commit is durable before anything is acked (`synchronous_commit`
//! is on by default); a batch goes in as one statement, an `UNNEST` insert per table.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use sha2::Digest;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::PgPoolOptions;
use sqlx::Connection;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder, Row, Transaction};
use time::OffsetDateTime;

use super::postgres_audit::{self, audit};
use super::postgres_search;
use super::sqlite::{
    count_from_row, group_from_row, hourly_from_row, millis, overview, push_conditions,
    replay_from_row, summary_from_row, totals, StatusIn, REPLAY_COLUMNS, SUMMARY_COLUMNS,
};
use super::{postgres_accounts, postgres_actions, postgres_jobs};
use super::{without_copies, ArchivedCopies};
use super::{
    Actor, AuditEntry, ChunkLimit, ItemOutcome, JobAction, JobItem, JobSpec, JobState, JobStep,
    ReplayEdit, ReplayJob, Role, Selection, TokenRecord, TokenSpec, UserRecord,
};
use super::{
    Archive, ArchiveError, ArchivedMessage, FailureGroup, HourlyCount, MessageFilter, MessagePage,
    MessageStatus, MessageSummary, NameLock, PageRequest, PreparedMessage, QueueReasonCount,
    ReplayRecord, ReplayStart, StoreOutcome, StoredBody,
};
use crate::death::ReplayTarget;

#[derive(Debug, Clone)]
pub struct PostgresArchive {
    pool: PgPool,
}

impl PostgresArchive {
    /// Connects, creates the database when it is missing (as SQLite creates its file), and
    /// migrates. Several instances may start at once: the migrator holds an advisory lock.
    pub async fn open(url: &str) -> Result<Self, ArchiveError> {
        if !Postgres::database_exists(url).await? {
            // Another instance may create it first: only its absence afterwards is an error.
            if let Err(e) = Postgres::create_database(url).await {
                if !Postgres::database_exists(url).await? {
                    return Err(e.into());
                }
            }
        }
        // Migrations run without the bounds below (an index on a large table can take longer
        // than any statement Lazarus itself runs); the advisory lock they take makes other
        // instances starting at once wait here.
        let mut migrating = PgConnection::connect(url).await?;
        sqlx::migrate!("migrations/postgres")
            .run(&mut migrating)
            .await?;
        migrating.close().await?;
        let pool = bounded_pool()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await?;
        Ok(PostgresArchive { pool })
    }

    /// How long an HTTP request waits for a connection before it is answered 503: under the
    /// second an orchestrator's probe allows, far above the milliseconds a connection to a
    /// database that is up takes (from the pool, or a new one).
    pub const REQUEST_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(750);

    /// The same database through a pool for HTTP requests (see [`super::ServedArchive`]):
    /// a few connections, opened when first needed, and
    /// [`PostgresArchive::REQUEST_ACQUIRE_TIMEOUT`] to get one. The background pool's 5 s
    /// is right for ingest, which holds its batch and retries; a probe of `/readyz` that
    /// took as long while PostgreSQL was down was taken for a hung process.
    pub fn for_requests(&self) -> PostgresArchive {
        let pool = bounded_pool()
            .max_connections(5)
            .acquire_timeout(Self::REQUEST_ACQUIRE_TIMEOUT)
            .connect_lazy_with((*self.pool.connect_options()).clone());
        PostgresArchive { pool }
    }

    /// The pool, for tests and tools that inspect the database directly.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The first key of instance name locks ("lazi").
const INSTANCE_LOCK_CLASS: i32 = 0x6c61_7a69;

/// What every pooled connection is held to, so that no transaction keeps its locks for
/// long — above all the row of a replay job, which another instance waits to take over
/// when the lease of the job's runner runs out (`--job-lease-secs`, 15 s by default):
///
/// - `idle_in_transaction_session_timeout` 5 s: the server ends a session that sits in a
///   transaction without sending its next statement. Lazarus never waits on anything but the
///   database inside a transaction, so only a client that hangs, is frozen or is cut off by a
///   partition gets there, and its locks are freed before its lease ends (its kernel still
///   answers TCP, so nothing else would ever end it). With a lease under 5 s, takeover comes
///   after these 5 s instead.
/// - `lock_timeout` 10 s: a wait behind a frozen holder outlasts the 5 s above and succeeds;
///   a longer one (behind a live bulk change) fails, and ingest and the job runner retry it
///   while a request gets a 503.
/// - `statement_timeout` 30 s, as long as an HTTP request may take: what a page, ingest or a
///   job step asks takes milliseconds, and a query whose request gave up does not run on.
///   Work on a whole selection lifts both timeouts for its own transaction
///   ([`lift_bounds`]).
const SESSION_BOUNDS: [(&str, &str); 3] = [
    ("idle_in_transaction_session_timeout", "5s"),
    ("lock_timeout", "10s"),
    ("statement_timeout", "30s"),
];

/// What [`lift_bounds`] sets for the rest of a transaction: no statement or lock timeout.
const BULK_BOUNDS: [(&str, &str); 2] = [("lock_timeout", "0"), ("statement_timeout", "0")];

/// Sets these parameters for the session, or (`local`) for the rest of its transaction.
async fn set_bounds(
    conn: &mut PgConnection,
    bounds: &[(&str, &str)],
    local: bool,
) -> Result<(), sqlx::Error> {
    let (names, values): (Vec<&str>, Vec<&str>) = bounds.iter().copied().unzip();
    sqlx::query(
        "SELECT set_config(name, value, $3) FROM unnest($1::text[], $2::text[]) AS b (name, value)",
    )
    .bind(names)
    .bind(values)
    .bind(local)
    .execute(conn)
    .await
    .map(drop)
}

/// Pool options whose connections are held to [`SESSION_BOUNDS`].
fn bounded_pool() -> PgPoolOptions {
    PgPoolOptions::new().after_connect(|conn, _| Box::pin(set_bounds(conn, &SESSION_BOUNDS, false)))
}

/// Lifts the statement and lock timeouts for the rest of this transaction, for work on a
/// whole selection (freezing a job's plan, starting or cancelling it, a dismissal, a
/// purge). At 1,000,000 messages it takes minutes (a dismissal 209 s, a plan 64 s, a purge
/// 78 s: `bulk_work_on_a_large_archive_within_its_bounds`), growing with the selection, so
/// any fixed bound would only make a large enough selection impossible to act on; and it
/// rightly waits for another such change to the same messages. It is never idle, so what the
/// bounds are for is still covered: a frozen client is cut off after 5 s idle.
pub(super) async fn lift_bounds(tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
    set_bounds(tx, &BULK_BOUNDS, true).await
}

/// [`SUMMARY_COLUMNS`] of a `messages` row, its status read from `message_status` — for the
/// rows a query returns only, after its LIMIT.
static SUMMARY: LazyLock<String> = LazyLock::new(|| {
    let columns = SUMMARY_COLUMNS
        .strip_suffix("status")
        .expect("the summary's last column is its status");
    format!("{columns}(SELECT status FROM message_status WHERE message_status.id = messages.id) AS status")
});

/// ` FROM messages WHERE ...`: the messages a list filter selects.
pub(super) fn push_filter<'a>(q: &mut QueryBuilder<'a, Postgres>, filter: &'a MessageFilter) {
    match filter.text.as_deref().map(postgres_search::query) {
        Some(Some(query)) => {
            q.push(" FROM messages WHERE search @@ ")
                .push_bind(query)
                .push("::tsquery");
        }
        // Words without a letter or digit in them: FTS5 finds nothing either.
        Some(None) => {
            q.push(" FROM messages WHERE FALSE");
        }
        None => {
            q.push(" FROM messages WHERE TRUE");
        }
    }
    push_conditions(q, filter, StatusIn::Table);
}

/// ` FROM messages WHERE ...`: the messages of a selection, after `SELECT ...`.
pub(super) fn push_selection<'a>(q: &mut QueryBuilder<'a, Postgres>, selection: &'a Selection) {
    match selection {
        Selection::Ids(ids) => {
            q.push(" FROM messages WHERE messages.id = ANY(")
                .push_bind(ids)
                .push(")");
        }
        Selection::Filter(filter) => push_filter(q, filter),
    }
}

/// How many rows are archived (by any instance) with each fingerprint that a possible copy in
/// the batch has, by queue: one query, through the `messages_fingerprint` hash index.
async fn archived_copies(
    conn: &mut PgConnection,
    batch: &[PreparedMessage],
) -> Result<ArchivedCopies, sqlx::Error> {
    let fingerprints: Vec<&[u8]> = batch
        .iter()
        .filter(|m| m.may_be_archived())
        .map(|m| &m.fingerprint[..])
        .collect();
    let rows = sqlx::query(
        "SELECT queue, fingerprint, count(*) AS n FROM messages WHERE fingerprint = ANY($1) \
         GROUP BY queue, fingerprint",
    )
    .bind(&fingerprints)
    .fetch_all(conn)
    .await?;
    let mut archived = ArchivedCopies::new();
    for row in rows {
        let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
        if let Ok(fingerprint) = fingerprint.try_into() {
            archived.insert((row.try_get("queue")?, fingerprint), row.try_get("n")?);
        }
    }
    Ok(archived)
}

/// Writes a batch whose ids are taken: the messages, their bodies, statuses and business
/// fields, and the totals, the sparkline's hourly counts and the failure groups they
/// add to — all in one statement (data-modifying `WITH` parts, each one `UNNEST` insert), so
/// a batch costs the server one round trip and one plan. Totals keys go in sorted, so
/// instances updating the same rows at once take their locks in one order.
async fn insert_batch(
    conn: &mut PgConnection,
    rows: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    fn first(m: &PreparedMessage) -> Option<&crate::death::FirstDeath> {
        m.history.first_death.as_ref()
    }
    fn target(m: &PreparedMessage) -> Option<&ReplayTarget> {
        m.history.replay_target.as_ref()
    }
    let col = |f: &dyn Fn(&PreparedMessage) -> Option<&str>| -> Vec<Option<&str>> {
        rows.iter().map(|(_, m)| f(m)).collect()
    };
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    let fingerprints: Vec<&[u8]> = rows.iter().map(|(_, m)| &m.fingerprint[..]).collect();
    let archived_at: Vec<i64> = rows
        .iter()
        .map(|(_, m)| millis(m.message.received_at))
        .collect();
    let redelivered: Vec<bool> = rows.iter().map(|(_, m)| m.message.redelivered).collect();
    let body_size: Vec<i64> = rows
        .iter()
        .map(|(_, m)| m.message.body.len() as i64)
        .collect();
    let replay_of: Vec<Option<i64>> = rows.iter().map(|(_, m)| m.replay_of).collect();
    let search: Vec<String> = rows
        .iter()
        .map(|(_, m)| postgres_search::document(&m.search_text))
        .collect();
    let bodies: Vec<&[u8]> = rows.iter().map(|(_, m)| &m.message.body[..]).collect();
    let fields: Vec<(i64, &(String, String))> = rows
        .iter()
        .flat_map(|(id, m)| m.fields.iter().map(move |f| (*id, f)))
        .collect();
    let totals = totals(rows);
    let (hours, groups) = overview(rows);
    sqlx::query(
        "WITH new_messages AS (\
         INSERT INTO messages (id, fingerprint, queue, archived_at, exchange, routing_key, redelivered, \
         message_id, correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, search) \
         SELECT id, fingerprint, queue, archived_at, exchange, routing_key, redelivered, message_id, \
         correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, search::tsvector \
         FROM UNNEST($1::bigint[], $2::bytea[], $3::text[], $4::bigint[], $5::text[], $6::text[], \
         $7::boolean[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::text[], \
         $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[], \
         $21::text[], $22::text[], $23::bigint[], $24::text[]) \
         AS t (id, fingerprint, queue, archived_at, exchange, routing_key, redelivered, message_id, \
         correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, search)), \
         new_bodies AS (\
         INSERT INTO message_bodies (message_id, body) SELECT * FROM UNNEST($1::bigint[], $25::bytea[])), \
         new_status AS (INSERT INTO message_status (id) SELECT * FROM UNNEST($1::bigint[])), \
         new_fields AS (\
         INSERT INTO message_fields (message_id, name, value) \
         SELECT * FROM UNNEST($26::bigint[], $27::text[], $28::text[]) ON CONFLICT DO NOTHING), \
         new_totals AS (\
         INSERT INTO queue_reason_counts (queue, reason, messages, oldest_at, newest_at) \
         SELECT * FROM UNNEST($29::text[], $30::text[], $31::bigint[], $32::bigint[], $33::bigint[]) \
         ON CONFLICT (queue, reason) DO UPDATE SET \
         messages = queue_reason_counts.messages + excluded.messages, \
         oldest_at = LEAST(queue_reason_counts.oldest_at, excluded.oldest_at), \
         newest_at = GREATEST(queue_reason_counts.newest_at, excluded.newest_at)), \
         new_hours AS (\
         INSERT INTO hourly_counts (queue, hour, messages) \
         SELECT * FROM UNNEST($34::text[], $35::bigint[], $36::bigint[]) \
         ON CONFLICT (queue, hour) DO UPDATE SET messages = hourly_counts.messages + excluded.messages) \
         INSERT INTO failure_groups (queue, reason, error, messages, first_seen, last_seen) \
         SELECT * FROM UNNEST($37::text[], $38::text[], $39::text[], $40::bigint[], $41::bigint[], $42::bigint[]) \
         ON CONFLICT (queue, reason, error) DO UPDATE SET \
         messages = failure_groups.messages + excluded.messages, \
         first_seen = LEAST(failure_groups.first_seen, excluded.first_seen), \
         last_seen = GREATEST(failure_groups.last_seen, excluded.last_seen)",
    )
    .bind(&ids)
    .bind(&fingerprints)
    .bind(col(&|m| Some(&m.message.queue)))
    .bind(&archived_at)
    .bind(col(&|m| Some(&m.columns.exchange)))
    .bind(col(&|m| Some(&m.columns.routing_key)))
    .bind(&redelivered)
    .bind(col(&|m| m.columns.message_id.as_deref()))
    .bind(col(&|m| m.columns.correlation_id.as_deref()))
    .bind(col(&|m| m.columns.content_type.as_deref()))
    .bind(col(&|m| m.columns.content_encoding.as_deref()))
    .bind(&body_size)
    .bind(col(&|m| Some(&m.properties_json)))
    .bind(col(&|m| m.headers_json.as_deref()))
    .bind(col(&|m| Some(&m.deaths_json)))
    .bind(col(&|m| m.problems_json.as_deref()))
    .bind(col(&|m| first(m).map(|f| f.queue.as_str())))
    .bind(col(&|m| first(m).map(|f| f.reason.as_str())))
    .bind(col(&|m| first(m).map(|f| f.exchange.as_str())))
    .bind(col(&|m| target(m).map(|t| t.exchange.as_str())))
    .bind(col(&|m| target(m).map(|t| t.routing_key.as_str())))
    .bind(col(&|m| m.error.as_deref()))
    .bind(&replay_of)
    .bind(&search)
    .bind(&bodies)
    .bind(fields.iter().map(|(id, _)| *id).collect::<Vec<i64>>())
    .bind(fields.iter().map(|(_, (n, _))| n.as_str()).collect::<Vec<_>>())
    .bind(fields.iter().map(|(_, (_, v))| v.as_str()).collect::<Vec<_>>())
    .bind(totals.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(totals.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.0).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.1).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.2).collect::<Vec<_>>())
    .bind(hours.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(hours.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(hours.values().copied().collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.2).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.0).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.1).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.2).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// Stores messages known not to be archived yet, and counts them in `outcome` as inserted. Their ids come from the sequence first, so every table of the batch can go in
/// as one statement ([`insert_batch`]).
async fn write_fresh(
    conn: &mut PgConnection,
    fresh: Vec<&PreparedMessage>,
    outcome: &mut StoreOutcome,
) -> Result<(), sqlx::Error> {
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT nextval('messages_id_seq') FROM generate_series(1, $1)")
            .bind(fresh.len() as i64)
            .fetch_all(&mut *conn)
            .await?;
    let rows: Vec<(i64, &PreparedMessage)> = ids.into_iter().zip(fresh).collect();
    insert_batch(conn, &rows).await?;
    outcome.inserted += rows.len() as u64;
    Ok(())
}

/// Business field values of the given messages, by message.
async fn fields_of(
    pool: &PgPool,
    ids: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<String, String>>, sqlx::Error> {
    let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let rows = sqlx::query(
        "SELECT message_id, name, value FROM message_fields WHERE message_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    for row in rows {
        out.entry(row.try_get("message_id")?)
            .or_default()
            .insert(row.try_get("name")?, row.try_get("value")?);
    }
    Ok(out)
}

#[async_trait]
impl Archive for PostgresArchive {
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError> {
        let mut outcome = StoreOutcome::default();
        if batch.is_empty() {
            return Ok(outcome);
        }
        let streams = super::stream_positions(batch);
        if streams.is_empty() && !batch.iter().any(PreparedMessage::may_be_archived) {
            // Nothing can be a copy (the usual case): no lookups, so no transaction to hold
            // open. The one statement that writes the batch commits it as a whole.
            let mut conn = self.pool.acquire().await?;
            write_fresh(&mut conn, batch.iter().collect(), &mut outcome).await?;
            return Ok(outcome);
        }
        // Some may be copies of rows already archived: look them up, then write the rest, in
        // one transaction.
        let mut tx = self.pool.begin().await?;
        let (fresh, duplicates) = without_copies(batch, archived_copies(&mut tx, batch).await?);
        outcome.duplicates = duplicates;
        if !fresh.is_empty() {
            write_fresh(&mut tx, fresh, &mut outcome).await?;
        }
        for (queue, next) in streams {
            sqlx::query(
                "INSERT INTO stream_offsets (queue, next_offset) VALUES ($1, $2) \
                 ON CONFLICT (queue) DO UPDATE SET \
                 next_offset = GREATEST(stream_offsets.next_offset, excluded.next_offset)",
            )
            .bind(queue)
            .bind(next)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(outcome)
    }

    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_offset FROM stream_offsets WHERE queue = $1")
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
        let mut q = QueryBuilder::<Postgres>::new(format!("SELECT {}", *SUMMARY));
        push_filter(&mut q, filter);
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before);
        }
        let limit = page.limit.clamp(1, super::MAX_PAGE_SIZE);
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        // Planned with its values every time (an unnamed statement), never from a cached
        // generic plan: the right plan depends on how common the words and values are. A word
        // in most messages is found fastest by walking the newest ids with the filter, a rare
        // one through the GIN index then a sort; a generic plan picks one for all, and the
        // other then takes seconds at a million messages (see BENCHMARKS.md).
        let rows = q.build().persistent(false).fetch_all(&self.pool).await?;
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
            "SELECT {}, {} FROM messages WHERE id = $1",
            *SUMMARY,
            super::sqlite::DETAIL_COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let fields = fields_of(&self.pool, &[id]).await?.remove(&id);
        super::sqlite::message_from_row(&row, fields.unwrap_or_default()).map(Some)
    }

    async fn get_body(&self, id: i64) -> Result<Option<StoredBody>, ArchiveError> {
        let row = sqlx::query(
            "SELECT b.body, m.content_type, m.content_encoding FROM messages m JOIN message_bodies b ON b.message_id = m.id WHERE m.id = $1",
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
            "SELECT queue, reason, messages, oldest_at, newest_at FROM queue_reason_counts ORDER BY queue COLLATE \"C\", reason COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(count_from_row).collect()
    }

    async fn hourly_counts(&self, since: OffsetDateTime) -> Result<Vec<HourlyCount>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, hour, messages FROM hourly_counts WHERE hour >= $1 ORDER BY queue COLLATE \"C\", hour",
        )
        .bind(since.unix_timestamp().div_euclid(3600))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(hourly_from_row).collect()
    }

    async fn failure_groups(&self, limit: u32) -> Result<Vec<FailureGroup>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT queue, reason, error, messages, first_seen, last_seen FROM failure_groups ORDER BY last_seen DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(group_from_row).collect()
    }

    async fn related(&self, message: &MessageSummary) -> Result<Vec<MessageSummary>, ArchiveError> {
        let replay_of: Option<i64> =
            sqlx::query_scalar("SELECT replay_of FROM messages WHERE id = $1")
                .bind(message.id)
                .fetch_optional(&self.pool)
                .await?
                .flatten();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE id != $1 AND (message_id = $2 OR replay_of = $1 OR id = $3) ORDER BY id DESC LIMIT 20",
            *SUMMARY
        ))
        .bind(message.id)
        .bind(&message.message_id)
        .bind(replay_of)
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
        let mut tx = self.pool.begin().await?;
        let edited_headers = super::sqlite::edited_headers(message_id, edit)?;
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO replays (message_id, request_key, actor, requested_at, target_exchange, target_routing_key, outcome, edited_body, edited_headers) \
             VALUES ($1, $2, $3, $4, $5, $6, 'publishing', $7, $8) ON CONFLICT (request_key) DO NOTHING RETURNING id",
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
                let (action, summary) = super::sqlite::replay_audit(message_id, target, edit);
                audit(&mut tx, actor, action, None, Some(message_id), &summary).await?;
                ReplayStart::New(id)
            }
            None => {
                let row = sqlx::query(&format!(
                    "SELECT {REPLAY_COLUMNS} FROM replays WHERE request_key = $1"
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
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE replays SET outcome = $1, detail = $2, finished_at = $3 WHERE id = $4 RETURNING {REPLAY_COLUMNS}"
        ))
        .bind(outcome)
        .bind(detail)
        .bind(millis(OffsetDateTime::now_utc()))
        .bind(replay_id)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("UPDATE message_status SET status = $1 WHERE id = (SELECT message_id FROM replays WHERE id = $2)")
            .bind(status.as_str())
            .bind(replay_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        replay_from_row(&row)
    }

    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError> {
        let rows = sqlx::query(&format!(
            "SELECT {REPLAY_COLUMNS} FROM replays WHERE message_id = $1 ORDER BY id DESC"
        ))
        .bind(message_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(replay_from_row).collect()
    }

    async fn create_job(&self, spec: &JobSpec<'_>) -> Result<ReplayJob, ArchiveError> {
        postgres_jobs::create_job(&self.pool, spec).await
    }

    async fn job(&self, id: i64) -> Result<Option<ReplayJob>, ArchiveError> {
        postgres_jobs::job(&self.pool, id).await
    }

    async fn jobs(&self, limit: u32) -> Result<Vec<ReplayJob>, ArchiveError> {
        postgres_jobs::jobs(&self.pool, limit).await
    }

    async fn job_items(
        &self,
        id: i64,
        outcome: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobItem>, ArchiveError> {
        postgres_jobs::job_items(&self.pool, id, outcome, after, limit).await
    }

    async fn control_job(
        &self,
        id: i64,
        action: JobAction,
        actor: &Actor,
    ) -> Result<ReplayJob, ArchiveError> {
        postgres_jobs::control_job(&self.pool, id, action, actor).await
    }

    async fn claim_job(
        &self,
        owner: &str,
        instance: Option<&str>,
        lease_ms: u64,
        only: Option<i64>,
    ) -> Result<Option<ReplayJob>, ArchiveError> {
        postgres_jobs::claim_job(&self.pool, owner, instance, lease_ms, only).await
    }

    async fn advance_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        outcomes: &[ItemOutcome],
        next: ChunkLimit,
    ) -> Result<JobStep, ArchiveError> {
        postgres_jobs::advance_job(&self.pool, id, owner, lease_ms, outcomes, next).await
    }

    async fn release_job(
        &self,
        id: i64,
        owner: &str,
        state: JobState,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<(), ArchiveError> {
        postgres_jobs::release_job(&self.pool, id, owner, state, detail, canary_done).await
    }

    async fn note_job(
        &self,
        id: i64,
        owner: &str,
        lease_ms: u64,
        detail: Option<&str>,
        canary_done: bool,
    ) -> Result<bool, ArchiveError> {
        postgres_jobs::note_job(&self.pool, id, owner, lease_ms, detail, canary_done).await
    }

    async fn canary_done(&self, id: i64) -> Result<bool, ArchiveError> {
        postgres_jobs::canary_done(&self.pool, id).await
    }

    async fn canary_deaths(&self, id: i64, since: OffsetDateTime) -> Result<i64, ArchiveError> {
        postgres_jobs::canary_deaths(&self.pool, id, since).await
    }

    async fn dismiss(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        postgres_actions::dismiss(&self.pool, selection, selection_text, note, actor).await
    }

    async fn purge(
        &self,
        selection: &Selection,
        selection_text: &str,
        note: &str,
        actor: &Actor,
    ) -> Result<u64, ArchiveError> {
        postgres_actions::purge(&self.pool, selection, selection_text, note, actor).await
    }

    async fn audit_log(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        postgres_audit::audit_log(&self.pool, before, limit).await
    }

    async fn audit_export(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, ArchiveError> {
        postgres_audit::audit_export(&self.pool, after, limit).await
    }

    async fn put_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        by: &Actor,
    ) -> Result<(), ArchiveError> {
        postgres_accounts::put_user(&self.pool, name, password_hash, role, by).await
    }

    async fn set_password(
        &self,
        name: &str,
        password_hash: &str,
        by: &Actor,
    ) -> Result<bool, ArchiveError> {
        postgres_accounts::set_password(&self.pool, name, password_hash, by).await
    }

    async fn remove_user(&self, name: &str, by: &Actor) -> Result<bool, ArchiveError> {
        postgres_accounts::remove_user(&self.pool, name, by).await
    }

    async fn user(&self, name: &str) -> Result<Option<UserRecord>, ArchiveError> {
        postgres_accounts::user(&self.pool, name).await
    }

    async fn users(&self) -> Result<Vec<UserRecord>, ArchiveError> {
        postgres_accounts::users(&self.pool).await
    }

    async fn create_session(&self, token_hash: &str, user: &str) -> Result<(), ArchiveError> {
        postgres_accounts::create_session(&self.pool, token_hash, user).await
    }

    async fn session_user(
        &self,
        token_hash: &str,
        idle_ms: u64,
        max_ms: u64,
    ) -> Result<Option<UserRecord>, ArchiveError> {
        postgres_accounts::session_user(&self.pool, token_hash, idle_ms, max_ms).await
    }

    async fn end_session(&self, token_hash: &str) -> Result<(), ArchiveError> {
        postgres_accounts::end_session(&self.pool, token_hash).await
    }

    async fn create_token(&self, token: &TokenSpec<'_>, by: &Actor) -> Result<i64, ArchiveError> {
        postgres_accounts::create_token(&self.pool, token, by).await
    }

    async fn token(&self, token_hash: &str) -> Result<Option<TokenRecord>, ArchiveError> {
        postgres_accounts::token(&self.pool, token_hash).await
    }

    async fn revoke_token(&self, id: i64, by: &Actor) -> Result<bool, ArchiveError> {
        postgres_accounts::revoke_token(&self.pool, id, by).await
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, ArchiveError> {
        postgres_accounts::tokens(&self.pool).await
    }

    async fn record(&self, actor: &Actor, action: &str, summary: &str) -> Result<(), ArchiveError> {
        let mut tx = self.pool.begin().await?;
        audit(&mut tx, actor, action, None, None, summary).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), ArchiveError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn writable(&self) -> Result<(), ArchiveError> {
        // A replica after a failover answers, but refuses every write.
        let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&self.pool)
            .await?;
        if read_only == "on" {
            return Err(ArchiveError::Conflict(
                "the database is read-only (a replica?): it takes no writes".into(),
            ));
        }
        Ok(())
    }

    async fn lock_instance_name(&self, name: &str) -> Result<Option<NameLock>, ArchiveError> {
        // A session lock, on a connection of its own: pooled connections come and go. Two
        // 32-bit keys ("lazi" and the name's hash) keep it apart from the one-key locks of
        // the migrator and of job selections.
        let digest = sha2::Sha256::digest(name.as_bytes());
        let key = i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        let mut conn = PgConnection::connect_with(&self.pool.connect_options()).await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(INSTANCE_LOCK_CLASS)
            .bind(key)
            .fetch_one(&mut conn)
            .await?;
        if locked {
            Ok(Some(NameLock::Session(conn)))
        } else {
            let _ = conn.close().await;
            Ok(None)
        }
    }
}

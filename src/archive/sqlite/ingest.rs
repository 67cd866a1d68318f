//! Storing a batch on SQLite: one `BEGIN IMMEDIATE` transaction, numbered rows in a few
//! multi-row statements (a body over a MiB: its first MiB there, the rest a piece a
//! statement), totals kept up to date in the same transaction. A DLQ consumer's batch is
//! appended without its search entries, which the indexer writes after the ack.

use async_trait::async_trait;
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use super::SqliteArchive;
use crate::archive::sql::overview::{overview, totals, Overview};
use crate::archive::sql::{bodies as body, lifecycle, millis, ArchivedRow, Conn};
use crate::archive::{
    copy_keys, counted, stream_positions, without_copies, ArchiveError, ArchivedCopies, Ingest,
    Numbering, PreparedMessage, SearchText, StoreOutcome,
};

/// How many rows are archived with each fingerprint that a possible copy in the batch has, by
/// queue ([`archived_rows`]).
async fn archived_copies(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    batch: &[PreparedMessage],
) -> Result<ArchivedCopies, sqlx::Error> {
    Ok(counted(archived_rows(tx, &copy_keys(batch)).await?))
}

/// The rows archived with these fingerprints ([`SqlArchive::archived_rows`]): among rows
/// without a time (those archived before rows had one, and those whose content carries none)
/// through `messages_fingerprint`; among the others through `messages_fingerprint_dated`,
/// reading each of the times' entries (their fingerprints are in the index) — a row whose
/// fingerprint is asked for has that fingerprint's time, so no other row matches. The indexes
/// are named: the statistics of an archive whose bursts shared a second make a scan look
/// cheaper. A statement's text depends on its number of keys only (a message without a time
/// binds NULL), one of a few ([`shaped`]).
///
/// [`SqlArchive::archived_rows`]: crate::archive::sql::SqlArchive::archived_rows
pub(super) async fn archived_rows(
    conn: &mut SqliteConnection,
    keys: &[([u8; 32], Option<i64>)],
) -> Result<Vec<ArchivedRow>, sqlx::Error> {
    // Each key once: a key in two chunks would find its rows twice.
    let keys: Vec<([u8; 32], Option<i64>)> = keys
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut rows = Vec::new();
    for chunk in shaped(&keys, ROWS_PER_STATEMENT) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT id, queue, fingerprint FROM messages INDEXED BY messages_fingerprint \
             WHERE fingerprint_time IS NULL AND fingerprint IN (",
        );
        let mut list = q.separated(", ");
        for (fingerprint, _) in chunk {
            list.push_bind(&fingerprint[..]);
        }
        q.push(
            ") UNION ALL SELECT id, queue, fingerprint FROM messages \
             INDEXED BY messages_fingerprint_dated WHERE fingerprint_time IN (",
        );
        let mut list = q.separated(", ");
        for (_, time) in chunk {
            list.push_bind(*time);
        }
        q.push(") AND fingerprint IN (");
        let mut list = q.separated(", ");
        for (fingerprint, _) in chunk {
            list.push_bind(&fingerprint[..]);
        }
        q.push(")");
        for row in q.build().fetch_all(&mut *conn).await? {
            let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
            if let Ok(fingerprint) = fingerprint.try_into() {
                rows.push((row.try_get("id")?, row.try_get("queue")?, fingerprint));
            }
        }
    }
    rows.sort_by_key(|(id, _, _)| *id);
    Ok(rows)
}

/// Rows per multi-row INSERT: 34 columns each stays far below SQLite's 32,766 parameters.
/// As many as a full batch (`--batch-size`'s default), so a backlog's batches go in whole.
const ROWS_PER_STATEMENT: usize = 500;

/// A batch's rows in chunks of a few fixed sizes — `most` while that many are left, then the
/// powers of two below it, largest first — so that a multi-row statement has one of a few
/// texts, each prepared once per connection and then taken from its statement cache. Chunks
/// of whatever size a batch has made a new statement almost every batch: SQLite parsed
/// statements of thousands of parameters again and again, ~34,000 instructions a message,
/// 8.6 % of all ingest did (`valgrind --tool=callgrind`, docs/lab-notebook.md, issue 37).
fn shaped<T>(mut rows: &[T], most: usize) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let size = match rows.len() >= most {
            true => most,
            false => 1 << rows.len().ilog2(),
        };
        let (chunk, rest) = rows.split_at(size);
        rows = rest;
        Some(chunk)
    })
}

/// Rows per multi-row INSERT of business fields and their keys: three parameters a row, 5,000
/// rows stay under SQLite's 32,766.
const FIELD_ROWS_PER_STATEMENT: usize = 5_000;

async fn insert_messages(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    rows: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO messages (id, fingerprint, fingerprint_time, queue, vhost, broker, archived_at, exchange, routing_key, redelivered, message_id, correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, replay_routing_key, error, replay_of, snippet, error_type, cause, message_type, convention, failed_queue, replay_target_from, convention_problems) ",
    );
    q.push_values(rows, |mut b, (id, m)| {
        let msg = &m.message;
        let first = m.history.first_death.as_ref();
        let target = m.history.replay_target.as_ref();
        b.push_bind(*id)
            .push_bind(&m.fingerprint[..])
            .push_bind(m.fingerprint_time)
            .push_bind(&msg.queue)
            .push_bind(&msg.vhost)
            .push_bind(&msg.broker)
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
            .push_bind(m.replay_of)
            .push_bind(&m.search_text.snippet)
            // The failure's cause (issue 33).
            .push_bind(&m.error_type)
            .push_bind(&m.cause)
            .push_bind(&m.message_type)
            // Its framework convention (issue 33).
            .push_bind(m.framework.as_ref().map(|f| f.convention.name()))
            .push_bind(m.failed_queue())
            .push_bind(m.framework.as_ref().and_then(|f| f.target_from.as_deref()))
            .push_bind(m.convention_problems_json());
    });
    q.build().execute(&mut **tx).await?;
    Ok(())
}

/// Keeps the sparkline's hourly counts and the failure groups up to date.
async fn record_overview(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    rows: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    let Overview {
        hours,
        minutes,
        groups,
        group_minutes,
    } = overview(rows);
    // Messages per DLQ and period: the sparkline's hours, "dying now"'s minutes.
    for (table, period, counts) in [
        ("minute_counts", "minute", minutes),
        ("hourly_counts", "hour", hours),
    ] {
        for ((queue, at), messages) in counts {
            sqlx::query(&format!(
                "INSERT INTO {table} (queue, {period}, messages) VALUES (?, ?, ?) \
                 ON CONFLICT (queue, {period}) DO UPDATE SET messages = messages + excluded.messages"
            ))
            .bind(queue)
            .bind(at)
            .bind(messages)
            .execute(&mut **tx)
            .await?;
        }
    }
    for ((key, minute), messages) in group_minutes {
        sqlx::query(
            "INSERT INTO group_minutes (dlq, queue, reason, cause, message_type, minute, messages) \
             VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (dlq, queue, reason, cause, message_type, minute) \
             DO UPDATE SET messages = messages + excluded.messages",
        )
        .bind(key.dlq)
        .bind(key.queue)
        .bind(key.reason)
        .bind(key.cause)
        .bind(key.message_type)
        .bind(minute)
        .bind(messages)
        .execute(&mut **tx)
        .await?;
    }
    for (key, count) in groups {
        sqlx::query(
            "INSERT INTO failure_groups (dlq, queue, reason, cause, message_type, error_type, example, \
             messages, open_messages, settling_messages, first_seen, last_seen) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?) \
             ON CONFLICT (dlq, queue, reason, cause, message_type) DO UPDATE SET \
             messages = messages + excluded.messages, open_messages = open_messages + excluded.messages, \
             first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)",
        )
        .bind(key.dlq)
        .bind(key.queue)
        .bind(key.reason)
        .bind(key.cause)
        .bind(key.message_type)
        .bind(count.error_type)
        .bind(count.example)
        .bind(count.messages)
        .bind(count.messages)
        .bind(count.first)
        .bind(count.last)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

#[async_trait]
impl Ingest for SqliteArchive {
    /// Stores a batch in one durable transaction and returns only once the commit is on disk.
    /// A redelivered message (or one a failed attempt may have stored: see
    /// [`PreparedMessage::maybe_stored`]) whose fingerprint is archived from its queue is
    /// skipped, as many of them in the batch as there are such rows ([`without_copies`]);
    /// anything else is stored, even when identical content is already archived.
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError> {
        // The batch's search words are gathered before the write lock is taken.
        let terms = terms_of(batch);
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout), so a batch never
        // fails half-way on a lock upgrade when several consumers write at once.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let outcome = write_batch(&mut tx, batch, Some(terms)).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// As [`Ingest::store_batch`], without the search entries: each message's id waits in
    /// `index_pending` for the indexer. Gathering the search words and FTS5's tokenizing alone
    /// were a sixth of the instructions ingest ran (callgrind, docs/lab-notebook.md), all of
    /// it between a delivery and its ack.
    async fn append_numbered(
        &self,
        batch: &[PreparedMessage],
        _numbering: &mut Numbering,
    ) -> Result<StoreOutcome, ArchiveError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let outcome = write_batch(&mut tx, batch, None).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Where to resume reading a stream DLQ: the offset after the last one archived from it
    /// (`None`: nothing archived from it as a stream yet).
    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_offset FROM stream_offsets WHERE queue = ?")
                .bind(queue)
                .fetch_optional(&self.pool)
                .await?;
        Ok(next.map(|n| n as u64))
    }

    /// Checks the database takes a write now, as a batch makes one: a probe message written
    /// through the batch's own statements (locks, triggers, constraints, a read-only file) and
    /// rolled back, then a commit of the probe row (a full disk, a failing fsync).
    async fn writable(&self) -> Result<(), ArchiveError> {
        let probe = [PreparedMessage::probe()];
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        write_batch(&mut tx, &probe, Some(terms_of(&probe))).await?;
        tx.rollback().await?;
        sqlx::query(
            "INSERT INTO write_probe (id, probed_at) VALUES (1, ?) \
             ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
        )
        .bind(millis(time::OffsetDateTime::now_utc()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// The search words of a batch (copies among its messages hold the words of what they copy:
/// nothing new; a message prepared without its search entries has none yet).
fn terms_of(batch: &[PreparedMessage]) -> super::terms::Terms {
    let mut terms = super::terms::Terms::default();
    for m in batch.iter().filter(|m| !m.search_later) {
        terms.add(&m.search_text);
    }
    terms
}

/// Writes a batch in the caller's transaction, which holds the write lock: the caller commits
/// it (or, for the write probe, rolls it back). With its search words (`terms`), its search
/// entries go in with it; without, its ids wait in `index_pending` for the indexer, as those
/// of messages prepared without their entries ([`PreparedMessage::search_later`]) always do.
async fn write_batch(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    batch: &[PreparedMessage],
    terms: Option<super::terms::Terms>,
) -> Result<StoreOutcome, ArchiveError> {
    let mut outcome = StoreOutcome::default();
    let (fresh, duplicates) = without_copies(batch, archived_copies(tx, batch).await?);
    outcome.duplicates = duplicates;
    // Holding the write lock, the next ids are ours: number the rows up front so that
    // messages, bodies and search entries go in as a few multi-row statements.
    // AUTOINCREMENT's counter, so an id is never reused even after the newest rows are
    // deleted (an explicit id above it moves it on).
    let first_id: i64 = sqlx::query_scalar(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0), coalesce((SELECT max(id) FROM messages), 0)) + 1",
    )
        .fetch_one(&mut **tx)
        .await?;
    let rows: Vec<(i64, &PreparedMessage)> = (first_id..).zip(fresh).collect();
    let originals: Vec<i64> = rows.iter().filter_map(|(_, m)| m.replay_of).collect();
    lifecycle::copies_died(&mut Conn::from(&mut *tx), &originals).await?;
    for chunk in shaped(&rows, ROWS_PER_STATEMENT) {
        insert_messages(tx, chunk).await?;
        let mut bodies =
            QueryBuilder::<Sqlite>::new("INSERT INTO message_bodies (message_id, body) ");
        bodies.push_values(chunk, |mut b, (id, m)| {
            b.push_bind(*id).push_bind(body::head(&m.message.body));
        });
        bodies.build().execute(&mut **tx).await?;
        // A body over a MiB: the rest of it a piece a statement, never bound whole.
        for (id, m) in chunk
            .iter()
            .filter(|(_, m)| body::has_rest(&m.message.body))
        {
            body::write_rest(&mut Conn::from(&mut *tx), *id, &m.message.body).await?;
        }
        if terms.is_some() {
            let now: Vec<(i64, &PreparedMessage)> = chunk
                .iter()
                .filter(|(_, m)| !m.search_later)
                .copied()
                .collect();
            write_search_entries(tx, &now).await?;
        }
    }
    match terms {
        Some(terms) => {
            terms.save(tx).await?;
            let later: Vec<i64> = rows
                .iter()
                .filter(|(_, m)| m.search_later)
                .map(|(id, _)| *id)
                .collect();
            if !later.is_empty() {
                // A JSON array: one statement text whatever their number.
                sqlx::query("INSERT INTO index_pending (id) SELECT value FROM json_each(?)")
                    .bind(serde_json::to_string(&later).expect("ids serialise"))
                    .execute(&mut **tx)
                    .await?;
            }
        }
        // Contiguous ids: one statement of one text whatever the batch.
        None if !rows.is_empty() => {
            sqlx::query(
                "WITH RECURSIVE r (id) AS (SELECT ? UNION ALL SELECT id + 1 FROM r WHERE id < ?) \
                 INSERT INTO index_pending (id) SELECT id FROM r",
            )
            .bind(first_id)
            .bind(first_id + rows.len() as i64 - 1)
            .execute(&mut **tx)
            .await?;
        }
        None => {}
    }
    record_overview(tx, &rows).await?;
    for ((queue, reason), t) in totals(&rows) {
        sqlx::query(
            "INSERT INTO queue_reason_counts (queue, reason, messages, open_messages, bytes, oldest_at, newest_at, broker) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (queue, reason) DO UPDATE SET messages = messages + excluded.messages, \
             open_messages = open_messages + excluded.messages, bytes = bytes + excluded.bytes, \
             oldest_at = min(oldest_at, excluded.oldest_at), newest_at = max(newest_at, excluded.newest_at)",
        )
        .bind(queue)
        .bind(reason)
        .bind(t.messages)
        .bind(t.messages)
        .bind(t.bytes)
        .bind(t.oldest)
        .bind(t.newest)
        .bind(t.broker)
        .execute(&mut **tx)
        .await?;
    }
    for (queue, next) in stream_positions(batch) {
        sqlx::query(
            "INSERT INTO stream_offsets (queue, next_offset) VALUES (?, ?) \
             ON CONFLICT (queue) DO UPDATE SET next_offset = max(next_offset, excluded.next_offset)",
        )
        .bind(queue)
        .bind(next)
        .execute(&mut **tx)
        .await?;
    }
    outcome.inserted = rows.len() as u64;
    Ok(outcome)
}

/// FTS5's rows for messages that have none yet, in chunks of a few fixed sizes.
pub(super) async fn insert_fts(
    conn: &mut SqliteConnection,
    rows: &[(i64, &SearchText)],
) -> Result<(), sqlx::Error> {
    for chunk in shaped(rows, ROWS_PER_STATEMENT) {
        let mut fts =
            QueryBuilder::<Sqlite>::new("INSERT INTO messages_fts (rowid, body, ids, headers) ");
        fts.push_values(chunk, |mut b, (id, t)| {
            b.push_bind(*id)
                .push_bind(&t.body)
                .push_bind(&t.ids)
                .push_bind(&t.headers);
        });
        fts.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// The search entries of a chunk of a batch: FTS5's rows, the business fields and their keys.
async fn write_search_entries(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    chunk: &[(i64, &PreparedMessage)],
) -> Result<(), sqlx::Error> {
    let texts: Vec<(i64, &SearchText)> =
        chunk.iter().map(|(id, m)| (*id, &m.search_text)).collect();
    insert_fts(tx, &texts).await?;
    let fields: Vec<(i64, &(String, String))> = chunk
        .iter()
        .flat_map(|(id, m)| m.fields.iter().map(move |f| (*id, f)))
        .collect();
    for fields in shaped(&fields, FIELD_ROWS_PER_STATEMENT) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT OR IGNORE INTO message_fields (message_id, name, value) ",
        );
        q.push_values(fields, |mut b, (id, (name, value))| {
            b.push_bind(*id).push_bind(name).push_bind(value);
        });
        q.build().execute(&mut **tx).await?;
    }
    let keys: Vec<(i64, &str, String)> = chunk
        .iter()
        .flat_map(|(id, m)| m.field_keys().into_iter().map(move |(n, k)| (*id, n, k)))
        .collect();
    for keys in shaped(&keys, FIELD_ROWS_PER_STATEMENT) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT OR IGNORE INTO message_field_keys (message_id, name, folded) ",
        );
        q.push_values(keys, |mut b, (id, name, key)| {
            b.push_bind(*id).push_bind(*name).push_bind(key);
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_cut_into_a_few_fixed_statement_sizes() {
        let sizes = |n: usize, most: usize| -> Vec<usize> {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = shaped(&rows, most).collect();
            // Every row once, in order.
            assert_eq!(chunks.concat(), rows);
            chunks.iter().map(|c| c.len()).collect()
        };
        assert_eq!(sizes(0, 500), Vec::<usize>::new());
        assert_eq!(sizes(1, 500), [1]);
        assert_eq!(sizes(500, 500), [500], "a full batch in one statement");
        assert_eq!(sizes(127, 500), [64, 32, 16, 8, 4, 2, 1]);
        assert_eq!(sizes(1_300, 500), [500, 500, 256, 32, 8, 4]);
        // Whatever the batch, a few distinct sizes: the statements' texts.
        let distinct: std::collections::BTreeSet<usize> =
            (0..3_000).flat_map(|n| sizes(n, 500)).collect();
        assert_eq!(distinct.len(), 10, "{distinct:?}");
    }
}

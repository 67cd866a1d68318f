//! Storing a batch on PostgreSQL: ids from the sequence, then every table in one statement;
//! a transaction only when some of the batch may be copies of archived rows, or replays that
//! died again, or a body is over a MiB (its other pieces a statement each).

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool, Row};

use super::search;
use super::PostgresArchive;
use crate::archive::sql::overview::{overview, totals, Overview};
use crate::archive::sql::{bodies, lifecycle, millis, ArchivedRow, Conn};
use crate::archive::{
    copy_keys, counted, stream_positions, without_copies, ArchiveError, ArchivedCopies, Ingest,
    Numbering, PreparedMessage, StoreOutcome,
};
use crate::message::death::ReplayTarget;

/// How many rows are archived (by any instance) with each fingerprint that a possible copy in
/// the batch has, by queue ([`archived_rows`]).
async fn archived_copies(
    conn: &mut PgConnection,
    batch: &[PreparedMessage],
) -> Result<ArchivedCopies, sqlx::Error> {
    Ok(counted(archived_rows(conn, &copy_keys(batch)).await?))
}

/// The rows archived with these fingerprints ([`SqlArchive::archived_rows`]), in one query:
/// through the `messages_fingerprint` hash index by the fingerprint alone among rows without
/// a time (those archived before rows had one, and those whose content carries none), and
/// through `messages_fingerprint_dated` by each distinct time and fingerprint among the others.
///
/// [`SqlArchive::archived_rows`]: crate::archive::sql::SqlArchive::archived_rows
pub(super) async fn archived_rows(
    conn: &mut PgConnection,
    keys: &[([u8; 32], Option<i64>)],
) -> Result<Vec<ArchivedRow>, sqlx::Error> {
    let fingerprints: Vec<&[u8]> = keys.iter().map(|(f, _)| &f[..]).collect();
    // Each (time, fingerprint) once: the join below would find a row once per repeat.
    let dated: std::collections::BTreeSet<(i64, &[u8])> = keys
        .iter()
        .filter_map(|(f, time)| Some(((*time)?, &f[..])))
        .collect();
    let (times, dated_fingerprints): (Vec<i64>, Vec<&[u8]>) = dated.into_iter().unzip();
    let found = sqlx::query(
        "SELECT id, queue, fingerprint FROM messages \
         WHERE fingerprint_time IS NULL AND fingerprint = ANY($1) \
         UNION ALL \
         SELECT m.id, m.queue, m.fingerprint FROM UNNEST($2::bigint[], $3::bytea[]) AS k (t, f) \
         JOIN messages m ON m.fingerprint_time = k.t AND m.fingerprint = k.f \
         ORDER BY id",
    )
    .bind(&fingerprints)
    .bind(&times)
    .bind(&dated_fingerprints)
    .fetch_all(conn)
    .await?;
    let mut rows = Vec::with_capacity(found.len());
    for row in found {
        let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
        if let Ok(fingerprint) = fingerprint.try_into() {
            rows.push((row.try_get("id")?, row.try_get("queue")?, fingerprint));
        }
    }
    Ok(rows)
}

/// When a batch's search entries are written ([`Ingest::append_numbered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// In the batch's own statement.
    Now,
    /// By the indexer, after the ack: the batch's ids wait in `index_pending`.
    Later,
}

/// Writes a batch whose ids are taken: the messages, their bodies and statuses, the totals,
/// the sparkline's hourly counts and the failure groups they add to, and either their search
/// entries (the document, the business fields with the keys `field:value` finds them by) or
/// their ids for the indexer — all in one statement (data-modifying `WITH` parts, each one
/// `UNNEST` insert), so a batch costs the server one round trip and one plan. Totals keys go
/// in sorted, so instances updating the same rows at once take their locks in one order.
async fn insert_batch(
    conn: &mut PgConnection,
    rows: &[(i64, &PreparedMessage)],
    search: Search,
) -> Result<(), sqlx::Error> {
    fn first(m: &PreparedMessage) -> Option<&crate::message::death::FirstDeath> {
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
    // Now: those prepared with their search entries; the rest wait for the indexer
    // ([`PreparedMessage::search_later`]).
    let now = |m: &PreparedMessage| search == Search::Now && !m.search_later;
    let (mut indexed, mut waiting) = (Vec::new(), Vec::new());
    for (id, m) in rows {
        match now(m) {
            true => indexed.push(*id),
            false => waiting.push(*id),
        }
    }
    let indexed_rows = || rows.iter().filter(|(_, m)| now(m));
    let documents: Vec<String> = indexed_rows()
        .map(|(_, m)| search::document(&m.search_text))
        .collect();
    // A body over a MiB: its first MiB here, the rest by `write_fresh`.
    let heads: Vec<&[u8]> = rows
        .iter()
        .map(|(_, m)| bodies::head(&m.message.body))
        .collect();
    let fields: Vec<(i64, &(String, String))> = indexed_rows()
        .flat_map(|(id, m)| m.fields.iter().map(move |f| (*id, f)))
        .collect();
    let keys: Vec<(i64, &str, String)> = indexed_rows()
        .flat_map(|(id, m)| m.field_keys().into_iter().map(move |(n, k)| (*id, n, k)))
        .collect();
    let totals = totals(rows);
    let Overview {
        hours,
        minutes,
        groups,
        group_minutes,
    } = overview(rows);
    sqlx::query(
        "WITH new_messages AS (\
         INSERT INTO messages (id, fingerprint, queue, vhost, broker, archived_at, exchange, routing_key, redelivered, \
         message_id, correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, snippet, error_type, cause, message_type, convention, \
         failed_queue, replay_target_from, convention_problems, fingerprint_time) \
         SELECT id, fingerprint, queue, vhost, broker, archived_at, exchange, routing_key, redelivered, message_id, \
         correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, snippet, error_type, cause, message_type, \
         convention, failed_queue, replay_target_from, convention_problems, fingerprint_time \
         FROM UNNEST($1::bigint[], $2::bytea[], $3::text[], $51::text[], $73::text[], $4::bigint[], $5::text[], $6::text[], \
         $7::boolean[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::text[], \
         $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[], \
         $21::text[], $22::text[], $23::bigint[], $49::text[], \
         $55::text[], $56::text[], $57::text[], $62::text[], $63::text[], $64::text[], $65::text[], $77::bigint[]) \
         AS t (id, fingerprint, queue, vhost, broker, archived_at, exchange, routing_key, redelivered, message_id, \
         correlation_id, content_type, content_encoding, body_size, properties, headers, deaths, \
         death_problems, first_death_queue, first_death_reason, first_death_exchange, replay_exchange, \
         replay_routing_key, error, replay_of, snippet, error_type, cause, message_type, convention, \
         failed_queue, replay_target_from, convention_problems, fingerprint_time)), \
         new_search AS (\
         INSERT INTO message_search (id, search) \
         SELECT i, s::tsvector FROM UNNEST($75::bigint[], $24::text[]) AS t (i, s)), \
         new_waiting AS (INSERT INTO index_pending (id) SELECT * FROM UNNEST($76::bigint[])), \
         new_bodies AS (\
         INSERT INTO message_bodies (message_id, body) SELECT * FROM UNNEST($1::bigint[], $25::bytea[])), \
         new_status AS (INSERT INTO message_status (id, group_queue, group_reason, group_cause) \
         SELECT * FROM UNNEST($1::bigint[], $43::text[], $44::text[], $45::text[])), \
         new_fields AS (\
         INSERT INTO message_fields (message_id, name, value) \
         SELECT * FROM UNNEST($26::bigint[], $27::text[], $28::text[]) ON CONFLICT DO NOTHING), \
         new_field_keys AS (\
         INSERT INTO message_field_keys (message_id, name, folded) \
         SELECT * FROM UNNEST($52::bigint[], $53::text[], $54::text[]) ON CONFLICT DO NOTHING), \
         new_totals AS (\
         INSERT INTO queue_reason_counts (queue, reason, messages, open_messages, bytes, oldest_at, newest_at, broker) \
         SELECT q, r, n, n, b, o, w, k FROM UNNEST($29::text[], $30::text[], $31::bigint[], $50::bigint[], \
         $32::bigint[], $33::bigint[], $74::text[]) AS t (q, r, n, b, o, w, k) \
         ON CONFLICT (queue, reason) DO UPDATE SET \
         messages = queue_reason_counts.messages + excluded.messages, \
         open_messages = queue_reason_counts.open_messages + excluded.messages, \
         bytes = queue_reason_counts.bytes + excluded.bytes, \
         oldest_at = LEAST(queue_reason_counts.oldest_at, excluded.oldest_at), \
         newest_at = GREATEST(queue_reason_counts.newest_at, excluded.newest_at)), \
         new_hours AS (\
         INSERT INTO hourly_counts (queue, hour, messages) \
         SELECT * FROM UNNEST($34::text[], $35::bigint[], $36::bigint[]) \
         ON CONFLICT (queue, hour) DO UPDATE SET messages = hourly_counts.messages + excluded.messages), \
         new_minutes AS (\
         INSERT INTO minute_counts (queue, minute, messages) \
         SELECT * FROM UNNEST($46::text[], $47::bigint[], $48::bigint[]) \
         ON CONFLICT (queue, minute) DO UPDATE SET messages = minute_counts.messages + excluded.messages), \
         new_group_minutes AS (\
         INSERT INTO group_minutes (dlq, queue, reason, cause, message_type, minute, messages) \
         SELECT * FROM UNNEST($66::text[], $67::text[], $68::text[], $69::text[], $70::text[], \
         $71::bigint[], $72::bigint[]) \
         ON CONFLICT (dlq, queue, reason, cause, message_type, minute) \
         DO UPDATE SET messages = group_minutes.messages + excluded.messages) \
         INSERT INTO failure_groups (dlq, queue, reason, cause, message_type, error_type, example, \
         messages, open_messages, settling_messages, first_seen, last_seen) \
         SELECT d, q, r, c, mt, et, x, n, n, 0, f, l FROM UNNEST($58::text[], $37::text[], $38::text[], \
         $39::text[], $59::text[], $60::text[], $61::text[], $40::bigint[], $41::bigint[], $42::bigint[]) \
         AS t (d, q, r, c, mt, et, x, n, f, l) \
         ON CONFLICT (dlq, queue, reason, cause, message_type) DO UPDATE SET \
         messages = failure_groups.messages + excluded.messages, \
         open_messages = failure_groups.open_messages + excluded.messages, \
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
    .bind(&documents)
    .bind(&heads)
    .bind(fields.iter().map(|(id, _)| *id).collect::<Vec<i64>>())
    .bind(fields.iter().map(|(_, (n, _))| n.as_str()).collect::<Vec<_>>())
    .bind(fields.iter().map(|(_, (_, v))| v.as_str()).collect::<Vec<_>>())
    .bind(totals.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(totals.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.messages).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.oldest).collect::<Vec<_>>())
    .bind(totals.values().map(|v| v.newest).collect::<Vec<_>>())
    .bind(hours.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(hours.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(hours.values().copied().collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.queue).collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.reason).collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.cause).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.messages).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.first).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.last).collect::<Vec<_>>())
    .bind(rows.iter().map(|(_, m)| m.group().queue).collect::<Vec<_>>())
    .bind(rows.iter().map(|(_, m)| m.group().reason).collect::<Vec<_>>())
    .bind(rows.iter().map(|(_, m)| m.group().cause).collect::<Vec<_>>())
    .bind(minutes.keys().map(|k| k.0).collect::<Vec<_>>())
    .bind(minutes.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(minutes.values().copied().collect::<Vec<_>>())
    .bind(col(&|m| m.search_text.snippet.as_deref()))
    .bind(totals.values().map(|v| v.bytes).collect::<Vec<_>>())
    .bind(col(&|m| Some(&m.message.vhost)))
    .bind(keys.iter().map(|(id, _, _)| *id).collect::<Vec<i64>>())
    .bind(keys.iter().map(|(_, n, _)| *n).collect::<Vec<&str>>())
    .bind(keys.iter().map(|(_, _, k)| k.as_str()).collect::<Vec<&str>>())
    // The failure's cause (issue 33): the message's, then its group's.
    .bind(col(&|m| m.error_type.as_deref()))
    .bind(col(&|m| Some(&m.cause)))
    .bind(col(&|m| m.message_type.as_deref()))
    .bind(groups.keys().map(|k| k.dlq).collect::<Vec<_>>())
    .bind(groups.keys().map(|k| k.message_type).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.error_type).collect::<Vec<_>>())
    .bind(groups.values().map(|v| v.example).collect::<Vec<_>>())
    // Its framework convention (issue 33).
    .bind(col(&|m| m.framework.as_ref().map(|f| f.convention.name())))
    .bind(col(&|m| m.failed_queue()))
    .bind(col(&|m| m.framework.as_ref().and_then(|f| f.target_from.as_deref())))
    .bind(rows.iter().map(|(_, m)| m.convention_problems_json()).collect::<Vec<_>>())
    // Each group's minutes (issue 35).
    .bind(group_minutes.keys().map(|k| k.0.dlq).collect::<Vec<_>>())
    .bind(group_minutes.keys().map(|k| k.0.queue).collect::<Vec<_>>())
    .bind(group_minutes.keys().map(|k| k.0.reason).collect::<Vec<_>>())
    .bind(group_minutes.keys().map(|k| k.0.cause).collect::<Vec<_>>())
    .bind(group_minutes.keys().map(|k| k.0.message_type).collect::<Vec<_>>())
    .bind(group_minutes.keys().map(|k| k.1).collect::<Vec<_>>())
    .bind(group_minutes.values().copied().collect::<Vec<_>>())
    // Its broker (issue 36).
    .bind(col(&|m| Some(&m.message.broker)))
    // Each total's broker, for the metrics' `broker` label.
    .bind(totals.values().map(|v| v.broker).collect::<Vec<_>>())
    // Its search entries now, or its id waiting for the indexer (issue 37).
    .bind(&indexed)
    .bind(&waiting)
    // The time its content carries: the fingerprint's index is in its order (issue 37).
    .bind(rows.iter().map(|(_, m)| m.fingerprint_time).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes the batch's archive ids from the sequence, as many as it has messages (a retry
/// stores no more rows than that), once the batch before it has taken its own, and keeps
/// them for a retry ([`Numbering`]). Before any connection is held for the batch: a batch
/// waiting its turn holds nothing another needs, and no transaction waits on it.
async fn number(
    pool: &PgPool,
    batch_len: usize,
    numbering: &mut Numbering,
) -> Result<(), sqlx::Error> {
    if numbering.taken().len() < batch_len {
        numbering.wait_turn().await;
        let ids: Vec<i64> =
            sqlx::query_scalar("SELECT nextval('messages_id_seq') FROM generate_series(1, $1)")
                .bind(batch_len as i64)
                .fetch_all(pool)
                .await?;
        numbering.keep(ids);
    }
    Ok(())
}

/// Stores messages known not to be archived yet, numbered with the batch's `ids`, and counts
/// them in `outcome` as inserted. The ids are taken up front ([`number`]), so every table of
/// the batch can go in as one statement ([`insert_batch`]); the pieces of a body over a MiB
/// follow, one statement each (the caller's transaction holds them together).
async fn write_fresh(
    conn: &mut PgConnection,
    ids: &[i64],
    fresh: Vec<&PreparedMessage>,
    search: Search,
    outcome: &mut StoreOutcome,
) -> Result<(), sqlx::Error> {
    let rows: Vec<(i64, &PreparedMessage)> = ids.iter().copied().zip(fresh).collect();
    insert_batch(conn, &rows, search).await?;
    for (id, m) in rows
        .iter()
        .filter(|(_, m)| bodies::has_rest(&m.message.body))
    {
        bodies::write_rest(&mut Conn::Postgres(&mut *conn), *id, &m.message.body).await?;
    }
    outcome.inserted += rows.len() as u64;
    Ok(())
}

impl PostgresArchive {
    /// Stores a batch in one durable transaction and returns only once the commit is on disk,
    /// its search entries written `search`.
    async fn store_with(
        &self,
        batch: &[PreparedMessage],
        numbering: &mut Numbering,
        search: Search,
    ) -> Result<StoreOutcome, ArchiveError> {
        let mut outcome = StoreOutcome::default();
        if batch.is_empty() {
            return Ok(outcome);
        }
        number(&self.pool, batch.len(), numbering).await?;
        let ids = numbering.taken();
        let streams = stream_positions(batch);
        let replayed_copies = batch.iter().any(|m| m.replay_of.is_some());
        let big_bodies = batch.iter().any(|m| bodies::has_rest(&m.message.body));
        if streams.is_empty()
            && !replayed_copies
            && !big_bodies
            && !batch.iter().any(PreparedMessage::may_be_archived)
        {
            // Nothing can be a copy (the usual case), nor is any a replay that died again: no
            // lookups, so no transaction to hold open. The one statement that writes the batch
            // commits it as a whole.
            let mut conn = self.pool.acquire().await?;
            write_fresh(&mut conn, ids, batch.iter().collect(), search, &mut outcome).await?;
            return Ok(outcome);
        }
        // Some may be copies of rows already archived (look them up, then write the rest), or
        // a body takes more than the one statement: one transaction.
        let mut tx = self.pool.begin().await?;
        let (fresh, duplicates) = without_copies(batch, archived_copies(&mut tx, batch).await?);
        outcome.duplicates = duplicates;
        // Replays that died again: their originals first (status rows before counts, as every
        // writer takes them).
        let originals: Vec<i64> = fresh.iter().filter_map(|m| m.replay_of).collect();
        lifecycle::copies_died(&mut Conn::from(&mut tx), &originals).await?;
        if !fresh.is_empty() {
            write_fresh(&mut tx, ids, fresh, search, &mut outcome).await?;
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
}

#[async_trait]
impl Ingest for PostgresArchive {
    /// Stores a batch in one durable transaction and returns only once the commit is on disk.
    /// A redelivered message (or one a failed attempt may have stored: see
    /// [`PreparedMessage::maybe_stored`]) whose fingerprint is archived from its queue is
    /// skipped, as many of them in the batch as there are such rows ([`without_copies`]);
    /// anything else is stored, even when identical content is already archived.
    async fn store_batch(&self, batch: &[PreparedMessage]) -> Result<StoreOutcome, ArchiveError> {
        self.store_numbered(batch, &mut Numbering::default()).await
    }

    async fn store_numbered(
        &self,
        batch: &[PreparedMessage],
        numbering: &mut Numbering,
    ) -> Result<StoreOutcome, ArchiveError> {
        self.store_with(batch, numbering, Search::Now).await
    }

    /// [`Ingest::store_numbered`] without the search entries, which the indexer writes after
    /// the ack: the document's tokens into a GIN index, the business fields and their keys
    /// were a large part of the batch's statement.
    async fn append_numbered(
        &self,
        batch: &[PreparedMessage],
        numbering: &mut Numbering,
    ) -> Result<StoreOutcome, ArchiveError> {
        self.store_with(batch, numbering, Search::Later).await
    }

    /// Where to resume reading a stream DLQ: the offset after the last one archived from it
    /// (`None`: nothing archived from it as a stream yet).
    async fn stream_offset(&self, queue: &str) -> Result<Option<u64>, ArchiveError> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_offset FROM stream_offsets WHERE queue = $1")
                .bind(queue)
                .fetch_optional(&self.pool)
                .await?;
        Ok(next.map(|n| n as u64))
    }

    /// Checks the database takes a write now, as a batch makes one: a probe message written
    /// through the batch's own statement (a read-only replica, triggers, constraints, locks)
    /// and rolled back (its id is taken from the sequence and not used), then a commit that
    /// writes and flushes a transaction id (a server that cannot write its log).
    async fn writable(&self) -> Result<(), ArchiveError> {
        let probe = PreparedMessage::probe();
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query_scalar("SELECT nextval('messages_id_seq')")
            .fetch_one(&mut *tx)
            .await?;
        let outcome = &mut StoreOutcome::default();
        write_fresh(&mut tx, &[id], vec![&probe], Search::Later, outcome).await?;
        tx.rollback().await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT txid_current()")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Two: the server's insert is the slow half of ingest on PostgreSQL, and a second
    /// connection lets it write the next batch while the first commits (measured in
    /// docs/lab-notebook.md; a third added nothing). Both batches take their locks on the shared
    /// totals in one order (sorted keys), as concurrent instances do.
    fn batches_at_once(&self) -> usize {
        2
    }
}

//! The PostgreSQL archive: for many DLQs, months of failures, and several Lazarus instances
//! sharing one database. A commit is durable before anything is acked (`synchronous_commit`
//! is on by default); a batch goes in as one statement, an `UNNEST` insert per table. What
//! only PostgreSQL does is here (opening with bounded sessions, ingest, search, dismiss and
//! purge, the instance name); what both backends do the same way is in `sql/`.

mod actions;
mod ingest;
mod messages;
mod search;

use std::time::Duration;

use async_trait::async_trait;
use sha2::Digest;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres, QueryBuilder};

use super::sql::filter::push_freeze;
use super::sql::{Conn, Pool, SqlArchive};
use super::{ArchiveError, InstanceLock, JobSpec, NameLock, SearchText, Selection};

#[derive(Debug, Clone)]
pub struct PostgresArchive {
    pool: PgPool,
}

impl PostgresArchive {
    /// Connects, creates the database when it is missing (as SQLite creates its file), and
    /// migrates. Several instances may start at once: the migrator holds an advisory lock.
    pub async fn open(url: &str) -> Result<Self, ArchiveError> {
        Self::prepare(url).await?;
        Self::unprepared(url)
    }

    /// Creates the database when it is missing and migrates it: what [`PostgresArchive::open`]
    /// does before it makes its pool, and what `lazarus serve` retries while the server does
    /// not answer ([`super::ServedArchive::prepare`]).
    pub async fn prepare(url: &str) -> Result<(), ArchiveError> {
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
        // A pool of one connection, not a bare connection: the migrator's future over a
        // connection is not Send for every lifetime, as a task that waits for the database
        // to come up needs (see `startup`).
        let migrating = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(named(url.parse()?))
            .await?;
        sqlx::migrate!("migrations/postgres")
            .run(&migrating)
            .await?;
        migrating.close().await;
        Ok(())
    }

    /// The archive without a connection yet (its pool connects when first used), whether or
    /// not the database exists or is migrated: only a URL that is not one is an error.
    pub fn unprepared(url: &str) -> Result<Self, ArchiveError> {
        let pool = session_pool()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with(named(url.parse()?));
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
        let pool = session_pool()
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

/// What every pooled connection is set to.
///
/// First its bounds, so that no transaction keeps its locks for long — above all the row of
/// a replay job, which another instance waits to take over when the lease of the job's
/// runner runs out (`--job-lease-secs`, 15 s by default):
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
///   ([`Conn::lift_bounds`]).
///
/// Then where a scan of a whole table starts:
///
/// - `synchronize_seqscans` off: a sequential scan starts at the table's first page, not
///   where the last scan of it stopped. A scan that stops early (the list's match count stops
///   at 10,001) then reads the same pages each time, and they stay cached. With synchronized
///   scans, which PostgreSQL uses on tables over a quarter of `shared_buffers`, each count
///   read pages no count had read lately: from disk, once the archive outgrew memory.
const SESSION_SETTINGS: [(&str, &str); 4] = [
    ("idle_in_transaction_session_timeout", "5s"),
    ("lock_timeout", "10s"),
    ("statement_timeout", "30s"),
    ("synchronize_seqscans", "off"),
];

/// The `application_name` of Lazarus' sessions, so that a DBA reading `pg_stat_activity` (or
/// the server's log with `%a`) sees whose they are. A URL that names its own
/// (`?application_name=billing-archive`, one per instance, say) keeps it.
const SESSION_NAME: &str = "lazarus";

/// `options` under [`SESSION_NAME`], unless they name their sessions already.
fn named(options: PgConnectOptions) -> PgConnectOptions {
    match options.get_application_name() {
        Some(_) => options,
        None => options.application_name(SESSION_NAME),
    }
}

/// Sets these parameters for the session.
async fn set_session(
    conn: &mut PgConnection,
    settings: &[(&str, &str)],
) -> Result<(), sqlx::Error> {
    let (names, values): (Vec<&str>, Vec<&str>) = settings.iter().copied().unzip();
    sqlx::query(
        "SELECT set_config(name, value, false) FROM unnest($1::text[], $2::text[]) AS b (name, value)",
    )
    .bind(names)
    .bind(values)
    .execute(conn)
    .await
    .map(drop)
}

/// Pool options whose connections are set to [`SESSION_SETTINGS`].
fn session_pool() -> PgPoolOptions {
    PgPoolOptions::new().after_connect(|conn, _| Box::pin(set_session(conn, &SESSION_SETTINGS)))
}

#[async_trait]
impl SqlArchive for PostgresArchive {
    fn db(&self) -> Pool<'_> {
        Pool::Postgres(&self.pool)
    }

    async fn selected_ids(
        &self,
        selection: &Selection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let mut q = QueryBuilder::<Postgres>::new("SELECT messages.id");
        messages::push_selection(&mut q, selection);
        q.push(" AND messages.id > ")
            .push_bind(after)
            .push(" ORDER BY messages.id LIMIT ")
            .push_bind(i64::from(limit));
        q.build_query_scalar().fetch_all(&self.pool).await
    }

    async fn archived_rows(
        &self,
        keys: &[([u8; 32], Option<i64>)],
    ) -> Result<Vec<super::sql::ArchivedRow>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        ingest::archived_rows(&mut conn, keys).await
    }

    async fn delete_messages(
        &self,
        conn: &mut Conn<'_>,
        ids: &[i64],
    ) -> Result<(u64, i64), sqlx::Error> {
        let Conn::Postgres(conn) = conn else {
            unreachable!("a PostgreSQL archive's transactions are PostgreSQL's")
        };
        actions::delete_messages(conn, ids).await
    }

    async fn rewrite_search(
        &self,
        conn: &mut Conn<'_>,
        entries: &[(i64, SearchText)],
    ) -> Result<(), sqlx::Error> {
        // In one statement, for messages still archived; an entry there is replaced.
        let Conn::Postgres(conn) = conn else {
            unreachable!("a PostgreSQL archive's transactions are PostgreSQL's")
        };
        let ids: Vec<i64> = entries.iter().map(|(id, _)| *id).collect();
        let documents: Vec<String> = entries.iter().map(|(_, t)| search::document(t)).collect();
        sqlx::query(
            "INSERT INTO message_search (id, search) \
             SELECT i, s::tsvector FROM UNNEST($1::bigint[], $2::text[]) AS t (i, s) \
             WHERE EXISTS (SELECT 1 FROM messages WHERE messages.id = t.i) \
             ON CONFLICT (id) DO UPDATE SET search = excluded.search",
        )
        .bind(&ids)
        .bind(&documents)
        .execute(&mut **conn)
        .await?;
        Ok(())
    }

    async fn freeze_selection(
        &self,
        conn: &mut Conn<'_>,
        id: i64,
        spec: &JobSpec<'_>,
    ) -> Result<u64, sqlx::Error> {
        let Conn::Postgres(conn) = conn else {
            unreachable!("a PostgreSQL archive's transactions are PostgreSQL's")
        };
        // Straight from the selection, so the ids never leave the database. The messages are
        // locked in id order, as purges and dismissals lock them: one being purged meanwhile
        // is waited for and then left out (as if the purge came first). This lock, not a
        // foreign key, keeps every item's message (migration 0013).
        let mut q = QueryBuilder::<Postgres>::new("");
        push_freeze(&mut q, id, spec);
        messages::push_selection(&mut q, spec.selection);
        q.push(" ORDER BY messages.id FOR KEY SHARE OF messages");
        Ok(q.build().execute(&mut **conn).await?.rows_affected())
    }
}

#[async_trait]
impl InstanceLock for PostgresArchive {
    /// Takes the instance name `name` for this process, if no other live process holds it
    /// (`Ok(None)` when one does), for as long as the returned lock lasts.
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

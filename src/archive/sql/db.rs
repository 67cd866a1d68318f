//! One handle on either backend, for the statements both run as they are: a pool ([`Pool`]),
//! a transaction ([`Tx`]) or a connection inside one ([`Conn`]), statements written with
//! `$N` placeholders (sqlx's SQLite driver reads them too), arguments as [`Arg`]s and rows
//! read through [`ArchiveRow`](super::ArchiveRow). What differs between the backends is named
//! by [`Dialect`]; statements that differ more live in `sqlite/` and `postgres/`.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Transaction};

/// Which backend a handle reaches, and the few ways their SQL differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// `column` sorted by its bytes, as SQLite sorts text by default, whatever PostgreSQL's
    /// collation: both backends list things in one order.
    pub fn byte_order(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => column.to_owned(),
            Dialect::Postgres => format!("{column} COLLATE \"C\""),
        }
    }

    /// The smaller of two values (SQLite's `min` of two arguments is not an aggregate).
    pub fn least(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Sqlite => format!("min({a}, {b})"),
            Dialect::Postgres => format!("LEAST({a}, {b})"),
        }
    }

    /// The larger of two values.
    pub fn greatest(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Sqlite => format!("max({a}, {b})"),
            Dialect::Postgres => format!("GREATEST({a}, {b})"),
        }
    }

    /// `column` is one of the ids bound as [`Arg::Ids`] at `$n`.
    pub fn in_ids(self, column: &str, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("{column} IN (SELECT value FROM json_each(${n}))"),
            Dialect::Postgres => format!("{column} = ANY(${n})"),
        }
    }

    /// A row lock for the rest of the transaction: what PostgreSQL's instances take on a
    /// job's row before they decide anything from it. SQLite's `BEGIN IMMEDIATE` already
    /// holds the whole database.
    pub fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        }
    }

    /// Like [`Dialect::for_update`], passing over rows another transaction holds.
    pub fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// The table that holds each message's `status` (by `id`): a column of `messages` on
    /// SQLite, a narrow table of its own on PostgreSQL, so that marking a message is not an
    /// update of its wide row.
    pub fn status_table(self) -> &'static str {
        match self {
            Dialect::Sqlite => "messages",
            Dialect::Postgres => "message_status",
        }
    }
}

/// A statement argument of a type both backends bind.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'q> {
    Int(Option<i64>),
    Text(Option<&'q str>),
    Bytes(Option<&'q [u8]>),
    Bool(bool),
    /// A list of ids, for [`Dialect::in_ids`]: a JSON array on SQLite, an array on PostgreSQL.
    Ids(&'q [i64]),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}

impl<'q> From<&'q str> for Arg<'q> {
    fn from(v: &'q str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'q> From<&'q String> for Arg<'q> {
    fn from(v: &'q String) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'q> From<Option<&'q str>> for Arg<'q> {
    fn from(v: Option<&'q str>) -> Self {
        Arg::Text(v)
    }
}

impl<'q> From<Option<&'q [u8]>> for Arg<'q> {
    fn from(v: Option<&'q [u8]>) -> Self {
        Arg::Bytes(v)
    }
}

impl<'q> From<&'q [i64]> for Arg<'q> {
    fn from(v: &'q [i64]) -> Self {
        Arg::Ids(v)
    }
}

impl<'q> From<&'q Vec<i64>> for Arg<'q> {
    fn from(v: &'q Vec<i64>) -> Self {
        Arg::Ids(v)
    }
}

impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(v)
    }
}

/// `[a, b, ...]` as `&[Arg]`.
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        &[$($crate::archive::sql::Arg::from($arg)),*][..]
    };
}
pub(crate) use args;

/// `sqlx::query(sql)` with `args` bound, for the backend of `$db`.
macro_rules! bound {
    (Sqlite, $sql:expr, $args:expr) => {
        bound!(@ Sqlite, $sql, $args, |ids: &[i64]| serde_json::to_string(ids)
            .expect("ids serialize"))
    };
    (Postgres, $sql:expr, $args:expr) => {
        bound!(@ Postgres, $sql, $args, |ids: &[i64]| ids.to_vec())
    };
    (@ $db:ty, $sql:expr, $args:expr, $ids:expr) => {{
        let mut q = sqlx::query::<$db>($sql);
        for arg in $args {
            q = match *arg {
                Arg::Int(v) => q.bind(v),
                Arg::Text(v) => q.bind(v),
                Arg::Bytes(v) => q.bind(v),
                Arg::Bool(v) => q.bind(v),
                Arg::Ids(ids) => q.bind(($ids)(ids)),
            };
        }
        q
    }};
}

/// A row of either backend.
pub enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

impl super::ArchiveRow for Row {
    fn column<T: super::rows::Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        match self {
            Row::Sqlite(row) => row.column(name),
            Row::Postgres(row) => row.column(name),
        }
    }
}

/// A pool of either backend.
#[derive(Clone, Copy)]
pub enum Pool<'p> {
    Sqlite(&'p SqlitePool),
    Postgres(&'p PgPool),
}

/// A transaction of either backend.
pub enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// A connection of either backend, mostly one inside a transaction (`Conn::from(&mut tx)`).
pub enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
}

impl<'c, 't> From<&'c mut Transaction<'t, Sqlite>> for Conn<'c> {
    fn from(tx: &'c mut Transaction<'t, Sqlite>) -> Self {
        Conn::Sqlite(tx)
    }
}

impl<'c, 't> From<&'c mut Transaction<'t, Postgres>> for Conn<'c> {
    fn from(tx: &'c mut Transaction<'t, Postgres>) -> Self {
        Conn::Postgres(tx)
    }
}

impl<'c> From<&'c mut Conn<'_>> for Conn<'c> {
    fn from(conn: &'c mut Conn<'_>) -> Self {
        match conn {
            Conn::Sqlite(c) => Conn::Sqlite(c),
            Conn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

impl Pool<'_> {
    pub fn dialect(self) -> Dialect {
        match self {
            Pool::Sqlite(_) => Dialect::Sqlite,
            Pool::Postgres(_) => Dialect::Postgres,
        }
    }

    /// A transaction for a change. SQLite's takes the write lock up front (waiting out
    /// `busy_timeout`), so that it never fails half-way on a lock upgrade.
    pub async fn begin(self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// Runs a statement; how many rows it changed.
    pub async fn execute(self, sql: &str, args: &[Arg<'_>]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(pool) => bound!(Sqlite, sql, args)
                .execute(pool)
                .await?
                .rows_affected(),
            Pool::Postgres(pool) => bound!(Postgres, sql, args)
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }

    pub async fn fetch_all(self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(pool) => bound!(Sqlite, sql, args)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Sqlite)
                .collect(),
            Pool::Postgres(pool) => bound!(Postgres, sql, args)
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(Row::Postgres)
                .collect(),
        })
    }

    pub async fn fetch_optional(
        self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Option<Row>, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(pool) => bound!(Sqlite, sql, args)
                .fetch_optional(pool)
                .await?
                .map(Row::Sqlite),
            Pool::Postgres(pool) => bound!(Postgres, sql, args)
                .fetch_optional(pool)
                .await?
                .map(Row::Postgres),
        })
    }
}

impl Tx {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Sqlite(tx) => Conn::Sqlite(tx),
            Tx::Postgres(tx) => Conn::Postgres(tx),
        }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
        }
    }
}

impl Conn<'_> {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs a statement; how many rows it changed.
    pub async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Conn::Sqlite(c) => bound!(Sqlite, sql, args)
                .execute(&mut **c)
                .await?
                .rows_affected(),
            Conn::Postgres(c) => bound!(Postgres, sql, args)
                .execute(&mut **c)
                .await?
                .rows_affected(),
        })
    }

    pub async fn fetch_all(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self {
            Conn::Sqlite(c) => bound!(Sqlite, sql, args)
                .fetch_all(&mut **c)
                .await?
                .into_iter()
                .map(Row::Sqlite)
                .collect(),
            Conn::Postgres(c) => bound!(Postgres, sql, args)
                .fetch_all(&mut **c)
                .await?
                .into_iter()
                .map(Row::Postgres)
                .collect(),
        })
    }

    pub async fn fetch_optional(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Option<Row>, sqlx::Error> {
        Ok(match self {
            Conn::Sqlite(c) => bound!(Sqlite, sql, args)
                .fetch_optional(&mut **c)
                .await?
                .map(Row::Sqlite),
            Conn::Postgres(c) => bound!(Postgres, sql, args)
                .fetch_optional(&mut **c)
                .await?
                .map(Row::Postgres),
        })
    }

    /// Lifts PostgreSQL's statement and lock timeouts (bounds in `SESSION_SETTINGS`) for the
    /// rest of this transaction, for work on a whole selection (freezing a job's plan,
    /// starting or cancelling it, a dismissal, a purge). At 1,000,000 messages it takes
    /// minutes (a dismissal 209 s, a plan 64 s, a purge 78 s:
    /// `bulk_work_on_a_large_archive_within_its_bounds`), growing with the selection, so any
    /// fixed bound would only make a large enough selection impossible to act on; and it
    /// rightly waits for another such change to the same messages. It is never idle, so what
    /// the bounds are for is still covered: a frozen client is cut off after 5 s idle.
    /// Nothing to do on SQLite.
    pub async fn lift_bounds(&mut self) -> Result<(), sqlx::Error> {
        if let Conn::Postgres(c) = self {
            sqlx::query("SELECT set_config('lock_timeout', '0', true), set_config('statement_timeout', '0', true)")
                .execute(&mut **c)
                .await?;
        }
        Ok(())
    }

    /// Serializes, across PostgreSQL's instances, the transactions that decide which messages
    /// unfinished jobs hold: two jobs made (or started) at once would each miss the other's
    /// uncommitted items and both publish a message. Held until the transaction ends; taken
    /// after the job's own row. (SQLite's `BEGIN IMMEDIATE` serializes them already.)
    pub async fn lock_selections(&mut self) -> Result<(), sqlx::Error> {
        /// Any fixed number would do; this one spells "lazjob".
        const SELECTION_LOCK: i64 = 0x6c61_7a6a_6f62;
        if let Conn::Postgres(c) = self {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(SELECTION_LOCK)
                .execute(&mut **c)
                .await?;
        }
        Ok(())
    }

    /// The one row a statement returns (`RowNotFound` when there is none).
    pub async fn fetch_one(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Row, sqlx::Error> {
        self.fetch_optional(sql, args)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

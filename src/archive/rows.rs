//! Reading rows of either backend: [`ArchiveRow`] lets one row reader (a summary, a job, a
//! user, ...) serve SQLite and PostgreSQL, whose columns have the same names and types.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Postgres, Row, Sqlite, Type};

/// A column type both backends decode (integers, text, flags, bytes and their `Option`s).
pub trait Column:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Column for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A row of either backend, read by column name.
pub trait ArchiveRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error>;
}

impl ArchiveRow for SqliteRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

impl ArchiveRow for PgRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

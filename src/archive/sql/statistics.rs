//! The planner's statistics kept current after a burst of writes (PostgreSQL): a table pages
//! read is analyzed once it changed by more rows than it held, so that lists over an archive
//! filled in the last seconds are planned for what it holds. Autovacuum may be off, and looks
//! once a minute when on; a never-analyzed `messages` had the list of one failure reason take
//! 240 ms instead of 3 at 100,000 rows (docs/lab-notebook.md, "pages under ingest").

use sqlx::{ConnectOptions, Connection};

use super::{args, ArchiveRow, Dialect, Pool};
use crate::archive::ArchiveError;

/// The tables whose statistics the pages' plans depend on, literal SQL for `IN (...)`.
const TABLES: &str =
    "'messages', 'message_status', 'message_search', 'message_fields', 'message_field_keys'";

/// A table's statistics are stale once it changed by this many rows more than it held when
/// last analyzed.
const STALE_AFTER: i64 = 1_000;

/// Analyzing reads a sample of up to 30,000 rows (0.2–0.7 s of the server's time from
/// 100,000 rows on): a table past this size is analyzed again at most every
/// [`LARGE_EVERY_SECS`], so that a drain pays for it about once.
const LARGE: i64 = 10_000;
const LARGE_EVERY_SECS: i64 = 60;

/// Analyzes the stale tables of [`TABLES`] (none on SQLite, whose planner needs no
/// statistics to use its indexes) and says which. A table another session is analyzing is
/// skipped, not waited for.
pub(super) async fn refresh(db: Pool<'_>) -> Result<Vec<String>, ArchiveError> {
    if db.dialect() != Dialect::Postgres {
        return Ok(Vec::new());
    }
    let stale = db
        .fetch_all(
            &format!(
                "SELECT s.relname::text AS name FROM pg_stat_user_tables s \
                 JOIN pg_class c ON c.oid = s.relid \
                 WHERE s.relname IN ({TABLES}) AND s.schemaname = current_schema() \
                 AND s.n_mod_since_analyze >= $1 + greatest(c.reltuples, 0) \
                 AND (c.reltuples < $2 OR coalesce(greatest(s.last_analyze, s.last_autoanalyze), \
                      '-infinity') < now() - interval '{LARGE_EVERY_SECS} seconds') \
                 ORDER BY s.relname"
            ),
            args![STALE_AFTER, LARGE],
        )
        .await?
        .iter()
        .map(|row| row.column::<String>("name"))
        .collect::<Result<Vec<_>, _>>()?;
    if let (false, Pool::Postgres(pool)) = (stale.is_empty(), db) {
        // On a connection of its own that does not log it as a slow statement: a second is
        // what analyzing takes, not a sign of trouble.
        let options = (*pool.connect_options()).clone();
        let mut conn = options.disable_statement_logging().connect().await?;
        let analyze = format!("ANALYZE (SKIP_LOCKED) {}", stale.join(", "));
        sqlx::query(&analyze).execute(&mut conn).await?;
        conn.close().await?;
    }
    Ok(stale)
}

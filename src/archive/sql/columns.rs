//! The columns each row reader reads, and SQL conditions both backends write the same way.

use crate::archive::audit_text::{PAGE_ACTOR_CHARS, PAGE_SUMMARY_CHARS};

/// A message's summary columns, its status read as `$status`.
macro_rules! summary_columns {
    ($status:literal) => {
        concat!(
            "id, queue, vhost, broker, archived_at, message_id, correlation_id, content_type, content_encoding, ",
            "body_size, deaths, first_death_queue, first_death_reason, first_death_exchange, ",
            "replay_exchange, replay_routing_key, error, replay_of, snippet, ",
            "error_type, cause, message_type, convention, failed_queue, replay_target_from, ",
            "convention_problems, ",
            $status
        )
    };
}

/// What [`summary_from_row`](super::rows::summary_from_row) reads, on `dialect`.
pub fn summary_columns(dialect: super::Dialect) -> &'static str {
    match dialect {
        super::Dialect::Sqlite => SUMMARY_COLUMNS,
        super::Dialect::Postgres => SUMMARY_WITH_STATUS_TABLE,
    }
}

/// What [`summary_from_row`](super::rows::summary_from_row) reads, where the status is a
/// column of `messages` (SQLite).
pub const SUMMARY_COLUMNS: &str = summary_columns!("status");

/// The same with the status read from `message_status` (PostgreSQL): for the rows a query
/// returns only, after its LIMIT.
pub const SUMMARY_WITH_STATUS_TABLE: &str = summary_columns!(
    "(SELECT status FROM message_status WHERE message_status.id = messages.id) AS status"
);

/// What [`message_from_row`](super::rows::message_from_row) reads besides a summary.
pub const DETAIL_COLUMNS: &str =
    "exchange, routing_key, redelivered, properties, headers, death_problems, status_note";

pub const REPLAY_COLUMNS: &str =
    "id, message_id, request_key, actor, requested_at, target_exchange, target_routing_key, outcome, \
     detail, (edited_body IS NOT NULL OR edited_headers IS NOT NULL) AS edited";

pub const JOB_COLUMNS: &str = "id, state, detail, actor, created_at, started_at, finished_at, selection, \
    target_exchange, target_routing_key, to_first_death_queue, rate_per_sec, include_replayed, canary_count, canary_wait_ms, \
    canary_max_deaths, plan, published, unroutable, nacked, failed, skipped, cancelled, total";

/// What [`user_from_row`](super::rows::user_from_row) reads.
pub const USER_COLUMNS: &str = "name, password_hash, role, grants, created_at";

/// What [`token_from_row`](super::rows::token_from_row) reads.
pub const TOKEN_COLUMNS: &str =
    "id, name, role, grants, created_by, created_at, revoked_at, expires_at, owner";

/// What a session lookup selects, both backends.
pub const SESSION_QUERY: &str = "SELECT u.name, u.password_hash, u.role, u.grants, u.created_at, \
    s.created_at AS session_created_at, s.last_seen FROM sessions s \
    JOIN users u ON u.name = s.user_name WHERE s.token_hash = ";

/// The columns of a page of entries: long texts cut by the database, not after reading.
pub fn page_columns() -> String {
    format!(
        "id, at, action, job_id, message_id, source, \
         substr(actor, 1, {PAGE_ACTOR_CHARS}) AS actor, CAST(length(actor) AS BIGINT) AS actor_len, \
         substr(summary, 1, {PAGE_SUMMARY_CHARS}) AS summary, CAST(length(summary) AS BIGINT) AS summary_len"
    )
}

/// The columns of whole entries.
pub const WHOLE_COLUMNS: &str = "id, at, actor, action, job_id, message_id, summary, source";

/// Still to publish (or handed out without a recorded confirm): the partial index's condition.
pub const TODO: &str = "(outcome IS NULL OR outcome = 'sending')";

/// `EXISTS (...)`: a job not yet finished holds the message (`messages.id`); purging leaves
/// such messages alone.
/// The messages (`m`) a `queue_reason_counts` row counts, for a subquery of an update of it.
pub const OF_TOTAL: &str = "WHERE m.queue = queue_reason_counts.queue \
    AND coalesce(m.first_death_reason, 'none') = queue_reason_counts.reason";

pub const HELD_BY_UNFINISHED_JOB: &str =
    "EXISTS (SELECT 1 FROM replay_job_items i JOIN replay_jobs j ON j.id = i.job_id \
     WHERE i.message_id = messages.id AND j.state IN ('queued', 'running', 'paused'))";

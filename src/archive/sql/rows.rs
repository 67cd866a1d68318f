//! Reading rows of either backend: [`ArchiveRow`] lets one row reader (a summary, a job, a
//! user, ...) serve SQLite and PostgreSQL, whose columns have the same names and types.

use std::collections::BTreeMap;

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Postgres, Row, Sqlite, Type};

use super::{corrupt, from_millis};
use crate::archive::accounts::{grants_from_stored, Grant, SessionTimes};
use crate::archive::audit_text::{PAGE_ACTOR_CHARS, PAGE_SUMMARY_CHARS};
use crate::archive::jobs::{
    Step, ALREADY_REPLAYED, DISMISSED, MAX_ATTEMPTS, NOT_ALLOWED, NO_TARGET,
};
use crate::archive::{
    ArchiveError, ArchivedMessage, AuditEntry, Canary, HourlyCount, JobCounts, JobItem, JobState,
    MessageStatus, MessageSummary, OutgoingBody, OutgoingMessage, Plan, QueueReasonCount,
    ReplayJob, ReplayRecord, Role, TargetCount, TokenRecord, UserRecord,
};
use crate::message::codec::table_from_stored_json;
use crate::message::death::{FirstDeath, ReplayTarget};

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

pub fn summary_from_row<R: ArchiveRow>(row: &R) -> Result<MessageSummary, ArchiveError> {
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
    let status = MessageStatus::parse(&status).ok_or_else(|| ArchiveError::Corrupt {
        id,
        reason: format!("unknown status {status:?}"),
    })?;
    let convention_problems = row
        .column::<Option<String>>("convention_problems")?
        .map(|p| serde_json::from_str(&p))
        .transpose()
        .map_err(|e| ArchiveError::Corrupt {
            id,
            reason: e.to_string(),
        })?
        .unwrap_or_default();
    Ok(MessageSummary {
        id,
        queue: row.column("queue")?,
        vhost: row.column("vhost")?,
        broker: row.column("broker")?,
        error: row.column("error")?,
        error_type: row.column("error_type")?,
        cause: row.column("cause")?,
        message_type: row.column("message_type")?,
        convention: row
            .column::<Option<String>>("convention")?
            .and_then(|c| crate::message::conventions::Convention::parse(&c)),
        failed_queue: row.column("failed_queue")?,
        replay_target_from: row.column("replay_target_from")?,
        convention_problems,
        replay_of: row.column("replay_of")?,
        snippet: row.column("snippet")?,
        open: status.is_open(),
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
        status,
        fields: BTreeMap::new(),
    })
}

/// A whole archived message from a row of either backend.
pub fn message_from_row<R: ArchiveRow>(
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
            .map(|h| table_from_stored_json(&h))
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

pub fn count_from_row(r: &impl ArchiveRow) -> Result<QueueReasonCount, ArchiveError> {
    Ok(QueueReasonCount {
        queue: r.column("queue")?,
        broker: r.column("broker")?,
        reason: r.column("reason")?,
        messages: r.column("messages")?,
        open: r.column("open_messages")?,
        oldest: from_millis(r.column("oldest_at")?),
        newest: from_millis(r.column("newest_at")?),
    })
}

pub fn hourly_from_row(r: &impl ArchiveRow) -> Result<HourlyCount, ArchiveError> {
    Ok(HourlyCount {
        queue: r.column("queue")?,
        hour: r.column("hour")?,
        messages: r.column("messages")?,
    })
}

/// The column types a row of either backend must decode for the shared row readers.
pub fn replay_from_row<R: ArchiveRow>(row: &R) -> Result<ReplayRecord, ArchiveError> {
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

/// A replay job from a row of either backend, selected with [`JOB_COLUMNS`].
pub fn job_from_row<R: ArchiveRow>(row: &R) -> Result<ReplayJob, ArchiveError> {
    let id: i64 = row.column("id")?;
    let state: String = row.column("state")?;
    let state = JobState::parse(&state).ok_or_else(|| ArchiveError::Corrupt {
        id,
        reason: format!("unknown job state {state:?}"),
    })?;
    let target = target_from_row(row)?;
    let canary_count: i64 = row.column("canary_count")?;
    let canary = (canary_count > 0).then(|| -> Result<Canary, sqlx::Error> {
        Ok(Canary {
            count: canary_count as u32,
            wait_secs: (row.column::<i64>("canary_wait_ms")? / 1000) as u32,
            max_deaths: row.column::<i64>("canary_max_deaths")? as u32,
        })
    });
    let plan: Plan = serde_json::from_str(&row.column::<String>("plan")?).map_err(corrupt(id))?;
    let selection =
        serde_json::from_str(&row.column::<String>("selection")?).map_err(corrupt(id))?;
    let total: i64 = row.column("total")?;
    let mut counts = JobCounts {
        published: row.column("published")?,
        unroutable: row.column("unroutable")?,
        nacked: row.column("nacked")?,
        failed: row.column("failed")?,
        skipped: row.column("skipped")?,
        cancelled: row.column("cancelled")?,
        pending: 0,
    };
    counts.pending =
        total - counts.published - counts.problems() - counts.skipped - counts.cancelled;
    let rate_per_sec: Option<i64> = row.column("rate_per_sec")?;
    Ok(ReplayJob {
        id,
        state,
        detail: row.column("detail")?,
        actor: row.column("actor")?,
        created_at: from_millis(row.column("created_at")?),
        started_at: row.column::<Option<i64>>("started_at")?.map(from_millis),
        finished_at: row.column::<Option<i64>>("finished_at")?.map(from_millis),
        selection,
        target,
        to_first_death_queue: row.column("to_first_death_queue")?,
        rate_per_sec: rate_per_sec.map(|r| r as u32),
        include_replayed: row.column("include_replayed")?,
        canary: canary.transpose()?,
        estimated_seconds: rate_per_sec
            .filter(|r| *r > 0)
            .map(|r| plan.to_publish as f64 / r as f64),
        plan,
        counts,
        total,
        // Read beside the job's row where it is shown (`sql::jobs::waiting_for`).
        waiting_for_brokers: Vec::new(),
    })
}

/// A job's or an item's target: both columns, or none.
fn target_from_row<R: ArchiveRow>(row: &R) -> Result<Option<ReplayTarget>, sqlx::Error> {
    Ok(
        match (
            row.column::<Option<String>>("target_exchange")?,
            row.column::<Option<String>>("target_routing_key")?,
        ) {
            (Some(exchange), Some(routing_key)) => Some(ReplayTarget {
                exchange,
                routing_key,
            }),
            _ => None,
        },
    )
}

/// One job item from a row of either backend (as [`job_items`] selects them).
pub fn item_from_row<R: ArchiveRow>(row: &R) -> Result<JobItem, ArchiveError> {
    Ok(JobItem {
        message_id: row.column("message_id")?,
        target: target_from_row(row)?,
        outcome: row.column("outcome")?,
        detail: row.column("detail")?,
        attempts: row.column("attempts")?,
    })
}

/// A message handed out to publish, from a row of either backend (as [`advance_job`]
/// selects them).
pub fn outgoing_from_row<R: ArchiveRow>(row: &R) -> Result<OutgoingMessage, ArchiveError> {
    let message_id: i64 = row.column("message_id")?;
    let headers: Option<String> = row.column("headers")?;
    let properties = serde_json::from_str(&row.column::<String>("properties")?);
    let headers = headers.map(|h| table_from_stored_json(&h)).transpose();
    // A record that cannot be read is not published (it would go out changed) and does not
    // stop the job: it ends failed, saying why.
    let (properties, headers, unreadable) = match (properties, headers) {
        (Ok(p), Ok(h)) => (p, h, None),
        (Err(e), _) | (_, Err(e)) => (
            Default::default(),
            None,
            Some(format!(
                "the stored record is unreadable ({e}); nothing was published"
            )),
        ),
    };
    Ok(OutgoingMessage {
        message_id,
        vhost: row.column("vhost")?,
        broker: row.column("broker")?,
        target: ReplayTarget {
            exchange: row.column("target_exchange")?,
            routing_key: row.column("target_routing_key")?,
        },
        properties,
        headers,
        body: match row.column::<Option<Vec<u8>>>("body")? {
            Some(body) => OutgoingBody::Held(body),
            None => OutgoingBody::Archived {
                size: row.column::<i64>("body_size")?.max(0) as u64,
            },
        },
        convention: row
            .column::<Option<String>>("convention")?
            .and_then(|c| crate::message::conventions::Convention::parse(&c)),
        unreadable,
    })
}

/// A plan from the counts of a job's items: still to do by target (`target_exchange`,
/// `target_routing_key`, `n`), and skipped by reason (`detail`, `n`).
pub fn plan_from_rows<R: ArchiveRow>(
    targets: &[R],
    skipped: &[R],
    refused: &[R],
) -> Result<Plan, sqlx::Error> {
    let mut plan = Plan::default();
    let target = |row: &R| -> Result<TargetCount, sqlx::Error> {
        Ok(TargetCount {
            vhost: row.column("vhost")?,
            broker: row.column("broker")?,
            exchange: row.column("target_exchange")?,
            routing_key: row.column("target_routing_key")?,
            messages: row.column("n")?,
            target_from: match (
                row.column::<Option<String>>("convention")?
                    .and_then(|c| crate::message::conventions::Convention::parse(&c)),
                row.column::<Option<String>>("target_from")?,
            ) {
                (Some(convention), Some(from)) => {
                    Some(crate::archive::Framework::source(convention, &from))
                }
                _ => None,
            },
        })
    };
    for row in targets {
        let t = target(row)?;
        plan.to_publish += t.messages;
        plan.targets.push(t);
    }
    for row in refused {
        plan.refused_targets.push(target(row)?);
    }
    for row in skipped {
        let n: i64 = row.column("n")?;
        match row.column::<String>("detail")?.as_str() {
            NO_TARGET => plan.no_target = n,
            ALREADY_REPLAYED => plan.already_replayed = n,
            DISMISSED => plan.dismissed = n,
            NOT_ALLOWED => plan.not_allowed = n,
            _ => plan.in_other_jobs = n,
        }
    }
    plan.messages = plan.to_publish
        + plan.no_target
        + plan.already_replayed
        + plan.dismissed
        + plan.in_other_jobs
        + plan.not_allowed;
    Ok(plan)
}

/// Sorts candidate rows (`message_id`, `attempts`, `body_size`, `status`) into a [`Step`].
pub fn step_from_rows<R: ArchiveRow>(
    candidates: &[R],
    include_replayed: bool,
    max_bytes: u64,
) -> Result<Step, sqlx::Error> {
    let mut bytes = 0u64;
    let mut step = Step::default();
    for row in candidates {
        let message_id: i64 = row.column("message_id")?;
        let size: i64 = row.column("body_size")?;
        if !step.send.is_empty() && bytes + size as u64 > max_bytes {
            break;
        }
        let status: String = row.column("status")?;
        let skip = MessageStatus::parse(&status)
            .is_some_and(|s| s.was_replayed() || s == MessageStatus::Dismissed);
        if !include_replayed && skip {
            // Replayed or dismissed since the plan froze the selection.
            step.replayed_since.push(message_id);
        } else if row.column::<i64>("attempts")? >= MAX_ATTEMPTS {
            step.given_up.push(message_id);
        } else {
            bytes += size as u64;
            step.send.push(message_id);
        }
    }
    Ok(step)
}

fn role_of<R: ArchiveRow>(row: &R) -> Result<Role, ArchiveError> {
    let role: String = row.column("role")?;
    Role::parse(&role).ok_or_else(|| ArchiveError::Corrupt {
        id: 0,
        reason: format!("unknown role {role:?}"),
    })
}

fn grants_of<R: ArchiveRow>(row: &R) -> Result<Vec<Grant>, ArchiveError> {
    let stored: Option<String> = row.column("grants")?;
    grants_from_stored(stored.as_deref()).map_err(|reason| ArchiveError::Corrupt { id: 0, reason })
}

/// A user, from a row of either backend.
pub fn user_from_row<R: ArchiveRow>(row: &R) -> Result<UserRecord, ArchiveError> {
    Ok(UserRecord {
        name: row.column("name")?,
        password_hash: row.column("password_hash")?,
        role: role_of(row)?,
        grants: grants_of(row)?,
        created_at: from_millis(row.column("created_at")?),
    })
}

/// The times of a session row (`session_created_at`, `last_seen`), from either backend.
pub fn session_times<R: ArchiveRow>(row: &R) -> Result<SessionTimes, ArchiveError> {
    Ok(SessionTimes {
        created_at: row.column("session_created_at")?,
        last_seen: row.column("last_seen")?,
    })
}

/// An API token, from a row of either backend.
pub fn token_from_row<R: ArchiveRow>(row: &R) -> Result<TokenRecord, ArchiveError> {
    Ok(TokenRecord {
        id: row.column("id")?,
        name: row.column("name")?,
        role: role_of(row)?,
        grants: grants_of(row)?,
        created_by: row.column("created_by")?,
        created_at: from_millis(row.column("created_at")?),
        expires_at: row.column::<Option<i64>>("expires_at")?.map(from_millis),
        owner: row.column("owner")?,
        revoked: row.column::<Option<i64>>("revoked_at")?.is_some(),
    })
}

/// An entry of a page, from a row of either backend: marked when a text was cut.
pub fn page_entry_from_row<R: ArchiveRow>(row: &R) -> Result<AuditEntry, ArchiveError> {
    let mut entry = entry_from_row(row)?;
    let actor_len: i64 = row.column("actor_len")?;
    let summary_len: i64 = row.column("summary_len")?;
    if actor_len > PAGE_ACTOR_CHARS as i64 {
        entry.actor.push('…');
        entry.truncated = true;
    }
    if summary_len > PAGE_SUMMARY_CHARS as i64 {
        entry.summary.push('…');
        entry.truncated = true;
    }
    Ok(entry)
}

/// One audit entry, from a row of either backend (the columns are the same).
pub fn entry_from_row<R: ArchiveRow>(row: &R) -> Result<AuditEntry, ArchiveError> {
    Ok(AuditEntry {
        id: row.column("id")?,
        at: from_millis(row.column("at")?),
        actor: row.column("actor")?,
        action: row.column("action")?,
        job_id: row.column::<Option<i64>>("job_id")?.map(|i| i.to_string()),
        message_id: row
            .column::<Option<i64>>("message_id")?
            .map(|i| i.to_string()),
        summary: row.column("summary")?,
        source: row.column("source")?,
        truncated: false,
    })
}

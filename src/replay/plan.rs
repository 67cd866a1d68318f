//! Creating and controlling replay jobs and dismissals, for the pages, the API and
//! `lazarus replay` alike: what a request may ask (ids or filters, a target, a rate, a
//! canary), validated in one place, and the same request key never making two jobs.

use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;

use crate::archive::selection::{InvalidSelection, ListParams};
use crate::archive::{
    Actions, Actor, ArchiveError, Canary, JobAction, JobSpec, JobStore, ReplayJob, Selection,
};
use crate::message::death::ReplayTarget;
use crate::message::exchange_policy::ExchangePolicy;

/// Why a request was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The request does not make sense (a 400, with what to fix).
    #[error("{0}")]
    Invalid(String),
    /// It names something that is not there (a 404).
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

impl From<InvalidSelection> for PlanError {
    fn from(e: InvalidSelection) -> Self {
        PlanError::Invalid(e.0)
    }
}

/// Most ids one request may name; larger selections are made with a filter.
pub const MAX_IDS: usize = 100_000;
/// The fastest rate a job may ask for (messages per second).
pub const MAX_RATE: u32 = 1_000_000;
/// The longest canary wait, in seconds.
pub const MAX_CANARY_WAIT_SECS: u32 = 3600;

/// An id as clients send it: the opaque string the API returned (or a number).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum IdValue {
    Text(String),
    Number(i64),
}

/// The messages an action applies to, as asked: `ids`, or a `filter` with the list's fields.
/// (Its schema is written by hand in `api_schemas`: one or the other.)
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SelectionRequest {
    pub ids: Option<Vec<IdValue>>,
    pub filter: Option<ListParams>,
    /// Required with an empty filter: yes, the whole archive.
    #[serde(default)]
    pub all: bool,
    /// Only messages of these DLQs (keys): those the caller may act on, set by whoever
    /// takes the request (`None`: every DLQ). Never read from the request.
    #[serde(skip)]
    pub within: Option<Vec<String>>,
}

impl SelectionRequest {
    /// The selection, and what it was as JSON (for the job page and the audit log).
    pub fn resolve(
        &self,
        business_fields: &[String],
        home_vhost: &str,
    ) -> Result<(Selection, String), PlanError> {
        match (&self.ids, &self.filter) {
            (Some(ids), None) => {
                if ids.is_empty() {
                    return Err(PlanError::Invalid("select at least one message".into()));
                }
                if ids.len() > MAX_IDS {
                    return Err(PlanError::Invalid(format!(
                        "at most {MAX_IDS} ids per request; select by filter instead"
                    )));
                }
                let ids = ids
                    .iter()
                    .map(|id| match id {
                        IdValue::Number(n) => Ok(*n),
                        IdValue::Text(s) => s.trim().parse().map_err(|_| {
                            PlanError::Invalid(format!("id {s:?} is not one this API returned"))
                        }),
                    })
                    .collect::<Result<Vec<i64>, _>>()?;
                let text = if ids.len() <= 20 {
                    json!({ "ids": ids.iter().map(i64::to_string).collect::<Vec<_>>() })
                } else {
                    json!({ "ids": ids.len() })
                };
                Ok((
                    Selection::Ids(ids).within(self.within.clone()),
                    text.to_string(),
                ))
            }
            (None, Some(filter)) => {
                let filter = filter.filters_only();
                if filter == ListParams::default() && !self.all {
                    return Err(PlanError::Invalid(
                        "an empty filter selects the whole archive: narrow it, or send \"all\": true".into(),
                    ));
                }
                let (parsed, _) = filter.parse(business_fields, home_vhost)?;
                let text = json!({ "filter": filter }).to_string();
                let selection = Selection::Filter(Box::new(parsed)).within(self.within.clone());
                Ok((selection, text))
            }
            _ => Err(PlanError::Invalid(
                "give either \"ids\" or \"filter\" (the list's filters) to select messages".into(),
            )),
        }
    }
}

/// `POST /api/replays`: a plan (`"dry_run": true`) or a job.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct JobRequest {
    #[serde(flatten)]
    pub selection: SelectionRequest,
    /// One target for every message; without it each goes to its own replay target.
    pub target: Option<ReplayTarget>,
    /// Each message to the queue it first died in only, through the default exchange — not
    /// to its original exchange and key, which reach every queue bound to the key (an audit
    /// queue that took it the first time too).
    #[serde(default)]
    pub to_first_death_queue: bool,
    pub rate_per_sec: Option<u32>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    /// The same key never makes a second job (safe retries).
    pub request_key: Option<String>,
}

impl JobRequest {
    /// Validates the options; the selection is resolved separately.
    pub fn check(&self) -> Result<(), PlanError> {
        if self.to_first_death_queue && self.target.is_some() {
            return Err(PlanError::Invalid(
                "give a target or to_first_death_queue, not both".into(),
            ));
        }
        if let Some(rate) = self.rate_per_sec {
            if rate == 0 || rate > MAX_RATE {
                return Err(PlanError::Invalid(format!(
                    "rate_per_sec must be between 1 and {MAX_RATE} (leave it out for no limit)"
                )));
            }
        }
        if let Some(c) = &self.canary {
            if c.count == 0 {
                return Err(PlanError::Invalid(
                    "a canary replays at least one message first".into(),
                ));
            }
            if c.wait_secs > MAX_CANARY_WAIT_SECS {
                return Err(PlanError::Invalid(format!(
                    "a canary waits at most {MAX_CANARY_WAIT_SECS} seconds"
                )));
            }
        }
        Ok(())
    }
}

/// The longest request key accepted (they are stored, and audited with their replay).
pub const MAX_REQUEST_KEY_CHARS: usize = 200;
/// The longest exchange name and routing key AMQP carries (short strings).
pub const MAX_TARGET_BYTES: usize = 255;

/// A request key, bounded, without control characters.
pub fn check_request_key(key: &str) -> Result<(), PlanError> {
    if key.is_empty()
        || key.chars().count() > MAX_REQUEST_KEY_CHARS
        || key.contains(char::is_control)
    {
        return Err(PlanError::Invalid(format!(
            "request_key has 1 to {MAX_REQUEST_KEY_CHARS} characters, no control characters"
        )));
    }
    Ok(())
}

/// A target AMQP can carry: exchange and routing key of at most 255 bytes, no NUL.
pub fn check_target(target: &ReplayTarget) -> Result<(), PlanError> {
    for (name, value) in [
        ("exchange", &target.exchange),
        ("routing_key", &target.routing_key),
    ] {
        if value.len() > MAX_TARGET_BYTES || value.contains('\0') {
            return Err(PlanError::Invalid(format!(
                "the target's {name} has at most {MAX_TARGET_BYTES} bytes and no NUL (AMQP's limit)"
            )));
        }
    }
    Ok(())
}

/// A request key no one else has: time and a process-wide counter.
pub fn new_request_key() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}-{}-{n}",
        OffsetDateTime::now_utc().unix_timestamp_nanos(),
        std::process::id()
    )
}

/// `90 s`, `12 min`, `2.5 h`: how long a plan's publishing should take.
pub fn human_duration(secs: f64) -> String {
    if secs < 90.0 {
        format!("{} s", secs.ceil() as i64)
    } else if secs < 90.0 * 60.0 {
        format!("{} min", (secs / 60.0).ceil() as i64)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// Freezes the requested selection into a plan or (unless a dry run) a queued job. The same
/// request key returns the job it made the first time; asked again for something else, it is
/// refused rather than answered with a job that is not what was asked.
pub async fn create_job<A: JobStore + ?Sized>(
    archive: &A,
    request: &JobRequest,
    actor: &Actor,
    business_fields: &[String],
    home_vhost: &str,
    policy: &ExchangePolicy,
) -> Result<ReplayJob, PlanError> {
    request.check()?;
    let (selection, selection_text) = request.selection.resolve(business_fields, home_vhost)?;
    let key = request.request_key.clone().unwrap_or_else(new_request_key);
    check_request_key(&key)?;
    if let Some(target) = &request.target {
        check_target(target)?;
    }
    let job = archive
        .create_job(&JobSpec {
            request_key: &key,
            actor,
            selection: &selection,
            selection_text: &selection_text,
            target: request.target.as_ref(),
            to_first_death_queue: request.to_first_death_queue,
            rate_per_sec: request.rate_per_sec,
            include_replayed: request.include_replayed,
            canary: request.canary,
            start: !request.dry_run,
            policy,
        })
        .await?;
    let asked: serde_json::Value =
        serde_json::from_str(&selection_text).unwrap_or(serde_json::Value::Null);
    if job.selection != asked
        || job.target != request.target
        || job.to_first_death_queue != request.to_first_death_queue
    {
        return Err(ArchiveError::Conflict(format!(
            "request_key {key:?} was used for replay job {} with another selection or target; \
             use a new key",
            job.id
        ))
        .into());
    }
    Ok(job)
}

/// Starts, pauses, resumes or cancels a job (`action` as a URL names it).
pub async fn control_job<A: JobStore + ?Sized>(
    archive: &A,
    id: i64,
    action: &str,
    actor: &Actor,
) -> Result<ReplayJob, PlanError> {
    let action = JobAction::parse(action).ok_or_else(|| {
        PlanError::NotFound(format!(
            "no job action {action:?}: use start, pause, resume or cancel"
        ))
    })?;
    Ok(archive.control_job(id, action, actor).await?)
}

/// The most a dismissal note may say.
pub const MAX_NOTE_CHARS: usize = 2000;

/// Dismisses the selection with a note (required: it says why, later).
pub async fn dismiss<A: Actions + ?Sized>(
    archive: &A,
    selection: &SelectionRequest,
    note: &str,
    actor: &Actor,
    business_fields: &[String],
    home_vhost: &str,
) -> Result<u64, PlanError> {
    let note = note.trim();
    if note.is_empty() {
        return Err(PlanError::Invalid(
            "say why in a note: it is what the next person reads".into(),
        ));
    }
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(PlanError::Invalid(format!(
            "a note has at most {MAX_NOTE_CHARS} characters"
        )));
    }
    let (selection, text) = selection.resolve(business_fields, home_vhost)?;
    Ok(archive.dismiss(&selection, &text, note, actor).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_targets_are_bounded_at_the_edge() {
        assert!(check_request_key("click-1").is_ok());
        assert!(check_request_key(&"k".repeat(MAX_REQUEST_KEY_CHARS + 1)).is_err());
        assert!(check_request_key("a\nb").is_err() && check_request_key("").is_err());
        let target = |exchange: &str| ReplayTarget {
            exchange: exchange.into(),
            routing_key: "k".into(),
        };
        assert!(check_target(&target("billing")).is_ok());
        assert!(check_target(&target(&"e".repeat(256))).is_err());
        assert!(check_target(&target("a\0b")).is_err());
    }
}

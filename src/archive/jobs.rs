//! Replay jobs, dismissals and the audit log as every backend stores them: the frozen
//! selection and its plan, job states and counts, per-message outcomes, audit entries.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{id_as_string, Actor, ArchiveError, MessageFilter, MessageStatus, Outcome};
use crate::amqp::headers::{MessageProperties, Table};
use crate::death::ReplayTarget;

/// Which messages an action applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// These archive ids (unknown ones are ignored).
    Ids(Vec<i64>),
    /// Every message the list shows for this filter at the moment the action is taken.
    Filter(Box<MessageFilter>),
}

/// Replay only the first `count` messages, wait `wait_secs`, and go on only if at most
/// `max_deaths` of the copies died again (came back into an archived DLQ) meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    pub count: u32,
    pub wait_secs: u32,
    #[serde(default)]
    pub max_deaths: u32,
}

/// Everything a new job (or plan) is made from.
#[derive(Debug, Clone)]
pub struct JobSpec<'a> {
    /// The same key never makes a second job: a retried request gets the first one back.
    pub request_key: &'a str,
    pub actor: &'a Actor,
    pub selection: &'a Selection,
    /// What the user asked for (JSON), kept for the job page and the audit log.
    pub selection_text: &'a str,
    /// One target for every message; `None`: each message's own replay target.
    pub target: Option<&'a ReplayTarget>,
    pub rate_per_sec: Option<u32>,
    /// Replay messages that were replayed or dismissed before (skipped otherwise).
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    /// `false`: only a plan (a dry run) that can be started later; `true`: queue it now.
    pub start: bool,
    /// Where replays may publish: messages bound elsewhere are skipped in the plan.
    pub policy: &'a crate::replay::policy::ExchangePolicy,
}

/// How many messages go where, decided when the selection is frozen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Messages the selection held.
    pub messages: i64,
    /// Messages that will be published.
    pub to_publish: i64,
    pub targets: Vec<TargetCount>,
    /// Skipped: no death history and no target chosen.
    pub no_target: i64,
    /// Skipped: replayed before (unless "include already replayed").
    pub already_replayed: i64,
    /// Skipped: dismissed (unless "include already replayed").
    pub dismissed: i64,
    /// Skipped: waiting in another unfinished job.
    pub in_other_jobs: i64,
    /// Skipped: their target exchange is not one `--replay-exchange` allows.
    #[serde(default)]
    pub not_allowed: i64,
    /// The targets of those, so the plan shows where they would have gone.
    #[serde(default)]
    pub refused_targets: Vec<TargetCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetCount {
    pub exchange: String,
    pub routing_key: String,
    pub messages: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// A dry run: frozen, counted, not started.
    Planned,
    /// Waiting for a runner.
    Queued,
    Running,
    /// Stopped by a user, a canary or a missing exchange; resumable.
    Paused,
    Cancelled,
    Completed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Planned => "planned",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Paused => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            JobState::Planned,
            JobState::Queued,
            JobState::Running,
            JobState::Paused,
            JobState::Cancelled,
            JobState::Completed,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }

    /// Nothing more will happen to it.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Cancelled | JobState::Completed)
    }
}

/// Per-message outcomes so far. `pending` are still to publish (or being published).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobCounts {
    pub published: i64,
    pub unroutable: i64,
    pub nacked: i64,
    pub failed: i64,
    pub skipped: i64,
    pub cancelled: i64,
    pub pending: i64,
}

impl JobCounts {
    /// Messages that did not reach a queue although they were meant to.
    pub fn problems(&self) -> i64 {
        self.unroutable + self.nacked + self.failed
    }
}

/// A replay job (or plan) with its progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayJob {
    #[serde(serialize_with = "id_as_string")]
    pub id: i64,
    pub state: JobState,
    /// Why it is paused, or what the runner waits for; `None` when all is well.
    pub detail: Option<String>,
    pub actor: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// What was selected, as asked.
    pub selection: serde_json::Value,
    pub target: Option<ReplayTarget>,
    pub rate_per_sec: Option<u32>,
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    pub plan: Plan,
    pub counts: JobCounts,
    pub total: i64,
    /// Seconds the publishing takes at the chosen rate; `None` without a rate.
    pub estimated_seconds: Option<f64>,
}

impl ReplayJob {
    /// Messages with a final outcome, of all in the job.
    pub fn done(&self) -> i64 {
        self.total - self.counts.pending
    }
}

/// A state change asked for by a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAction {
    /// Start a plan.
    Start,
    Pause,
    Resume,
    Cancel,
}

impl JobAction {
    pub fn as_str(self) -> &'static str {
        match self {
            JobAction::Start => "start",
            JobAction::Pause => "pause",
            JobAction::Resume => "resume",
            JobAction::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Start, Self::Pause, Self::Resume, Self::Cancel]
            .into_iter()
            .find(|a| a.as_str() == s)
    }
}

/// One message of a job and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobItem {
    #[serde(serialize_with = "id_as_string")]
    pub message_id: i64,
    pub target: Option<ReplayTarget>,
    /// `null` while to do; `sending`, then `published`, `unroutable`, `nacked`, `failed`,
    /// `skipped` or `cancelled`.
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub attempts: i64,
}

/// What the runner learnt about one message it published.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemOutcome {
    pub message_id: i64,
    pub outcome: Outcome,
    pub detail: Option<String>,
    /// The connection failed before the confirm: publish it again (the unconfirmed window).
    pub retry: bool,
}

/// A message ready to publish, with everything the publisher needs.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage {
    pub message_id: i64,
    pub target: ReplayTarget,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    pub body: Vec<u8>,
    /// Why the stored record could not be read; such a message is not published.
    pub unreadable: Option<String>,
}

/// How much the next step of a job may hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimit {
    pub messages: u32,
    /// Stored body bytes (at least one message is always handed out).
    pub bytes: u64,
}

/// What a runner does next.
#[derive(Debug, Clone, PartialEq)]
pub enum JobStep {
    /// Publish these (already recorded as `sending`).
    Publish(Vec<OutgoingMessage>),
    /// Stop: the job is in this state now (completed when nothing was left, or paused,
    /// cancelled or taken by another runner when its lease ran out).
    Stop(JobState),
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    #[serde(serialize_with = "id_as_string")]
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    /// `replay`, `edit_replay`, `dismiss`, `job_plan`, `job_start`, `job_pause`,
    /// `job_resume`, `job_cancel`, `job_complete`, `login`, `login_failed`, `logout`,
    /// `user_put`, `user_password`, `user_remove`, `token_create`, `token_revoke`.
    pub action: String,
    pub job_id: Option<String>,
    pub message_id: Option<String>,
    pub summary: String,
    /// The client's address, when it came over the network.
    pub source: Option<String>,
    /// The actor or summary was cut for the page; the export has them whole.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A replay with a changed body and/or headers; the original stays archived as it was.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayEdit {
    pub body: Option<Vec<u8>>,
    pub headers: Option<Table>,
}

/// A message handed out this many times without a recorded confirm is given up as failed
/// (it keeps breaking the channel, or the broker keeps going away mid-publish).
pub const MAX_ATTEMPTS: i64 = 3;

/// Skip reasons, as items and plans name them.
pub const NO_TARGET: &str = "no known target";
pub const ALREADY_REPLAYED: &str = "already replayed";
pub const DISMISSED: &str = "dismissed";
pub const IN_OTHER_JOB: &str = "in another unfinished replay job";
pub const NOT_ALLOWED: &str =
    "its target exchange is not one replays may publish to (--replay-exchange)";
/// Items the runner settles itself when it hands out the next step.
pub const REPLAYED_SINCE: &str = "replayed or dismissed after the plan was made";
pub const GIVEN_UP: &str = "handed to the broker 3 times without a confirm";

/// The state `action` takes a job in `state` to, or why it cannot.
pub fn next_state(id: i64, action: JobAction, state: JobState) -> Result<JobState, ArchiveError> {
    use JobState::*;
    match (action, state) {
        (JobAction::Start, Planned) => Ok(Queued),
        (JobAction::Pause, Queued | Running) => Ok(Paused),
        (JobAction::Resume, Paused) => Ok(Queued),
        (JobAction::Cancel, Planned | Queued | Running | Paused) => Ok(Cancelled),
        (action, state) => Err(ArchiveError::Conflict(format!(
            "replay job {id} is {}: it cannot {}",
            state.as_str(),
            match action {
                JobAction::Start => "be started (only a plan can)",
                JobAction::Pause => "be paused (only a queued or running job can)",
                JobAction::Resume => "be resumed (only a paused job can)",
                JobAction::Cancel => "be cancelled any more",
            }
        ))),
    }
}

/// A runner's outcomes, as the statements that record them take them: the ids to publish
/// again, and the ids of each final (outcome, detail).
pub type SortedOutcomes<'a> = (
    Vec<i64>,
    std::collections::BTreeMap<(Outcome, Option<&'a str>), Vec<i64>>,
);

pub fn sort_outcomes(outcomes: &[ItemOutcome]) -> SortedOutcomes<'_> {
    // Not confirmed (the connection broke, or never sent): to do again.
    let retry: Vec<i64> = outcomes
        .iter()
        .filter(|o| o.retry)
        .map(|o| o.message_id)
        .collect();
    let mut groups: std::collections::BTreeMap<(Outcome, Option<&str>), Vec<i64>> =
        Default::default();
    for o in outcomes.iter().filter(|o| !o.retry) {
        groups
            .entry((o.outcome, o.detail.as_deref()))
            .or_default()
            .push(o.message_id);
    }
    (retry, groups)
}

/// The job's count column a final outcome adds to.
pub fn count_column(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Published => "published",
        Outcome::Unroutable => "unroutable",
        Outcome::Nacked => "nacked",
        Outcome::Failed => "failed",
    }
}

/// The next step's candidates, sorted: to send (cut at the byte limit, one at least),
/// replayed or dismissed since the plan (unless the job includes those), and given up.
#[derive(Debug, Default)]
pub struct Step {
    pub send: Vec<i64>,
    pub replayed_since: Vec<i64>,
    pub given_up: Vec<i64>,
}

/// Items a step settles without publishing them.
pub struct Settled<'a> {
    pub ids: &'a [i64],
    /// The item's outcome (`skipped` or `failed`), which is also the job's count column.
    pub outcome: &'static str,
    pub detail: &'static str,
    /// The status their messages take, if it changes.
    pub status: Option<MessageStatus>,
}

impl Step {
    /// What is settled without publishing.
    pub fn settled(&self) -> [Settled<'_>; 2] {
        [
            Settled {
                ids: &self.replayed_since,
                outcome: "skipped",
                detail: REPLAYED_SINCE,
                status: None,
            },
            Settled {
                ids: &self.given_up,
                outcome: Outcome::Failed.as_str(),
                detail: GIVEN_UP,
                status: Some(MessageStatus::ReplayFailed),
            },
        ]
    }
}

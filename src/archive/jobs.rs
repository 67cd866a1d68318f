//! Replay jobs as every backend stores them — the frozen selection and its plan, job states
//! and counts, per-message outcomes, audit entries — and their rules (pure): which action
//! takes a job where, how a step's outcomes are recorded.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{id_as_string, Actor, ArchiveError, MessageFilter, MessageStatus, Outcome};
use crate::message::death::ReplayTarget;
use crate::message::headers::{MessageProperties, Table};

/// Which messages an action applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// These archive ids (unknown ones are ignored).
    Ids(Vec<i64>),
    /// These archive ids, of these DLQs (keys) only: the DLQs a caller's rights reach.
    IdsWithin(Vec<i64>, Vec<String>),
    /// Every message the list shows for this filter at the moment the action is taken.
    Filter(Box<MessageFilter>),
}

impl Selection {
    /// The same selection, of the DLQs (keys) `dlqs` names only; `None`: every DLQ.
    pub fn within(self, dlqs: Option<Vec<String>>) -> Selection {
        let Some(dlqs) = dlqs else {
            return self;
        };
        match self {
            Selection::Ids(ids) | Selection::IdsWithin(ids, _) => Selection::IdsWithin(ids, dlqs),
            Selection::Filter(mut filter) => {
                filter.dlqs = Some(dlqs);
                Selection::Filter(filter)
            }
        }
    }
}

/// Replay only the first `count` messages, wait `wait_secs`, and go on only if at most
/// `max_deaths` of the copies died again (came back into an archived DLQ) meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// Each message to the queue it first died in, through the default exchange (not its
    /// original exchange and key, which reach every queue bound to the key).
    pub to_first_death_queue: bool,
    pub rate_per_sec: Option<u32>,
    /// Replay messages that were replayed or dismissed before (skipped otherwise).
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    /// `false`: only a plan (a dry run) that can be started later; `true`: queue it now.
    pub start: bool,
    /// Where replays may publish: messages bound elsewhere are skipped in the plan.
    pub policy: &'a crate::message::exchange_policy::ExchangePolicy,
}

/// How many messages go where, decided when the selection is frozen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TargetCount {
    /// The vhost the messages go back into, their own; absent: the AMQP URL's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vhost: String,
    /// The broker they go back to, their own: a `--broker` name; absent: `default`
    /// (`--amqp-url`).
    #[serde(
        default = "crate::archive::model::default_broker",
        skip_serializing_if = "crate::archive::model::is_default_broker"
    )]
    pub broker: String,
    pub exchange: String,
    pub routing_key: String,
    pub messages: i64,
    /// Where the target came from, when the messages' framework convention gave it
    /// (`MassTransit's MT-Fault-InputAddress`); absent: their death history, or a target
    /// chosen for the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_from: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// Every state. [`JobState::parse`] reads only these, so a state left out could not be
    /// read back from the archive, and the transition tests go through all of them.
    pub const ALL: [JobState; 6] = [
        JobState::Planned,
        JobState::Queued,
        JobState::Running,
        JobState::Paused,
        JobState::Cancelled,
        JobState::Completed,
    ];

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
        JobState::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// Nothing more will happen to it.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Cancelled | JobState::Completed)
    }
}

/// Per-message outcomes so far. `pending` are still to publish (or being published).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReplayJob {
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
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
    /// Each message to the queue it first died in only (the default exchange).
    pub to_first_death_queue: bool,
    pub rate_per_sec: Option<u32>,
    pub include_replayed: bool,
    pub canary: Option<Canary>,
    pub plan: Plan,
    pub counts: JobCounts,
    pub total: i64,
    /// Seconds the publishing takes at the chosen rate; `None` without a rate.
    pub estimated_seconds: Option<f64>,
    /// While it is queued or running: the brokers its messages go back to (other than
    /// `default`) that no running instance has a `--broker` for. Only an instance that has
    /// them all claims the job: it waits, queued, until one runs. Empty otherwise.
    #[serde(default)]
    pub waiting_for_brokers: Vec<String>,
}

impl ReplayJob {
    /// Messages with a final outcome, of all in the job.
    pub fn done(&self) -> i64 {
        self.total - self.counts.pending
    }
}

/// What became of the copies a job published, by the status of each message it published
/// now: did the fix hold?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CopyCounts {
    /// Published, and settling: open until `--settle-secs` after its publish, unless its
    /// copy dies again first.
    pub settling: i64,
    /// Published, and its copy did not come back within the settle time: resolved.
    pub settled: i64,
    /// Published, and its copy died again: the copy, archived back, is the open record now.
    pub died_again: i64,
    /// Published, then dismissed or replayed once more since.
    pub changed_since: i64,
}

impl CopyCounts {
    /// The messages the job published (whatever became of them).
    pub fn published(&self) -> i64 {
        self.settling + self.settled + self.died_again + self.changed_since
    }

    /// Whether the fix held: `Some(false)` once a copy died again, `Some(true)` once every
    /// copy of a finished job settled (or changed since) and none died again, `None` while
    /// that is still to be seen — or when nothing was published.
    pub fn fix_held(&self, state: JobState) -> Option<bool> {
        if self.died_again > 0 {
            return Some(false);
        }
        let seen = state.is_final() && self.settling == 0 && self.settled > 0;
        seen.then_some(true)
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
    pub const ALL: [JobAction; 4] = [Self::Start, Self::Pause, Self::Resume, Self::Cancel];

    pub fn as_str(self) -> &'static str {
        match self {
            JobAction::Start => "start",
            JobAction::Pause => "pause",
            JobAction::Resume => "resume",
            JobAction::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One message of a job and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct JobItem {
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
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
    /// The vhost it was archived from, and is published back into (empty: the AMQP URL's).
    pub vhost: String,
    /// The broker it was archived from, and is published back to.
    pub broker: String,
    pub target: ReplayTarget,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    pub body: OutgoingBody,
    /// The framework convention it follows: a replay strips its failure headers.
    pub convention: Option<crate::message::conventions::Convention>,
    /// Why the stored record could not be read; such a message is not published.
    pub unreadable: Option<String>,
}

/// The body of a message handed out to publish.
#[derive(Debug, Clone, PartialEq)]
pub enum OutgoingBody {
    /// In hand: a body of up to a MiB.
    Held(Vec<u8>),
    /// Larger: read from the archive a piece at a time as it is published
    /// ([`crate::archive::MessageStore::body_part`]), so that a step never holds it.
    Archived { size: u64 },
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
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    #[serde(serialize_with = "id_as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    /// `replay`, `edit_replay`, `dismiss`, `job_plan`, `job_start`, `job_pause`,
    /// `job_resume`, `job_cancel`, `job_complete`, `login`, `login_failed`, `login_refused`,
    /// `logout`,
    /// `user_put`, `user_password`, `user_remove`, `token_create`, `token_revoke`, `purge`,
    /// `retention`.
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

/// The brokers other than `default` a plan publishes to, each once, in order: what a runner
/// must have a `--broker` for to claim the job (every runner has the default one).
pub fn plan_brokers(plan: &Plan) -> Vec<&str> {
    let mut brokers: Vec<&str> = plan
        .targets
        .iter()
        .map(|t| t.broker.as_str())
        .filter(|b| !super::model::is_default_broker(b))
        .collect();
    brokers.sort_unstable();
    brokers.dedup();
    brokers
}

#[cfg(test)]
mod copy_tests {
    use super::*;

    #[test]
    fn the_fix_held_only_once_every_copy_settled_and_none_died() {
        let counts = |settling, settled, died_again| CopyCounts {
            settling,
            settled,
            died_again,
            changed_since: 0,
        };
        assert_eq!(counts(0, 5, 1).fix_held(JobState::Running), Some(false));
        assert_eq!(counts(3, 0, 1).fix_held(JobState::Completed), Some(false));
        assert_eq!(counts(1, 5, 0).fix_held(JobState::Completed), None);
        assert_eq!(counts(0, 5, 0).fix_held(JobState::Running), None);
        assert_eq!(counts(0, 5, 0).fix_held(JobState::Completed), Some(true));
        assert_eq!(counts(0, 0, 0).fix_held(JobState::Completed), None);
        assert_eq!(counts(2, 5, 1).published(), 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_needs_the_brokers_of_its_targets_but_the_default() {
        let target = |broker: &str, exchange: &str| TargetCount {
            vhost: String::new(),
            broker: broker.into(),
            exchange: exchange.into(),
            routing_key: "k".into(),
            messages: 1,
            target_from: None,
        };
        let plan = Plan {
            targets: vec![
                target("us", "a"),
                target("default", "a"),
                target("eu", "b"),
                target("us", "b"),
            ],
            // Skipped ones are not published: their broker is not needed.
            refused_targets: vec![target("asia", "c")],
            ..Default::default()
        };
        assert_eq!(plan_brokers(&plan), ["eu", "us"]);
        assert!(plan_brokers(&Plan::default()).is_empty());
    }

    const ACTIONS: [JobAction; 4] = [
        JobAction::Start,
        JobAction::Pause,
        JobAction::Resume,
        JobAction::Cancel,
    ];
    const STATES: [JobState; 6] = JobState::ALL;

    /// Every (action, state) pair, written out: the state it leads to, or `None` (refused).
    fn documented() -> Vec<(JobAction, JobState, Option<JobState>)> {
        use JobAction::*;
        use JobState::*;
        vec![
            (Start, Planned, Some(Queued)),
            (Start, Queued, None),
            (Start, Running, None),
            (Start, Paused, None),
            (Start, Cancelled, None),
            (Start, Completed, None),
            (Pause, Planned, None),
            (Pause, Queued, Some(Paused)),
            (Pause, Running, Some(Paused)),
            (Pause, Paused, None),
            (Pause, Cancelled, None),
            (Pause, Completed, None),
            (Resume, Planned, None),
            (Resume, Queued, None),
            (Resume, Running, None),
            (Resume, Paused, Some(Queued)),
            (Resume, Cancelled, None),
            (Resume, Completed, None),
            (Cancel, Planned, Some(Cancelled)),
            (Cancel, Queued, Some(Cancelled)),
            (Cancel, Running, Some(Cancelled)),
            (Cancel, Paused, Some(Cancelled)),
            (Cancel, Cancelled, None),
            (Cancel, Completed, None),
        ]
    }

    #[test]
    fn the_table_covers_every_pair_once() {
        let table = documented();
        for action in ACTIONS {
            for state in STATES {
                let rows = table
                    .iter()
                    .filter(|(a, s, _)| *a == action && *s == state)
                    .count();
                assert_eq!(rows, 1, "{action:?} on {state:?}");
            }
        }
        assert_eq!(table.len(), ACTIONS.len() * STATES.len());
    }

    #[test]
    fn next_state_takes_each_allowed_pair_to_its_documented_state() {
        for (action, state, next) in documented() {
            let Some(next) = next else { continue };
            match next_state(7, action, state) {
                Ok(got) => assert_eq!(got, next, "{action:?} on {state:?}"),
                Err(e) => panic!("{action:?} on {state:?} is allowed, got {e}"),
            }
        }
    }

    #[test]
    fn next_state_refuses_every_other_pair_naming_the_job_and_its_state() {
        for (action, state, next) in documented() {
            if next.is_some() {
                continue;
            }
            let message = match next_state(7, action, state) {
                Err(ArchiveError::Conflict(message)) => message,
                other => panic!("{action:?} on {state:?}: expected a conflict, got {other:?}"),
            };
            assert!(
                message.starts_with(&format!("replay job 7 is {}: ", state.as_str())),
                "{action:?} on {state:?}: {message}"
            );
            let says = match action {
                JobAction::Start => "cannot be started",
                JobAction::Pause => "cannot be paused",
                JobAction::Resume => "cannot be resumed",
                JobAction::Cancel => "cannot be cancelled",
            };
            assert!(message.contains(says), "{action:?} on {state:?}: {message}");
        }
    }

    #[test]
    fn final_states_take_no_action_and_every_other_state_can_be_cancelled() {
        for state in STATES {
            let allowed = ACTIONS
                .iter()
                .filter(|a| next_state(1, **a, state).is_ok())
                .count();
            assert_eq!(state.is_final(), allowed == 0, "{state:?}");
            assert_eq!(
                next_state(1, JobAction::Cancel, state).is_ok(),
                !state.is_final(),
                "{state:?}"
            );
        }
    }

    #[test]
    fn states_and_actions_read_back_from_their_names() {
        for state in STATES {
            assert_eq!(JobState::parse(state.as_str()), Some(state));
        }
        for action in ACTIONS {
            assert_eq!(JobAction::parse(action.as_str()), Some(action));
        }
        assert_eq!(JobState::parse("sending"), None);
        assert_eq!(JobAction::parse("restart"), None);
    }

    fn outcome(
        message_id: i64,
        outcome: Outcome,
        detail: Option<&str>,
        retry: bool,
    ) -> ItemOutcome {
        ItemOutcome {
            message_id,
            outcome,
            detail: detail.map(str::to_owned),
            retry,
        }
    }

    #[test]
    fn sort_outcomes_groups_final_outcomes_by_outcome_and_detail_and_sets_retries_apart() {
        let outcomes = [
            outcome(1, Outcome::Published, None, false),
            outcome(2, Outcome::Failed, Some("channel closed"), true),
            outcome(3, Outcome::Published, None, false),
            outcome(4, Outcome::Unroutable, Some("NO_ROUTE"), false),
            outcome(5, Outcome::Failed, Some("x"), false),
            outcome(6, Outcome::Failed, Some("y"), false),
            outcome(7, Outcome::Published, None, true),
            outcome(8, Outcome::Unroutable, Some("NO_ROUTE"), false),
            outcome(9, Outcome::Nacked, None, false),
            outcome(10, Outcome::Failed, None, false),
        ];
        let (retry, groups) = sort_outcomes(&outcomes);
        // A retry is to do again, whatever outcome it came with.
        assert_eq!(retry, vec![2, 7]);
        let groups: Vec<_> = groups.into_iter().collect();
        assert_eq!(
            groups,
            vec![
                ((Outcome::Published, None), vec![1, 3]),
                ((Outcome::Unroutable, Some("NO_ROUTE")), vec![4, 8]),
                ((Outcome::Nacked, None), vec![9]),
                ((Outcome::Failed, None), vec![10]),
                ((Outcome::Failed, Some("x")), vec![5]),
                ((Outcome::Failed, Some("y")), vec![6]),
            ]
        );
    }

    #[test]
    fn sort_outcomes_of_nothing_is_nothing() {
        let (retry, groups) = sort_outcomes(&[]);
        assert!(retry.is_empty() && groups.is_empty());
        let only_retries = [outcome(1, Outcome::Failed, None, true)];
        let (retry, groups) = sort_outcomes(&only_retries);
        assert_eq!(retry, vec![1]);
        assert!(groups.is_empty());
    }

    #[test]
    fn each_outcome_counts_in_its_own_column() {
        assert_eq!(count_column(Outcome::Published), "published");
        assert_eq!(count_column(Outcome::Unroutable), "unroutable");
        assert_eq!(count_column(Outcome::Nacked), "nacked");
        assert_eq!(count_column(Outcome::Failed), "failed");
        // The column is named as the item's outcome is.
        for o in [
            Outcome::Published,
            Outcome::Unroutable,
            Outcome::Nacked,
            Outcome::Failed,
        ] {
            assert_eq!(count_column(o), o.as_str());
        }
    }

    #[test]
    fn a_step_settles_replayed_since_as_skipped_and_given_up_as_failed() {
        let step = Step {
            send: vec![1, 4],
            replayed_since: vec![2, 5],
            given_up: vec![3],
        };
        let [replayed, given_up] = step.settled();
        assert_eq!(replayed.ids, &[2, 5]);
        assert_eq!(replayed.outcome, "skipped");
        assert_eq!(replayed.detail, REPLAYED_SINCE);
        // Their status is what made them skipped: left as it is.
        assert_eq!(replayed.status, None);
        assert_eq!(given_up.ids, &[3]);
        assert_eq!(given_up.outcome, "failed");
        assert_eq!(given_up.outcome, count_column(Outcome::Failed));
        assert_eq!(given_up.detail, GIVEN_UP);
        assert_eq!(given_up.status, Some(MessageStatus::ReplayFailed));
        // What is sent is never settled in the same step.
        for settled in step.settled() {
            assert!(settled.ids.iter().all(|id| !step.send.contains(id)));
        }
        assert!(
            GIVEN_UP.contains(&format!(" {MAX_ATTEMPTS} times")),
            "{GIVEN_UP:?} says how many attempts MAX_ATTEMPTS allows"
        );
    }

    #[test]
    fn an_empty_step_settles_nothing() {
        let step = Step::default();
        assert!(step.settled().iter().all(|s| s.ids.is_empty()));
    }
}

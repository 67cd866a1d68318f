//! What the audit log says of each action: its lines, and how much of a text it keeps.

use super::{
    GroupNoteChange, JobAction, JobSpec, Plan, ReplayEdit, ReplayJob, RetentionCount, Selection,
};
use crate::message::death::ReplayTarget;
use crate::support::format::thousands;

/// The most of an actor and of a summary an entry keeps (the web caps names and fields well
/// below this; this bounds what any path can append)…
pub const MAX_ACTOR_CHARS: usize = 512;
pub const MAX_SUMMARY_CHARS: usize = 16 * 1024;
/// …and what a page shows of them.
pub const PAGE_ACTOR_CHARS: usize = 200;
pub const PAGE_SUMMARY_CHARS: usize = 2000;

/// At most `max` characters of `text`, marked when cut.
pub fn capped(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]).into(),
        None => text.into(),
    }
}

/// The audit action and summary of a failure group's note and status.
pub fn group_note_audit(group: i64, change: &GroupNoteChange) -> (&'static str, String) {
    use time::format_description::well_known::Rfc3339;
    let until = change
        .snoozed_until
        .and_then(|t| t.format(&Rfc3339).ok())
        .map(|t| format!(" until {t}"))
        .unwrap_or_default();
    (
        "group_note",
        format!(
            "failure group {group}: status {}{until}; note {:?}",
            change.status.label(),
            change.note
        ),
    )
}

/// The audit action and summary of a single replay.
pub fn replay_audit(
    message_id: i64,
    target: &ReplayTarget,
    edit: Option<&ReplayEdit>,
) -> (&'static str, String) {
    let (action, what) = match edit {
        Some(_) => ("edit_replay", "edited and replayed"),
        None => ("replay", "replayed"),
    };
    (
        action,
        format!("{what} message {message_id} to {}", target.label()),
    )
}

/// The message an action on a selection names in its audit entry: the one selected by id.
pub fn single_message(selection: &Selection) -> Option<i64> {
    match selection {
        Selection::Ids(ids) | Selection::IdsWithin(ids, _) if ids.len() == 1 => Some(ids[0]),
        _ => None,
    }
}

/// The audit line of an action on a selection (`dismissed`, `purged`).
pub fn action_summary(done: &str, count: u64, selection_text: &str, note: &str) -> String {
    let count = crate::support::format::count(count as i64, "message", "messages");
    format!("{done} {count} ({selection_text}): {note}")
}

/// The audit action and line of a new job (or plan).
pub fn create_summary(spec: &JobSpec<'_>, id: i64, plan: &Plan) -> (&'static str, String) {
    let target = spec.target.map_or_else(
        || "each message's own target".to_owned(),
        ReplayTarget::label,
    );
    let (action, verb) = if spec.start {
        ("job_start", "started")
    } else {
        ("job_plan", "planned")
    };
    let summary = format!(
        "{verb} replay job {id}: {} of {} selected messages to publish to {target}; selection {}{}{}",
        thousands(plan.to_publish),
        thousands(plan.messages),
        spec.selection_text,
        spec.rate_per_sec
            .map(|r| format!("; at most {}/s", thousands(i64::from(r))))
            .unwrap_or_default(),
        if spec.include_replayed {
            "; including already replayed"
        } else {
            ""
        },
    );
    (action, summary)
}

/// The audit line of a user's action on a job, with the job as it is afterwards.
pub fn control_summary(action: JobAction, job: &ReplayJob) -> String {
    format!(
        "{} replay job {} ({} published, {} not published, {} still to do)",
        match action {
            JobAction::Start => "started",
            JobAction::Pause => "paused",
            JobAction::Resume => "resumed",
            JobAction::Cancel => "cancelled",
        },
        job.id,
        thousands(job.counts.published),
        thousands(job.counts.problems()),
        thousands(job.counts.pending),
    )
}

/// The audit line of a job that has nothing left to publish.
pub fn complete_summary(job: &ReplayJob) -> String {
    let c = job.counts;
    format!(
        "replay job {} completed: {} published, {} unroutable, {} nacked, {} failed, {} skipped",
        job.id,
        thousands(c.published),
        thousands(c.unroutable),
        thousands(c.nacked),
        thousands(c.failed),
        thousands(c.skipped)
    )
}

/// The audit line of a job its runner paused.
pub fn pause_summary(id: i64, detail: Option<&str>) -> String {
    format!(
        "replay job {id} paused: {}",
        detail.unwrap_or("no reason given")
    )
}

/// The audit line of a retention run: what it deleted, by DLQ and rule.
pub fn retention_summary(deleted: i64, counts: &[RetentionCount], interrupted: bool) -> String {
    let bytes: i64 = counts.iter().map(|c| c.bytes).sum();
    let each: Vec<String> = counts
        .iter()
        .map(|c| format!("{} {} by {}", c.queue, c.messages, c.rule))
        .collect();
    let ended = match interrupted {
        true => " (the run was interrupted; this is what it did)",
        false => "",
    };
    format!(
        "retention deleted {deleted} messages ({bytes} body bytes): {}{ended}",
        each.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_a_character() {
        assert_eq!(capped("abc", 3), "abc");
        assert_eq!(capped("abcd", 3), "abc…");
        assert_eq!(capped("ééé", 2), "éé…");
    }

    #[test]
    fn a_retention_run_says_what_it_deleted_by_queue_and_rule() {
        let count = |queue: &str, rule: &str, messages, bytes| RetentionCount {
            queue: queue.into(),
            rule: rule.into(),
            messages,
            bytes,
        };
        let counts = [
            count("orders.dlq", "days=90", 1200, 1_000_000),
            count("pay.dlq", "messages=10", 34, 2_000),
        ];
        assert_eq!(
            retention_summary(1234, &counts, false),
            "retention deleted 1234 messages (1002000 body bytes): orders.dlq 1200 by days=90; \
             pay.dlq 34 by messages=10"
        );
        assert!(retention_summary(1234, &counts, true)
            .ends_with("(the run was interrupted; this is what it did)"));
    }
}

//! The pages people read, server-rendered with askama and updated by htmx: the overview,
//! the message list and one message, replay plans and jobs, the audit log, the DLQs, the
//! administration of users and tokens, and what they share (chrome, chips, highlights,
//! the payload viewer).

pub mod admin;
pub mod audit;
pub mod chips;
pub mod dlqs;
pub mod group_notes;
pub mod highlight;
pub mod message;
pub mod message_actions;
pub mod messages;
pub mod nearest;
pub mod overview;
pub mod overview_groups;
pub mod payload;
pub mod replays;

/// What the list and the overview say while the indexer is behind ingest (issue 37: append,
/// then index); `None` when it is not.
pub fn indexing_notice(behind: u64) -> Option<String> {
    (behind > 0).then(|| {
        format!(
            "Indexing: {} behind. The newest messages are listed and counted already; \
             search finds them once they are indexed, within seconds.",
            crate::support::format::thousands(behind)
        )
    })
}

//! What the people on an incident say of a failure group: a note ("investigating — PAY-123")
//! and a status ([`GroupStatus`]: investigating, waiting for a fix, snoozed until a time),
//! who said it and when ([`GroupNote`]); and a group's recent arrivals per minute
//! ([`GroupMinute`]), its trend.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Where a failure group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupStatus {
    /// Nothing said (a note may still be kept).
    None,
    /// Someone is looking at it.
    Investigating,
    /// Understood; a fix is on its way.
    WaitingForFix,
    /// Folded away on the overview until `snoozed_until`.
    Snoozed,
}

impl GroupStatus {
    pub const ALL: [GroupStatus; 4] = [
        GroupStatus::None,
        GroupStatus::Investigating,
        GroupStatus::WaitingForFix,
        GroupStatus::Snoozed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupStatus::None => "none",
            GroupStatus::Investigating => "investigating",
            GroupStatus::WaitingForFix => "waiting_for_fix",
            GroupStatus::Snoozed => "snoozed",
        }
    }

    /// How the overview says it.
    pub fn label(self) -> &'static str {
        match self {
            GroupStatus::None => "no status",
            GroupStatus::Investigating => "investigating",
            GroupStatus::WaitingForFix => "waiting for fix",
            GroupStatus::Snoozed => "snoozed",
        }
    }

    pub fn parse(s: &str) -> Option<GroupStatus> {
        Self::ALL.into_iter().find(|g| g.as_str() == s)
    }
}

/// A failure group's note and status, as last set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct GroupNote {
    pub status: GroupStatus,
    /// `""`: none.
    pub note: String,
    /// Until when a snoozed group is folded away (null unless snoozed).
    #[serde(with = "time::serde::rfc3339::option")]
    pub snoozed_until: Option<OffsetDateTime>,
    /// Who set it.
    pub by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl GroupNote {
    /// Whether the group is folded away at `now` (snoozed, until a time still to come).
    pub fn snoozed_at(&self, now: OffsetDateTime) -> bool {
        self.status == GroupStatus::Snoozed && self.snoozed_until.is_some_and(|until| until > now)
    }
}

/// A change of a group's note and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupNoteChange {
    pub status: GroupStatus,
    pub note: String,
    pub snoozed_until: Option<OffsetDateTime>,
}

/// Messages of one failure group (as a grouping names it: the cause group's id, or the value
/// of the part it is grouped by) archived in one span of minutes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMinute {
    pub group: String,
    /// The span's newest minute: Unix time / 60.
    pub minute: i64,
    pub messages: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_snoozed_until_its_time() {
        let now = OffsetDateTime::now_utc();
        let note = |status, until| GroupNote {
            status,
            note: String::new(),
            snoozed_until: until,
            by: "ana".into(),
            at: now,
        };
        let later = Some(now + time::Duration::hours(1));
        let earlier = Some(now - time::Duration::minutes(1));
        assert!(note(GroupStatus::Snoozed, later).snoozed_at(now));
        assert!(!note(GroupStatus::Snoozed, earlier).snoozed_at(now));
        assert!(!note(GroupStatus::Investigating, later).snoozed_at(now));
        for s in GroupStatus::ALL {
            assert_eq!(GroupStatus::parse(s.as_str()), Some(s));
        }
    }
}

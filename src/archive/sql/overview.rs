//! What a batch adds to the running totals ingest keeps (per DLQ and reason, per hour, per
//! failure group and per group and minute), computed once for both backends (pure).

use std::collections::BTreeMap;

use super::millis;
use crate::archive::{GroupKey, PreparedMessage, NO_REASON};

/// Messages per (DLQ, hour) (the sparkline), per (DLQ, minute) (the rate it dies at now), and
/// per failure group ([`GroupKey`]); in key order, the order every backend writes them in.
pub struct Overview<'a> {
    pub hours: BTreeMap<(&'a str, i64), i64>,
    pub minutes: BTreeMap<(&'a str, i64), i64>,
    pub groups: BTreeMap<GroupKey<'a>, GroupCount<'a>>,
    /// Per failure group and minute: each group's own trend.
    pub group_minutes: BTreeMap<(GroupKey<'a>, i64), i64>,
}

/// What a batch adds to a failure group: how many, the first and the last archive time, and
/// what a group made by it says of itself (its first message's error type and error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCount<'a> {
    pub messages: i64,
    pub first: i64,
    pub last: i64,
    pub error_type: Option<&'a str>,
    pub example: Option<&'a str>,
}

/// Minutes of per-minute counts kept: the overview shows the last few.
pub const MINUTES_KEPT: i64 = 60;
/// Minutes of per-group minute counts kept: a group's trend shows the last hours.
pub const GROUP_MINUTES_KEPT: i64 = 6 * 60;

pub fn overview<'a>(rows: &[(i64, &'a PreparedMessage)]) -> Overview<'a> {
    let mut hours: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut minutes: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut groups: BTreeMap<GroupKey, GroupCount> = BTreeMap::new();
    let mut group_minutes: BTreeMap<(GroupKey, i64), i64> = BTreeMap::new();
    for (_, m) in rows {
        let at = millis(m.message.received_at);
        *hours
            .entry((m.message.queue.as_str(), at / 3_600_000))
            .or_default() += 1;
        *minutes
            .entry((m.message.queue.as_str(), at / 60_000))
            .or_default() += 1;
        *group_minutes.entry((m.group(), at / 60_000)).or_default() += 1;
        let entry = groups.entry(m.group()).or_insert(GroupCount {
            messages: 0,
            first: at,
            last: at,
            error_type: m.error_type.as_deref(),
            example: m.error.as_deref(),
        });
        entry.messages += 1;
        entry.first = entry.first.min(at);
        entry.last = entry.last.max(at);
    }
    Overview {
        hours,
        minutes,
        groups,
        group_minutes,
    }
}

/// What a batch adds to one DLQ and first-death reason's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTotal<'a> {
    /// The DLQ's broker (the key carries it too, as a prefix; the totals keep it apart for
    /// the metrics' `broker` label).
    pub broker: &'a str,
    pub messages: i64,
    /// Body bytes (what a retention size cap counts).
    pub bytes: i64,
    pub oldest: i64,
    pub newest: i64,
}

/// Per DLQ and first-death reason: how many rows, their body bytes, the oldest and the newest
/// archive time.
pub fn totals<'a>(
    rows: &[(i64, &'a PreparedMessage)],
) -> BTreeMap<(&'a str, &'a str), QueueTotal<'a>> {
    let mut totals = BTreeMap::new();
    for (_, m) in rows {
        let reason = m
            .history
            .first_death
            .as_ref()
            .map_or(NO_REASON, |f| f.reason.as_str());
        let at = millis(m.message.received_at);
        let entry = totals
            .entry((m.message.queue.as_str(), reason))
            .or_insert(QueueTotal {
                broker: m.message.broker.as_str(),
                messages: 0,
                bytes: 0,
                oldest: at,
                newest: at,
            });
        entry.messages += 1;
        entry.bytes += m.message.body.len() as i64;
        entry.oldest = entry.oldest.min(at);
        entry.newest = entry.newest.max(at);
    }
    totals
}

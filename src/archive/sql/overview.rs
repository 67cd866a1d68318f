//! What a batch adds to the running totals ingest keeps (per DLQ and reason, per hour, per
//! failure group), computed once for both backends (pure).

use std::collections::BTreeMap;

use super::millis;
use crate::archive::{PreparedMessage, NO_REASON};

/// Messages per (DLQ, hour) (the sparkline), per (DLQ, minute) (the rate it dies at now), and
/// per failure group (queue, reason, error): how many, the first and the last archive time;
/// in key order, the order every backend writes them in.
pub struct Overview<'a> {
    pub hours: BTreeMap<(&'a str, i64), i64>,
    pub minutes: BTreeMap<(&'a str, i64), i64>,
    pub groups: BTreeMap<(&'a str, &'a str, &'a str), (i64, i64, i64)>,
}

/// Minutes of per-minute counts kept: the overview shows the last few.
pub const MINUTES_KEPT: i64 = 60;

pub fn overview<'a>(rows: &[(i64, &'a PreparedMessage)]) -> Overview<'a> {
    let mut hours: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut minutes: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut groups: BTreeMap<(&str, &str, &str), (i64, i64, i64)> = BTreeMap::new();
    for (_, m) in rows {
        let at = millis(m.message.received_at);
        *hours
            .entry((m.message.queue.as_str(), at / 3_600_000))
            .or_default() += 1;
        *minutes
            .entry((m.message.queue.as_str(), at / 60_000))
            .or_default() += 1;
        let entry = groups.entry(m.group()).or_insert((0, at, at));
        entry.0 += 1;
        entry.1 = entry.1.min(at);
        entry.2 = entry.2.max(at);
    }
    Overview {
        hours,
        minutes,
        groups,
    }
}

/// What a batch adds to one DLQ and first-death reason's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTotal {
    pub messages: i64,
    /// Body bytes (what a retention size cap counts).
    pub bytes: i64,
    pub oldest: i64,
    pub newest: i64,
}

/// Per DLQ and first-death reason: how many rows, their body bytes, the oldest and the newest
/// archive time.
pub fn totals<'a>(rows: &[(i64, &'a PreparedMessage)]) -> BTreeMap<(&'a str, &'a str), QueueTotal> {
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

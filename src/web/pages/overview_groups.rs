//! The overview's failure groups as a glance answers "is it getting worse?": in the order
//! the user chose ([`GroupSort`], `?sort=`), each with its own trend (the last hours in
//! 10-minute bars, and the rate now against an hour ago: [`Trend`]), its note and status
//! ([`NoteView`]). Pure: the page reads, this shapes.

use std::collections::HashMap;

use time::OffsetDateTime;

use crate::archive::{FailureGroup, GroupBy, GroupMinute, GroupNote, GroupStatus};
use crate::web::html::utc;

/// One bar of a chart (a DLQ's sparkline, a group's trend): its slot, its height in a
/// 0..=20 box, and what it counts.
pub struct Bar {
    pub x: usize,
    pub y: i64,
    pub height: i64,
    pub title: String,
}

/// Minutes per bar of a group's trend.
pub const BIN_MINUTES: i64 = 10;
/// Bars of a group's trend: six hours.
pub const BINS: usize = 36;
/// Bars between "now" and "an hour ago".
const HOUR_BINS: usize = (60 / BIN_MINUTES) as usize;

/// The order the overview shows the groups in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GroupSort {
    /// Open ones first, the latest failure first (the archive's own order).
    #[default]
    LastSeen,
    /// The most open messages first.
    Open,
    /// The newest group first.
    FirstSeen,
    /// By name, A to Z.
    Name,
}

impl GroupSort {
    pub const ALL: [GroupSort; 4] = [
        GroupSort::LastSeen,
        GroupSort::Open,
        GroupSort::FirstSeen,
        GroupSort::Name,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupSort::LastSeen => "last_seen",
            GroupSort::Open => "open",
            GroupSort::FirstSeen => "first_seen",
            GroupSort::Name => "name",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            GroupSort::LastSeen => "last seen",
            GroupSort::Open => "open count",
            GroupSort::FirstSeen => "first seen",
            GroupSort::Name => "name",
        }
    }

    pub fn parse(s: &str) -> Option<GroupSort> {
        Self::ALL.into_iter().find(|g| g.as_str() == s)
    }
}

/// What a row is sorted on.
pub struct SortKey<'a> {
    pub name: &'a str,
    pub open: i64,
    pub first_seen: OffsetDateTime,
}

/// The indices of `keys` in `sort`'s order (ties keep the archive's order).
pub fn sorted(keys: &[SortKey<'_>], sort: GroupSort) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    match sort {
        GroupSort::LastSeen => {}
        GroupSort::Open => order.sort_by_key(|&i| std::cmp::Reverse(keys[i].open)),
        GroupSort::FirstSeen => order.sort_by_key(|&i| std::cmp::Reverse(keys[i].first_seen)),
        GroupSort::Name => order.sort_by(|&a, &b| keys[a].name.cmp(keys[b].name)),
    }
    order
}

/// How a group is named in its minute counts ([`GroupMinute::group`]) as grouped `by`.
pub fn trend_key(g: &FailureGroup, by: GroupBy) -> String {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    match by {
        GroupBy::Cause => g.id.map(|id| id.to_string()).unwrap_or_default(),
        GroupBy::ErrorType => text(&g.error_type),
        GroupBy::MessageType => text(&g.message_type),
        GroupBy::Queue => text(&g.first_death_queue),
        GroupBy::Reason => text(&g.reason),
    }
}

/// Each group's messages per bar, newest bar first, from the minute counts.
pub fn bins(minutes: &[GroupMinute], now_minute: i64) -> HashMap<String, [i64; BINS]> {
    let mut out: HashMap<String, [i64; BINS]> = HashMap::new();
    for m in minutes {
        let age = now_minute - m.minute;
        if !(0..BINS as i64 * BIN_MINUTES).contains(&age) {
            continue;
        }
        out.entry(m.group.clone()).or_insert([0; BINS])[(age / BIN_MINUTES) as usize] += m.messages;
    }
    out
}

/// A group's trend: bars oldest to newest, and the rate now against an hour ago.
pub struct Trend {
    pub bars: Vec<Bar>,
    /// Messages over the bars.
    pub total: i64,
    /// `rising`, `falling`, `steady` or `quiet`: the CSS class and the word.
    pub direction: &'static str,
    /// "4.2/min now, 0.5/min an hour ago".
    pub said: String,
    /// "4.2/min".
    pub now: String,
    /// The rate an hour ago: "0.5/min".
    pub before: String,
    /// ▲, ▼ or nothing.
    pub arrow: &'static str,
}

/// Messages per minute over one bar, as the page says it.
pub fn per_minute(messages: i64, minutes: i64) -> String {
    let rate = messages as f64 / minutes.max(1) as f64;
    if messages == 0 {
        "0/min".to_owned()
    } else if rate >= 10.0 {
        format!("{rate:.0}/min")
    } else {
        format!("{rate:.1}/min")
    }
}

/// The trend of a group whose bars (newest first) are `newest_first`; `now_minute` names
/// the bars' times.
pub fn trend(newest_first: &[i64; BINS], now_minute: i64) -> Trend {
    let max = newest_first.iter().copied().max().unwrap_or(0).max(1);
    let bars = (0..BINS)
        .map(|slot| {
            let age = BINS - 1 - slot;
            let n = newest_first[age];
            let height = if n == 0 { 0 } else { (n * 20 / max).max(1) };
            let start = now_minute - (age as i64 + 1) * BIN_MINUTES + 1;
            let start = OffsetDateTime::from_unix_timestamp(start * 60)
                .map(utc)
                .unwrap_or_default();
            Bar {
                x: slot * 3,
                y: 20 - height,
                height,
                title: format!("{n} in the 10 minutes from {start}"),
            }
        })
        .collect();
    let (now, before) = (newest_first[0], newest_first[HOUR_BINS]);
    let direction = if now == 0 && before == 0 {
        "quiet"
    } else if now * 2 > before * 3 && now - before >= 3 {
        "rising"
    } else if before * 2 > now * 3 && before - now >= 3 {
        "falling"
    } else {
        "steady"
    };
    Trend {
        bars,
        total: newest_first.iter().sum(),
        direction,
        said: format!(
            "{} now, {} an hour ago",
            per_minute(now, BIN_MINUTES),
            per_minute(before, BIN_MINUTES)
        ),
        now: per_minute(now, BIN_MINUTES),
        before: per_minute(before, BIN_MINUTES),
        arrow: match direction {
            "rising" => "▲",
            "falling" => "▼",
            _ => "",
        },
    }
}

/// The statuses the note form offers: (value, label, whether it is the group's now).
pub fn status_choices(note: Option<&GroupNote>) -> Vec<(&'static str, &'static str, bool)> {
    let now = note.map_or(GroupStatus::None, |n| n.status);
    GroupStatus::ALL
        .into_iter()
        .map(|s| (s.as_str(), s.label(), s == now))
        .collect()
}

/// What the group's replay form says a replay would do, when some of its open messages are
/// settling from a replay already (`None`: none are).
pub fn replay_said(open: i64, settling: i64) -> Option<String> {
    match settling {
        0 => None,
        s if s >= open => Some(format!(
            "All {open} open messages were replayed and are settling: their copies are out. \
             A second replay publishes each of them again — tick “include already replayed” \
             to plan it; without it the plan is empty."
        )),
        s => Some(format!(
            "{s} of the {open} open messages are settling from a replay: the plan takes the \
             other {}; tick “include already replayed” to publish those {s} again too.",
            open - s
        )),
    }
}

/// A group's note and status, as the overview shows it.
pub struct NoteView {
    /// Empty with no status.
    pub status: &'static str,
    /// The status as a CSS class.
    pub status_class: &'static str,
    pub note: String,
    pub by: String,
    pub at: String,
    pub snoozed_until: Option<String>,
}

impl NoteView {
    pub fn of(note: &GroupNote) -> Self {
        NoteView {
            status: match note.status {
                GroupStatus::None => "",
                s => s.label(),
            },
            status_class: note.status.as_str(),
            note: note.note.clone(),
            by: note.by.clone(),
            at: utc(note.at),
            snoozed_until: note.snoozed_until.map(utc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trend_says_whether_it_gets_worse() {
        let mut bins = [0; BINS];
        bins[0] = 42;
        bins[HOUR_BINS] = 5;
        let t = trend(&bins, 1_000_000);
        assert_eq!(t.direction, "rising");
        assert_eq!(t.said, "4.2/min now, 0.5/min an hour ago");
        // Newest on the right, scaled to the busiest bar.
        assert_eq!(t.bars.last().unwrap().height, 20);
        assert_eq!(t.bars[BINS - 1 - HOUR_BINS].height, 2);
        bins.swap(0, HOUR_BINS);
        assert_eq!(trend(&bins, 1_000_000).direction, "falling");
        assert_eq!(trend(&[0; BINS], 0).direction, "quiet");
    }

    #[test]
    fn minutes_fall_in_their_bars() {
        let m = |group: &str, minute, messages| GroupMinute {
            group: group.into(),
            minute,
            messages,
        };
        let out = bins(
            &[
                m("7", 100, 2),
                m("7", 91, 3),
                m("7", 90, 4),
                m("7", -300, 9),
            ],
            100,
        );
        assert_eq!(out["7"][0], 5);
        assert_eq!(out["7"][1], 4);
        assert_eq!(out["7"].iter().sum::<i64>(), 9);
    }

    #[test]
    fn groups_sort_as_chosen() {
        let t = OffsetDateTime::UNIX_EPOCH;
        let keys = [
            SortKey {
                name: "b",
                open: 1,
                first_seen: t,
            },
            SortKey {
                name: "a",
                open: 5,
                first_seen: t + time::Duration::hours(1),
            },
        ];
        assert_eq!(sorted(&keys, GroupSort::LastSeen), [0, 1]);
        assert_eq!(sorted(&keys, GroupSort::Open), [1, 0]);
        assert_eq!(sorted(&keys, GroupSort::FirstSeen), [1, 0]);
        assert_eq!(sorted(&keys, GroupSort::Name), [1, 0]);
        assert_eq!(GroupSort::parse("open"), Some(GroupSort::Open));
    }
}

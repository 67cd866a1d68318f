//! The overview page: every archived DLQ with totals, reasons, a 24-hour sparkline and its
//! consumer's state, then the failure groups — by cause, or by one of its parts
//! (`?group_by=`), in the order chosen (`?sort=`), each with its trend, note and status
//! (`overview_groups`). Reads only the incremental tables.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use time::{Duration, OffsetDateTime};

use crate::amqp::discovery::Risk;
use crate::archive::selection::{fields_query, group_filters, group_link};
use crate::archive::{
    FailureGroup, GroupBy, GroupNote, GroupQuery, HourlyCount, QueueReasonCount, Role,
};
use crate::runtime::status::ConsumerState;
use crate::web::caller::Caller;
use crate::web::html::{filters, render, utc};
use crate::web::nav::Nav;
use crate::web::pages::dlqs::Found;
use crate::web::pages::overview_groups::{
    self as shaped, Bar, GroupSort, NoteView, SortKey, Trend,
};
use crate::web::AppState;

/// Failure groups shown on the overview.
const GROUPS_SHOWN: u32 = 50;
/// The minutes "dying now" looks back over.
pub const RECENT_MINUTES: i64 = 5;

pub struct ReasonCount {
    pub reason: String,
    /// Open messages of this reason.
    pub open: i64,
}

pub struct QueueRow {
    pub name: String,
    /// Messages still to deal with (not dismissed, settled or died again).
    pub open: i64,
    /// Of the open ones, replayed and settling.
    pub settling: i64,
    /// Every message archived from it.
    pub total: i64,
    pub reasons: Vec<ReasonCount>,
    pub bars: Vec<Bar>,
    pub last_24h: i64,
    /// Archived in the last few minutes: what dies now.
    pub recent: i64,
    /// The same as a rate: "2.4/min".
    pub rate: String,
    pub newest: Option<String>,
    pub oldest: Option<String>,
    pub consumer: String,
    pub consumer_class: &'static str,
}

pub struct GroupRow {
    /// What names it to the page's script across refreshes (its filter).
    pub key: String,
    /// The cause group's id (its note form), grouped by cause.
    pub id: Option<i64>,
    /// What its messages have in common, as the grouping names it (grouped by cause: the
    /// queue they failed in).
    pub name: String,
    /// Grouped by cause: the DLQ, when it is not the queue they failed in.
    pub dlq: Option<String>,
    pub reason: Option<String>,
    /// Grouped by cause (or exception type): `Type: template`; empty when none was given.
    pub cause: Option<String>,
    /// One error of the group as written.
    pub example: Option<String>,
    pub message_type: Option<String>,
    pub open: i64,
    pub settling: i64,
    pub total: i64,
    pub first_seen: String,
    pub last_seen: String,
    /// The list of its open messages.
    pub link: String,
    /// Its filters, as the hidden fields of its replay and dismiss forms.
    pub fields: Vec<(&'static str, String)>,
    /// "Replay group…", or "Replay again…" once everything open is settling.
    pub replay_label: &'static str,
    /// What a replay would do while some are settling.
    pub replay_said: Option<String>,
    /// The note form's statuses: (value, label, chosen).
    pub status_choices: Vec<(&'static str, &'static str, bool)>,
    pub trend: Trend,
    pub note: Option<NoteView>,
}

/// A grouping the overview offers, and its link.
pub struct GroupChoice {
    pub label: &'static str,
    pub link: String,
    pub chosen: bool,
}

/// A dead-letter queue on a broker that this instance does not archive.
pub struct DlqRow {
    pub broker: String,
    pub vhost: String,
    pub name: String,
    pub kind: String,
    pub sources: String,
    pub warnings: Vec<String>,
}

/// What discovery (`--management-url`) found: the DLQs not archived here.
pub struct DlqsCard {
    /// No answer yet (the first question is under way).
    pub pending: bool,
    /// Each management API that did not answer, what it said.
    pub errors: Vec<String>,
    pub rows: Vec<DlqRow>,
    /// Several brokers: each row names its own.
    pub several: bool,
    /// Brokers no management API was given for: their DLQs are not looked for.
    pub unlisted: Vec<String>,
}

/// The retention policy, and its last pass.
pub struct RetentionLine {
    pub policy: String,
    /// When the last pass ended, and how many it deleted.
    pub last: Option<(String, i64)>,
    pub next: Option<String>,
}

/// Where notifications go, and what became of the latest.
pub struct NotificationsLine {
    /// Each webhook as scheme and host.
    pub targets: Vec<String>,
    pub thresholds: Vec<String>,
    /// When the last event was taken, and its text.
    pub told: Option<(String, String)>,
    /// When one was last lost, and why.
    pub lost: Option<(String, String)>,
}

#[derive(Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub nav: Nav,
    pub queues: Vec<QueueRow>,
    pub groups: Vec<GroupRow>,
    /// How the groups are grouped, and the other ways.
    pub group_by: GroupBy,
    pub group_choices: Vec<GroupChoice>,
    /// The orders the groups may be shown in, and their links.
    pub sort_choices: Vec<GroupChoice>,
    /// Groups snoozed (folded away until their time).
    pub snoozed: Vec<GroupRow>,
    /// The snoozes the note form offers: (hours, label).
    pub snooze_hours: &'static [(i64, &'static str)],
    /// This page, grouped and sorted as it is (what it refreshes from).
    pub here: String,
    /// Risks to a DLQ's messages although it is consumed: (queue, what is wrong).
    pub warnings: Vec<(String, String)>,
    /// What cannot be reached (the database, RabbitMQ), said in full above everything.
    pub outages: Vec<String>,
    /// While the indexer is behind ingest, what the page says of it.
    pub indexing: Option<String>,
    /// Messages open across every DLQ.
    pub open_total: i64,
    /// The minutes "dying now" counts.
    pub recent_minutes: i64,
    /// The broker's DLQs Lazarus does not archive (with `--management-url`).
    pub dlqs: Option<DlqsCard>,
    /// `None`: no retention policy, everything is kept.
    pub retention: Option<RetentionLine>,
    /// `None`: no `--webhook`.
    pub notifications: Option<NotificationsLine>,
}

/// `/`: never an error page — what cannot be read is said in a banner, and the page keeps
/// refreshing itself until it can.
pub async fn overview(
    State(state): State<AppState>,
    nav: Nav,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Response {
    let now = OffsetDateTime::now_utc();
    // A caller whose rights are of some DLQs sees those, and nothing of the others: not their
    // names, counts, consumers or warnings, nor the instance-wide cards.
    let scope = caller.dlqs_at(Role::Viewer, &state).await.ok().flatten();
    let whole = scope.is_none() && caller.rights.everywhere_at(Role::Viewer);
    let visible =
        |queue: &str| whole || scope.as_ref().is_some_and(|s| s.iter().any(|d| d == queue));
    let mut consumers = state.status.snapshot();
    consumers.retain(|queue, _| visible(queue));
    let mut outages = outages(&consumers);
    let mut warnings: Vec<(String, String)> = state
        .status
        .warnings()
        .into_iter()
        .filter(|(queue, _)| visible(queue))
        .collect();
    let sort = match requested(query.as_deref(), "sort", GroupSort::parse) {
        Ok(sort) => sort.unwrap_or_default(),
        Err(asked) => {
            warnings.push((
                format!("sort={asked}"),
                format!(
                    "groups can be sorted by {}; shown by last seen",
                    GroupSort::ALL.map(GroupSort::as_str).join(", ")
                ),
            ));
            GroupSort::LastSeen
        }
    };
    let group_by = match requested(query.as_deref(), "group_by", GroupBy::parse)
        .map(Option::unwrap_or_default)
    {
        Ok(by) => by,
        Err(asked) => {
            warnings.push((
                format!("group_by={asked}"),
                format!(
                    "groups can be grouped by {}; shown by cause",
                    GroupBy::ALL.map(GroupBy::as_str).join(", ")
                ),
            ));
            GroupBy::Cause
        }
    };
    // The page says the database is down (and keeps refreshing) rather than being an error.
    let read = async {
        let mut counts = state.archive.counts().await?;
        counts.retain(|c| visible(&c.queue));
        let mut hourly = state
            .archive
            .hourly_counts(now - Duration::hours(23))
            .await?;
        hourly.retain(|h| visible(&h.queue));
        let groups = state
            .archive
            .groups(&GroupQuery {
                by: group_by,
                dlqs: (!whole).then(|| scope.clone().unwrap_or_default()),
                ..GroupQuery::by_cause(GROUPS_SHOWN)
            })
            .await?;
        // Whole minutes: the current one and the four before it.
        let mut recent = state
            .archive
            .recent_counts(now - Duration::minutes(RECENT_MINUTES - 1))
            .await?;
        recent.retain(|(queue, _)| visible(queue));
        let last_pass = match state.retention {
            Some(_) => state.archive.last_retention().await?,
            None => None,
        };
        let now_minute = now.unix_timestamp().div_euclid(60);
        // A cause group is of one DLQ; the other groupings' trends count every DLQ's
        // messages, so a caller who sees some DLQs gets none.
        let minutes = match whole || group_by == GroupBy::Cause {
            true => {
                let (span, spans) = (shaped::BIN_MINUTES, shaped::BINS);
                let archive = &state.archive;
                archive
                    .group_minutes(group_by, now_minute, span, spans)
                    .await?
            }
            false => Vec::new(),
        };
        let mut settling = state.archive.settling_by_dlq().await?;
        settling.retain(|(queue, _)| visible(queue));
        let ids: Vec<i64> = groups.iter().filter_map(|g| g.id).collect();
        let notes = state.archive.group_notes(&ids).await?;
        let extra = GroupReads {
            bins: shaped::bins(&minutes, now_minute),
            settling,
            notes: notes.into_iter().collect(),
        };
        let behind = state.index_behind().await?;
        Ok::<_, crate::archive::ArchiveError>((
            counts, hourly, groups, recent, last_pass, extra, behind,
        ))
    };
    let (counts, hourly, groups, recent, last_pass, extra, behind) = match state
        .reads
        .acquire()
        .await
    {
        // Too many readers at once: said like an outage, and the page refreshes itself.
        Err(busy) => {
            outages.insert(0, format!("{busy}."));
            Default::default()
        }
        Ok(_reading) => match read.await {
            Ok(read) => read,
            Err(e) => {
                outages.insert(0, format!("The database is unreachable: {e}. Nothing archived can be shown; consumers hold their deliveries until it is back."));
                Default::default()
            }
        },
    };
    let dlqs = (whole && !state.managements.is_empty()).then(|| {
        let found = state.discovery.latest(
            &state.managements,
            &state.brokers,
            crate::web::pages::dlqs::archived_queues(&state),
        );
        let mut card = dlqs_card(found, state.brokers.several(), &mut warnings);
        card.unlisted = state
            .managements
            .missing(&state.brokers)
            .into_iter()
            .map(str::to_owned)
            .collect();
        card
    });
    let retention = state
        .retention
        .as_ref()
        .filter(|_| whole)
        .map(|policy| RetentionLine {
            policy: policy.to_string(),
            last: last_pass
                .as_ref()
                .and_then(|r| Some((utc(r.finished_at?), r.deleted))),
            next: last_pass.as_ref().and_then(|r| r.next_at).map(utc),
        });
    let notifications = (whole && !state.notifications.targets.is_empty()).then(|| {
        let latest = state.notifications.latest();
        NotificationsLine {
            targets: state.notifications.targets.to_vec(),
            thresholds: state.notifications.thresholds.to_vec(),
            told: latest.told.map(|(at, text)| (utc(at), text)),
            lost: latest.lost.map(|(at, why)| (utc(at), why)),
        }
    });
    let (groups, snoozed) = group_rows(&groups, group_by, sort, &extra, now);
    render(&OverviewPage {
        nav,
        indexing: super::indexing_notice(behind),
        dlqs,
        retention,
        notifications,
        open_total: counts.iter().map(|c| c.open).sum(),
        recent_minutes: RECENT_MINUTES,
        queues: queue_rows(&counts, &hourly, &recent, &extra.settling, &consumers, now),
        groups,
        snoozed,
        snooze_hours: &crate::web::pages::group_notes::SNOOZE_HOURS,
        group_by,
        group_choices: GroupBy::ALL
            .into_iter()
            .map(|by| GroupChoice {
                label: by.label(),
                link: overview_link(by, sort),
                chosen: by == group_by,
            })
            .collect(),
        sort_choices: GroupSort::ALL
            .into_iter()
            .map(|s| GroupChoice {
                label: s.label(),
                link: overview_link(group_by, s),
                chosen: s == sort,
            })
            .collect(),
        here: overview_link(group_by, sort),
        warnings,
        outages,
    })
}

/// What the group rows are made of beside the groups themselves.
#[derive(Default)]
struct GroupReads {
    /// Each group's trend bars, by [`shaped::trend_key`].
    bins: std::collections::HashMap<String, [i64; shaped::BINS]>,
    /// Settling messages per DLQ.
    settling: Vec<(String, i64)>,
    /// Notes by cause group id.
    notes: BTreeMap<i64, GroupNote>,
}

/// The group rows in `sort`'s order, and apart from them those snoozed at `now`.
fn group_rows(
    groups: &[FailureGroup],
    by: GroupBy,
    sort: GroupSort,
    extra: &GroupReads,
    now: OffsetDateTime,
) -> (Vec<GroupRow>, Vec<GroupRow>) {
    let now_minute = now.unix_timestamp().div_euclid(60);
    let mut rows: Vec<(GroupRow, bool)> = groups
        .iter()
        .map(|g| {
            let note = g.id.and_then(|id| extra.notes.get(&id));
            let bins = extra
                .bins
                .get(&shaped::trend_key(g, by))
                .copied()
                .unwrap_or([0; shaped::BINS]);
            let mut row = group_row(g, by);
            row.trend = shaped::trend(&bins, now_minute);
            row.note = note.map(NoteView::of);
            row.status_choices = shaped::status_choices(note);
            (row, note.is_some_and(|n| n.snoozed_at(now)))
        })
        .collect();
    let keys: Vec<SortKey<'_>> = rows
        .iter()
        .zip(groups)
        .map(|((row, _), g)| SortKey {
            name: &row.name,
            open: row.open,
            first_seen: g.first_seen,
        })
        .collect();
    let order = shaped::sorted(&keys, sort);
    let mut slots: Vec<Option<(GroupRow, bool)>> = rows.drain(..).map(Some).collect();
    let (mut shown, mut snoozed) = (Vec::new(), Vec::new());
    for i in order {
        if let Some((row, asleep)) = slots[i].take() {
            if asleep {
                snoozed.push(row);
            } else {
                shown.push(row);
            }
        }
    }
    (shown, snoozed)
}

/// The card of DLQs not archived, every broker's (`several`: more than the default one); the
/// risks of archived ones join `warnings` (but their delivery limit, which the consumer's own
/// check says already), and so do queues whose dead letters reach no queue.
fn dlqs_card(
    found: Option<Found>,
    several: bool,
    warnings: &mut Vec<(String, String)>,
) -> DlqsCard {
    let mut card = DlqsCard {
        pending: found.is_none(),
        errors: Vec::new(),
        rows: Vec::new(),
        several,
        unlisted: Vec::new(),
    };
    for (broker, answer) in found.map(|f| f.brokers).unwrap_or_default() {
        let found = match answer {
            Ok(found) => found,
            Err(e) if several => {
                card.errors.push(format!("broker {broker}'s: {e}"));
                continue;
            }
            Err(e) => {
                card.errors.push(e);
                continue;
            }
        };
        let on = match broker.as_str() {
            crate::message::dlq::DEFAULT_BROKER => String::new(),
            broker => format!(", broker {broker}"),
        };
        // Dead letters the broker drops: said above everything, with the vhost and broker.
        warnings.extend(
            found
                .dead_ends
                .into_iter()
                .map(|e| (format!("{} (vhost {}{on})", e.queue, e.vhost), e.reason)),
        );
        for d in found.dlqs {
            let words = |risks: &[Risk]| risks.iter().map(ToString::to_string).collect::<Vec<_>>();
            if d.archived {
                let extra: Vec<Risk> = d
                    .warnings
                    .iter()
                    .filter(|r| !matches!(r, Risk::DeliveryLimit(_)))
                    .cloned()
                    .collect();
                warnings.extend(words(&extra).into_iter().map(|w| (d.key.clone(), w)));
                continue;
            }
            // Why it cannot be archived comes before what its settings risk.
            let mut said: Vec<String> = d.refused.into_iter().collect();
            said.extend(words(&d.warnings));
            card.rows.push(DlqRow {
                warnings: said,
                sources: d.sources.join(", "),
                broker: d.broker,
                vhost: d.vhost,
                name: d.name,
                kind: d.kind,
            });
        }
    }
    card
}

/// What the consumers cannot reach, once per cause: RabbitMQ, the database.
fn outages(consumers: &BTreeMap<String, ConsumerState>) -> Vec<String> {
    let mut out = Vec::new();
    let mut say = |queues: Vec<&str>, what: &str, detail: &str| {
        if !queues.is_empty() {
            out.push(format!("{what} ({}): {detail}", queues.join(", ")));
        }
    };
    let of = |pick: fn(&ConsumerState) -> Option<&String>| -> (Vec<&str>, String) {
        let hit: Vec<(&str, &String)> = consumers
            .iter()
            .filter_map(|(q, s)| pick(s).map(|d| (q.as_str(), d)))
            .collect();
        let detail = hit.first().map(|(_, d)| (*d).clone()).unwrap_or_default();
        (hit.into_iter().map(|(q, _)| q).collect(), detail)
    };
    let (queues, detail) = of(|s| match s {
        ConsumerState::Disconnected(d) => Some(d),
        _ => None,
    });
    say(
        queues,
        "RabbitMQ is unreachable; nothing is being archived",
        &detail,
    );
    let (queues, detail) = of(|s| match s {
        ConsumerState::DatabaseUnavailable(d) => Some(d),
        _ => None,
    });
    say(
        queues,
        "The database refuses writes; deliveries are held unacked in RabbitMQ",
        &detail,
    );
    out
}

/// One row per DLQ that is archived or consumed (a configured queue with nothing yet shows).
fn queue_rows(
    counts: &[QueueReasonCount],
    hourly: &[HourlyCount],
    recent: &[(String, i64)],
    settling: &[(String, i64)],
    consumers: &BTreeMap<String, ConsumerState>,
    now: OffsetDateTime,
) -> Vec<QueueRow> {
    let mut names: Vec<&str> = counts.iter().map(|c| c.queue.as_str()).collect();
    names.extend(consumers.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    let this_hour = now.unix_timestamp().div_euclid(3600);
    names
        .into_iter()
        .map(|name| {
            let mine: Vec<&QueueReasonCount> = counts.iter().filter(|c| c.queue == name).collect();
            let per_hour: Vec<i64> = (0..24)
                .map(|i| {
                    let hour = this_hour - 23 + i;
                    hourly
                        .iter()
                        .find(|h| h.queue == name && h.hour == hour)
                        .map_or(0, |h| h.messages)
                })
                .collect();
            let (consumer, consumer_class) = match consumers.get(name) {
                None => ("not consumed".to_owned(), ""),
                Some(ConsumerState::Consuming) => ("consuming".to_owned(), "ok"),
                Some(ConsumerState::Connecting) => ("connecting".to_owned(), ""),
                Some(ConsumerState::QueueMissing) => ("queue missing".to_owned(), "down"),
                Some(ConsumerState::Disconnected(_)) => ("disconnected".to_owned(), "down"),
                Some(ConsumerState::DatabaseUnavailable(_)) => {
                    ("database unavailable".to_owned(), "down")
                }
                Some(ConsumerState::Stopped) => ("stopped".to_owned(), "down"),
            };
            let recent = recent
                .iter()
                .find(|(q, _)| q == name)
                .map_or(0, |(_, n)| *n);
            QueueRow {
                name: name.to_owned(),
                open: mine.iter().map(|c| c.open).sum(),
                settling: settling
                    .iter()
                    .find(|(q, _)| q == name)
                    .map_or(0, |(_, n)| *n),
                rate: shaped::per_minute(recent, RECENT_MINUTES),
                total: mine.iter().map(|c| c.messages).sum(),
                reasons: mine
                    .iter()
                    .filter(|c| c.open > 0)
                    .map(|c| ReasonCount {
                        reason: c.reason.clone(),
                        open: c.open,
                    })
                    .collect(),
                last_24h: per_hour.iter().sum(),
                recent,
                bars: sparkline(&per_hour, this_hour - 23),
                newest: mine.iter().map(|c| c.newest).max().map(utc),
                oldest: mine.iter().map(|c| c.oldest).min().map(utc),
                consumer,
                consumer_class,
            }
        })
        .collect()
}

/// Bars scaled to the busiest hour, 4 px wide with a 1 px gap, in a 20 px high box.
fn sparkline(per_hour: &[i64], first_hour: i64) -> Vec<Bar> {
    let max = per_hour.iter().copied().max().unwrap_or(0).max(1);
    per_hour
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let height = if n == 0 { 0 } else { (n * 20 / max).max(1) };
            let start = OffsetDateTime::from_unix_timestamp((first_hour + i as i64) * 3600)
                .map(utc)
                .unwrap_or_default();
            Bar {
                x: i * 5,
                y: 20 - height,
                height,
                title: format!("{n} from {start}"),
            }
        })
        .collect()
}

/// What parameter `name` asks for (`None`: nothing); what it asked for, when `parse` knows
/// no such thing.
fn requested<T>(
    query: Option<&str>,
    name: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, String> {
    let asked = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    match asked {
        None => Ok(None),
        Some(v) => parse(&v).map(Some).ok_or(v),
    }
}

/// The overview with its groups grouped `by`, in `sort`'s order.
fn overview_link(by: GroupBy, sort: GroupSort) -> String {
    let mut parts = Vec::new();
    if by != GroupBy::Cause {
        parts.push(format!("group_by={}", by.as_str()));
    }
    if sort != GroupSort::LastSeen {
        parts.push(format!("sort={}", sort.as_str()));
    }
    match parts.is_empty() {
        true => "/".to_owned(),
        false => format!("/?{}", parts.join("&")),
    }
}

fn group_row(g: &FailureGroup, by: GroupBy) -> GroupRow {
    let none = || crate::archive::NO_ERROR.to_owned();
    let name = match by {
        GroupBy::Cause | GroupBy::Queue => g.first_death_queue.clone(),
        GroupBy::ErrorType => g.error_type.clone().or_else(|| Some(none())),
        GroupBy::MessageType => g.message_type.clone().or_else(|| Some(none())),
        GroupBy::Reason => g.reason.clone(),
    };
    let fields = group_filters(g, by);
    GroupRow {
        key: fields_query(&fields),
        id: g.id.filter(|_| by == GroupBy::Cause),
        replay_label: if g.settling >= g.open {
            "Replay again…"
        } else {
            "Replay group…"
        },
        replay_said: shaped::replay_said(g.open, g.settling),
        status_choices: shaped::status_choices(None),
        trend: shaped::trend(&[0; shaped::BINS], 0),
        note: None,
        name: name.unwrap_or_default(),
        dlq: g
            .queue
            .clone()
            .filter(|q| Some(q) != g.first_death_queue.as_ref()),
        reason: g.reason.clone().filter(|_| by == GroupBy::Cause),
        cause: (by == GroupBy::Cause).then(|| g.cause()),
        example: g.example.clone(),
        message_type: g.message_type.clone().filter(|_| by == GroupBy::Cause),
        open: g.open,
        settling: g.settling,
        total: g.total,
        first_seen: utc(g.first_seen),
        last_seen: utc(g.last_seen),
        link: group_link(g, by),
        fields,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_busiest_hour() {
        let bars = sparkline(&[0, 5, 10], 0);
        assert_eq!(
            bars.iter().map(|b| b.height).collect::<Vec<_>>(),
            [0, 10, 20]
        );
        assert_eq!(bars[2].y, 0);
        assert_eq!(bars[1].x, 5);
    }
}

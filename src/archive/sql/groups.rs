//! Reading the failure groups, the same on both backends: the groups' own rows (one per cause
//! and message type, kept by ingest and every status change) summed as a [`GroupQuery`]
//! groups them — never a scan of the messages; and their trends from their minute counts.

use super::db::Arg;
use super::{from_millis, ArchiveRow, Pool};
use crate::archive::{ArchiveError, FailureGroup, GroupBy, GroupMinute, GroupQuery};

/// What each output column is when grouped `by`: a column of the grouping, an aggregate, or
/// nothing (null).
fn select(by: GroupBy) -> String {
    let text_null = "CAST(NULL AS TEXT)";
    let cause = by == GroupBy::Cause;
    let pick = |keep: bool, expression: &'static str| if keep { expression } else { text_null };
    [
        format!(
            "{} AS id",
            if cause {
                "min(id)"
            } else {
                "CAST(NULL AS BIGINT)"
            }
        ),
        format!("{} AS dlq", pick(cause, "dlq")),
        format!("{} AS queue", pick(cause || by == GroupBy::Queue, "queue")),
        format!(
            "{} AS reason",
            pick(cause || by == GroupBy::Reason, "reason")
        ),
        format!(
            "{} AS error_type",
            match by {
                GroupBy::Cause => "max(error_type)",
                GroupBy::ErrorType => "error_type",
                _ => text_null,
            }
        ),
        format!("{} AS cause", pick(cause, "cause")),
        format!(
            "{} AS message_type",
            match by {
                // A cause group's rows are its message types: named when there is one.
                GroupBy::Cause => {
                    "CASE WHEN min(message_type) = max(message_type) THEN min(message_type) END"
                }
                GroupBy::MessageType => "message_type",
                _ => text_null,
            }
        ),
        "min(example) AS example".into(),
        "CAST(sum(messages) AS BIGINT) AS messages".into(),
        "CAST(sum(open_messages) AS BIGINT) AS open_messages".into(),
        "CAST(sum(settling_messages) AS BIGINT) AS settling_messages".into(),
        "min(first_seen) AS first_seen".into(),
        "max(last_seen) AS last_seen".into(),
    ]
    .join(", ")
}

/// The columns a grouping groups the rows on.
fn dimensions(by: GroupBy) -> &'static [&'static str] {
    match by {
        GroupBy::Cause => &["dlq", "queue", "reason", "cause"],
        GroupBy::ErrorType => &["error_type"],
        GroupBy::MessageType => &["message_type"],
        GroupBy::Queue => &["queue"],
        GroupBy::Reason => &["reason"],
    }
}

/// `$n` of `arg`, added to `args`.
fn bind<'q>(args: &mut Vec<Arg<'q>>, arg: Arg<'q>) -> String {
    args.push(arg);
    format!("${}", args.len())
}

/// The groups `query` asks for; with `new_since`, only cause groups first seen then or later
/// (the webhooks' new groups), oldest first.
pub async fn read(
    db: Pool<'_>,
    query: &GroupQuery,
    new_since: Option<i64>,
) -> Result<Vec<FailureGroup>, ArchiveError> {
    let d = db.dialect();
    let mut args: Vec<Arg<'_>> = Vec::new();
    let mut conditions = Vec::new();
    for (expression, value) in [
        ("dlq", &query.dlq),
        ("queue", &query.queue),
        ("reason", &query.reason),
        ("coalesce(error_type, '')", &query.error_type),
        ("message_type", &query.message_type),
    ] {
        if let Some(value) = value {
            let n = bind(&mut args, Arg::Text(Some(value)));
            conditions.push(format!("{expression} = {n}"));
        }
    }
    if let Some(dlqs) = &query.dlqs {
        let binds: Vec<String> = dlqs
            .iter()
            .map(|dlq| bind(&mut args, Arg::Text(Some(dlq))))
            .collect();
        conditions.push(match binds.is_empty() {
            true => "1 = 0".to_owned(),
            false => format!("dlq IN ({})", binds.join(", ")),
        });
    }
    if let Some(id) = query.group {
        let n = bind(&mut args, Arg::Int(Some(id)));
        for column in ["dlq", "queue", "reason", "cause"] {
            conditions.push(format!(
                "{column} = (SELECT g.{column} FROM failure_groups g WHERE g.id = {n})"
            ));
        }
    }
    let mut having = Vec::new();
    match query.open {
        Some(true) => having.push("sum(open_messages) > 0".to_owned()),
        Some(false) => having.push("sum(messages) > sum(open_messages)".to_owned()),
        None => {}
    }
    let dims = dimensions(query.by);
    let order = match new_since {
        Some(since) => {
            // The groups with a row first seen since then (through `failure_groups_first_seen`),
            // whole, new if none of their rows is older.
            let n = bind(&mut args, Arg::Int(Some(since)));
            conditions.push(format!(
                "(dlq, queue, reason, cause) IN \
                 (SELECT dlq, queue, reason, cause FROM failure_groups WHERE first_seen >= {n})"
            ));
            having.push(format!("min(first_seen) >= {n}"));
            "min(first_seen), min(id)".to_owned()
        }
        None => {
            let tie: Vec<String> = dims.iter().map(|c| d.byte_order(c)).collect();
            format!(
                "sum(open_messages) > 0 DESC, max(last_seen) DESC, {}",
                tie.join(", ")
            )
        }
    };
    let limit = bind(&mut args, Arg::Int(Some(i64::from(query.limit))));
    let sql = format!(
        "SELECT {} FROM failure_groups{}{} GROUP BY {}{} ORDER BY {order} LIMIT {limit}",
        select(query.by),
        if conditions.is_empty() { "" } else { " WHERE " },
        conditions.join(" AND "),
        dims.join(", "),
        if having.is_empty() {
            String::new()
        } else {
            format!(" HAVING {}", having.join(" AND "))
        },
    );
    let rows = db.fetch_all(&sql, &args).await?;
    rows.iter().map(group_from_row).collect()
}

/// Messages per group (named as [`GroupMinute::group`] says, grouped `by`) and minute, from
/// minute `since` on: the groups' own minute counts, never the messages.
pub async fn minutes(
    db: Pool<'_>,
    by: GroupBy,
    newest: i64,
    span: i64,
    spans: usize,
) -> Result<Vec<GroupMinute>, ArchiveError> {
    let (group, join, dims) = match by {
        // The cause group's id: the smallest of its rows' (as `read` names it), looked up once
        // per group and joined, then grouped by it: a lookup per row, grouped by the four
        // texts, read the whole table in the order of its key (22–34 ms for 6,500 rows at
        // 1,000,000 messages; docs/lab-notebook.md, "the pages bench again").
        GroupBy::Cause => (
            "CAST(ids.id AS TEXT)",
            " LEFT JOIN (SELECT dlq, queue, reason, cause, min(id) AS id FROM failure_groups \
             GROUP BY dlq, queue, reason, cause) ids ON ids.dlq = m.dlq AND ids.queue = m.queue \
             AND ids.reason = m.reason AND ids.cause = m.cause",
            "ids.id",
        ),
        GroupBy::ErrorType => (
            "coalesce(g.error_type, '')",
            " JOIN failure_groups g ON g.dlq = m.dlq AND g.queue = m.queue AND g.reason = m.reason \
             AND g.cause = m.cause AND g.message_type = m.message_type",
            "coalesce(g.error_type, '')",
        ),
        GroupBy::MessageType => ("m.message_type", "", "m.message_type"),
        GroupBy::Queue => ("m.queue", "", "m.queue"),
        GroupBy::Reason => ("m.reason", "", "m.reason"),
    };
    // Summed per span here, not per minute: a row per bar. A row per minute — up to 360 a
    // group over six hours — cost the overview 13 ms of its 15–22 at 1,000,000 messages
    // (docs/lab-notebook.md, "the overview's trends summed by the database").
    let span = span.max(1);
    let since = newest - span * spans as i64 + 1;
    let sql = format!(
        "SELECT {group} AS grp, ($2 - m.minute) / $3 AS back, \
         CAST(sum(m.messages) AS BIGINT) AS n FROM group_minutes m{join} \
         WHERE m.minute >= $1 AND m.minute <= $2 GROUP BY {dims}, ($2 - m.minute) / $3"
    );
    let rows = db
        .fetch_all(
            &sql,
            &[
                Arg::Int(Some(since)),
                Arg::Int(Some(newest)),
                Arg::Int(Some(span)),
            ],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let back: i64 = r.column("back")?;
            Ok(GroupMinute {
                group: r.column::<Option<String>>("grp")?.unwrap_or_default(),
                minute: newest - back * span,
                messages: r.column("n")?,
            })
        })
        .collect()
}

/// Replayed messages still settling, per DLQ: the groups' own counts summed.
pub async fn settling_by_dlq(db: Pool<'_>) -> Result<Vec<(String, i64)>, ArchiveError> {
    let rows = db
        .fetch_all(
            "SELECT dlq, CAST(sum(settling_messages) AS BIGINT) AS n FROM failure_groups \
             GROUP BY dlq HAVING sum(settling_messages) > 0",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.column("dlq")?, r.column("n")?)))
        .collect()
}

/// A group as [`read`] selects it.
fn group_from_row(r: &impl ArchiveRow) -> Result<FailureGroup, ArchiveError> {
    let error_type: Option<String> = r.column("error_type")?;
    let cause: Option<String> = r.column("cause")?;
    Ok(FailureGroup {
        id: r.column("id")?,
        queue: r.column("dlq")?,
        first_death_queue: r.column("queue")?,
        reason: r.column("reason")?,
        error: cause.map(|c| template_of(c, error_type.as_deref())),
        error_type,
        example: r.column("example")?,
        message_type: r
            .column::<Option<String>>("message_type")?
            .filter(|t| !t.is_empty()),
        open: r.column("open_messages")?,
        total: r.column("messages")?,
        settling: r.column("settling_messages")?,
        first_seen: from_millis(r.column("first_seen")?),
        last_seen: from_millis(r.column("last_seen")?),
    })
}

/// The template a cause's signature (`Type: template`) holds; a cause that names no type (or
/// an error archived by an earlier version, not regrouped yet) is all template.
fn template_of(cause: String, error_type: Option<&str>) -> String {
    match error_type {
        Some(kind) if cause == kind => String::new(),
        Some(kind) => match cause
            .strip_prefix(kind)
            .and_then(|rest| rest.strip_prefix(": "))
        {
            Some(template) => template.to_owned(),
            None => cause,
        },
        None => cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_the_signature_without_its_type() {
        let t = |c: &str, k: Option<&str>| template_of(c.to_owned(), k);
        assert_eq!(t("E: no customer C-<n>", Some("E")), "no customer C-<n>");
        assert_eq!(t("E", Some("E")), "");
        assert_eq!(t("timed out after <n> s", None), "timed out after <n> s");
        assert_eq!(t("", None), "");
    }
}

//! The list filter as SQL conditions, with bound parameters only: one builder for both
//! backends, generic over sqlx's database.

use sqlx::QueryBuilder;

use super::millis;
use crate::archive::{JobSpec, MessageFilter, StatusFilter, NO_REASON};

/// Where a backend keeps a message's status: a column of `messages` (SQLite), or a table of
/// its own (PostgreSQL's `message_status`, so that marking a message is not an update of its
/// wide row).
#[derive(Clone, Copy)]
pub enum StatusIn {
    Column,
    Table,
}

/// Each part of a cause group's key ([`GroupKey`](crate::archive::GroupKey) but the message
/// type): its `failure_groups` column, and what it is for a message. A message archived by an
/// earlier version counts under its error until it is regrouped (its cause is null until then).
pub const GROUP_KEY: [(&str, &str); 4] = [
    ("queue", "coalesce(first_death_queue, failed_queue, queue)"),
    ("reason", "coalesce(first_death_reason, 'none')"),
    ("cause", "coalesce(cause, error, '')"),
    ("dlq", "queue"),
];

/// A failure group's key, read from its row before a query that selects its messages
/// (`group=`): SQLite uses its index of groups' messages only for values it is given, not for
/// values a subquery reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupParts {
    /// Each part's value, in the order of [`GROUP_KEY`].
    values: [String; 4],
}

impl GroupParts {
    /// The key of the group `filter` selects by (`None`: no such filter, or no such group,
    /// which the condition's subqueries then find as nothing).
    pub async fn of(
        conn: &mut super::Conn<'_>,
        filter: &MessageFilter,
    ) -> Result<Option<GroupParts>, sqlx::Error> {
        use super::ArchiveRow;
        let Some(id) = filter.group.as_deref().and_then(|g| g.parse::<i64>().ok()) else {
            return Ok(None);
        };
        let columns: Vec<&str> = GROUP_KEY.iter().map(|(column, _)| *column).collect();
        let row = conn
            .fetch_optional(
                &format!(
                    "SELECT {} FROM failure_groups WHERE id = $1",
                    columns.join(", ")
                ),
                super::args![id],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut values: [String; 4] = Default::default();
        for (value, column) in values.iter_mut().zip(&columns) {
            *value = row.column(column)?;
        }
        Ok(Some(GroupParts { values }))
    }

    /// Those of the selection's filter.
    pub async fn of_selection(
        conn: &mut super::Conn<'_>,
        selection: &crate::archive::Selection,
    ) -> Result<Option<GroupParts>, sqlx::Error> {
        match selection {
            crate::archive::Selection::Filter(filter) => Self::of(conn, filter).await,
            crate::archive::Selection::Ids(_) | crate::archive::Selection::IdsWithin(..) => {
                Ok(None)
            }
        }
    }
}

/// ` AND ...` for every condition of the filter but its text; `group`: the key of the group it
/// selects by, when read beforehand ([`GroupParts`]).
pub fn push_conditions<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    filter: &'a MessageFilter,
    status_in: StatusIn,
    group: Option<&'a GroupParts>,
) where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    // The status is one of the conditions.
    for (field, value) in filter.conditions() {
        match (field, group) {
            ("group", Some(parts)) => {
                for ((_, expression), value) in GROUP_KEY.iter().zip(&parts.values) {
                    q.push(format!(" AND {expression} = "))
                        .push_bind(value.as_str());
                }
            }
            _ => push_condition(q, field, value, status_in),
        }
    }
    for term in filter.business_terms() {
        push_business_term(q, term);
    }
    if let Some(job) = filter.job {
        q.push(
            " AND id IN (SELECT message_id FROM replay_job_items WHERE outcome = 'published' \
             AND job_id = ",
        )
        .push_bind(job)
        .push(")");
    }
    if let Some(job) = filter.copies_of_job {
        // Archived since the job started: an earlier replay's copies are not this job's.
        q.push(
            " AND replay_of IN (SELECT message_id FROM replay_job_items WHERE outcome = 'published' \
             AND job_id = ",
        )
        .push_bind(job)
        .push(") AND archived_at >= (SELECT coalesce(started_at, created_at) FROM replay_jobs WHERE id = ")
        .push_bind(job)
        .push(")");
    }
    if let Some(dlqs) = &filter.dlqs {
        push_dlqs(q, dlqs);
    }
    if let Some(since) = filter.since {
        q.push(" AND archived_at >= ").push_bind(millis(since));
    }
    if let Some(until) = filter.until {
        q.push(" AND archived_at < ").push_bind(millis(until));
    }
}

/// ` AND` the message is of one of `dlqs` (keys): none when it is empty.
pub fn push_dlqs<'a, DB: sqlx::Database>(q: &mut QueryBuilder<'a, DB>, dlqs: &'a [String])
where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    if dlqs.is_empty() {
        q.push(" AND 1 = 0");
        return;
    }
    q.push(" AND queue IN (");
    let mut list = q.separated(", ");
    for dlq in dlqs {
        list.push_bind(dlq.as_str());
    }
    list.push_unseparated(")");
}

/// `AND <field matches value>`, with the archive column each search field stands for.
pub fn push_condition<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    field: &'a str,
    value: &'a str,
    status_in: StatusIn,
) where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let column = match field {
        "queue" => "queue",
        // Only other vhosts' messages are indexed (`messages_vhost`): said so, the index serves.
        "vhost" if !value.is_empty() => {
            q.push(" AND vhost <> '' AND vhost = ").push_bind(value);
            return;
        }
        "vhost" => "vhost",
        // Only other brokers' messages are indexed (`messages_broker`): said so, it serves.
        "broker" if value != crate::message::dlq::DEFAULT_BROKER => {
            q.push(" AND broker <> 'default' AND broker = ")
                .push_bind(value);
            return;
        }
        "broker" => "broker",
        "reason" if value == NO_REASON => {
            q.push(" AND first_death_reason IS NULL");
            return;
        }
        "reason" => "first_death_reason",
        // Messages without history are grouped under the queue their framework says they
        // failed in, else under the DLQ itself.
        "first_death_queue" => "coalesce(first_death_queue, failed_queue, queue)",
        "error" => "coalesce(error, '')",
        "group" => {
            // The group's key, read from its row by subqueries (PostgreSQL's index serves
            // these; SQLite's is given the values, [`GroupParts`]): each part as the index of
            // groups' messages (`messages_group`) writes it.
            for (column, expression) in GROUP_KEY {
                q.push(format!(
                    " AND {expression} = (SELECT {column} FROM failure_groups WHERE id = CAST("
                ))
                .push_bind(value)
                .push(" AS BIGINT))");
            }
            return;
        }
        "error_type" => "coalesce(error_type, '')",
        "message_type" => "coalesce(message_type, '')",
        "exchange" => "first_death_exchange",
        "routing_key" => "replay_routing_key",
        "status" => {
            // One status, or the set `open` / `resolved` stands for; unknown words (a search's
            // `status:`) match nothing, as any other unknown value.
            let statuses = StatusFilter::parse(value).map_or_else(Vec::new, |s| s.statuses());
            let mut list: Vec<String> = statuses
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            if list.is_empty() {
                list.push("NULL".into());
            }
            let list = list.join(", ");
            match status_in {
                // Looked up for each row the list walks (newest first, through whichever index
                // its other conditions use), never joined with the whole status table: a hashed
                // semi-join took 270 ms at a million messages, and an anti-join planned on
                // statistics from before a mass dismissal took 49 s. The cost is bounded by
                // the rows walked: a group 90 % resolved still walks its resolved ones.
                StatusIn::Table => q.push(format!(
                    " AND (SELECT status FROM message_status WHERE message_status.id = messages.id) \
                     IN ({list})"
                )),
                // SQLite: the exact condition of its partial index of open messages by group.
                StatusIn::Column => q.push(format!(" AND status IN ({list})")),
            };
            return;
        }
        "message_id" => "message_id",
        "correlation_id" => "correlation_id",
        "content_type" => {
            // `application/json` also finds `application/json; charset=utf-8`: a range
            // (';' is followed by '<'), so the index still serves it.
            q.push(" AND (content_type = ")
                .push_bind(value)
                .push(" OR (content_type >= ")
                .push_bind(format!("{value};"))
                .push(" AND content_type < ")
                .push_bind(format!("{value}<"))
                .push("))");
            return;
        }
        // A search's business fields are found by their words (push_business_term); a name
        // that is no column matches nothing.
        _ => {
            q.push(" AND FALSE");
            return;
        }
    };
    q.push(format!(" AND {column} = ")).push_bind(value);
}

/// `AND <a business field holds the term's words>`: its keys in the term's range
/// ([`crate::message::field_match`]: folded words, a phrase in order, a prefix), or its exact value —
/// which also finds values whose keys are still to be written (archived before they existed,
/// until the background reindex reaches them).
fn push_business_term<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    term: &'a crate::message::search::FieldTerm,
) where
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    q.push(" AND id IN (SELECT message_id FROM message_fields WHERE name = ")
        .push_bind(term.field.as_str())
        .push(" AND value = ")
        .push_bind(term.value.as_str());
    if let Some((low, high)) = crate::message::field_match::term_range(&term.value, term.prefix) {
        q.push(" UNION SELECT message_id FROM message_field_keys WHERE name = ")
            .push_bind(term.field.as_str())
            .push(" AND folded >= ")
            .push_bind(low)
            .push(" AND folded < ")
            .push_bind(high);
    }
    q.push(")");
}

/// `INSERT INTO replay_job_items ... SELECT job, message, target`: what every backend's
/// [`SqlArchive::freeze_selection`](super::SqlArchive::freeze_selection) writes before the
/// ` FROM messages ...` of the selection.
pub fn push_freeze<'a, DB: sqlx::Database>(
    q: &mut QueryBuilder<'a, DB>,
    id: i64,
    spec: &JobSpec<'_>,
) where
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    q.push(
        "INSERT INTO replay_job_items (job_id, message_id, target_exchange, target_routing_key) SELECT ",
    );
    q.push_bind(id);
    if spec.to_first_death_queue {
        // The default exchange routes a queue's name to that queue alone. A message without
        // death history has no such queue — but where its framework names the queue it
        // failed in, that one: else no target.
        // The columns hold the queue's key (`Dlq::key`): outside the home vhost vhost/name,
        // the vhost escaped (no `/`); at home the name, after a `/` when it holds one.
        let queue = "coalesce(messages.first_death_queue, messages.failed_queue)";
        q.push(format!(
            ", messages.id, CASE WHEN {queue} IS NULL THEN NULL ELSE '' END, \
             CASE WHEN messages.vhost <> '' \
             THEN substr({queue}, length(replace(replace(messages.vhost, \
             '%', '%25'), '/', '%2F')) + 2) \
             WHEN {queue} LIKE '/%' THEN substr({queue}, 2) \
             ELSE {queue} END"
        ));
        return;
    }
    q.push(", messages.id, coalesce(")
        .push_bind(spec.target.map(|t| t.exchange.clone()))
        .push(", messages.replay_exchange), coalesce(")
        .push_bind(spec.target.map(|t| t.routing_key.clone()))
        .push(", messages.replay_routing_key)");
}

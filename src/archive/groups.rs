//! Failure groups: what a group is keyed on ([`GroupKey`]), how they are read — grouped by
//! cause or by one of its parts ([`GroupBy`], [`GroupQuery`]) — and what is read
//! ([`FailureGroup`]). One bug is one group whatever ids its messages name: the key holds the
//! cause (the exception type and the message's template), not the error as written.

use serde::Serialize;
use time::OffsetDateTime;

use super::model::{optional_id_as_string, NO_ERROR};

/// What each message counts in, as ingest, status changes, purges and the regroup count it:
/// its DLQ, the queue it failed in (its first death's; the DLQ's without history), the reason
/// (`none` without history), its cause ([`Cause::signature`](crate::message::cause::Cause::signature);
/// until a message archived by an earlier version is regrouped, its error as written) and its
/// message type (`""`: none). In this order, the order every writer takes the rows in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupKey<'a> {
    pub dlq: &'a str,
    pub queue: &'a str,
    pub reason: &'a str,
    pub cause: &'a str,
    pub message_type: &'a str,
}

/// How the groups are read: by cause (the groups themselves), or by one of their parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// DLQ, failing queue, reason and cause: one bug in one place.
    #[default]
    Cause,
    /// The exception type only.
    ErrorType,
    /// The message type only.
    MessageType,
    /// The queue the messages failed in.
    Queue,
    /// The reason of their first death.
    Reason,
}

impl GroupBy {
    pub const ALL: [GroupBy; 5] = [
        GroupBy::Cause,
        GroupBy::ErrorType,
        GroupBy::MessageType,
        GroupBy::Queue,
        GroupBy::Reason,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Cause => "cause",
            GroupBy::ErrorType => "error_type",
            GroupBy::MessageType => "message_type",
            GroupBy::Queue => "queue",
            GroupBy::Reason => "reason",
        }
    }

    /// How the overview names it.
    pub fn label(self) -> &'static str {
        match self {
            GroupBy::Cause => "cause",
            GroupBy::ErrorType => "exception type",
            GroupBy::MessageType => "message type",
            GroupBy::Queue => "failing queue",
            GroupBy::Reason => "reason",
        }
    }

    pub fn parse(s: &str) -> Option<GroupBy> {
        Self::ALL.into_iter().find(|g| g.as_str() == s)
    }
}

/// Which groups to read, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupQuery {
    pub by: GroupBy,
    /// Only groups of this DLQ.
    pub dlq: Option<String>,
    /// Only groups of messages that failed in this queue.
    pub queue: Option<String>,
    pub reason: Option<String>,
    /// Only this exception type (`""`: none named).
    pub error_type: Option<String>,
    /// Only this message type (`""`: none).
    pub message_type: Option<String>,
    /// Only the cause group of this group id.
    pub group: Option<i64>,
    /// `Some(true)`: groups with open messages; `Some(false)`: with resolved ones.
    pub open: Option<bool>,
    /// Only groups of these DLQs (keys): the DLQs a caller's rights reach (`None`: every
    /// DLQ; empty: none). Their counts are of these DLQs' messages only.
    pub dlqs: Option<Vec<String>>,
    pub limit: u32,
}

impl GroupQuery {
    /// Every group by cause, the most recent with open messages first, up to `limit`.
    pub fn by_cause(limit: u32) -> Self {
        GroupQuery {
            by: GroupBy::Cause,
            dlq: None,
            queue: None,
            reason: None,
            error_type: None,
            message_type: None,
            group: None,
            open: None,
            dlqs: None,
            limit,
        }
    }
}

/// Failed messages with something in common: by default one cause (exception type and
/// message template) in one DLQ, failing queue and reason; or, grouped by one of those, all
/// messages with that part in common. A part the grouping does not keep is null.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FailureGroup {
    /// The cause group's id, for the list's `group` filter (null unless grouped by cause).
    #[serde(serialize_with = "optional_id_as_string")]
    #[schema(value_type = Option<String>)]
    pub id: Option<i64>,
    /// The DLQ its messages were archived from.
    pub queue: Option<String>,
    /// The queue its messages failed in: their first death's (the DLQ itself for messages
    /// without death history).
    pub first_death_queue: Option<String>,
    /// The reason of their first death (`none` without history).
    pub reason: Option<String>,
    /// The exception type the failures name (null: none named).
    pub error_type: Option<String>,
    /// The error's template: what varies between its failures (ids, numbers, UUIDs, emails,
    /// quoted values) as placeholders; `""` when no error was given.
    pub error: Option<String>,
    /// One error of the group, as the failing consumer left it.
    pub example: Option<String>,
    /// The type of its messages (the AMQP `type` property), when they all have one.
    pub message_type: Option<String>,
    /// Messages still open (archived, replayed and settling, or whose replay failed).
    pub open: i64,
    /// Every message archived in it, resolved ones too.
    pub total: i64,
    /// Of the open ones, replayed and settling: open until the settle time passes without
    /// their copy dying again.
    pub settling: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub first_seen: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen: OffsetDateTime,
}

impl FailureGroup {
    /// What failed, as one line: `Type: template`, the type or the template alone (`""`:
    /// no error given, or not grouped by cause or type).
    pub fn cause(&self) -> String {
        match (self.error_type.as_deref(), self.error.as_deref()) {
            (Some(kind), Some(t)) if !t.is_empty() => format!("{kind}: {t}"),
            (Some(kind), _) => kind.to_owned(),
            (None, Some(t)) => t.to_owned(),
            (None, None) => String::new(),
        }
    }

    /// The list filters that select exactly its messages, as it was grouped `by` (add
    /// `status=open` for its open ones). "No exception type" and "no message type" are
    /// values of their own ([`NO_ERROR`]).
    pub fn filter(&self, by: GroupBy) -> Vec<(&'static str, String)> {
        let value = |v: &Option<String>| match v.as_deref() {
            Some("") | None => NO_ERROR.to_owned(),
            Some(v) => v.to_owned(),
        };
        match by {
            GroupBy::Cause => match self.id {
                Some(id) => vec![("group", id.to_string())],
                None => Vec::new(),
            },
            GroupBy::ErrorType => vec![("error_type", value(&self.error_type))],
            GroupBy::MessageType => vec![("message_type", value(&self.message_type))],
            GroupBy::Queue => vec![("first_death_queue", value(&self.first_death_queue))],
            GroupBy::Reason => vec![("reason", value(&self.reason))],
        }
    }
}

//! Which messages a list, an action or a replay is about: the list's filters as every surface
//! takes them — the list's query string, a form, a JSON body, `lazarus replay`'s flags — and
//! their validation into the archive's [`MessageFilter`], in one place.

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::archive::{
    FailureGroup, GroupBy, MessageFilter, PageRequest, StatusFilter, DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
};
use crate::message::search;

/// Filters that do not make sense, with a message that says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSelection(pub String);

/// Query string of the list, as received: everything is validated into a filter with
/// messages a user can act on.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Deserialize,
    Serialize,
    clap::Args,
    utoipa::ToSchema,
    utoipa::IntoParams,
)]
#[serde(default)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Search, as in the list's search box (words, "phrases", prefix*, field:value).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub q: Option<String>,
    /// Only messages archived from this DLQ.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub queue: Option<String>,
    /// Only messages of DLQs in this vhost.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub vhost: Option<String>,
    /// Only messages of DLQs on this broker (`default`: `--amqp-url`'s; else a `--broker`
    /// name). On the command line `--from-broker`, `--broker` naming a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long = "from-broker")]
    pub broker: Option<String>,
    /// First-death reason: rejected, expired, maxlen, delivery_limit, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub reason: Option<String>,
    /// The queue of the first death (the DLQ itself for messages without history).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub first_death_queue: Option<String>,
    /// The failing consumer's error description (from --error-header), as it left it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub error: Option<String>,
    /// A failure group's id (`GET /api/groups`): its messages, one cause in one queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub group: Option<String>,
    /// The exception type the error names ("(none)" for errors that name none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub error_type: Option<String>,
    /// The message type, the AMQP `type` property ("(none)" for messages without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub message_type: Option<String>,
    /// Replay-target exchange to select by ("(AMQP default)" for the default exchange).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub exchange: Option<String>,
    /// Replay-target routing key to select by ("(empty)" for the empty key).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub routing_key: Option<String>,
    /// open (archived, replayed and settling, replay_failed) or resolved (dismissed, settled,
    /// died_again), or one of those statuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub status: Option<String>,
    /// Content type (application/json also finds application/json; charset=utf-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub content_type: Option<String>,
    /// Archived at or after (RFC 3339, e.g. 2026-12-02T09:00:00Z).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub since: Option<String>,
    /// Archived before (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub until: Option<String>,
    /// Published by this replay job (its id): with `status`, its copies still settling
    /// (`replayed`), settled, or died again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub job: Option<String>,
    /// The copies that died again (archived back, open) of what this replay job published.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(long)]
    pub copies_of_job: Option<String>,
    /// Messages per page: 1 to 500 (default 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(skip)]
    pub limit: Option<String>,
    /// The `next_cursor` of the page before, for the next (older) page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[arg(skip)]
    pub cursor: Option<String>,
}

/// A value as it goes into a query string or a path segment (`form_urlencoded`'s encoding).
pub fn query_value(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The filters as a query string, in their order.
pub fn fields_query(fields: &[(&str, String)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", query_value(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A failure group's open messages (grouped `by`), as list filters.
pub fn group_filters(g: &FailureGroup, by: GroupBy) -> Vec<(&'static str, String)> {
    let mut fields = g.filter(by);
    fields.push(("status", "open".to_owned()));
    fields
}

/// The message list of a failure group's open messages (grouped `by`): the overview's link
/// and the webhooks'.
pub fn group_link(g: &FailureGroup, by: GroupBy) -> String {
    format!("/messages?{}", fields_query(&group_filters(g, by)))
}

/// Empty form fields mean "no filter", as a browser sends them.
pub fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ListParams {
    /// The same filters with empty values left out, and without the page (limit, cursor):
    /// what a selection is, and what links and the audit log show.
    pub fn filters_only(&self) -> ListParams {
        let kept: serde_json::Map<String, serde_json::Value> = self
            .given_params()
            .filter(|(name, _)| !matches!(name.as_str(), "limit" | "cursor"))
            .map(|(name, v)| (name, v.into()))
            .collect();
        serde_json::from_value(kept.into()).expect("its own parameters read back")
    }

    /// The parameters given, by their names in the query string (serde's, so that no list of
    /// them is written again here), trimmed, empty ones left out.
    fn given_params(&self) -> impl Iterator<Item = (String, String)> {
        let serde_json::Value::Object(params) =
            serde_json::to_value(self).expect("strings always serialize")
        else {
            unreachable!("a struct serializes as an object")
        };
        params.into_iter().filter_map(|(name, v)| {
            let v = v.as_str()?.trim();
            (!v.is_empty()).then(|| (name, v.to_owned()))
        })
    }

    /// The query string of these filters (empty ones left out), with a page size and cursor.
    pub fn to_query(&self, cursor: Option<&str>) -> String {
        let mut params = self.filters_only();
        params.limit = given(&self.limit).map(str::to_owned);
        params.cursor = cursor.map(str::to_owned);
        serde_urlencoded::to_string(&params).expect("strings always encode")
    }

    /// No stored text holds NUL, and PostgreSQL refuses it in a parameter: a 400 that says
    /// so, not a database error.
    fn refuse_nul(&self) -> Result<(), InvalidSelection> {
        match self.given_params().find(|(_, v)| v.contains('\0')) {
            Some((name, _)) => Err(InvalidSelection(format!(
                "{name} contains a NUL character (%00), which no archived value holds"
            ))),
            None => Ok(()),
        }
    }

    /// Validates the filters; `business_fields` are the `--field` names `q` may use, and
    /// `home_vhost` is the AMQP URL's vhost (which the archive stores as empty).
    pub fn parse(
        &self,
        business_fields: &[String],
        home_vhost: &str,
    ) -> Result<(MessageFilter, PageRequest), InvalidSelection> {
        self.refuse_nul()?;
        let mut search = search::parse(given(&self.q).unwrap_or(""), business_fields)
            .map_err(|e| InvalidSelection(e.to_string()))?;
        let stored_vhost = |v: &str| crate::message::dlq::stored_vhost(v, home_vhost);
        for term in search.fields.iter_mut() {
            match term.field.as_str() {
                "vhost" => term.value = stored_vhost(&term.value),
                // Words of Lazarus' own vocabulary, whatever their case (`status:Open`).
                "status" | "reason" => term.value = term.value.to_lowercase(),
                _ => {}
            }
        }
        let job = |name: &str, v: &Option<String>| -> Result<Option<i64>, InvalidSelection> {
            given(v)
                .map(|s| {
                    s.parse::<i64>().map_err(|_| {
                        InvalidSelection(format!("{name} must be a replay job's id, not {s:?}"))
                    })
                })
                .transpose()
        };

        let time = |name: &str,
                    v: &Option<String>|
         -> Result<Option<OffsetDateTime>, InvalidSelection> {
            given(v)
                .map(|s| {
                    // RFC 3339, or what a datetime-local field sends (taken as UTC).
                    let local = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
                    OffsetDateTime::parse(s, &Rfc3339)
                        .or_else(|_| time::PrimitiveDateTime::parse(s, local).map(|t| t.assume_utc()))
                        .map_err(|_| {
                        InvalidSelection(format!(
                            "{name} must be an RFC 3339 time such as 2026-12-02T09:00:00Z, not {s:?}"
                        ))
                    })
                })
                .transpose()
        };
        let status = given(&self.status)
            .map(|s| {
                StatusFilter::parse(&s.to_lowercase()).ok_or_else(|| {
                    InvalidSelection(format!(
                        "status must be open, resolved, archived, replayed, replay_failed, \
                         dismissed, settled or died_again, not {s:?}"
                    ))
                })
            })
            .transpose()?;
        let limit = match given(&self.limit) {
            None => DEFAULT_PAGE_SIZE,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
                .ok_or_else(|| {
                    InvalidSelection(format!(
                        "limit must be between 1 and {MAX_PAGE_SIZE}, not {s:?}"
                    ))
                })?,
        };
        let before = given(&self.cursor)
            .map(|s| {
                s.parse::<i64>().map_err(|_| {
                    InvalidSelection(format!("cursor {s:?} is not one this API returned"))
                })
            })
            .transpose()?;
        let group = given(&self.group)
            .map(|g| {
                g.parse::<i64>().map(|id| id.to_string()).map_err(|_| {
                    InvalidSelection(format!(
                        "group must be the id of a failure group (GET /api/groups), not {g:?}"
                    ))
                })
            })
            .transpose()?;
        let text = |v: &Option<String>| given(v).map(str::to_owned);
        let filter = MessageFilter {
            queue: text(&self.queue),
            vhost: given(&self.vhost).map(stored_vhost),
            broker: text(&self.broker),
            reason: given(&self.reason).map(str::to_lowercase),
            first_death_queue: text(&self.first_death_queue),
            error: text(&self.error),
            group,
            error_type: text(&self.error_type),
            message_type: text(&self.message_type),
            exchange: text(&self.exchange),
            routing_key: text(&self.routing_key),
            status,
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            content_type: text(&self.content_type),
            text: search.text_query(),
            terms: search.fields,
            job: job("job", &self.job)?,
            copies_of_job: job("copies_of_job", &self.copies_of_job)?,
            dlqs: None,
        };
        Ok((filter, PageRequest { limit, before }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list's filters, as clap knows them (a list not written by hand).
    fn every_parameter() -> Vec<String> {
        use clap::Args;
        ListParams::augment_args(clap::Command::new("list"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect()
    }

    fn with(name: &str, value: &str) -> ListParams {
        serde_json::from_value(serde_json::json!({ name: value })).unwrap()
    }

    #[test]
    fn every_parameter_is_checked_for_nul_and_kept_as_a_filter() {
        let mut names = every_parameter();
        assert!(names.len() >= 17, "the parameters are read: {names:?}");
        // The page is no flag of `lazarus replay` (clap skips it), but a parameter of the list.
        names.extend(["limit".to_owned(), "cursor".to_owned()]);
        for name in &names {
            let refused = with(name, "a\0b").parse(&[], "/").unwrap_err();
            assert!(
                refused.0.starts_with(&format!("{name} contains a NUL")),
                "{name}: {refused}"
            );
            let kept = with(name, " 7 ").filters_only();
            let expected = match name.as_str() {
                "limit" | "cursor" => ListParams::default(),
                _ => with(name, "7"),
            };
            assert_eq!(kept, expected, "{name}");
        }
    }

    #[test]
    fn list_links_encode_every_value() {
        assert_eq!(query_value("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        let fields = [
            ("queue", "orders dlq".to_owned()),
            ("error", "x=1&y".to_owned()),
        ];
        assert_eq!(fields_query(&fields), "queue=orders+dlq&error=x%3D1%26y");
    }
    use crate::archive::MessageStatus;

    fn params(pairs: &[(&str, &str)]) -> ListParams {
        let query = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        serde_urlencoded_from(&query)
    }

    fn serde_urlencoded_from(query: &str) -> ListParams {
        serde_urlencoded::from_str(query).unwrap()
    }

    #[test]
    fn empty_query_is_newest_default_page() {
        let (filter, page) = params(&[]).parse(&[], "/").unwrap();
        assert_eq!(filter, MessageFilter::default());
        assert_eq!(
            page,
            PageRequest {
                limit: DEFAULT_PAGE_SIZE,
                before: None
            }
        );
    }

    #[test]
    fn the_home_vhost_is_the_one_stored_as_empty() {
        let (home, _) = params(&[("vhost", "shop")]).parse(&[], "shop").unwrap();
        assert_eq!(home.vhost.as_deref(), Some(""));
        let (other, _) = params(&[("vhost", "tenant-a")]).parse(&[], "shop").unwrap();
        assert_eq!(other.vhost.as_deref(), Some("tenant-a"));
        let (searched, _) = params(&[("q", "vhost:shop")]).parse(&[], "shop").unwrap();
        assert_eq!(searched.conditions(), [("vhost", "")]);
    }

    #[test]
    fn filters_are_parsed() {
        let (filter, page) = params(&[
            ("queue", "invoices.dlq"),
            ("reason", "rejected"),
            ("status", "archived"),
            ("since", "2026-12-02T09:00:00Z"),
            ("limit", "10"),
            ("cursor", "1234"),
        ])
        .parse(&[], "/")
        .unwrap();
        assert_eq!(filter.queue.as_deref(), Some("invoices.dlq"));
        assert_eq!(
            filter.status,
            Some(StatusFilter::One(MessageStatus::Archived))
        );
        let (open, _) = params(&[("status", "open")]).parse(&[], "/").unwrap();
        assert_eq!(open.status, Some(StatusFilter::Open));
        assert!(params(&[("status", "fixed")]).parse(&[], "/").is_err());
        assert_eq!(filter.since.unwrap().hour(), 9);
        assert_eq!(
            page,
            PageRequest {
                limit: 10,
                before: Some(1234)
            }
        );
    }

    #[test]
    fn bad_values_get_clear_messages() {
        for (pairs, expected) in [
            (vec![("limit", "0")], "limit must be between 1 and 500"),
            (vec![("limit", "lots")], "limit must be between"),
            (vec![("cursor", "abc")], "cursor \"abc\" is not one"),
            (
                vec![("status", "gone")],
                "status must be open, resolved, archived",
            ),
            (
                vec![("since", "yesterday")],
                "since must be an RFC 3339 time",
            ),
            (vec![("q", "%22open")], "never closed"),
        ] {
            let err = params(&pairs).parse(&[], "/").unwrap_err();
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }

    #[test]
    fn empty_fields_are_no_filter() {
        let (filter, _) = params(&[("exchange", ""), ("queue", ""), ("error", "")])
            .parse(&[], "/")
            .unwrap();
        assert_eq!(filter, MessageFilter::default());
    }

    #[test]
    fn q_becomes_text_and_terms() {
        let (filter, _) = params(&[("q", "timeout%20invoice:INV-1")])
            .parse(&["invoice".into()], "/")
            .unwrap();
        assert_eq!(filter.text.unwrap().words, ["timeout"]);
        assert_eq!(filter.terms[0].value, "INV-1");
        // Without the business field, `invoice:` is text.
        let (filter, _) = params(&[("q", "invoice:INV-1")]).parse(&[], "/").unwrap();
        assert_eq!(filter.text.unwrap().words, ["invoice:INV-1"]);
    }

    #[test]
    fn lazarus_own_words_are_found_whatever_their_case() {
        let (filter, _) = params(&[
            ("q", "status:OPEN%20reason:Rejected"),
            ("reason", "EXPIRED"),
        ])
        .parse(&[], "/")
        .unwrap();
        assert_eq!(
            filter.conditions(),
            [
                ("reason", "expired"),
                ("status", "open"),
                ("reason", "rejected")
            ]
        );
        let (filter, _) = params(&[("status", "Died_Again")]).parse(&[], "/").unwrap();
        assert_eq!(
            filter.status,
            Some(StatusFilter::One(MessageStatus::DiedAgain))
        );
    }

    #[test]
    fn a_job_filter_takes_a_job_id() {
        let (filter, _) = params(&[("job", "7"), ("copies_of_job", "8")])
            .parse(&[], "/")
            .unwrap();
        assert_eq!((filter.job, filter.copies_of_job), (Some(7), Some(8)));
        let err = params(&[("job", "seven")]).parse(&[], "/").unwrap_err();
        assert_eq!(
            err.to_string(),
            "job must be a replay job's id, not \"seven\""
        );
    }

    #[test]
    fn nul_in_any_filter_is_refused_by_name() {
        let err = params(&[("routing_key", "a%00b")])
            .parse(&[], "/")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("routing_key contains a NUL"),
            "{err}"
        );
    }

    #[test]
    fn datetime_local_values_are_utc() {
        let (filter, _) = params(&[("since", "2026-12-02T09:30")])
            .parse(&[], "/")
            .unwrap();
        assert_eq!(filter.since.unwrap().unix_timestamp(), 1_796_203_800);
    }
}

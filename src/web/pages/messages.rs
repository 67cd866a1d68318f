//! The message list: filters, keyset pages, htmx partial updates of the rows.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::archive::selection::ListParams;
use crate::archive::{MessageFilter, MessageSummary, Role};
use crate::message::death::ReplayTarget;
use crate::web::auth::Caller;
use crate::web::extract::AppQuery;
use crate::web::html::{filters, human_bytes, is_htmx, render, thousands, utc, PageError};
use crate::web::nav::Nav;
use crate::web::pages::chips::{filter_pairs, removable, Chip};
use crate::web::pages::nearest::{self, Hint};
use crate::web::AppState;

pub struct Row {
    pub id: String,
    /// What names it on a card (a phone's list): its first business field, else its
    /// message-id, else its archive id.
    pub title: String,
    /// Its page, carrying the search that found it (whose hits the page marks).
    pub link: String,
    pub queue: String,
    pub archived_at: String,
    pub message_id: String,
    pub reason: String,
    pub first_queue: String,
    pub target: String,
    pub size: String,
    pub status: &'static str,
    pub open: bool,
    /// The start of its body, as text (empty: none, or not for this caller).
    pub snippet: String,
    /// The failing consumer's error, as it left it (empty: none).
    pub error: String,
    /// Business field values, in the order of the configured fields.
    pub fields: Vec<String>,
}

impl Row {
    /// The row of `m`, found by the search `q` (if any).
    pub(crate) fn new(m: &MessageSummary, field_names: &[String], q: Option<&str>) -> Self {
        let link = match q.map(str::trim).filter(|q| !q.is_empty()) {
            Some(q) => format!(
                "/messages/{}?q={}",
                m.id,
                crate::archive::selection::query_value(q)
            ),
            None => format!("/messages/{}", m.id),
        };
        let first_field = field_names
            .first()
            .and_then(|f| m.fields.get(f))
            .filter(|v| !v.is_empty());
        let title = match (first_field, m.message_id.as_deref()) {
            (Some(v), _) => v.clone(),
            (None, Some(id)) if !id.is_empty() => id.to_owned(),
            _ => format!("message {}", m.id),
        };
        Row {
            link,
            title,
            fields: field_names
                .iter()
                .map(|f| m.fields.get(f).cloned().unwrap_or_default())
                .collect(),
            id: m.id.to_string(),
            queue: m.queue.clone(),
            archived_at: utc(m.archived_at),
            message_id: m.message_id.clone().unwrap_or_default(),
            reason: m
                .first_death
                .as_ref()
                .map_or("none".into(), |f| f.reason.clone()),
            first_queue: m
                .first_death
                .as_ref()
                .map_or(String::new(), |f| f.queue.clone()),
            target: target_text(m),
            size: human_bytes(m.body_size),
            status: m.status.as_str(),
            open: m.open,
            snippet: m.snippet.clone().unwrap_or_default(),
            error: m.error.clone().unwrap_or_default(),
        }
    }
}

pub(crate) fn target_text(m: &MessageSummary) -> String {
    m.replay_target
        .as_ref()
        .map_or_else(|| "unknown".into(), ReplayTarget::label)
}

#[derive(Template)]
#[template(path = "messages.html")]
pub struct MessagesPage {
    pub nav: Nav,
    pub form: ListParams,
    /// `since` and `until` as a datetime-local field shows them (UTC).
    pub since_input: String,
    pub until_input: String,
    pub field_names: Vec<String>,
    pub queues: Vec<String>,
    pub rows: Vec<Row>,
    pub next_link: Option<String>,
    pub error: Option<String>,
    /// The filters as hidden fields of the selection form ("all matching").
    pub filter_pairs: Vec<(String, String)>,
    pub chips: Vec<Chip>,
    /// A search that found nothing: how it was read, and what to try instead.
    pub read_as: Vec<String>,
    pub offers: Vec<Hint>,
    /// May replay and dismiss (viewers get no selection boxes).
    pub can_act: bool,
    /// Where the number of matches is asked for, once the rows are shown.
    pub count_link: Option<String>,
    /// Filters in use besides the search (the folded filters say how many).
    pub filters_in_use: usize,
    /// While the indexer is behind ingest, what the list says of it.
    pub indexing: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/message_rows.html")]
pub struct MessageRowsPartial {
    pub can_act: bool,
    pub count_link: Option<String>,
    pub field_names: Vec<String>,
    pub rows: Vec<Row>,
    pub next_link: Option<String>,
    pub error: Option<String>,
    pub filter_pairs: Vec<(String, String)>,
    pub chips: Vec<Chip>,
    /// A search that found nothing: how it was read, and what to try instead.
    pub read_as: Vec<String>,
    pub offers: Vec<Hint>,
    pub indexing: Option<String>,
}

/// Whether a query string holds a parameter with nothing in it (`?q=&queue=billing`), as a
/// plain form submission sends every field.
fn has_empty_parameter(query: Option<&str>) -> bool {
    query.is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(_, v)| v.trim().is_empty()))
}

/// A time filter as `<input type="datetime-local">` takes it: `2026-12-02T09:30` (UTC).
fn datetime_local(v: &Option<String>) -> String {
    let v = value(v);
    let minutes = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
    match time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339) {
        Ok(t) => t
            .to_offset(time::UtcOffset::UTC)
            .format(minutes)
            .unwrap_or_default(),
        Err(_) => v.to_owned(),
    }
}

fn value(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// Matches counted at first: past it the list says "more than 1,000", and counts them all
/// when asked ("count all"): a common word in millions costs the list nothing until then.
pub const COUNT_CAP: u64 = 1_000;

/// Past [`COUNT_CAP`]: "more than 1,000 match", and the button that counts them all.
#[derive(Template)]
#[template(path = "partials/match_count.html")]
struct MoreThanPartial {
    cap: String,
    all: String,
}

/// `/messages/count`: how many messages the list's filters find, as the list shows it (asked
/// for after the rows are shown, so counting never holds them up); with `exact=1`, all of
/// them, however many.
pub async fn count_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    RawQuery(raw): RawQuery,
    AppQuery(form): AppQuery<ListParams>,
) -> Result<Response, PageError> {
    let exact = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "exact" && v == "1");
    let (filter, _) = caller
        .filter(&state, &form)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    let _reading = state
        .reads
        .acquire()
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    let cap = if exact {
        i64::MAX as u64
    } else {
        COUNT_CAP + 1
    };
    let n = state
        .archive
        .count_messages(&filter, cap)
        .await
        .map_err(|e| PageError::new(e, &headers))?;
    let text = match n {
        0 => "no message matches".to_owned(),
        1 => "1 message matches".to_owned(),
        n if n > COUNT_CAP && !exact => {
            let more = MoreThanPartial {
                cap: thousands(COUNT_CAP),
                all: format!("/messages/count?{}&exact=1", form.to_query(None)),
            };
            return Ok(([(header::CACHE_CONTROL, "no-store")], render(&more)).into_response());
        }
        n => format!("{} match", thousands(n)),
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], text).into_response())
}

/// The failure group `filter` selects by, as its chip names it: `cause (reason in queue)`.
async fn group_named(
    state: &AppState,
    caller: &Caller,
    filter: &crate::archive::MessageFilter,
) -> Result<Option<String>, crate::archive::ArchiveError> {
    let Some(id) = filter.group.as_deref().and_then(|g| g.parse().ok()) else {
        return Ok(None);
    };
    let query = crate::archive::GroupQuery {
        group: Some(id),
        ..crate::archive::GroupQuery::by_cause(1)
    };
    let groups = state.archive.groups(&query).await?;
    let seen = groups.first().filter(|g| caller.sees_group(g, state));
    Ok(seen.map(|g| {
        let cause = g.cause();
        format!(
            "{} ({} in {})",
            if cause.is_empty() {
                "no error given"
            } else {
                &cause
            },
            g.reason.as_deref().unwrap_or_default(),
            g.first_death_queue.as_deref().unwrap_or_default()
        )
    }))
}

/// `/messages`: the whole page, or only the result rows when htmx asks (live filtering).
pub async fn list_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    caller: Caller,
    AppQuery(form): AppQuery<ListParams>,
) -> Result<Response, PageError> {
    // The list's URL holds only the filters in use: a form sent without script is sent on.
    if !is_htmx(&headers) && has_empty_parameter(uri.query()) {
        let query = form.to_query(form.cursor.as_deref());
        let to = match query.is_empty() {
            true => "/messages".to_owned(),
            false => format!("/messages?{query}"),
        };
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response());
    }
    let parsed = caller.filter(&state, &form).await;
    let mut found_nothing: Option<MessageFilter> = None;
    let mut group = None;
    let mut indexing = None;
    let (rows, next_link, error) = match parsed {
        Ok((filter, page)) => {
            let _reading = state
                .reads
                .acquire()
                .await
                .map_err(|e| PageError::new(e, &headers))?;
            group = group_named(&state, &caller, &filter)
                .await
                .map_err(|e| PageError::new(e, &headers))?;
            let mut page = state
                .archive
                .list_messages(&filter, page)
                .await
                .map_err(|e| PageError::new(e, &headers))?;
            indexing = super::indexing_notice(
                state
                    .index_behind()
                    .await
                    .map_err(|e| PageError::new(e, &headers))?,
            );
            for m in &mut page.messages {
                let role = caller.role_on(&m.queue, &m.vhost, &state);
                state.masking.summary(role.unwrap_or(Role::Viewer), m);
            }
            let next = page
                .next_cursor
                .as_deref()
                .map(|c| format!("/messages?{}", form.to_query(Some(c))));
            if page.messages.is_empty() {
                found_nothing = Some(filter);
            }
            (
                page.messages
                    .iter()
                    .map(|m| Row::new(m, &state.business_fields, form.q.as_deref()))
                    .collect(),
                next,
                None,
            )
        }
        Err(e) => (Vec::new(), None, Some(e.to_string())),
    };
    let pairs = filter_pairs(&form);
    let count_link = (error.is_none() && !rows.is_empty())
        .then(|| format!("/messages/count?{}", form.to_query(None)));
    let queues = match found_nothing.is_some() || !is_htmx(&headers) {
        true => caller
            .visible_dlqs(&state)
            .await
            .map_err(|e| PageError::new(e, &headers))?,
        false => Vec::new(),
    };
    // Nothing found: say how the search was read, and offer the nearest that finds something.
    let (read_as, offers) = match &found_nothing {
        Some(filter) => {
            let q = form.q.as_deref().unwrap_or_default();
            let read = crate::message::search::parse(q, &state.business_fields)
                .map(|s| nearest::read_as(&s))
                .unwrap_or_default();
            (read, nearest::offers(&state, q, filter, &queues).await)
        }
        None => (Vec::new(), Vec::new()),
    };
    if is_htmx(&headers) {
        // 200 even for a bad filter: the inline message replaces the results as you type.
        return Ok((
            [(header::VARY, "HX-Request")],
            render(&MessageRowsPartial {
                can_act: caller.role >= crate::archive::Role::Operator,
                count_link,
                field_names: state.business_fields.to_vec(),
                rows,
                next_link,
                error,
                chips: removable(&pairs, group.as_deref()),
                filter_pairs: pairs,
                read_as,
                offers,
                indexing,
            }),
        )
            .into_response());
    }
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        [(header::VARY, "HX-Request")],
        render(&MessagesPage {
            nav: Nav::new(Some(&caller), state.auth.mode),
            can_act: caller.role >= crate::archive::Role::Operator,
            count_link,
            chips: removable(&pairs, group.as_deref()),
            filters_in_use: pairs.iter().filter(|(name, _)| name != "q").count(),
            filter_pairs: pairs,
            read_as,
            offers,
            since_input: datetime_local(&form.since),
            until_input: datetime_local(&form.until),
            field_names: state.business_fields.to_vec(),
            form,
            queues,
            rows,
            next_link,
            error,
            indexing,
        }),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parameters_are_found() {
        assert!(has_empty_parameter(Some("q=&queue=x")));
        assert!(has_empty_parameter(Some("q=+")));
        assert!(!has_empty_parameter(Some("queue=x")));
        assert!(!has_empty_parameter(None));
    }

    #[test]
    fn time_filters_fill_datetime_local_fields() {
        assert_eq!(
            datetime_local(&Some("2026-12-02T09:30:00+01:00".into())),
            "2026-12-02T08:30"
        );
        assert_eq!(
            datetime_local(&Some("2026-12-02T09:30".into())),
            "2026-12-02T09:30"
        );
        assert_eq!(datetime_local(&None), "");
    }
}

//! What every page shares: the HTML answer to an error (a full page, or a toast-sized
//! partial when htmx asked) and small display helpers.

use askama::Template;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::nav::Nav;
use super::AppError;

/// Whether htmx made the request and wants a fragment, not a page. A history restore
/// (back/forward with htmx's cache missed) wants the whole page.
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request") && !headers.contains_key("hx-history-restore-request")
}

/// Renders a template, turning the (unexpected) render failure into a 500 without details.
pub fn render<T: Template>(template: &T) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render; the server log has the details",
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    /// The chrome of a page whose caller is not known here: no name, no admin links.
    nav: Nav,
    title: &'a str,
    message: &'a str,
}

#[derive(Template)]
#[template(path = "partials/error.html")]
struct ErrorPartial<'a> {
    message: &'a str,
}

/// An [`AppError`] answered as HTML: the same status and message as the API gives.
#[derive(Debug)]
pub struct PageError {
    pub error: AppError,
    pub htmx: bool,
}

impl PageError {
    pub fn new(error: impl Into<AppError>, headers: &HeaderMap) -> Self {
        PageError {
            error: error.into(),
            htmx: is_htmx(headers),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let retry = self.error.retry_after();
        let (status, message) = self.error.status_and_message();
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::BAD_REQUEST => "That request does not work",
            StatusCode::SERVICE_UNAVAILABLE => "The archive is unavailable",
            _ => "Something went wrong",
        };
        let body = if self.htmx {
            render(&ErrorPartial { message: &message })
        } else {
            render(&ErrorPage {
                nav: Nav::default(),
                title,
                message: &message,
            })
        };
        super::error::with_retry_after((status, body).into_response(), retry)
    }
}

/// RFC 3339 in UTC, second precision: what `<time datetime>` and the pages show.
pub fn utc(t: OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// The same instant, shorter for tables: `2026-12-02 09:30:00` (UTC).
pub fn short(rfc3339: &str) -> String {
    rfc3339
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

/// Filters the templates use (`{{ t|short }}`); bring into scope with `use super::html::filters`.
pub mod filters {
    #[askama::filter_fn]
    pub fn short<T: std::fmt::Display>(s: T, _: &dyn askama::Values) -> askama::Result<String> {
        Ok(super::short(&s.to_string()))
    }
}

/// A byte count for people: `512 B`, `1.5 KiB`, `16.0 MiB`.
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_well() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(16 * 1024 * 1024), "16.0 MiB");
    }

    #[test]
    fn short_times_drop_the_t_and_z() {
        assert_eq!(short("2025-12-02T10:00:00Z"), "2025-12-02 10:00:00");
    }

    #[test]
    fn times_are_utc_seconds() {
        let t = OffsetDateTime::from_unix_timestamp(1_764_669_600).unwrap();
        assert_eq!(
            utc(t + time::Duration::milliseconds(250)),
            "2025-12-02T10:00:00Z"
        );
    }
}

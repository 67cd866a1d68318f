//! What every page shares: the HTML answer to an error (a full page, or a toast-sized
//! partial when htmx asked) and small display helpers.

use askama::Template;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};

pub use crate::support::format::{human_bytes, utc};
use crate::web::nav::Nav;
use crate::web::AppError;

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
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::SERVICE_UNAVAILABLE => "The archive is unavailable",
            _ => "Something went wrong",
        };
        if self.htmx {
            let body = render(&ErrorPartial { message: &message });
            return crate::web::error::with_retry_after((status, body).into_response(), retry);
        }
        let page = ErrorPageParts { title, message };
        let mut response = (status, page.render(Nav::default())).into_response();
        // The chrome is the caller's, whom only the authentication layer knows: it draws the
        // page again with their name (`with_nav`).
        response.extensions_mut().insert(page);
        crate::web::error::with_retry_after(response, retry)
    }
}

/// What an error page says, kept with its answer so that it can be drawn again in the
/// chrome of whoever is signed in.
#[derive(Debug, Clone)]
pub struct ErrorPageParts {
    title: &'static str,
    message: String,
}

impl ErrorPageParts {
    fn render(&self, nav: Nav) -> Response {
        render(&ErrorPage {
            nav,
            title: self.title,
            message: &self.message,
        })
    }
}

/// An error page drawn again with the header of the one signed in (their name, their links),
/// as every other page has it; any other answer as it is.
pub fn with_nav(response: Response, nav: Nav) -> Response {
    let Some(page) = response.extensions().get::<ErrorPageParts>().cloned() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    let (_, body) = page.render(nav).into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, body)
}

/// The cookie a page's script shows once, as a message that something went well (a form's
/// answer is a redirect: the page it leads to says what the form did).
pub const FLASH_COOKIE: &str = "lazarus_flash";

/// The answer, with `text` to be shown by the page it leads to.
pub fn flash(mut response: Response, text: &str) -> Response {
    let value: String = form_urlencoded::byte_serialize(text.as_bytes()).collect();
    let cookie = format!("{FLASH_COOKIE}={value}; Path=/; Max-Age=60; SameSite=Strict");
    if let Ok(cookie) = axum::http::HeaderValue::from_str(&cookie) {
        response
            .headers_mut()
            .append(axum::http::header::SET_COOKIE, cookie);
    }
    response
}

/// The same instant, shorter for tables: `2026-12-02 09:30:00` (UTC).
pub fn short(rfc3339: &str) -> String {
    rfc3339
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

pub use crate::support::format::thousands;

/// Filters the templates use (`{{ t|short }}`, `{{ n|num }}`); bring into scope with
/// `use crate::web::html::filters`.
pub mod filters {
    #[askama::filter_fn]
    pub fn short<T: std::fmt::Display>(s: T, _: &dyn askama::Values) -> askama::Result<String> {
        Ok(super::short(&s.to_string()))
    }

    /// A count with thousands separators (`50,000`); anything that is not a whole number
    /// is shown as it is.
    #[askama::filter_fn]
    pub fn num<T: std::fmt::Display>(n: T, _: &dyn askama::Values) -> askama::Result<String> {
        let text = n.to_string();
        Ok(match text.parse::<i64>() {
            Ok(n) => super::thousands(n),
            Err(_) => text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_times_drop_the_t_and_z() {
        assert_eq!(short("2025-12-02T10:00:00Z"), "2025-12-02 10:00:00");
    }
}

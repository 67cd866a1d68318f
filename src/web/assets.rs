//! Static assets (htmx, our stylesheet and script), compiled into the binary and served under
//! versioned names with a year-long cache: a changed file gets a new name.

use axum::http::header;
use axum::response::IntoResponse;

pub const HTMX: &str = "/static/htmx-2.0.11.min.js";
pub const CSS: &str = "/static/lazarus-5.css";
pub const JS: &str = "/static/lazarus-6.js";
pub const FAVICON: &str = "/static/favicon-1.svg";

const CACHE_FOREVER: &str = "public, max-age=31536000, immutable";

fn asset(content_type: &'static str, bytes: &'static [u8]) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, CACHE_FOREVER),
        ],
        bytes,
    )
}

pub(super) async fn htmx() -> impl IntoResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/htmx-2.0.11.min.js"),
    )
}

pub(super) async fn css() -> impl IntoResponse {
    asset(
        "text/css; charset=utf-8",
        include_bytes!("../../static/lazarus-5.css"),
    )
}

pub(super) async fn js() -> impl IntoResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/lazarus-6.js"),
    )
}

pub(super) async fn favicon() -> impl IntoResponse {
    asset(
        "image/svg+xml",
        include_bytes!("../../static/favicon-1.svg"),
    )
}

//! `/api`: the JSON API described for people — every operation of `/api/openapi.json`, with
//! the role it needs (from the access table) and what it does (from its handler's doc).

use std::sync::{Arc, OnceLock};

use askama::Template;
use axum::response::Response;
use axum::Extension;

use super::access::AccessTable;
use super::html::render;
use super::nav::Nav;
use super::openapi::{endpoints, Endpoint};

#[derive(Template)]
#[template(path = "api.html")]
pub struct ApiPage {
    pub nav: Nav,
    pub endpoints: &'static [Endpoint],
}

pub async fn api_page(Extension(table): Extension<Arc<AccessTable>>, nav: Nav) -> Response {
    // The routes never change while the process runs: described once.
    static ENDPOINTS: OnceLock<Vec<Endpoint>> = OnceLock::new();
    render(&ApiPage {
        nav,
        endpoints: ENDPOINTS.get_or_init(|| endpoints(&table)),
    })
}

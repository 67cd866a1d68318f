//! `/api`: the JSON API described for people — every operation of `/api/openapi.json`, with
//! the role it needs (from the access table) and what it does (from its handler's doc).

use std::sync::{Arc, OnceLock};

use askama::Template;
use axum::response::Response;
use axum::Extension;

use crate::web::auth::access::AccessTable;
use crate::web::html::render;
use crate::web::nav::Nav;
use crate::web::openapi::{endpoints, Endpoint};

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

//! The HTTP surface: router, shared state and middleware stack in one place. Pages are
//! server-rendered (askama) with htmx partial updates; `/api` is their JSON twin.

mod api;
mod assets;
mod error;
mod health;
mod html;
mod messages;
mod overview;
mod payload;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use tower_http::trace::TraceLayer;

use crate::archive::Archive;
use crate::metrics::Metrics;
use crate::status::IngestStatus;

pub use error::AppError;

/// Everything a handler may need; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub archive: Arc<dyn Archive>,
    pub metrics: Arc<Metrics>,
    pub status: IngestStatus,
    /// The business field names (`--field`) that searches may use.
    pub business_fields: Arc<[String]>,
    /// Where replays publish (the broker Lazarus consumes from).
    pub amqp_url: Arc<str>,
}

/// The whole application as a router: tests call it with `oneshot`, no socket needed.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(overview::overview))
        .route("/messages", get(messages::list_page))
        .route("/messages/{id}", get(messages::detail_page))
        .route("/messages/{id}/replay", post(messages::replay_form))
        .merge(assets::routes())
        .merge(health::routes())
        .nest("/api", api::routes())
        .fallback(error::not_found)
        .with_state(state)
        .layer(TraceLayer::new_for_http())
}

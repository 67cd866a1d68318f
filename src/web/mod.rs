//! The HTTP surface: router, shared state and middleware stack in one place.

mod api;
mod error;
mod health;

use std::sync::Arc;

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
}

/// The whole application as a router: tests call it with `oneshot`, no socket needed.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(health::routes())
        .nest("/api", api::routes())
        .fallback(error::not_found)
        .with_state(state)
        .layer(TraceLayer::new_for_http())
}

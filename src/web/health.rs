//! `/healthz` (the process answers), `/readyz` (database and every consumer up), `/metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let database = state.archive.ping().await;
    let queues = state.status.snapshot();
    let ready = database.is_ok() && state.status.all_consuming();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let database = match database {
        Ok(()) => json!({"state": "ok"}),
        Err(e) => json!({"state": "unavailable", "detail": e.to_string()}),
    };
    (
        code,
        Json(json!({
            "ready": ready,
            "database": database,
            "queues": queues,
            "warnings": state.status.warnings(),
        })),
    )
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Archive totals are best effort: a scrape during a database outage still reports ingest.
    let counts = match state.archive.counts().await {
        Ok(counts) => counts,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: archive totals unavailable");
            Vec::new()
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&counts),
    )
}

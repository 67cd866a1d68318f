//! `/healthz` (the process answers), `/readyz` (database and every consumer up), `/metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::auth::Caller;
use super::AppState;

pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready or not, for anyone (a load balancer's probe); which queue and what the database
/// said only for someone signed in: queue names and database errors tell an outsider
/// about the systems behind Lazarus.
pub(super) async fn readyz(
    State(state): State<AppState>,
    caller: Option<Caller>,
) -> impl IntoResponse {
    let database = state.archive.ping().await;
    let ready = database.is_ok() && state.status.all_consuming();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if caller.is_none() {
        let database = if database.is_ok() {
            "ok"
        } else {
            "unavailable"
        };
        return (
            code,
            Json(json!({"ready": ready, "database": {"state": database}})),
        );
    }
    let database = match database {
        Ok(()) => json!({"state": "ok"}),
        Err(e) => json!({"state": "unavailable", "detail": e.to_string()}),
    };
    (
        code,
        Json(json!({
            "ready": ready,
            "database": database,
            "queues": state.status.snapshot(),
            "warnings": state.status.warnings(),
        })),
    )
}

pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Archive totals are best effort: a scrape during a database outage still reports ingest.
    let counts = match state.archive.counts().await {
        Ok(counts) => Some(counts),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: archive totals unavailable");
            None
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(counts.as_deref()),
    )
}

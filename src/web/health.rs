//! `/healthz` (the process answers), `/readyz` (database and every consumer up), `/metrics`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::runtime::status::ConsumerState;
use crate::web::auth::Caller;
use crate::web::AppState;

/// Whether the process answers (a liveness probe): `ok`.
#[utoipa::path(get, path = "/healthz", tag = "probes",
    responses((status = 200, description = "The process runs", content_type = "text/plain", body = String)))]
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// What `/readyz` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Readiness {
    /// The database answers and every consumer consumes.
    ready: bool,
    database: DatabaseState,
    /// Each DLQ's consumer (signed in only).
    #[serde(skip_serializing_if = "Option::is_none")]
    queues: Option<BTreeMap<String, ConsumerState>>,
    /// What puts a DLQ's messages at risk although it is consumed (signed in only).
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<BTreeMap<String, String>>,
    /// The RabbitMQ node (`host:port`) each connected consumer is on (signed in only): with a
    /// broker given as several addresses, the one that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct DatabaseState {
    /// `ok` or `unavailable`.
    state: &'static str,
    /// What the database said (signed in only).
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// Whether Lazarus is ready (a readiness probe): 200 when the database answers and every
/// consumer consumes, else 503.
///
/// Ready or not for anyone; which queue and what the database said only for someone signed
/// in: queue names and database errors tell an outsider about the systems behind Lazarus.
#[utoipa::path(get, path = "/readyz", tag = "probes",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready: the database or a consumer is down", body = Readiness),
    ))]
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
    let signed_in = caller.is_some();
    let database = DatabaseState {
        state: if database.is_ok() {
            "ok"
        } else {
            "unavailable"
        },
        detail: database.err().filter(|_| signed_in).map(|e| e.to_string()),
    };
    let readiness = Readiness {
        ready,
        database,
        queues: signed_in.then(|| state.status.snapshot()),
        warnings: signed_in.then(|| state.status.warnings()),
        nodes: signed_in.then(|| state.status.nodes()),
    };
    (code, Json(readiness))
}

/// Lazarus' metrics in Prometheus' text format: ingest, replays, archive totals.
#[utoipa::path(get, path = "/metrics", tag = "probes",
    responses((status = 200, description = "The metrics", content_type = "text/plain", body = String)))]
pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Archive totals are best effort: a scrape during a database outage still reports ingest.
    let counts = match state.archive.counts().await {
        Ok(counts) => Some(counts),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: archive totals unavailable");
            None
        }
    };
    let consumed: Vec<String> = state.status.dlqs().iter().map(|d| d.key()).collect();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(counts.as_deref(), &consumed),
    )
}

//! `/healthz` (the process answers), `/readyz` (database and every consumer up), `/metrics`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::archive::Role;
use crate::message::dlq::{on_broker, DEFAULT_BROKER};
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
/// in who may view every DLQ: queue names and database errors tell an outsider about the
/// systems behind Lazarus, and one tenant about another's.
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
    let signed_in = caller.is_some_and(|c| c.rights.everywhere_at(Role::Viewer));
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
pub(super) async fn metrics(State(state): State<AppState>, caller: Caller) -> impl IntoResponse {
    // Archive totals are best effort: a scrape during a database outage still reports ingest.
    let counts = match state.archive.counts().await {
        Ok(counts) => Some(counts),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: archive totals unavailable");
            None
        }
    };
    let mut text = state
        .metrics
        .render(counts.as_deref(), &state.status.dlqs());
    // A scrape by a caller whose rights are of some DLQs: those DLQs' series only (the
    // instance's own series count every DLQ's messages), each DLQ by the key its `broker`
    // and `queue` labels make.
    if !caller.rights.everywhere_at(Role::Viewer) {
        let visible = caller
            .dlqs_at(Role::Viewer, &state)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        text = only_queues(&text, |key| visible.iter().any(|v| v == key));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// The samples of Prometheus text whose DLQ `keep` keeps, given its key ([`Dlq::key`]: the
/// `queue` label behind the `broker` label's `broker:`, none for `default`); samples without
/// a `queue` label are left out, `# HELP` and `# TYPE` lines kept.
fn only_queues(text: &str, keep: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let key = || {
            let queue = label(line, "queue")?;
            let broker = label(line, "broker").unwrap_or_else(|| DEFAULT_BROKER.to_owned());
            Some(on_broker(&broker, queue))
        };
        let kept = line.starts_with('#') || key().is_some_and(|k| keep(&k));
        if kept {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The value of the label `wanted` of a sample line, unescaped as the text format escapes it.
fn label(line: &str, wanted: &str) -> Option<String> {
    let labels = line.split_once('{')?.1;
    let mut rest = labels;
    loop {
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if name.trim_start_matches(',').trim() == wanted {
            return Some(value);
        }
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_keeps_the_series_of_the_brokers_queues_it_may_see() {
        let text = "# TYPE lazarus_archived gauge\n\
                    lazarus_archived{broker=\"us\",queue=\"orders.dlq\",reason=\"expired\"} 2\n\
                    lazarus_archived{broker=\"default\",queue=\"orders.dlq\",reason=\"expired\"} 3\n\
                    lazarus_connected{queue=\"x\",broker=\"us\"} 1\n";
        let kept = only_queues(text, |key| key == "us:orders.dlq" || key == "us:x");
        assert!(kept.contains("} 2\n") && kept.contains("} 1\n"), "{kept}");
        // The default broker's orders.dlq is another DLQ.
        assert!(!kept.contains("} 3\n"), "{kept}");
        let kept = only_queues(text, |key| key == "orders.dlq");
        assert!(kept.contains("} 3\n") && !kept.contains("} 2\n"), "{kept}");
    }

    #[test]
    fn a_scrape_keeps_the_series_of_the_queues_it_may_see() {
        let text = "# HELP lazarus_archived Archived.\n\
                    # TYPE lazarus_archived gauge\n\
                    lazarus_archived{queue=\"tenant-a%2Fx/orders\",reason=\"rejected\"} 3\n\
                    lazarus_archived{reason=\"expired\",queue=\"tenant-b/orders\"} 4\n\
                    lazarus_archived{queue=\"odd \\\"q\\\\\"} 5\n\
                    lazarus_ingested_total 7\n";
        let kept = only_queues(text, |q| q == "tenant-a%2Fx/orders" || q == "odd \"q\\");
        assert!(kept.contains("# TYPE lazarus_archived gauge"));
        assert!(kept.contains("} 3\n") && kept.contains("} 5\n"), "{kept}");
        assert!(
            !kept.contains("tenant-b") && !kept.contains("ingested"),
            "{kept}"
        );
    }
}

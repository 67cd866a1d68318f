//! `/api`: the JSON API described for people — every API route the router declares, with
//! the role it needs (from the access table, so none is missing) and what it does.

use std::sync::Arc;

use askama::Template;
use axum::http::Method;
use axum::response::Response;
use axum::Extension;

use super::access::{Access, AccessTable};
use super::html::render;
use super::nav::Nav;

/// What each API route does, by method and pattern.
const DESCRIPTIONS: &[(&str, &str, &str)] = &[
    ("GET", "/api/messages", "Archived messages, newest first: {\"messages\": [summary], \"next_cursor\"}. Filters: q, queue, reason, first_death_queue, error, exchange, routing_key, status (open, resolved or one status), content_type, since, until, limit (1–500), cursor."),
    ("GET", "/api/messages/{id}", "One message: its summary (status, open, error, replay_of, deaths, replay_target, fields), properties, typed headers, body (text or base64), its replays and the copies that died again (died_again_as)."),
    ("GET", "/api/messages/{id}/body", "The exact stored bytes, as an attachment (masked JSON for a viewer under --mask)."),
    ("POST", "/api/messages/{id}/replay", "Replays one message: {\"target\"?, \"request_key\"?, \"body\"?, \"headers\"?} → the replay record; 200 once the broker answered, 202 while its confirm is awaited."),
    ("POST", "/api/messages/{id}/dismiss", "Dismisses one message: {\"note\"} → {\"dismissed\": 1} (0 when it already was)."),
    ("POST", "/api/messages/dismiss", "Dismisses a selection: {\"ids\"} or {\"filter\"}, and \"note\" → {\"dismissed\": n}."),
    ("GET", "/api/replays", "Replay jobs and plans, newest first."),
    ("POST", "/api/replays", "Plans (\"dry_run\": true) or starts a bulk replay of {\"ids\"} or {\"filter\"}; optional \"target\" or \"to_first_death_queue\", \"rate_per_sec\", \"include_replayed\", \"canary\", \"request_key\"."),
    ("GET", "/api/replays/{id}", "One job: state, plan (targets, skipped), counts, progress."),
    ("POST", "/api/replays/{id}/{action}", "start (a plan), pause, resume or cancel a job → the job; 409 when its state does not allow it."),
    ("GET", "/api/replays/{id}/items", "A job's messages and their outcomes: ?outcome=&after=&limit=."),
    ("GET", "/api/dlqs", "The broker's dead-letter queues in every vhost the management user sees (--management-url): {\"enabled\", \"dlqs\": [{vhost, name, type, sources, archived, warnings}], \"dead_ends\": [{vhost, queue, exchange, reason}]}."),
    ("GET", "/api/audit", "The audit log, newest first: ?before=&limit=."),
    ("GET", "/api/audit.ndjson", "The whole audit log, oldest first, one JSON object per line, streamed."),
    ("GET", "/api/export", "The messages the list's filters select, whole and lossless (body base64, typed headers, status, replays), one JSON object per line in archive order, streamed; audited."),
    ("GET", "/api/admin/users", "Users and their roles."),
    ("GET", "/api/admin/tokens", "API tokens (never the token itself)."),
    ("POST", "/api/admin/tokens", "Creates a token: {\"name\", \"role\", \"expires_in_days\"?} → the token, shown this once."),
    ("POST", "/api/admin/tokens/{id}/revoke", "Revokes a token."),
    ("POST", "/api/admin/purge", "Deletes a selection for good, except what an unfinished job holds: {\"ids\"} or {\"filter\"}, and a \"note\" → {\"purged\": n}."),
    ("GET", "/healthz", "ok while the process runs."),
    ("GET", "/readyz", "200 when the database answers and every consumer consumes, else 503; JSON with each queue's state."),
    ("GET", "/metrics", "Prometheus text format: ingest, replays, archive totals."),
];

/// Whether the page lists a route: the JSON API and the probes.
fn listed(path: &str) -> bool {
    path.starts_with("/api/") || matches!(path, "/healthz" | "/readyz" | "/metrics")
}

pub struct Endpoint {
    pub method: String,
    pub path: &'static str,
    pub role: &'static str,
    pub description: &'static str,
}

#[derive(Template)]
#[template(path = "api.html")]
pub struct ApiPage {
    pub nav: Nav,
    pub endpoints: Vec<Endpoint>,
}

fn endpoints(table: &AccessTable) -> Vec<Endpoint> {
    table
        .entries()
        .into_iter()
        .filter(|(_, path, _)| listed(path))
        .map(|(method, path, access)| Endpoint {
            description: description(&method, path).unwrap_or_default(),
            method: method.to_string(),
            path,
            role: match access {
                Access::Public => "anyone",
                Access::Role(role) => role.as_str(),
            },
        })
        .collect()
}

fn description(method: &Method, path: &str) -> Option<&'static str> {
    DESCRIPTIONS
        .iter()
        .find(|(m, p, _)| *m == method.as_str() && *p == path)
        .map(|(_, _, d)| *d)
}

pub async fn api_page(Extension(table): Extension<Arc<AccessTable>>, nav: Nav) -> Response {
    render(&ApiPage {
        nav,
        endpoints: endpoints(&table),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_route_is_described_and_every_description_is_a_route() {
        let (_, table) = super::super::routes().build();
        let listed: Vec<Endpoint> = endpoints(&table);
        for e in &listed {
            assert!(
                !e.description.is_empty(),
                "{} {} is not described",
                e.method,
                e.path
            );
        }
        for (method, path, _) in DESCRIPTIONS {
            assert!(
                listed
                    .iter()
                    .any(|e| e.method == *method && e.path == *path),
                "{method} {path} is described but not a route"
            );
        }
    }
}

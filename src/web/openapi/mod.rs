//! `/api/openapi.json`: the JSON API described as OpenAPI 3.1, generated from the handlers'
//! own annotations (`#[utoipa::path]`) and the types they take and answer, with the role
//! each route needs taken from the access table — so neither can drift from the code. The
//! `/api` page is rendered from the same description.

pub mod page;

use std::sync::{Arc, OnceLock};

use axum::http::{header, Method};
use axum::response::IntoResponse;
use axum::Extension;
use serde_json::{json, Value};
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder};
use utoipa::openapi::security::{SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi as Description, RefOr, Response};
use utoipa::OpenApi;

use crate::auth::SESSION_COOKIE;
use crate::web::api::{export, groups, messages, replays};
use crate::web::auth::access::{Access, AccessTable};
use crate::web::error::ErrorBody;
use crate::web::health;
use crate::web::pages::{admin, dlqs, group_notes};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Lazarus",
        description = "Archived RabbitMQ dead letters: search them, read them, replay them to \
            their original exchange and routing key, dismiss or purge them. Every page of \
            Lazarus has a JSON twin here. Ids are strings. Errors answer {\"error\": \"what to \
            fix\"}; a 503 with Retry-After means: try again shortly.",
    ),
    paths(
        messages::list_messages,
        messages::get_message,
        messages::download_body,
        messages::replay_message,
        groups::list_groups,
        group_notes::note_group,
        replays::dismiss_one,
        replays::dismiss,
        replays::list_jobs,
        replays::create_job,
        replays::get_job,
        replays::control_job,
        replays::job_items,
        dlqs::list_dlqs,
        replays::audit_log,
        admin::audit_ndjson,
        export::export_messages,
        admin::list_users,
        admin::list_tokens,
        admin::create_token,
        admin::revoke_token,
        admin::purge,
        openapi_json,
        health::healthz,
        health::readyz,
        health::metrics,
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "messages", description = "Archived messages: list, read, replay one, dismiss"),
        (name = "replays", description = "Bulk replays: plans and jobs, and their messages"),
        (name = "admin", description = "Tokens, users, the audit log, export and purge"),
        (name = "probes", description = "Health, readiness and metrics"),
    )
)]
struct ApiDoc;

/// This description, as JSON.
#[utoipa::path(get, path = "/api/openapi.json", tag = "probes",
    responses((status = 200, description = "The OpenAPI 3.1 description", body = Object)))]
pub(crate) async fn openapi_json(
    Extension(table): Extension<Arc<AccessTable>>,
) -> impl IntoResponse {
    // The routes never change while the process runs: described once.
    static JSON: OnceLock<String> = OnceLock::new();
    let json = JSON.get_or_init(|| {
        describe(&table)
            .to_pretty_json()
            .expect("the description serializes")
    });
    ([(header::CONTENT_TYPE, "application/json")], json.as_str())
}

/// The security schemes: an API token, or a signed-in browser's session cookie.
const TOKEN: &str = "token";
const SESSION: &str = "session";

/// The whole description: the handlers' own, with who may call each operation and the
/// errors every operation may answer.
pub fn describe(table: &AccessTable) -> Description {
    let mut doc = ApiDoc::openapi();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        TOKEN,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API token (Admin page, or `lazarus token create`), as `Authorization: Bearer TOKEN`.",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        SESSION,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            SESSION_COOKIE,
            "A session from signing in on the login page.",
        ))),
    );
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, operation) in [(Method::GET, &mut item.get), (Method::POST, &mut item.post)] {
            if let Some(operation) = operation {
                let access = table.needed(&method, path);
                complete(operation, path, access);
                link(operation);
            }
        }
    }
    doc
}

/// Where the ids an answer holds lead: (operation, link name, the operation it leads to,
/// where its `id` is in the answer). Clients (and schemathesis) follow them.
const LINKS: &[(&str, &str, &str, &str)] = &[
    (
        "list_messages",
        "message",
        "get_message",
        "$response.body#/messages/0/id",
    ),
    (
        "list_messages",
        "body",
        "download_body",
        "$response.body#/messages/0/id",
    ),
    (
        "list_messages",
        "replay",
        "replay_message",
        "$response.body#/messages/0/id",
    ),
    (
        "list_messages",
        "dismiss",
        "dismiss_one",
        "$response.body#/messages/0/id",
    ),
    (
        "list_jobs",
        "job",
        "get_job",
        "$response.body#/replays/0/id",
    ),
    ("create_job", "job", "get_job", "$response.body#/id"),
    ("create_job", "items", "job_items", "$response.body#/id"),
    ("create_job", "control", "control_job", "$response.body#/id"),
    (
        "list_tokens",
        "revoke",
        "revoke_token",
        "$response.body#/tokens/0/id",
    ),
    (
        "create_token",
        "revoke",
        "revoke_token",
        "$response.body#/id",
    ),
];

/// Adds the links of [`LINKS`] to an operation's 200 answer.
fn link(operation: &mut Operation) {
    let from = operation.operation_id.as_deref().unwrap_or_default();
    for (_, name, to, id) in LINKS.iter().filter(|(op, ..)| *op == from) {
        let Some(RefOr::T(ok)) = operation.responses.responses.get_mut("200") else {
            panic!("{from} has no 200 answer to link from");
        };
        let link = json!({ "operationId": to, "parameters": { "id": id } });
        ok.links.insert(
            (*name).to_owned(),
            serde_json::from_value(link).expect("a valid link"),
        );
    }
}

/// Adds to one operation who may call it and the errors it may answer.
fn complete(operation: &mut Operation, path: &str, access: Option<Access>) {
    let mut errors: Vec<(u16, &str)> = Vec::new();
    // A malformed query or body is a 400; a path's id that is none is a 404 (below), and any
    // other path parameter (a job's action) is a 400 when it is not one of its values.
    let takes_more_than_an_id = operation.parameters.iter().flatten().any(|p| match p {
        RefOr::T(p) => !matches!(p.parameter_in, ParameterIn::Path) || p.name != "id",
        RefOr::Ref(_) => true,
    });
    if takes_more_than_an_id || operation.request_body.is_some() {
        errors.push((
            400,
            "The request is not what the route takes: the error says what to fix",
        ));
    }
    if path.contains("{id}") {
        errors.push((404, "No such record (or not an id at all)"));
    }
    match access {
        Some(access @ (Access::Role(_) | Access::OnDlqs(_))) => {
            let needs = match access {
                Access::OnDlqs(role) => format!(
                    "Needs the {} role (or a higher one) on a DLQ; what the caller's rights \
                     do not reach is left out.",
                    role.as_str()
                ),
                _ => format!(
                    "Needs the {} role (or a higher one) on every DLQ.",
                    access.role().map_or("", |r| r.as_str())
                ),
            };
            operation.description = Some(match operation.description.take() {
                Some(description) => format!("{description}\n\n{needs}"),
                None => needs,
            });
            operation.security = Some(vec![
                SecurityRequirement::new(TOKEN, Vec::<String>::new()),
                SecurityRequirement::new(SESSION, Vec::<String>::new()),
            ]);
            errors.push((401, "Not signed in, or an unknown or expired token"));
            errors.push((
                403,
                "The caller's role does not allow it, or a cross-site request",
            ));
        }
        Some(Access::Public) => {}
        None => panic!("{path} is described but no route declares its access"),
    }
    errors.push((
        503,
        "The archive database (or the broker) is unavailable, or the server is busy: try again shortly (Retry-After)",
    ));
    for (status, description) in errors {
        operation
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| error_response(description));
    }
}

/// An error answer: `{"error": "..."}`.
fn error_response(description: &str) -> RefOr<Response> {
    let response: Value = json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } },
    });
    serde_json::from_value(response).expect("a valid response")
}

/// One operation as the `/api` page lists it.
pub struct Endpoint {
    pub method: &'static str,
    pub path: String,
    /// Who may call it.
    pub role: &'static str,
    pub summary: Vec<Span>,
    pub description: Vec<Span>,
    /// Its parameters (`name (where)`) and request body (the schema's name).
    pub takes: Vec<String>,
    /// Each status it may answer, with the schema of the body where there is one.
    pub answers: Vec<String>,
}

/// Every operation of the description, in path order, with the access its route needs.
pub fn endpoints(table: &AccessTable) -> Vec<Endpoint> {
    // What the handlers say, and the whole description (errors, roles) as JSON.
    let doc = ApiDoc::openapi();
    let full = serde_json::to_value(describe(table)).expect("the description serializes");
    let mut all = Vec::new();
    for (path, item) in &doc.paths.paths {
        for (method, operation) in [(Method::GET, &item.get), (Method::POST, &item.post)] {
            let Some(operation) = operation else { continue };
            let role = match table.needed(&method, path) {
                Some(access) => access.role().map_or("anyone", |r| r.as_str()),
                None => "nobody",
            };
            let described = &full["paths"][path][method.as_str().to_lowercase()];
            all.push(Endpoint {
                method: if method == Method::GET { "GET" } else { "POST" },
                path: path.clone(),
                role,
                summary: spans(operation.summary.as_deref().unwrap_or_default()),
                description: spans(operation.description.as_deref().unwrap_or_default()),
                takes: takes(described),
                answers: answers(described),
            });
        }
    }
    all
}

/// A piece of a doc comment: text, or code (what the comment has between backticks).
pub struct Span {
    pub code: bool,
    pub text: String,
}

/// A doc comment's text in spans, for the page to show `code` as code.
fn spans(text: &str) -> Vec<Span> {
    text.split('`')
        .enumerate()
        .filter(|(_, text)| !text.is_empty())
        .map(|(i, text)| Span {
            code: i % 2 == 1,
            text: text.to_owned(),
        })
        .collect()
}

/// The name of a body's schema: its component, or its type.
fn schema_name(media: &Value) -> Option<String> {
    let schema = media.as_object()?.values().next()?.get("schema")?;
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => reference.rsplit('/').next().map(str::to_owned),
        None => schema
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

fn takes(operation: &Value) -> Vec<String> {
    let parameters = operation["parameters"].as_array().into_iter().flatten();
    let mut takes: Vec<String> = parameters
        .map(|p| {
            format!(
                "{} ({})",
                p["name"].as_str().unwrap_or(""),
                p["in"].as_str().unwrap_or("")
            )
        })
        .collect();
    if let Some(body) = schema_name(&operation["requestBody"]["content"]) {
        takes.push(format!("body: {body}"));
    }
    takes
}

fn answers(operation: &Value) -> Vec<String> {
    let responses = operation["responses"].as_object().into_iter().flatten();
    responses
        .map(
            |(status, response)| match schema_name(&response["content"]) {
                Some(body) if !status.starts_with(['4', '5']) => format!("{status} {body}"),
                _ => status.clone(),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes the description must cover: the JSON API and the probes.
    fn described(path: &str) -> bool {
        path.starts_with("/api/") || matches!(path, "/healthz" | "/readyz" | "/metrics")
    }

    #[test]
    fn every_api_route_is_described_and_every_operation_is_a_route() {
        let (_, table) = crate::web::routes().build();
        let listed = endpoints(&table);
        for (method, path, _) in table.entries() {
            if described(path) {
                assert!(
                    listed
                        .iter()
                        .any(|e| e.method == method.as_str() && e.path == path),
                    "{method} {path} is a route but not in /api/openapi.json"
                );
            }
        }
        for e in &listed {
            assert_ne!(
                e.role, "nobody",
                "{} {} is described but not a route",
                e.method, e.path
            );
            assert!(
                !e.summary.is_empty(),
                "{} {} has no summary",
                e.method,
                e.path
            );
            let said: String = e.description.iter().map(|s| s.text.as_str()).collect();
            assert!(!said.contains('`'), "{said}");
        }
    }

    #[test]
    fn backticks_mark_code() {
        let shown: Vec<(bool, String)> = spans("Send `all`: `true` to")
            .into_iter()
            .map(|s| (s.code, s.text))
            .collect();
        let expected = [
            (false, "Send "),
            (true, "all"),
            (false, ": "),
            (true, "true"),
            (false, " to"),
        ];
        assert_eq!(shown, expected.map(|(c, t)| (c, t.to_owned())));
    }

    #[test]
    fn the_description_is_openapi_3_1_with_roles_and_errors() {
        let (_, table) = crate::web::routes().build();
        let doc: Value = serde_json::to_value(describe(&table)).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        let purge = &doc["paths"]["/api/admin/purge"]["post"];
        assert!(purge["description"]
            .as_str()
            .unwrap()
            .contains("admin role"));
        for status in ["200", "400", "401", "403", "503"] {
            assert!(
                purge["responses"][status].is_object(),
                "purge answers {status}"
            );
        }
        assert_eq!(purge["security"][0], json!({ "token": [] }));
        // A bad id is a 404, never a 400; a job's action that is none is a 400.
        let job = &doc["paths"]["/api/replays/{id}"]["get"]["responses"];
        assert!(job["404"].is_object() && job["400"].is_null(), "{job}");
        let control = &doc["paths"]["/api/replays/{id}/{action}"]["post"]["responses"];
        assert!(control["404"].is_object() && control["400"].is_object());
        let links = &doc["paths"]["/api/messages"]["get"]["responses"]["200"]["links"];
        assert_eq!(links["message"]["operationId"], "get_message");
        let ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        for (from, _, to, _) in LINKS {
            assert!(ids.contains(from) && ids.contains(to), "{from} → {to}");
        }
        // Limits written as literals in the annotations are the code's.
        let schemas = &doc["components"]["schemas"];
        for request in ["PurgeRequest", "DismissRequest", "NoteRequest"] {
            let note = &schemas[request]["allOf"][1]["properties"]["note"];
            let note = if note.is_null() {
                &schemas[request]["properties"]["note"]
            } else {
                note
            };
            assert_eq!(
                note["maxLength"],
                crate::replay::plan::MAX_NOTE_CHARS,
                "{request}"
            );
        }
        // Each request body is its own schema: two request types of one name would share one.
        let body = |path: &str| {
            let schema =
                &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
            let name = schema["$ref"].as_str().unwrap_or_default();
            schemas[name.trim_start_matches("#/components/schemas/")].clone()
        };
        let group_note = body("/api/groups/{id}/note");
        assert!(
            group_note["properties"]["status"].is_object(),
            "{group_note}"
        );
        let dismiss = body("/api/messages/{id}/dismiss");
        assert!(dismiss["properties"]["status"].is_null(), "{dismiss}");
        assert_eq!(dismiss["properties"]["note"]["minLength"], 1, "{dismiss}");
        let control = &doc["paths"]["/api/replays/{id}/{action}"]["post"]["parameters"];
        assert_eq!(control[1]["name"], "action");
        assert_eq!(
            control[1]["schema"]["enum"],
            json!(["start", "pause", "resume", "cancel"])
        );
        let healthz = &doc["paths"]["/healthz"]["get"];
        assert!(healthz["security"].is_null(), "probes need nobody");
        assert!(healthz["responses"]["401"].is_null());
        // Every referenced schema is defined.
        let text = doc.to_string();
        let schemas = &doc["components"]["schemas"];
        for name in text.split("#/components/schemas/").skip(1) {
            let name = name.split('"').next().unwrap();
            assert!(
                schemas[name].is_object(),
                "{name} is referenced but not defined"
            );
        }
    }
}

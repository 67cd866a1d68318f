//! The HTTP surface: router, shared state and middleware stack in one place. Pages are
//! server-rendered (askama) with htmx partial updates; `/api` is their JSON twin.

pub mod access;
mod admin;
mod api;
mod api_groups;
mod api_page;
mod api_replays;
mod assets;
mod audit;
pub mod auth;
pub mod caller;
mod chips;
mod client;
mod dlqs;
mod download;
mod error;
mod export;
mod extract;
mod group_notes;
mod health;
mod highlight;
pub mod html;
pub mod limits;
pub mod masking;
mod message;
mod message_actions;
pub mod messages;
mod nav;
mod ndjson;
mod nearest;
mod openapi;
pub mod overview;
mod overview_groups;
mod payload;
mod replays;
mod security;
pub mod serve;
mod signin;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::middleware;
use axum::{Extension, Router};
use tokio::sync::Notify;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use self::access::{Routes, ADMIN, OPERATOR, PUBLIC, VIEWER};
use crate::archive::Console;
use crate::auth::{AuthSettings, Throttle};
use crate::metrics::Metrics;
use crate::replay::policy::ExchangePolicy;
use crate::status::IngestStatus;

pub use error::AppError;
pub use html::utc;

/// Requests that may wait for a body permit (each holds little while it waits).
pub const BODY_QUEUE: usize = 64;
/// Sign-ins that may wait for a hashing permit.
pub const HASH_QUEUE: usize = 64;
/// Requests that may wait to read pages of rows (each holds nothing while it waits).
pub const READ_QUEUE: usize = 64;

/// Everything a handler may need; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// What the web may do with the archive: no storing deliveries, no stepping jobs.
    pub archive: Arc<dyn Console>,
    pub metrics: Arc<Metrics>,
    pub status: IngestStatus,
    /// The business field names (`--field`) that searches may use.
    pub business_fields: Arc<[String]>,
    /// Where replays publish (the broker Lazarus consumes from).
    pub amqp_url: Arc<str>,
    /// The AMQP URL's vhost: the one archived messages with an empty vhost are in.
    pub home_vhost: Arc<str>,
    /// Wakes this process's replay job runner when a job is queued or resumed.
    pub jobs_wake: Arc<Notify>,
    pub auth: Arc<AuthSettings>,
    /// Failed sign-ins, to slow down guessing.
    pub throttle: Arc<Throttle>,
    /// What viewers may not read (`--mask`).
    pub masking: Arc<masking::Masking>,
    /// The protobuf message types bodies are decoded with (`--proto-descriptors`).
    pub schemas: Option<Arc<crate::structured::protobuf::Schemas>>,
    /// Loading, decoding, masking and rendering bodies: a few at a time.
    pub bodies: Arc<limits::WorkLimit>,
    /// Reading lists, counts and messages (rows held while a page is built): a few at a
    /// time.
    pub reads: Arc<limits::Gate>,
    /// Body downloads, each streamed a piece at a time: a few at once.
    pub downloads: Arc<limits::Gate>,
    /// Password hashing (argon2 is slow and takes 19 MiB on purpose): a few at a time.
    pub hashing: Arc<limits::WorkLimit>,
    /// Where replays may publish (`--replay-exchange`).
    pub replay_policy: Arc<ExchangePolicy>,
    /// How long a replayed message settles before it is resolved (`--settle-secs`).
    pub settle: std::time::Duration,
    /// RabbitMQ's management API (`--management-url`): which queues a plan's targets reach.
    pub management: Option<Arc<crate::amqp::management::Management>>,
    /// The broker's DLQs as the management API last described them.
    pub discovery: Arc<dlqs::Discovery>,
    /// The retention policy (`--retention`) as the overview says it; `None`: everything kept.
    pub retention: Option<Arc<str>>,
    /// The webhooks (`--webhook`) and what became of their latest events.
    pub notifications: crate::notify::NotifyStatus,
}

impl AppState {
    /// A stored vhost named: the empty one is the AMQP URL's.
    pub fn vhost_name<'a>(&'a self, stored: &'a str) -> &'a str {
        crate::amqp::dlq::named_vhost(stored, &self.home_vhost)
    }

    /// Fresh metrics, status and runner wake-up around an archive; no authentication.
    pub fn new(archive: Arc<dyn Console>, business_fields: Vec<String>, amqp_url: &str) -> Self {
        AppState {
            archive,
            metrics: Arc::new(Metrics::default()),
            status: IngestStatus::default(),
            business_fields: business_fields.into(),
            amqp_url: Arc::from(amqp_url),
            home_vhost: Arc::from(crate::amqp::dlq::home_vhost(amqp_url)),
            jobs_wake: Arc::new(Notify::new()),
            auth: Arc::new(AuthSettings::none()),
            throttle: Arc::new(Throttle::default()),
            masking: Arc::new(masking::Masking::default()),
            schemas: None,
            bodies: Arc::new(limits::WorkLimit::new(
                limits::cores(),
                BODY_QUEUE,
                "reading message bodies",
            )),
            reads: Arc::new(limits::Gate::new(
                2 * limits::cores(),
                READ_QUEUE,
                "reading the archive",
            )),
            downloads: Arc::new(limits::Gate::new(
                2 * limits::cores(),
                READ_QUEUE,
                "downloading bodies",
            )),
            hashing: Arc::new(limits::WorkLimit::new(
                limits::cores(),
                HASH_QUEUE,
                "sign-in",
            )),
            replay_policy: Arc::new(ExchangePolicy::default()),
            settle: std::time::Duration::from_secs(300),
            management: None,
            discovery: Arc::default(),
            retention: None,
            notifications: Default::default(),
        }
    }
}

/// Every route with the access it needs (default deny: a route not declared here answers
/// 403 to everyone).
fn routes() -> Routes {
    Routes::default()
        // Anyone: signing in, probes, assets.
        .get(PUBLIC, "/login", signin::login_page)
        .post(
            PUBLIC,
            "/login",
            signin::login.layer(DefaultBodyLimit::max(signin::MAX_LOGIN_FORM_BYTES)),
        )
        .post(PUBLIC, "/logout", signin::logout)
        .get(PUBLIC, "/healthz", health::healthz)
        .get(PUBLIC, "/readyz", health::readyz)
        .get(PUBLIC, assets::HTMX, assets::htmx)
        .get(PUBLIC, assets::CSS, assets::css)
        .get(PUBLIC, assets::JS, assets::js)
        .get(PUBLIC, assets::FAVICON, assets::favicon)
        // Viewers: reading.
        .get(VIEWER, "/", overview::overview)
        .get(VIEWER, "/api", api_page::api_page)
        .get(VIEWER, "/api/openapi.json", openapi::openapi_json)
        .get(VIEWER, "/messages", messages::list_page)
        .get(VIEWER, "/messages/count", messages::count_fragment)
        .get(VIEWER, "/messages/{id}", message::detail_page)
        .get(VIEWER, "/replays", replays::list_page)
        .get(VIEWER, "/replays/{id}", replays::job_page)
        .get(VIEWER, "/replays/{id}/progress", replays::progress_partial)
        .get(VIEWER, "/metrics", health::metrics)
        .get(VIEWER, "/api/messages", api::list_messages)
        .get(VIEWER, "/api/messages/{id}", api::get_message)
        .get(VIEWER, "/api/messages/{id}/body", api::download_body)
        .get(VIEWER, "/api/replays", api_replays::list_jobs)
        .get(VIEWER, "/api/replays/{id}", api_replays::get_job)
        .get(VIEWER, "/api/replays/{id}/items", api_replays::job_items)
        .get(VIEWER, "/api/dlqs", dlqs::list_dlqs)
        .get(VIEWER, "/api/groups", api_groups::list_groups)
        // Operators: replaying and dismissing.
        .post(
            OPERATOR,
            "/messages/{id}/replay",
            message_actions::replay_form,
        )
        .post(
            OPERATOR,
            "/messages/{id}/dismiss",
            message_actions::dismiss_form,
        )
        .post(OPERATOR, "/messages/select", replays::selection_form)
        .post(OPERATOR, "/groups/{id}/note", group_notes::note_group_form)
        .post(OPERATOR, "/api/groups/{id}/note", group_notes::note_group)
        .post(OPERATOR, "/replays/{id}/{action}", replays::control_form)
        .post(OPERATOR, "/api/messages/{id}/replay", api::replay_message)
        .post(OPERATOR, "/api/replays", api_replays::create_job)
        .post(
            OPERATOR,
            "/api/replays/{id}/{action}",
            api_replays::control_job,
        )
        .post(OPERATOR, "/api/messages/dismiss", api_replays::dismiss)
        .post(
            OPERATOR,
            "/api/messages/{id}/dismiss",
            api_replays::dismiss_one,
        )
        // Admins: users, tokens, purges, the audit log.
        .get(ADMIN, "/audit", audit::audit_page)
        .get(ADMIN, "/admin", admin::admin_page)
        .post(ADMIN, "/admin/tokens", admin::token_form)
        .post(ADMIN, "/admin/tokens/{id}/revoke", admin::revoke_form)
        .get(ADMIN, "/api/audit", api_replays::audit_log)
        .get(ADMIN, "/api/audit.ndjson", admin::audit_ndjson)
        .get(ADMIN, "/api/export", export::export_messages)
        .get(ADMIN, "/api/admin/users", admin::list_users)
        .get(ADMIN, "/api/admin/tokens", admin::list_tokens)
        .post(ADMIN, "/api/admin/tokens", admin::create_token)
        .post(ADMIN, "/api/admin/tokens/{id}/revoke", admin::revoke_token)
        .post(ADMIN, "/api/admin/purge", admin::purge)
}

/// The whole application as a router: tests call it with `oneshot`, no socket needed.
pub fn router(state: AppState) -> Router {
    let (routes, access) = routes().build();
    routes
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(CatchPanicLayer::custom(error::panicked))
        .layer(DefaultBodyLimit::max(security::MAX_REQUEST_BYTES))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(Extension(access))
        .with_state(state)
        .layer(middleware::from_fn(security::refuse_cross_site))
        .layer(middleware::from_fn(security::time_limit))
        .layer(middleware::from_fn(security::security_headers))
        .layer(TraceLayer::new_for_http())
}

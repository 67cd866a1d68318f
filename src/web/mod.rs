//! The HTTP surface: router, shared state and middleware stack in one place. Pages are
//! server-rendered (askama) with htmx partial updates; `/api` is their JSON twin.

pub mod api;
mod assets;
pub mod auth;
pub mod caller;
mod error;
mod extract;
mod health;
pub mod html;
pub mod limits;
pub mod masking;
pub mod nav;
mod ndjson;
mod openapi;
pub mod pages;
pub mod recent;
mod security;
pub mod serve;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::middleware;
use axum::{Extension, Router};
use tokio::sync::Notify;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use self::auth::access::{Routes, ADMIN, DLQ_OPERATOR, DLQ_VIEWER, PUBLIC, VIEWER};
use crate::archive::Console;
use crate::auth::{AuthSettings, Throttle};
use crate::message::exchange_policy::ExchangePolicy;
use crate::runtime::metrics::Metrics;
use crate::runtime::status::IngestStatus;

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
    /// Every broker by name (`--amqp-url` as `default`, each `--broker`): a replay goes back
    /// to its message's.
    pub brokers: Arc<crate::message::brokers::Brokers>,
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
    pub schemas: Option<Arc<crate::message::structured::protobuf::Schemas>>,
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
    /// Each broker's management API (`--management-url [NAME=]URL`): which queues a plan's
    /// targets reach, which DLQs each broker has.
    pub managements: Arc<crate::amqp::managements::Managements>,
    /// The brokers' DLQs as their management APIs last described them.
    pub discovery: Arc<pages::dlqs::Discovery>,
    /// The retention policy (`--retention`) as the overview says it; `None`: everything kept.
    pub retention: Option<Arc<str>>,
    /// The webhooks (`--webhook`) and what became of their latest events.
    pub notifications: crate::notify::NotifyStatus,
    /// How far the search index is behind ingest, counted at most once a second.
    index_lag: Arc<recent::IndexLag>,
    /// What became of running jobs' copies, counted at most once a second per job.
    job_copies: Arc<recent::JobCopies>,
}

impl AppState {
    /// Messages archived but not yet searchable, counted at most once a second
    /// ([`recent::IndexLag`]).
    pub async fn index_behind(&self) -> Result<u64, crate::archive::ArchiveError> {
        self.index_lag.behind(self.archive.as_ref()).await
    }

    /// What became of `job`'s copies; while it runs, counted at most once a second
    /// ([`recent::JobCopies`]).
    pub async fn job_copies(
        &self,
        job: &crate::archive::ReplayJob,
    ) -> Result<crate::archive::CopyCounts, crate::archive::ArchiveError> {
        self.job_copies.of(self.archive.as_ref(), job).await
    }

    /// A stored vhost named: the empty one is the AMQP URL's.
    pub fn vhost_name<'a>(&'a self, stored: &'a str) -> &'a str {
        crate::message::dlq::named_vhost(stored, &self.home_vhost)
    }

    /// Fresh metrics, status and runner wake-up around an archive; no authentication.
    pub fn new(archive: Arc<dyn Console>, business_fields: Vec<String>, amqp_url: &str) -> Self {
        AppState {
            archive,
            metrics: Arc::new(Metrics::default()),
            status: IngestStatus::default(),
            business_fields: business_fields.into(),
            amqp_url: Arc::from(amqp_url),
            brokers: Arc::new(crate::message::brokers::Brokers::single(amqp_url)),
            home_vhost: Arc::from(crate::message::dlq::home_vhost(amqp_url)),
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
            managements: Arc::default(),
            discovery: Arc::default(),
            retention: None,
            notifications: Default::default(),
            index_lag: Arc::default(),
            job_copies: Arc::default(),
        }
    }
}

/// Every route with the access it needs (default deny: a route not declared here answers
/// 403 to everyone).
fn routes() -> Routes {
    Routes::default()
        // Anyone: signing in, probes, assets.
        .get(PUBLIC, "/login", auth::signin::login_page)
        .post(
            PUBLIC,
            "/login",
            auth::signin::login.layer(DefaultBodyLimit::max(auth::signin::MAX_LOGIN_FORM_BYTES)),
        )
        .post(PUBLIC, "/logout", auth::signout::logout)
        .get(PUBLIC, "/signed-out", auth::signout::signed_out)
        .get(PUBLIC, "/login/oidc", auth::oidc::start)
        .get(PUBLIC, "/login/oidc/callback", auth::oidc::callback)
        .get(PUBLIC, "/healthz", health::healthz)
        .get(PUBLIC, "/readyz", health::readyz)
        .get(PUBLIC, assets::HTMX, assets::htmx)
        .get(PUBLIC, assets::CSS, assets::css)
        .get(PUBLIC, assets::JS, assets::js)
        .get(PUBLIC, assets::FAVICON, assets::favicon)
        // Viewers: reading — of the DLQs their rights reach, but the broker's DLQs.
        .get(DLQ_VIEWER, "/", pages::overview::overview)
        .get(DLQ_VIEWER, "/api", openapi::page::api_page)
        .get(DLQ_VIEWER, "/api/openapi.json", openapi::openapi_json)
        .get(DLQ_VIEWER, "/messages", pages::messages::list_page)
        .get(
            DLQ_VIEWER,
            "/messages/count",
            pages::messages::count_fragment,
        )
        .get(DLQ_VIEWER, "/messages/{id}", pages::message::detail_page)
        .get(DLQ_VIEWER, "/replays", pages::replays::list_page)
        .get(DLQ_VIEWER, "/replays/{id}", pages::replays::job_page)
        .get(
            DLQ_VIEWER,
            "/replays/{id}/progress",
            pages::replays::progress_partial,
        )
        .get(DLQ_VIEWER, "/metrics", health::metrics)
        .get(DLQ_VIEWER, "/api/messages", api::messages::list_messages)
        .get(DLQ_VIEWER, "/api/messages/{id}", api::messages::get_message)
        .get(
            DLQ_VIEWER,
            "/api/messages/{id}/body",
            api::messages::download_body,
        )
        .get(DLQ_VIEWER, "/api/replays", api::replays::list_jobs)
        .get(DLQ_VIEWER, "/api/replays/{id}", api::replays::get_job)
        .get(
            DLQ_VIEWER,
            "/api/replays/{id}/items",
            api::replays::job_items,
        )
        .get(VIEWER, "/api/dlqs", pages::dlqs::list_dlqs)
        .get(DLQ_VIEWER, "/api/groups", api::groups::list_groups)
        // Operators: replaying and dismissing, on the DLQs their rights reach.
        .post(
            DLQ_OPERATOR,
            "/messages/{id}/replay",
            pages::message_actions::replay_form,
        )
        .post(
            DLQ_OPERATOR,
            "/messages/{id}/dismiss",
            pages::message_actions::dismiss_form,
        )
        .post(
            DLQ_OPERATOR,
            "/messages/select",
            pages::replays::selection_form,
        )
        .post(
            DLQ_OPERATOR,
            "/groups/{id}/note",
            pages::group_notes::note_group_form,
        )
        .post(
            DLQ_OPERATOR,
            "/api/groups/{id}/note",
            pages::group_notes::note_group,
        )
        .post(
            DLQ_OPERATOR,
            "/replays/{id}/{action}",
            pages::replays::control_form,
        )
        .post(
            DLQ_OPERATOR,
            "/api/messages/{id}/replay",
            api::messages::replay_message,
        )
        .post(DLQ_OPERATOR, "/api/replays", api::replays::create_job)
        .post(
            DLQ_OPERATOR,
            "/api/replays/{id}/{action}",
            api::replays::control_job,
        )
        .post(DLQ_OPERATOR, "/api/messages/dismiss", api::replays::dismiss)
        .post(
            DLQ_OPERATOR,
            "/api/messages/{id}/dismiss",
            api::replays::dismiss_one,
        )
        // Admins: users, tokens, purges, the audit log.
        .get(ADMIN, "/audit", pages::audit::audit_page)
        .get(ADMIN, "/admin", pages::admin::admin_page)
        .post(ADMIN, "/admin/tokens", pages::admin::token_form)
        .post(
            ADMIN,
            "/admin/tokens/{id}/revoke",
            pages::admin::revoke_form,
        )
        .get(ADMIN, "/api/audit", api::replays::audit_log)
        .get(ADMIN, "/api/audit.ndjson", pages::admin::audit_ndjson)
        .get(ADMIN, "/api/export", api::export::export_messages)
        .get(ADMIN, "/api/admin/users", pages::admin::list_users)
        .get(ADMIN, "/api/admin/tokens", pages::admin::list_tokens)
        .post(ADMIN, "/api/admin/tokens", pages::admin::create_token)
        .post(
            ADMIN,
            "/api/admin/tokens/{id}/revoke",
            pages::admin::revoke_token,
        )
        .post(ADMIN, "/api/admin/purge", pages::admin::purge)
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

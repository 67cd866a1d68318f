//! The HTTP surface: router, shared state and middleware stack in one place. Pages are
//! server-rendered (askama) with htmx partial updates; `/api` is their JSON twin.

mod admin;
mod api;
mod api_replays;
mod assets;
mod audit;
pub mod auth;
mod client;
mod error;
mod health;
mod html;
pub mod limits;
pub mod masking;
mod messages;
mod overview;
mod payload;
mod replays;
mod security;
pub mod serve;
mod signin;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::Notify;
use tower_http::trace::TraceLayer;

use crate::archive::Archive;
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
    /// Wakes this process's replay job runner when a job is queued or resumed.
    pub jobs_wake: Arc<Notify>,
    pub auth: Arc<AuthSettings>,
    /// Failed sign-ins, to slow down guessing.
    pub throttle: Arc<Throttle>,
    /// What viewers may not read (`--mask`).
    pub masking: Arc<masking::Masking>,
    /// Loading, decoding, masking and rendering bodies: a few at a time.
    pub bodies: Arc<limits::WorkLimit>,
    /// Password hashing (argon2 is slow and takes 19 MiB on purpose): a few at a time.
    pub hashing: Arc<limits::WorkLimit>,
    /// Where replays may publish (`--replay-exchange`).
    pub replay_policy: Arc<ExchangePolicy>,
}

impl AppState {
    /// Fresh metrics, status and runner wake-up around an archive; no authentication.
    pub fn new(archive: Arc<dyn Archive>, business_fields: Vec<String>, amqp_url: &str) -> Self {
        AppState {
            archive,
            metrics: Arc::new(Metrics::default()),
            status: IngestStatus::default(),
            business_fields: business_fields.into(),
            amqp_url: Arc::from(amqp_url),
            jobs_wake: Arc::new(Notify::new()),
            auth: Arc::new(AuthSettings::none()),
            throttle: Arc::new(Throttle::default()),
            masking: Arc::new(masking::Masking::default()),
            bodies: Arc::new(limits::WorkLimit::new(
                limits::cores(),
                BODY_QUEUE,
                "reading message bodies",
            )),
            hashing: Arc::new(limits::WorkLimit::new(
                limits::cores(),
                HASH_QUEUE,
                "sign-in",
            )),
            replay_policy: Arc::new(ExchangePolicy::default()),
        }
    }
}

/// The whole application as a router: tests call it with `oneshot`, no socket needed.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(overview::overview))
        .route("/messages", get(messages::list_page))
        .route("/messages/{id}", get(messages::detail_page))
        .route("/messages/{id}/replay", post(messages::replay_form))
        .route("/messages/{id}/dismiss", post(messages::dismiss_form))
        .route("/messages/select", post(replays::selection_form))
        .route("/replays", get(replays::list_page))
        .route("/replays/{id}", get(replays::job_page))
        .route("/replays/{id}/progress", get(replays::progress_partial))
        .route("/replays/{id}/{action}", post(replays::control_form))
        .route("/audit", get(audit::audit_page))
        .route(
            "/login",
            get(signin::login_page)
                .post(signin::login.layer(DefaultBodyLimit::max(signin::MAX_LOGIN_FORM_BYTES))),
        )
        .route("/logout", post(signin::logout))
        .route("/admin", get(admin::admin_page))
        .route("/admin/tokens", post(admin::token_form))
        .route("/admin/tokens/{id}/revoke", post(admin::revoke_form))
        .merge(assets::routes())
        .merge(health::routes())
        .nest(
            "/api",
            api::routes()
                .merge(api_replays::routes())
                .merge(admin::api_routes()),
        )
        .fallback(error::not_found)
        .layer(DefaultBodyLimit::max(security::MAX_REQUEST_BYTES))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .with_state(state)
        .layer(middleware::from_fn(security::refuse_cross_site))
        .layer(middleware::from_fn(security::time_limit))
        .layer(middleware::from_fn(security::security_headers))
        .layer(TraceLayer::new_for_http())
}

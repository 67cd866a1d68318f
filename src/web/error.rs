//! One mapping from failures to HTTP answers: a clear message for the caller, internals
//! only in the log.

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::archive::selection::InvalidSelection;
use crate::archive::ArchiveError;
use crate::replay::plan::PlanError;
use crate::replay::single::ReplayError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    /// Not signed in (or an unknown token).
    #[error("{0}")]
    Unauthorized(String),
    /// Signed in, but the role does not allow it (or a cross-site request).
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The route takes other methods.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A dependency (the broker) is unreachable.
    #[error("{0}")]
    Unavailable(String),
    /// Too much of some heavy work at once (hashing, decoding): try again shortly.
    #[error("{0}")]
    Busy(String),
    /// A bug: what went wrong goes to the log only.
    #[error("{0}")]
    Internal(String),
}

impl From<PlanError> for AppError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Invalid(m) => AppError::BadRequest(m),
            PlanError::NotFound(m) => AppError::NotFound(m),
            PlanError::Archive(e) => AppError::Archive(e),
        }
    }
}

impl From<InvalidSelection> for AppError {
    fn from(e: InvalidSelection) -> Self {
        AppError::BadRequest(e.0)
    }
}

impl From<ReplayError> for AppError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::UnknownMessage(_) => AppError::NotFound(e.to_string()),
            ReplayError::NoTarget
            | ReplayError::MissingExchange(..)
            | ReplayError::VhostRefused(..)
            | ReplayError::UnknownBroker(_)
            | ReplayError::InvalidEdit(_) => AppError::BadRequest(e.to_string()),
            ReplayError::Broker(_) => AppError::Unavailable(e.to_string()),
            ReplayError::NotAllowed(_) => AppError::Forbidden(e.to_string()),
            ReplayError::InProgress(_) | ReplayError::KeyReused(_) => {
                AppError::Archive(crate::archive::ArchiveError::Conflict(e.to_string()))
            }
            ReplayError::Archive(e) => AppError::Archive(e),
        }
    }
}

impl AppError {
    /// The status and the message the user sees (internals only go to the log).
    pub fn status_and_message(&self) -> (StatusCode, String) {
        match self {
            AppError::NotFound(m) => (StatusCode::NOT_FOUND, m.clone()),
            AppError::BadRequest(m) => (StatusCode::BAD_REQUEST, m.clone()),
            AppError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m.clone()),
            AppError::Forbidden(m) => (StatusCode::FORBIDDEN, m.clone()),
            AppError::MethodNotAllowed(m) => (StatusCode::METHOD_NOT_ALLOWED, m.clone()),
            AppError::Unavailable(m) | AppError::Busy(m) => {
                (StatusCode::SERVICE_UNAVAILABLE, m.clone())
            }
            AppError::Archive(e @ ArchiveError::UnknownJob(_)) => {
                (StatusCode::NOT_FOUND, e.to_string())
            }
            AppError::Archive(ArchiveError::Conflict(m)) => (StatusCode::CONFLICT, m.clone()),
            AppError::Archive(e) if e.is_unavailable() => {
                tracing::error!(error = %e, "archive query failed");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the archive database is unavailable; try again shortly".to_owned(),
                )
            }
            AppError::Archive(e) => {
                tracing::error!(error = %e, "archive error");
                (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL.to_owned())
            }
            AppError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL.to_owned())
            }
        }
    }
}

impl AppError {
    /// Seconds to wait before trying again, when waiting helps.
    pub fn retry_after(&self) -> Option<u64> {
        let unavailable = matches!(self, AppError::Archive(e) if e.is_unavailable());
        (matches!(self, AppError::Busy(_)) || unavailable).then_some(RETRY_AFTER_SECS)
    }
}

/// What the caller hears of a bug.
const INTERNAL: &str = "internal error; the server log has the details";

/// What a busy answer tells the client to wait.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Adds `Retry-After` to an answer when the error says waiting helps.
pub fn with_retry_after(mut response: Response, error_retry: Option<u64>) -> Response {
    if let Some(secs) = error_retry {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(secs),
        );
    }
    response
}

/// What every error answers in the JSON API.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, and what to fix.
    pub error: String,
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let retry = self.retry_after();
        let (status, message) = self.status_and_message();
        with_retry_after(
            (status, Json(ErrorBody { error: message })).into_response(),
            retry,
        )
    }
}

/// A handler that panicked (a bug): 500 with the usual error body, and the panic in the log,
/// instead of a connection closed without an answer.
pub fn panicked(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(not text)");
    AppError::Internal(format!("a request handler panicked: {what}")).into_response()
}

pub async fn not_found(uri: Uri) -> AppError {
    AppError::NotFound(format!("no route for {}", uri.path()))
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> AppError {
    AppError::MethodNotAllowed(format!("{} does not take {method}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower::ServiceExt;
    use tower_http::catch_panic::CatchPanicLayer;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_with_the_usual_error() {
        async fn buggy() -> &'static str {
            panic!("index out of bounds")
        }
        let app = axum::Router::new()
            .route("/buggy", get(buggy))
            .layer(CatchPanicLayer::custom(panicked));
        let request = axum::http::Request::get("/buggy")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["error"], INTERNAL,
            "the panic itself only goes to the log"
        );
    }
}

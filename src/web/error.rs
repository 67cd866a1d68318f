//! One mapping from failures to HTTP answers: a clear message for the caller, internals
//! only in the log.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::archive::ArchiveError;
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
    /// A dependency (the broker) is unreachable.
    #[error("{0}")]
    Unavailable(String),
}

impl From<ReplayError> for AppError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::UnknownMessage(_) => AppError::NotFound(e.to_string()),
            ReplayError::NoTarget
            | ReplayError::MissingExchange(_)
            | ReplayError::InvalidEdit(_) => AppError::BadRequest(e.to_string()),
            ReplayError::Broker(_) => AppError::Unavailable(e.to_string()),
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
            AppError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m.clone()),
            AppError::Archive(e @ ArchiveError::UnknownJob(_)) => {
                (StatusCode::NOT_FOUND, e.to_string())
            }
            AppError::Archive(ArchiveError::Conflict(m)) => (StatusCode::CONFLICT, m.clone()),
            AppError::Archive(ArchiveError::Database(e)) => {
                tracing::error!(error = %e, "archive query failed");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the archive database is unavailable; try again shortly".to_owned(),
                )
            }
            AppError::Archive(e) => {
                tracing::error!(error = %e, "archive error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; the server log has the details".to_owned(),
                )
            }
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, message) = self.status_and_message();
        (status, Json(json!({ "error": message }))).into_response()
    }
}

pub async fn not_found(uri: Uri) -> AppError {
    AppError::NotFound(format!("no route for {}", uri.path()))
}

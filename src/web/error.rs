//! One mapping from failures to HTTP answers: a clear message for the caller, internals
//! only in the log.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::archive::ArchiveError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

impl AppError {
    /// The status and the message the user sees (internals only go to the log).
    pub fn status_and_message(&self) -> (StatusCode, String) {
        match self {
            AppError::NotFound(m) => (StatusCode::NOT_FOUND, m.clone()),
            AppError::BadRequest(m) => (StatusCode::BAD_REQUEST, m.clone()),
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

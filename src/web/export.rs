//! `GET /api/export`: the messages the list's filters select, whole and lossless, one JSON
//! line each (see [`ExportedMessage`]), streamed a batch at a time; admins only (bodies are
//! shown unmasked), and audited.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::auth::Caller;
use super::extract::AppQuery;
use super::{AppError, AppState};
use crate::archive::{ExportedMessage, Selection, EXPORT_BATCH, EXPORT_BATCH_BYTES};
use crate::selection::ListParams;

/// The messages the filters select, whole and lossless, one JSON object per line.
///
/// In archive order, streamed: body base64, typed headers, status and replays, as
/// `lazarus import` reads them back. Admins only (bodies are unmasked); audited.
#[utoipa::path(get, path = "/api/export", tag = "admin", params(ListParams),
    responses((status = 200, description = "One message per line", content_type = "application/x-ndjson", body = ExportedMessage)))]
pub(super) async fn export_messages(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(params): AppQuery<ListParams>,
) -> Result<Response, AppError> {
    let (filter, _) = params.parse(&state.business_fields, &state.home_vhost)?;
    let text = params.filters_only().to_query(None);
    let selection = Arc::new(Selection::Filter(Box::new(filter)));
    // Each message as a file carries it: its vhost named.
    let home = state.home_vhost.clone();
    let portable = move |batch: Vec<ExportedMessage>| -> Vec<ExportedMessage> {
        batch.into_iter().map(|m| m.portable(&home)).collect()
    };
    let first = state
        .archive
        .export_batch(&selection, 0, EXPORT_BATCH, EXPORT_BATCH_BYTES)
        .await
        .map(&portable)?;
    let what = if text.is_empty() {
        "every message".to_owned()
    } else {
        text
    };
    state
        .archive
        .record(&caller.actor(), "export", &format!("exported {what}"))
        .await?;
    let archive = state.archive.clone();
    Ok(super::ndjson::download(
        first,
        move |last: &ExportedMessage| {
            let (archive, selection, after) = (archive.clone(), selection.clone(), last.id);
            let portable = portable.clone();
            async move {
                archive
                    .export_batch(&selection, after, EXPORT_BATCH, EXPORT_BATCH_BYTES)
                    .await
                    .map(portable)
            }
        },
        "lazarus-messages.ndjson",
    ))
}

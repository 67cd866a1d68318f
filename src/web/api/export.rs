//! `GET /api/export`: the messages the list's filters select, whole and lossless, one JSON
//! line each (see [`ExportedMessage`]), streamed a batch at a time and a body over a MiB a
//! piece at a time; admins only (bodies are shown unmasked), and audited.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use crate::archive::selection::ListParams;
use crate::archive::{
    ArchiveError, Console, ExportLine, ExportedMessage, Selection, EXPORT_BATCH, EXPORT_BATCH_BYTES,
};
use crate::web::auth::Caller;
use crate::web::extract::AppQuery;
use crate::web::{AppError, AppState};

/// The messages the filters select, whole and lossless, one JSON object per line.
///
/// In archive order, streamed: body base64, typed headers, status and replays, as
/// `lazarus import` reads them back. Admins only (bodies are unmasked); audited.
#[utoipa::path(get, path = "/api/export", tag = "admin", params(ListParams),
    responses((status = 200, description = "One message per line", content_type = "application/x-ndjson", body = ExportedMessage)))]
pub(crate) async fn export_messages(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(params): AppQuery<ListParams>,
) -> Result<Response, AppError> {
    let (filter, _) = params.parse(&state.business_fields, &state.home_vhost)?;
    let text = params.filters_only().to_query(None);
    let selection = Arc::new(Selection::Filter(Box::new(filter)));
    // Each message as a file carries it: its vhost named.
    let brokers = state.brokers.clone();
    let portable = move |batch: Vec<ExportedMessage>| -> Vec<ExportedMessage> {
        batch.into_iter().map(|m| m.portable(&brokers)).collect()
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
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(write_lines(
        state.archive.clone(),
        selection,
        first,
        portable,
        tx,
    ));
    let pieces = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    Ok(crate::web::ndjson::attachment(
        pieces,
        "lazarus-messages.ndjson",
    ))
}

/// What the download is sent at a time (at least: a body's base64 goes a piece at a time).
const SEND_BYTES: usize = 256 * 1024;

/// Writes the export's lines to `tx` a batch at a time from `first` on, each message's
/// line a piece at a time ([`ExportLine`]: a body over a MiB is read from the archive as it
/// is sent), until the selection is done, the archive fails (the download is cut short) or
/// the client goes away. What is held: a batch, and two pieces on their way.
async fn write_lines(
    archive: Arc<dyn Console>,
    selection: Arc<Selection>,
    first: Vec<ExportedMessage>,
    portable: impl Fn(Vec<ExportedMessage>) -> Vec<ExportedMessage>,
    tx: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
) {
    let cut = |e: ArchiveError| {
        tracing::error!(error = %e, "export cut short");
        Err(std::io::Error::other(
            "the archive failed; the export is cut short",
        ))
    };
    let (mut batch, mut out) = (first, Vec::new());
    while let Some(after) = batch.last().map(|m| m.id) {
        for mut m in batch {
            let mut line = ExportLine::new(&mut m);
            loop {
                match line.next(archive.as_ref()).await {
                    Ok(Some(piece)) => out.extend_from_slice(&piece),
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(cut(e)).await;
                        return;
                    }
                }
                if out.len() >= SEND_BYTES && tx.send(Ok(std::mem::take(&mut out))).await.is_err() {
                    return;
                }
            }
        }
        batch = match archive
            .export_batch(&selection, after, EXPORT_BATCH, EXPORT_BATCH_BYTES)
            .await
        {
            Ok(batch) => portable(batch),
            Err(e) => {
                let _ = tx.send(cut(e)).await;
                return;
            }
        };
    }
    if !out.is_empty() {
        let _ = tx.send(Ok(out)).await;
    }
}

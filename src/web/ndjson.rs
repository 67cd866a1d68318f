//! Downloads streamed as NDJSON a page at a time (the audit log, the message export): memory
//! stays the same however long the download. The first page is read before the answer
//! starts, so that a failing archive is a proper error; a later failure cuts the stream
//! short, which the client sees as an incomplete transfer.

use std::future::Future;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::archive::ArchiveError;

/// What the stream yields next.
enum Next<T> {
    Page(Vec<T>),
    Failed,
    Done,
}

/// `first`, then the pages `next` reads after the last item of the one before, until one is
/// empty: one JSON line per item, as `filename`.
pub fn download<T, F, Fut>(first: Vec<T>, next: F, filename: &str) -> Response
where
    T: Serialize + Send + 'static,
    F: Fn(&T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<T>, ArchiveError>> + Send,
{
    let pages = futures_util::stream::unfold(
        (std::sync::Arc::new(next), Next::Page(first)),
        |(next, page)| async move {
            let page = match page {
                Next::Page(page) if !page.is_empty() => page,
                Next::Page(_) | Next::Done => return None,
                Next::Failed => {
                    let cut = std::io::Error::other("the archive failed; the export is cut short");
                    return Some((Err(cut), (next, Next::Done)));
                }
            };
            let mut out = Vec::new();
            for item in &page {
                serde_json::to_writer(&mut out, item).expect("records serialize");
                out.push(b'\n');
            }
            let following = match page.last() {
                Some(last) => match next(last).await {
                    Ok(page) => Next::Page(page),
                    Err(e) => {
                        tracing::error!(error = %e, "export cut short");
                        Next::Failed
                    }
                },
                None => Next::Done,
            };
            Some((Ok::<_, std::io::Error>(out), (next, following)))
        },
    );
    attachment(pages, filename)
}

/// `pieces` as the NDJSON download `filename`; an error cuts it short.
pub fn attachment<S>(pieces: S, filename: &str) -> Response
where
    S: futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static,
{
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        axum::body::Body::from_stream(pieces),
    )
        .into_response()
}

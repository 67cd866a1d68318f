//! The audit log page: every replay, edit, job action and dismissal, newest first.

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::web::api::replays::AuditParams;
use crate::web::extract::AppQuery;
use crate::web::html::{filters, render, utc, PageError};
use crate::web::nav::Nav;
use crate::web::pages::chips::{self, Piece};
use crate::web::{AppError, AppState};

pub struct EntryRow {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub job_id: Option<String>,
    pub message_id: Option<String>,
    /// What was done, the selections in it shown as the list's chips.
    pub summary: Vec<Piece>,
}

#[derive(Template)]
#[template(path = "audit.html")]
pub struct AuditPage {
    pub nav: Nav,
    pub entries: Vec<EntryRow>,
    pub next_link: Option<String>,
}

/// `/audit?before=`
pub async fn audit_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    nav: Nav,
    AppQuery(params): AppQuery<AuditParams>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    let (before, limit) = params.parse().map_err(page_error)?;
    let entries = state
        .archive
        .audit_log(before, limit)
        .await
        .map_err(|e| page_error(e.into()))?;
    let next_link = (entries.len() == limit as usize)
        .then(|| entries.last())
        .flatten()
        .map(|e| format!("/audit?before={}", e.id));
    Ok(render(&AuditPage {
        nav,
        entries: entries
            .into_iter()
            .map(|e| EntryRow {
                at: utc(e.at),
                actor: e.actor,
                action: e.action,
                job_id: e.job_id,
                message_id: e.message_id,
                summary: chips::in_text(&e.summary),
            })
            .collect(),
        next_link,
    }))
}

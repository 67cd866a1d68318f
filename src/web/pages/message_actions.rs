//! What the message page's forms do: replay (as archived or edited) and dismiss with a note.

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use crate::archive::{ReplayEdit, Role};
use crate::message::death::ReplayTarget;
use crate::message::headers::Table;
use crate::replay::plan::{check_request_key, check_target, IdValue, SelectionRequest};
use crate::replay::single::{original_to_edit, replay_one, SingleReplay};
use crate::web::api::replays::dismiss_selection;
use crate::web::auth::Caller;
use crate::web::extract::{AppForm, MessageId};
use crate::web::html::{flash, is_htmx, render, PageError};
use crate::web::pages::message::ReplayRow;
use crate::web::{AppError, AppState};
use serde::Deserialize;

#[derive(Template)]
#[template(path = "partials/replay_result.html")]
pub struct ReplayResultPartial {
    pub row: ReplayRow,
}

#[derive(Debug, Deserialize)]
pub struct ReplayForm {
    exchange: String,
    routing_key: String,
    request_key: String,
    /// Set by the edit & replay form, with the edited `body` and `headers` (typed JSON).
    edit: Option<String>,
    body: Option<String>,
    headers: Option<String>,
}

impl ReplayForm {
    /// The edit from the form. Browsers send a textarea's line breaks as CRLF: they are
    /// turned back into LF unless the archived body itself used CR.
    fn edit(&self, original: &[u8]) -> Result<Option<ReplayEdit>, AppError> {
        if self.edit.is_none() {
            return Ok(None);
        }
        let headers = match self.headers.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(serde_json::from_str::<Table>(text).map_err(|e| {
                AppError::BadRequest(format!(
                    "the headers must be a JSON object of typed values, as shown ({e}); nothing was published"
                ))
            })?),
        };
        let keep_cr = original.contains(&b'\r');
        let body = self.body.as_ref().map(|b| match keep_cr {
            true => b.clone().into_bytes(),
            false => b.replace("\r\n", "\n").into_bytes(),
        });
        Ok(Some(ReplayEdit { body, headers }))
    }
}

/// `POST /messages/{id}/replay` from the detail page's form.
pub async fn replay_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppForm(form): AppForm<ReplayForm>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    caller
        .may_act_on(&state, numeric, &id)
        .await
        .map_err(page_error)?;
    let target = ReplayTarget {
        exchange: form.exchange.trim().to_owned(),
        routing_key: form.routing_key.trim().to_owned(),
    };
    check_target(&target).map_err(|e| page_error(e.into()))?;
    check_request_key(&form.request_key).map_err(|e| page_error(e.into()))?;
    if target.exchange.is_empty() && target.routing_key.is_empty() {
        return Err(page_error(AppError::BadRequest(
            "choose a target: an exchange, a routing key, or both (the default exchange routes by queue name)".into(),
        )));
    }
    let original = match form.edit.is_some() {
        true => {
            original_to_edit(state.archive.as_ref(), numeric)
                .await
                .map_err(|e| page_error(e.into()))?
                .bytes
        }
        false => Vec::new(),
    };
    let edit = form.edit(&original).map_err(page_error)?;
    let answer = replay_one(
        state.archive.clone(),
        &state.brokers,
        SingleReplay {
            id: numeric,
            target: Some(target),
            edit,
            request_key: &form.request_key,
            actor: &caller.actor(),
            metrics: state.metrics.clone(),
            policy: &state.replay_policy,
        },
    )
    .await
    .map_err(|e| page_error(e.into()))?;
    let record = answer.record();
    if is_htmx(&headers) {
        return Ok(render(&ReplayResultPartial {
            row: ReplayRow::new(record),
        }));
    }
    Ok(Redirect::to(&format!("/messages/{id}")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct DismissForm {
    #[serde(default)]
    note: String,
}

/// `POST /messages/{id}/dismiss`: resolved without a replay, with a note.
pub async fn dismiss_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    MessageId {
        id: numeric,
        raw: id,
    }: MessageId,
    AppForm(form): AppForm<DismissForm>,
) -> Result<Response, PageError> {
    let page_error = |e: AppError| PageError::new(e, &headers);
    caller
        .message(&state, numeric, &id, Role::Operator)
        .await
        .map_err(page_error)?;
    let selection = SelectionRequest {
        ids: Some(vec![IdValue::Number(numeric)]),
        ..Default::default()
    };
    let dismissed = dismiss_selection(&state, &selection, &form.note, &caller)
        .await
        .map_err(page_error)?;
    Ok(flash(
        Redirect::to(&format!("/messages/{id}")).into_response(),
        &crate::web::pages::replays::dismissed_said(dismissed),
    ))
}

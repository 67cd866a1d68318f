//! Replaying one message now, as archived or edited: recorded (with its audit entry) before
//! publishing, once per request key, so a double click or a retried request never publishes
//! it twice; the outcome sets its status.

use crate::amqp::connection::connect;
use crate::amqp::publisher::{PublishOutcome, Publisher, ReplayMessage};
use crate::archive::{
    Actor, Archive, ArchiveError, ArchivedMessage, MessageStatus, ReplayEdit, ReplayRecord,
    ReplayStart, StoredBody,
};
use crate::death::ReplayTarget;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no archived message with id {0}")]
    UnknownMessage(i64),
    #[error("this message has no death history, so its original target is unknown: choose an exchange and routing key")]
    NoTarget,
    #[error("exchange {0:?} does not exist: nothing was published")]
    MissingExchange(String),
    #[error("RabbitMQ is unreachable: {0}")]
    Broker(String),
    #[error("{0}")]
    InvalidEdit(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// The status a message takes after a replay that ended so.
pub fn status_after(outcome: &PublishOutcome) -> (MessageStatus, &'static str, Option<String>) {
    match outcome {
        PublishOutcome::Published => (MessageStatus::Replayed, "published", None),
        PublishOutcome::Unroutable { reply } => (
            MessageStatus::ReplayFailed,
            "unroutable",
            Some(reply.clone()),
        ),
        PublishOutcome::Nacked => (MessageStatus::ReplayFailed, "nacked", None),
        PublishOutcome::Failed(e) => (MessageStatus::ReplayFailed, "failed", Some(e.clone())),
    }
}

/// Only text bodies can be edited, and a JSON body must stay valid JSON.
pub fn check_edit(
    message: &ArchivedMessage,
    original: &StoredBody,
    edit: &ReplayEdit,
) -> Result<(), ReplayError> {
    let Some(body) = &edit.body else {
        return Ok(());
    };
    if message.summary.content_encoding.is_some() || std::str::from_utf8(&original.bytes).is_err() {
        return Err(ReplayError::InvalidEdit(
            "only text and JSON bodies can be edited; this one is encoded or binary".into(),
        ));
    }
    let json_type = message
        .summary
        .content_type
        .as_deref()
        .is_some_and(|t| t.contains("json"));
    let was_json = serde_json::from_slice::<serde::de::IgnoredAny>(&original.bytes).is_ok();
    if json_type || was_json {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            return Err(ReplayError::InvalidEdit(format!(
                "the edited body is not valid JSON ({e}); nothing was published"
            )));
        }
    }
    Ok(())
}

/// One replay as asked for.
#[derive(Debug, Clone)]
pub struct SingleReplay<'a> {
    pub id: i64,
    /// `None`: the message's own replay target.
    pub target: Option<ReplayTarget>,
    /// A changed body and/or headers (the archived message stays as it was).
    pub edit: Option<ReplayEdit>,
    pub request_key: &'a str,
    pub actor: &'a Actor,
}

/// Replays one message once for its request key.
pub async fn replay_one(
    archive: &dyn Archive,
    amqp_url: &str,
    request: SingleReplay<'_>,
) -> Result<ReplayRecord, ReplayError> {
    let id = request.id;
    let message = archive
        .get_message(id)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    let body = archive
        .get_body(id)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    if let Some(edit) = &request.edit {
        check_edit(&message, &body, edit)?;
    }
    let target = request
        .target
        .or_else(|| message.summary.replay_target.clone())
        .ok_or(ReplayError::NoTarget)?;
    let connection = connect(amqp_url, "lazarus replay")
        .await
        .map_err(|e| ReplayError::Broker(e.to_string()))?;
    let mut publisher = Publisher::open(connection)
        .await
        .map_err(|e| ReplayError::Broker(e.to_string()))?;
    let exists = publisher.exchange_exists(&target.exchange).await;
    let edit = request.edit.as_ref();
    let result = match exists {
        Err(e) => Err(ReplayError::Broker(e.to_string())),
        Ok(false) => Err(ReplayError::MissingExchange(target.exchange.clone())),
        Ok(true) => match archive
            .begin_replay(id, request.request_key, request.actor, &target, edit)
            .await?
        {
            ReplayStart::Existing(record) => Ok(record),
            ReplayStart::New(replay_id) => {
                let mut outcome = PublishOutcome::Failed("no confirm".into());
                let m = ReplayMessage {
                    archive_id: id,
                    properties: &message.properties,
                    headers: edit
                        .and_then(|e| e.headers.as_ref())
                        .or(message.headers.as_ref()),
                    body: edit.and_then(|e| e.body.as_deref()).unwrap_or(&body.bytes),
                    target: &target,
                    job: None,
                };
                publisher.publish_all([m], 1, |_, o| outcome = o).await;
                let (status, name, detail) = status_after(&outcome);
                Ok(archive
                    .finish_replay(replay_id, name, detail.as_deref(), status)
                    .await?)
            }
        },
    };
    publisher.close().await;
    result
}

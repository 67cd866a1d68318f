//! Replaying one message now: recorded before publishing, once per request key, so a double
//! click or a retried request never publishes it twice; the outcome sets its status.

use crate::amqp::connection::connect;
use crate::amqp::publisher::{PublishOutcome, Publisher, ReplayMessage};
use crate::archive::{Archive, ArchiveError, MessageStatus, ReplayRecord, ReplayStart};
use crate::death::ReplayTarget;

/// Who replays, until authentication exists.
pub const ANONYMOUS_ACTOR: &str = "anonymous";

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

/// Replays message `id` to `target` (or its own replay target) once for `request_key`.
pub async fn replay_one(
    archive: &dyn Archive,
    amqp_url: &str,
    id: i64,
    target: Option<ReplayTarget>,
    request_key: &str,
    actor: &str,
) -> Result<ReplayRecord, ReplayError> {
    let message = archive
        .get_message(id)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    let body = archive
        .get_body(id)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    let target = target
        .or_else(|| message.summary.replay_target.clone())
        .ok_or(ReplayError::NoTarget)?;
    let connection = connect(amqp_url, "lazarus replay")
        .await
        .map_err(|e| ReplayError::Broker(e.to_string()))?;
    let publisher = Publisher::open(connection)
        .await
        .map_err(|e| ReplayError::Broker(e.to_string()))?;
    let exists = publisher.exchange_exists(&target.exchange).await;
    let result = match exists {
        Err(e) => Err(ReplayError::Broker(e.to_string())),
        Ok(false) => Err(ReplayError::MissingExchange(target.exchange.clone())),
        Ok(true) => match archive
            .begin_replay(id, request_key, actor, &target)
            .await?
        {
            ReplayStart::Existing(record) => Ok(record),
            ReplayStart::New(replay_id) => {
                let mut outcome = PublishOutcome::Failed("no confirm".into());
                let m = ReplayMessage {
                    archive_id: id,
                    properties: &message.properties,
                    headers: message.headers.as_ref(),
                    body: &body.bytes,
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

//! Replaying one message now, as archived or edited: recorded (with its audit entry) before
//! publishing, once per request key, so a double click or a retried request never publishes
//! it twice; the outcome sets its status. A publish the broker holds back (a resource alarm)
//! is not abandoned: its confirm is awaited in the background and settles the record, and
//! the message takes no other single replay meanwhile.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::bodies::{replay_body, ArchivedBodies, IN_HAND_BYTES};
use crate::amqp::publisher::{PublishOutcome, Publisher, ReplayMessage};
use crate::amqp::wire::Connection;
use crate::archive::{
    Actor, ArchiveError, ArchivedMessage, Console, Outcome, OutgoingBody, ReplayEdit, ReplayRecord,
    ReplayStart, StoredBody,
};
use crate::message::death::ReplayTarget;
use crate::message::exchange_policy::ExchangePolicy;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no archived message with id {0}")]
    UnknownMessage(i64),
    #[error("this message has no death history, so its original target is unknown: choose an exchange and routing key")]
    NoTarget,
    /// The exchange, and where it was looked for (empty, or ` in vhost "v"`).
    #[error("exchange {0:?}{1} does not exist: nothing was published")]
    MissingExchange(String, String),
    #[error("RabbitMQ is unreachable: {0}")]
    Broker(String),
    /// The message came from a broker this instance has no `--broker` for.
    #[error("the message came from the broker {0:?}, which this instance has no --broker for; nothing was published")]
    UnknownBroker(String),
    /// The message's vhost, refused by the broker on opening: what [`crate::message::dlq::refused`]
    /// and the broker said.
    #[error("{0} ({1}): it does not exist, or the user may not use it; nothing was published")]
    VhostRefused(String, String),
    #[error("a replay of this message (requested {0}) is still waiting for the broker's confirm; it settles by itself")]
    InProgress(String),
    #[error("request_key {0:?} was used for another message; use a new key")]
    KeyReused(String),
    #[error("{0}")]
    InvalidEdit(String),
    /// The target is outside `--replay-exchange`.
    #[error("{0}")]
    NotAllowed(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// How a replay that ended so is recorded, and what the record says of it.
pub fn recorded(outcome: &PublishOutcome) -> (Outcome, Option<String>) {
    match outcome {
        PublishOutcome::Published => (Outcome::Published, None),
        PublishOutcome::Unroutable { reply } => (Outcome::Unroutable, Some(reply.clone())),
        PublishOutcome::Nacked => (Outcome::Nacked, None),
        PublishOutcome::Failed(e) => (Outcome::Failed, Some(e.clone())),
    }
}

/// The body a replay publishes: the edited one (the archived one checked first), the
/// archived one in hand (up to [`IN_HAND_BYTES`]), or a larger archived one, read from the
/// archive as it is published.
async fn body_to_publish(
    archive: &dyn Console,
    message: &ArchivedMessage,
    edit: Option<&ReplayEdit>,
) -> Result<OutgoingBody, ReplayError> {
    let id = message.summary.id;
    if let Some(edited) = edit.and_then(|e| e.body.as_ref()) {
        let original = original_to_edit(archive, id).await?;
        check_edit(message, &original, edit.expect("an edit"))?;
        return Ok(OutgoingBody::Held(edited.clone()));
    }
    let start = archive
        .body_start(id, IN_HAND_BYTES)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    Ok(match start.is_whole() {
        true => OutgoingBody::Held(start.body.bytes),
        false => OutgoingBody::Archived { size: start.size },
    })
}

/// The largest archived body an edit may replace: it is read whole, to check it is text.
pub const MAX_EDITED_ORIGINAL: usize = 8 * 1024 * 1024;

/// The archived body of message `id` that an edit replaces, read whole (at most
/// [`MAX_EDITED_ORIGINAL`]).
pub async fn original_to_edit(archive: &dyn Console, id: i64) -> Result<StoredBody, ReplayError> {
    let start = archive
        .body_start(id, MAX_EDITED_ORIGINAL)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    if !start.is_whole() {
        return Err(ReplayError::InvalidEdit(format!(
            "the archived body is {} bytes: a body over {} MiB cannot be edited (replay it as \
             archived); nothing was published",
            start.size,
            MAX_EDITED_ORIGINAL >> 20
        )));
    }
    Ok(start.body)
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
    if !crate::message::body::edits_as_text(&original.bytes, &message.encoding()) {
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
    /// Where the final outcome is counted (also when it comes after the answer).
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// Where replays may publish.
    pub policy: &'a ExchangePolicy,
}

/// How long a request waits for the broker's confirm before answering that it is pending.
const CONFIRM_WAIT: Duration = Duration::from_secs(10);
/// A replay still `publishing` after this long was cut off (Lazarus stopped while waiting):
/// it no longer holds the message back.
const STALE_PUBLISHING: time::Duration = time::Duration::hours(1);

/// What a request learns of its replay.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayAnswer {
    /// The broker answered: the record has its outcome.
    Settled(ReplayRecord),
    /// Published, not confirmed yet (the broker blocks publishing for a resource alarm, or
    /// is slow): the record settles by itself; its detail says what it waits for.
    Pending(ReplayRecord),
}

impl ReplayAnswer {
    pub fn record(&self) -> &ReplayRecord {
        match self {
            ReplayAnswer::Settled(r) | ReplayAnswer::Pending(r) => r,
        }
    }
}

/// Replays one message once for its request key.
pub async fn replay_one(
    archive: Arc<dyn Console>,
    brokers: &crate::message::brokers::Brokers,
    request: SingleReplay<'_>,
) -> Result<ReplayAnswer, ReplayError> {
    let id = request.id;
    let message = archive
        .get_message(id)
        .await?
        .ok_or(ReplayError::UnknownMessage(id))?;
    let body = body_to_publish(archive.as_ref(), &message, request.edit.as_ref()).await?;
    let target = request
        .target
        .or_else(|| message.summary.replay_target.clone())
        .ok_or(ReplayError::NoTarget)?;
    request
        .policy
        .check(&target.exchange)
        .map_err(ReplayError::NotAllowed)?;
    let since = OffsetDateTime::now_utc() - STALE_PUBLISHING;
    let replays = archive.replays_of(id).await?;
    if let Some(earlier) = replays
        .iter()
        .find(|r| r.request_key == request.request_key)
    {
        return Ok(ReplayAnswer::Settled(earlier.clone()));
    }
    if let Some(busy) = replays
        .iter()
        .find(|r| r.is_publishing() && r.requested_at > since)
    {
        let at = busy
            .requested_at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        return Err(ReplayError::InProgress(at));
    }
    // Back to the broker and into the vhost it came from.
    let vhost = &message.summary.vhost;
    let broker = &message.summary.broker;
    let amqp_url = brokers
        .url(broker)
        .ok_or_else(|| ReplayError::UnknownBroker(broker.clone()))?;
    let connection = Connection::open_in(amqp_url, vhost, "lazarus replay")
        .await
        .map_err(|e| match e.vhost_refused() {
            true => ReplayError::VhostRefused(crate::message::dlq::refused(vhost), e.to_string()),
            false => ReplayError::Broker(e.to_string()),
        })?;
    let mut publisher = Publisher::open(connection)
        .await
        .map_err(|e| ReplayError::Broker(e.to_string()))?;
    let edit = request.edit.as_ref();
    let exists = publisher.exchange_exists(&target.exchange).await;
    let replay_id = match exists {
        Err(e) => Err(ReplayError::Broker(e.to_string())),
        Ok(false) => Err(ReplayError::MissingExchange(
            target.exchange.clone(),
            crate::message::dlq::in_vhost(&message.summary.vhost),
        )),
        Ok(true) => match archive
            .begin_replay(id, request.request_key, request.actor, &target, edit)
            .await?
        {
            ReplayStart::Existing(record) if record.message_id != id => {
                Err(ReplayError::KeyReused(request.request_key.to_owned()))
            }
            ReplayStart::Existing(record) => {
                publisher.close().await;
                return Ok(ReplayAnswer::Settled(record));
            }
            ReplayStart::New(replay_id) => Ok(replay_id),
        },
    };
    let replay_id = match replay_id {
        Ok(replay_id) => replay_id,
        Err(e) => {
            publisher.close().await;
            return Err(e);
        }
    };
    // Published and awaited in a task of its own, so that the record settles however long
    // the broker takes, even once the request has had its answer.
    let properties = message.properties.clone();
    let convention = message.summary.convention;
    let headers = edit
        .and_then(|e| e.headers.clone())
        .or(message.headers.clone());
    let mut blocked = publisher.blocked();
    let (settled_tx, settled) = tokio::sync::oneshot::channel();
    let publishing = {
        let archive = archive.clone();
        let target = target.clone();
        let metrics = request.metrics.clone();
        async move {
            let mut outcome = PublishOutcome::Failed("no confirm".into());
            let bodies = ArchivedBodies(archive.as_ref());
            let m = ReplayMessage {
                archive_id: id,
                properties: &properties,
                headers: headers.as_ref(),
                body: replay_body(&body, &bodies),
                target: &target,
                job: None,
                convention,
            };
            publisher.publish_all([m], 1, |_, o| outcome = o).await;
            publisher.close().await;
            let (outcome, detail) = recorded(&outcome);
            metrics.replayed(outcome.as_str(), 1);
            let record = archive
                .finish_replay(replay_id, outcome, detail.as_deref())
                .await;
            let _ = settled_tx.send(record);
        }
    };
    tokio::spawn(publishing);
    let pending = |detail: String| async {
        let mut record = archive
            .replays_of(id)
            .await?
            .into_iter()
            .find(|r| r.id == replay_id)
            .ok_or(ReplayError::UnknownMessage(id))?;
        record.detail = Some(detail);
        Ok::<_, ReplayError>(ReplayAnswer::Pending(record))
    };
    let wait_blocked = async {
        loop {
            if let Some(reason) = blocked.borrow_and_update().clone() {
                return reason;
            }
            if blocked.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::select! {
        record = settled => match record {
            Ok(record) => Ok(ReplayAnswer::Settled(record?)),
            Err(_) => Err(ReplayError::Broker("the replay task ended without an outcome".into())),
        },
        reason = wait_blocked => pending(format!(
            "RabbitMQ blocks publishing ({reason}): the message goes out once its resource \
             alarm clears, and this record then says how it ended"
        )).await,
        _ = tokio::time::sleep(CONFIRM_WAIT) => pending(
            "published; the broker has not confirmed it yet, and this record says how it \
             ends once it does".to_owned()
        ).await,
    }
}

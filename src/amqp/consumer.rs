//! One DLQ consumer: manual acks, deliveries gathered into batches, each batch stored in one
//! durable transaction and only then acked with a single `multiple` ack.
//!
//! Any broker error drops the connection and starts over after a backoff: unacked
//! deliveries come back flagged redelivered, and the archive recognises those it committed
//! before the ack was lost (see `Archive::store_batch`).
//! A database error holds the batch (unacked, consuming nothing more) and retries it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{DeliveryTag, FieldTable};
use lapin::{Channel, Connection};
use time::OffsetDateTime;
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::connection::{connect, is_not_found, Backoff};
use super::headers::MessageProperties;
use crate::archive::{Archive, IncomingMessage, IngestRules, PreparedMessage};
use crate::metrics::{Metrics, QueueLabels};
use crate::status::{ConsumerState, IngestStatus};

/// How deliveries are grouped into transactions.
#[derive(Debug, Clone)]
pub struct BatchSettings {
    /// Unacked deliveries the broker may push ahead (AMQP `basic.qos`).
    pub prefetch: u16,
    /// Commit after this many messages...
    pub max_messages: usize,
    /// ...or this long after the first message of the batch arrived...
    pub max_delay: Duration,
    /// ...or once the bodies add up to this many bytes, whichever comes first.
    pub max_bytes: usize,
}

/// What a consumer needs from the rest of the process.
#[derive(Clone)]
pub struct ConsumerContext {
    pub amqp_url: String,
    pub archive: Arc<dyn Archive>,
    pub settings: BatchSettings,
    pub rules: IngestRules,
    pub status: IngestStatus,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
enum ConsumeError {
    #[error("broker: {0}")]
    Broker(#[from] lapin::Error),
    #[error("queue {0:?} does not exist")]
    QueueMissing(String),
    #[error("the broker cancelled the consumer")]
    Cancelled,
    #[error("shutting down with a batch the database did not take; it stays unacked")]
    AbandonedOnShutdown,
}

/// Runs the consumer of `queue` until shutdown, restarting it should it ever panic (the
/// deliveries it held are unacked, so the broker keeps them).
pub async fn supervise(queue: String, ctx: ConsumerContext) {
    loop {
        match tokio::spawn(run(queue.clone(), ctx.clone())).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(queue, error = %e, "consumer crashed; restarting it");
                ctx.metrics.ingest_error(&queue, "crash");
                ctx.metrics.set_connected(&queue, false);
                ctx.status.set(
                    &queue,
                    ConsumerState::Disconnected(format!("consumer crashed: {e}")),
                );
            }
        }
        tokio::select! {
            _ = sleep(Duration::from_secs(5)) => {}
            _ = ctx.shutdown.cancelled() => return,
        }
    }
}

/// Consumes `queue` until shutdown, reconnecting with backoff after every failure.
pub async fn run(queue: String, ctx: ConsumerContext) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        ctx.status.set(&queue, ConsumerState::Connecting);
        let result = consume(&queue, &ctx, &mut backoff).await;
        ctx.metrics.set_connected(&queue, false);
        match result {
            Ok(()) => break,
            Err(ConsumeError::QueueMissing(_)) => {
                tracing::warn!(
                    queue,
                    "DLQ does not exist; Lazarus never creates it, retrying"
                );
                ctx.metrics.ingest_error(&queue, "queue_missing");
                ctx.status.set(&queue, ConsumerState::QueueMissing);
            }
            Err(ConsumeError::AbandonedOnShutdown) => {
                tracing::warn!(queue, "stopped with an unstored batch; it stays in the DLQ");
                break;
            }
            Err(e) => {
                tracing::warn!(queue, error = %e, "consumer lost; reconnecting");
                ctx.metrics.ingest_error(&queue, "broker");
                ctx.status
                    .set(&queue, ConsumerState::Disconnected(e.to_string()));
            }
        }
        tokio::select! {
            _ = sleep(backoff.next_delay()) => {}
            _ = ctx.shutdown.cancelled() => break,
        }
    }
    ctx.status.set(&queue, ConsumerState::Stopped);
}

async fn consume(
    queue: &str,
    ctx: &ConsumerContext,
    backoff: &mut Backoff,
) -> Result<(), ConsumeError> {
    let connection = connect(&ctx.amqp_url, &format!("lazarus consumer {queue}")).await?;
    let result = consume_on(&connection, queue, ctx, backoff).await;
    // Closing returns every unacked delivery to the queue at once.
    let _ = connection
        .close(200, "lazarus consumer stopping".into())
        .await;
    result
}

async fn consume_on(
    connection: &Connection,
    queue: &str,
    ctx: &ConsumerContext,
    backoff: &mut Backoff,
) -> Result<(), ConsumeError> {
    let channel = connection.create_channel().await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    match channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
    {
        Err(e) if is_not_found(&e) => return Err(ConsumeError::QueueMissing(queue.to_owned())),
        other => other?,
    };
    channel
        .basic_qos(ctx.settings.prefetch, BasicQosOptions::default())
        .await?;
    let mut deliveries = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(queue, "consuming");
    ctx.status.set(queue, ConsumerState::Consuming);
    ctx.metrics.set_connected(queue, true);
    backoff.reset();

    let mut batch = Batch::default();
    loop {
        let deadline = batch.deadline(ctx.settings.max_delay);
        tokio::select! {
            biased;
            _ = ctx.shutdown.cancelled() => {
                flush(&channel, queue, &mut batch, ctx).await?;
                return Ok(());
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                flush(&channel, queue, &mut batch, ctx).await?;
            }
            next = deliveries.next() => match next {
                Some(Ok(delivery)) => {
                    batch.push(queue, delivery, &ctx.rules);
                    if batch.is_full(&ctx.settings) {
                        flush(&channel, queue, &mut batch, ctx).await?;
                    }
                }
                // The channel or consumer is gone. Store what we hold anyway: if the broker
                // dropped it (a deleted queue) this is the only copy; if it redelivers it, the
                // archive recognises what it committed. The ack then fails, and we reconnect.
                Some(Err(e)) => {
                    let _ = flush(&channel, queue, &mut batch, ctx).await;
                    return Err(e.into());
                }
                None => {
                    let _ = flush(&channel, queue, &mut batch, ctx).await;
                    return Err(ConsumeError::Cancelled);
                }
            },
        }
    }
}

/// Deliveries waiting to be stored, with the tag that acks all of them.
#[derive(Default)]
struct Batch {
    messages: Vec<PreparedMessage>,
    last_tag: Option<DeliveryTag>,
    bytes: usize,
    started: Option<Instant>,
}

impl Batch {
    fn push(&mut self, queue: &str, delivery: Delivery, rules: &IngestRules) {
        self.started.get_or_insert_with(Instant::now);
        self.last_tag = Some(delivery.delivery_tag);
        self.bytes += delivery.data.len();
        let (properties, headers) = MessageProperties::from_amqp(&delivery.properties);
        self.messages.push(PreparedMessage::with_rules(
            IncomingMessage {
                queue: queue.to_owned(),
                exchange: delivery.exchange.as_str().to_owned(),
                routing_key: delivery.routing_key.as_str().to_owned(),
                redelivered: delivery.redelivered,
                properties,
                headers,
                body: delivery.data,
                received_at: OffsetDateTime::now_utc(),
            },
            rules,
        ));
    }

    fn is_full(&self, settings: &BatchSettings) -> bool {
        self.messages.len() >= settings.max_messages || self.bytes >= settings.max_bytes
    }

    fn deadline(&self, max_delay: Duration) -> Option<Instant> {
        self.started.map(|started| started + max_delay)
    }
}

/// Stores the batch (retrying while the database is unavailable) and then acks it.
async fn flush(
    channel: &Channel,
    queue: &str,
    batch: &mut Batch,
    ctx: &ConsumerContext,
) -> Result<(), ConsumeError> {
    let Some(last_tag) = batch.last_tag else {
        return Ok(());
    };
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let started = Instant::now();
        match ctx.archive.store_batch(&batch.messages).await {
            Ok(outcome) => {
                ctx.metrics
                    .batch_commit_seconds
                    .observe(started.elapsed().as_secs_f64());
                let labels = QueueLabels {
                    queue: queue.to_owned(),
                };
                ctx.metrics
                    .ingested
                    .get_or_create(&labels)
                    .inc_by(outcome.inserted);
                ctx.metrics
                    .duplicates
                    .get_or_create(&labels)
                    .inc_by(outcome.duplicates);
                break;
            }
            Err(e) => {
                tracing::error!(queue, error = %e, messages = batch.messages.len(), "storing batch failed; holding it unacked and retrying");
                ctx.metrics.ingest_error(queue, "database");
                ctx.status
                    .set(queue, ConsumerState::DatabaseUnavailable(e.to_string()));
                ctx.metrics.set_connected(queue, false);
                // A connection lost during COMMIT leaves its outcome unknown (PostgreSQL):
                // the retry stores only what it finds no archived copy of.
                for m in &mut batch.messages {
                    m.maybe_stored = true;
                }
                if ctx.shutdown.is_cancelled() {
                    return Err(ConsumeError::AbandonedOnShutdown);
                }
                // On shutdown the batch is given up unacked; the broker keeps it.
                tokio::select! {
                    _ = sleep(backoff.next_delay()) => {}
                    _ = ctx.shutdown.cancelled() => return Err(ConsumeError::AbandonedOnShutdown),
                }
            }
        }
    }
    // Durable now: acknowledge everything up to the last delivery in one frame.
    channel
        .basic_ack(last_tag, BasicAckOptions { multiple: true })
        .await?;
    ctx.status.set(queue, ConsumerState::Consuming);
    ctx.metrics.set_connected(queue, true);
    *batch = Batch::default();
    Ok(())
}

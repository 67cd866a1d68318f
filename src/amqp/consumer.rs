//! One DLQ consumer: manual acks, deliveries gathered into batches, each batch appended in one
//! durable transaction and only then acked with a single `multiple` ack (its search entries
//! follow, written by the indexer: [`crate::runtime::indexer`]).
//!
//! Any broker error drops the connection and starts over after a backoff: unacked
//! deliveries come back flagged redelivered, and the archive recognises those it committed
//! before the ack was lost (see `Archive::store_batch`).
//! A batch is stored by a task of its own while the next one fills (as many batches in the
//! database at a time as the archive takes at once, acked in order). A database error holds
//! the batches in flight (unacked) and retries them; the consumer fills at most one batch
//! more meanwhile, and takes nothing further. Bodies count toward what the process holds
//! ([`crate::support::memory::hold_bodies`]) from their content header until their batch is stored:
//! two 128 MiB dead letters are never in memory at once, from one DLQ or several.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::management::Management;
use super::queue_info::DeliveryLimit;
use super::wire::{Channel, Connection, Delivery, Event, WireError};
use crate::archive::{Archive, IncomingMessage, IngestRules, Numbering, PreparedMessage};
use crate::message::dlq::Dlq;
use crate::message::headers::{AmqpValue, Table};
use crate::runtime::indexer::IndexWake;
use crate::runtime::metrics::{Metrics, QueueLabels};
use crate::runtime::status::{ConsumerState, IngestStatus};
use crate::support::backoff::Backoff;

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
    /// RabbitMQ's management API, to read each DLQ's delivery limit (`--management-url`).
    pub management: Option<Arc<Management>>,
    /// Told of every batch appended: its search entries are the indexer's to write.
    pub index: Arc<IndexWake>,
    pub shutdown: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
enum ConsumeError {
    #[error("broker: {0}")]
    Broker(#[from] WireError),
    #[error("queue {0:?} does not exist")]
    QueueMissing(String),
    #[error("the broker cancelled the consumer")]
    Cancelled,
    #[error("shutting down with a batch the database did not take; it stays unacked")]
    AbandonedOnShutdown,
    #[error("shutting down")]
    ShuttingDown,
    #[error("database: {0}")]
    Database(#[from] crate::archive::ArchiveError),
}

/// Runs the consumer of `dlq` until shutdown, restarting it should it ever panic (the
/// deliveries it held are unacked, so the broker keeps them).
pub async fn supervise(dlq: Dlq, ctx: ConsumerContext) {
    let queue = dlq.key();
    loop {
        match tokio::spawn(run(dlq.clone(), ctx.clone())).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(queue, error = %e, "consumer crashed; restarting it");
                ctx.metrics.ingest_error(&dlq, "crash");
                ctx.metrics.set_connected(&dlq, false);
                ctx.status.set(
                    &dlq,
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

/// Consumes `dlq` until shutdown, reconnecting with backoff after every failure. Its status
/// and metrics go by the [`Dlq`], its archived messages by [`Dlq::key`].
pub async fn run(dlq: Dlq, ctx: ConsumerContext) {
    let queue = dlq.key();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let mut kind = None;
    loop {
        ctx.status.set(&dlq, ConsumerState::Connecting);
        let result = consume(&dlq, &ctx, &mut backoff, &mut kind).await;
        ctx.metrics.set_connected(&dlq, false);
        ctx.status.set_node(&dlq, None);
        match result {
            Ok(()) => break,
            Err(ConsumeError::QueueMissing(_)) => {
                tracing::warn!(
                    queue,
                    "DLQ does not exist; Lazarus never creates it, retrying"
                );
                ctx.metrics.ingest_error(&dlq, "queue_missing");
                ctx.status.set(&dlq, ConsumerState::QueueMissing);
            }
            Err(ConsumeError::AbandonedOnShutdown) => {
                tracing::warn!(
                    queue,
                    "stopped with a batch the database did not take: RabbitMQ redelivers it \
                     later (on a quorum queue, this return counts toward its delivery limit)"
                );
                break;
            }
            Err(ConsumeError::ShuttingDown) => break,
            Err(ConsumeError::Database(e)) => {
                tracing::warn!(queue, error = %e, "database unavailable; retrying");
                ctx.metrics.ingest_error(&dlq, "database");
                ctx.status
                    .set(&dlq, ConsumerState::DatabaseUnavailable(e.to_string()));
            }
            Err(ConsumeError::Broker(e)) if e.vhost_refused() => {
                // NOT_ALLOWED on opening: the vhost does not exist, or the user may not use it.
                let refused = crate::message::dlq::refused(&dlq.vhost);
                let text = match dlq.vhost.is_empty() {
                    true => format!("{refused} ({e}); retrying"),
                    false => format!(
                        "{refused} ({e}); retrying. (A queue of the AMQP URL's vhost whose \
                         name holds / is written --queue /{})",
                        dlq.key()
                    ),
                };
                tracing::warn!(queue, "{text}");
                ctx.metrics.ingest_error(&dlq, "broker");
                ctx.status.set(&dlq, ConsumerState::Disconnected(text));
            }
            Err(e) => {
                tracing::warn!(queue, error = %e, "consumer lost; reconnecting");
                ctx.metrics.ingest_error(&dlq, "broker");
                ctx.status
                    .set(&dlq, ConsumerState::Disconnected(e.to_string()));
            }
        }
        tokio::select! {
            _ = sleep(backoff.next_delay()) => {}
            _ = ctx.shutdown.cancelled() => break,
        }
    }
    ctx.status.set(&dlq, ConsumerState::Stopped);
}

async fn consume(
    dlq: &Dlq,
    ctx: &ConsumerContext,
    backoff: &mut Backoff,
    kind: &mut Option<QueueKind>,
) -> Result<(), ConsumeError> {
    let queue = &dlq.key();
    // Deliveries the database cannot take would only go back to the queue, and on a quorum
    // queue every return counts toward its delivery limit: take none until it answers.
    wait_for_database(dlq, ctx).await?;
    let name = format!("lazarus consumer {queue}");
    let connection = Connection::open_in(&ctx.amqp_url, &dlq.vhost, &name).await?;
    let result = consume_on(&connection, dlq, ctx, backoff, kind).await;
    // Closing returns every unacked delivery to the queue at once.
    connection.close().await;
    result
}

/// Waits until the archive would take a write; `Err` only when shutting down meanwhile.
async fn wait_for_database(dlq: &Dlq, ctx: &ConsumerContext) -> Result<(), ConsumeError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match ctx.archive.writable().await {
            Ok(()) => return Ok(()),
            Err(e) => {
                ctx.status
                    .set(dlq, ConsumerState::DatabaseUnavailable(e.to_string()));
                tokio::select! {
                    _ = sleep(backoff.next_delay()) => {}
                    _ = ctx.shutdown.cancelled() => return Err(ConsumeError::ShuttingDown),
                }
            }
        }
    }
}

/// How a DLQ is consumed, as the broker told when it was first consumed: a stream (read from
/// an offset) or a queue of any other type (acked away). AMQP tells no more than that; the
/// management API says whether a queue is quorum, where that matters (its delivery limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueKind {
    Queue,
    Stream,
}

/// Consumes the queue. A stream keeps what was acked, so it is read from where the archive
/// left off (`x-stream-offset`) — everything it holds the first time. Other queues refuse that
/// argument (406, naming their type) and are consumed as they are; the kind is remembered.
async fn start_consuming(
    connection: &Connection,
    dlq: &Dlq,
    ctx: &ConsumerContext,
    kind: &mut Option<QueueKind>,
) -> Result<(Channel, Option<StreamPosition>), ConsumeError> {
    let queue = dlq.name.as_str();
    let mut channel = connection.channel().await?;
    match channel.queue_exists(queue).await {
        Err(e) if e.is_not_found() => return Err(ConsumeError::QueueMissing(dlq.key())),
        other => other?,
    };
    channel.qos(ctx.settings.prefetch).await?;
    if matches!(kind, None | Some(QueueKind::Stream)) {
        let next = ctx.archive.stream_offset(&dlq.key()).await?;
        let offset = match next {
            Some(n) => AmqpValue::LongLongInt(n as i64),
            None => AmqpValue::text("first"),
        };
        match channel
            .consume(queue, &Table::from([("x-stream-offset", offset)]))
            .await
        {
            Ok(()) => {
                *kind = Some(QueueKind::Stream);
                return Ok((channel, Some(StreamPosition { next })));
            }
            Err(e) if e.reply_code() == Some(406) && e.to_string().contains("x-stream-offset") => {
                *kind = Some(QueueKind::Queue);
                channel = connection.channel().await?;
                channel.qos(ctx.settings.prefetch).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    channel.consume(queue, &Table::new()).await?;
    Ok((channel, None))
}

/// How far a stream DLQ has been read.
struct StreamPosition {
    /// The offset the next delivery should have (`None`: reading from the stream's start).
    next: Option<u64>,
}

impl StreamPosition {
    /// The delivery's offset; notes a gap (the stream's retention removed messages before
    /// Lazarus could read them, for instance while it was stopped).
    fn read(&mut self, dlq: &Dlq, delivery: &Delivery, ctx: &ConsumerContext) -> Option<u64> {
        let offset = delivery
            .content
            .headers
            .as_ref()?
            .get("x-stream-offset")?
            .as_i64()? as u64;
        if let Some(next) = self.next.filter(|&next| offset > next) {
            let text = format!(
                "the stream's retention removed offsets {next} to {} before Lazarus read them",
                offset - 1
            );
            tracing::warn!(queue = %dlq, "{text}");
            ctx.status.warn(dlq, text);
        }
        self.next = Some(offset + 1);
        Some(offset)
    }
}

async fn consume_on(
    connection: &Connection,
    dlq: &Dlq,
    ctx: &ConsumerContext,
    backoff: &mut Backoff,
    kind: &mut Option<QueueKind>,
) -> Result<(), ConsumeError> {
    let (mut channel, mut stream) = start_consuming(connection, dlq, ctx, kind).await?;
    let queue = &dlq.key();
    let node = connection.node();
    tracing::info!(queue, broker = %connection.server().version, node, kind = ?kind, "consuming");
    ctx.status.set(dlq, ConsumerState::Consuming);
    ctx.status.set_node(dlq, Some(node));
    ctx.metrics.set_connected(dlq, true);
    backoff.reset();

    let watch = DeliveryLimitWatch::new(dlq, connection.server().version_pair());
    if let Some(management) = &ctx.management {
        tokio::spawn(check_delivery_limit(
            management.clone(),
            dlq.clone(),
            watch.limit.clone(),
            connection.server().major_version(),
            ctx.status.clone(),
            ctx.shutdown.clone(),
        ));
    }
    // A stream's batches are stored one at a time: its resume point is the highest offset
    // stored, so a later batch must never be durable before an earlier one.
    let at_once = match stream {
        Some(_) => 1,
        None => ctx.archive.batches_at_once().max(1),
    };
    let mut storing = InFlight::new(at_once);
    let result =
        consume_deliveries(&mut channel, dlq, ctx, &watch, &mut stream, &mut storing).await;
    // Whatever ended it, the batches being stored are written (or given up) before the
    // consumer reconnects: their redelivered copies must find them archived, not race them.
    for mut store in storing.batches {
        let _ = store.done().await;
    }
    result
}

/// The consuming loop: deliveries decoded into a batch while the batch before it is stored
/// (see [`Storing`]).
async fn consume_deliveries(
    channel: &mut Channel,
    dlq: &Dlq,
    ctx: &ConsumerContext,
    watch: &DeliveryLimitWatch,
    stream: &mut Option<StreamPosition>,
    storing: &mut InFlight,
) -> Result<(), ConsumeError> {
    let queue = &dlq.key();
    let mut batch = Batch::default();
    loop {
        let deadline = batch.deadline(ctx.settings.max_delay);
        tokio::select! {
            biased;
            _ = ctx.shutdown.cancelled() => {
                flush(channel, dlq, &mut batch, ctx, storing).await?;
                return Ok(());
            }
            stored = async { storing.batches.front_mut().expect("checked").done().await }, if !storing.batches.is_empty() => {
                let store = storing.batches.pop_front().expect("checked");
                store.acked(channel, stored, dlq, ctx).await?;
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                hand_over(channel, dlq, &mut batch, ctx, storing).await?;
            }
            event = channel.next_event() => match event {
                Event::Delivery(delivery) => {
                    watch.check(&delivery, ctx);
                    let offset = stream.as_mut().and_then(|s| s.read(dlq, &delivery, ctx));
                    batch.push(queue, &dlq.broker, &dlq.vhost, delivery, offset, &ctx.rules);
                    if batch.is_full(&ctx.settings) {
                        hand_over(channel, dlq, &mut batch, ctx, storing).await?;
                    }
                }
                // The channel or consumer is gone. Store what we hold anyway: if the broker
                // dropped it (a deleted queue) this is the only copy; if it redelivers it, the
                // archive recognises what it committed. The ack then fails, and we reconnect.
                Event::Closed(e) => {
                    let _ = flush(channel, dlq, &mut batch, ctx, storing).await;
                    return Err(e.into());
                }
                Event::ConsumerCancelled => {
                    let _ = flush(channel, dlq, &mut batch, ctx, storing).await;
                    return Err(ConsumeError::Cancelled);
                }
                Event::Ack { .. } | Event::Nack { .. } | Event::Return(_) => {}
            },
        }
    }
}

/// Watches the broker's delivery counters: a DLQ whose messages keep coming back is one
/// step from losing them if it is a quorum queue with a delivery limit (RabbitMQ 4's
/// default is 20, and a DLQ has no dead-letter exchange of its own to send them on to).
///
/// A dead letter from a quorum queue arrives with its source's counters (`x-delivery-count`
/// on its first delivery from the DLQ). RabbitMQ 4.3 goes on counting from there, and the
/// DLQ's own limit spends them: with a limit of 3, a message that used 3 deliveries in its
/// source is dropped by the DLQ at its first return (measured on 4.3.6). Before 4.3 the DLQ
/// counts afresh, so a dead letter's first count says nothing of the DLQ; there only
/// messages without a death history are judged by their count, and the management API's
/// limit (`--management-url`) speaks for the rest.
struct DeliveryLimitWatch {
    dlq: Dlq,
    broker: (u32, u32),
    /// The DLQ's delivery limit as the management API reads it: [`LIMIT_UNKNOWN`] until
    /// then, [`LIMIT_UNLIMITED`] for none.
    limit: Arc<std::sync::atomic::AtomicI64>,
    warned: std::sync::atomic::AtomicBool,
}

/// Deliveries of one message before the DLQ is reported at risk.
const DELIVERY_COUNT_WARNING: i64 = 3;
const LIMIT_UNKNOWN: i64 = -2;
const LIMIT_UNLIMITED: i64 = -1;
/// The broker version from which a quorum DLQ's limit counts a dead letter's deliveries in
/// its source queue too.
const COUNTS_CARRIED_FROM: (u32, u32) = (4, 3);

impl DeliveryLimitWatch {
    fn new(dlq: &Dlq, broker: (u32, u32)) -> Self {
        DeliveryLimitWatch {
            dlq: dlq.clone(),
            broker,
            limit: Arc::new(LIMIT_UNKNOWN.into()),
            warned: Default::default(),
        }
    }

    fn check(&self, delivery: &Delivery, ctx: &ConsumerContext) {
        let headers = delivery.content.headers.as_ref();
        let Some(count) = crate::message::death::delivery_attempts(headers) else {
            return;
        };
        let dead_letter = headers.is_some_and(|h| h.get("x-death").is_some());
        let limit = self.limit.load(std::sync::atomic::Ordering::Relaxed);
        let Some(text) = count_warning(count, dead_letter, self.broker, limit) else {
            return;
        };
        if self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        tracing::warn!(queue = %self.dlq, delivery_count = count, "{text}");
        ctx.status.warn(&self.dlq, text);
    }
}

/// What a delivery's count says of its DLQ (pure): `None` when it says nothing worth a
/// warning. `limit` is the management API's reading ([`LIMIT_UNKNOWN`], [`LIMIT_UNLIMITED`]
/// or the limit).
fn count_warning(count: i64, dead_letter: bool, broker: (u32, u32), limit: i64) -> Option<String> {
    let carried = broker >= COUNTS_CARRIED_FROM;
    if count < DELIVERY_COUNT_WARNING || limit == LIMIT_UNLIMITED || (dead_letter && !carried) {
        return None;
    }
    let spent = if dead_letter {
        format!(
            "dead letters reach this DLQ having spent {count} deliveries already (RabbitMQ \
             {}.{} carries a quorum source's delivery count across dead-lettering, and the \
             DLQ's delivery limit counts it)",
            broker.0, broker.1
        )
    } else {
        format!("messages of this DLQ have been delivered {count} times")
    };
    let limit = match limit {
        LIMIT_UNKNOWN if broker.0 >= 4 => "a quorum queue's limit is 20 unless a policy or \
             argument sets another (give Lazarus --management-url to read it)"
            .to_owned(),
        LIMIT_UNKNOWN => {
            "a quorum queue with a delivery-limit drops a message after that many deliveries"
                .to_owned()
        }
        n => format!("its delivery limit is {n}, read from the management API"),
    };
    Some(delivery_limit_warning(&format!("{spent}: {limit}")))
}

/// The text of a warning about a DLQ whose messages are dropped after `limit` deliveries.
fn delivery_limit_warning(what: &str) -> String {
    format!(
        "{what}, and a DLQ has nowhere to dead-letter them: every time Lazarus must give \
         messages back (a lost connection, a restart during a database outage) brings them \
         closer to being dropped; set the policy delivery-limit: -1 on it (the manual's \
         \"Quorum and stream DLQs\", docs/quorum-and-streams.md)"
    )
}

/// Asks the management API for the DLQ's delivery limit, again every few seconds while the
/// broker has not gathered its policy yet or the API does not answer (a loaded broker's
/// statistics and answers can lag by tens of seconds), and reports a finite one on `/readyz`,
/// the overview and the log. Ingest never waits for it.
async fn check_delivery_limit(
    management: Arc<Management>,
    dlq: Dlq,
    read: Arc<std::sync::atomic::AtomicI64>,
    broker_major: u32,
    status: IngestStatus,
    shutdown: CancellationToken,
) {
    /// Five minutes of asking, then the delivery counts are the only warning.
    const ATTEMPTS: u32 = 60;
    let queue = dlq.key();
    let mut failed_before = false;
    for _ in 0..ATTEMPTS {
        if status.warned(&dlq) {
            return; // Said already (on an earlier connection, or by its delivery counts).
        }
        match management
            .queue(dlq.vhost_name(management.vhost()), &dlq.name)
            .await
        {
            Ok(info) => match info.delivery_limit(broker_major) {
                DeliveryLimit::Unlimited => {
                    read.store(LIMIT_UNLIMITED, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
                DeliveryLimit::Finite(limit) => {
                    read.store(limit, std::sync::atomic::Ordering::Relaxed);
                    let text = delivery_limit_warning(&format!(
                        "this quorum DLQ drops a message delivered more than {limit} times \
                         (its delivery limit, says the management API)"
                    ));
                    tracing::warn!(queue, delivery_limit = limit, "{text}");
                    status.warn(&dlq, text);
                    return;
                }
                DeliveryLimit::NotYetKnown => {}
            },
            Err(e) if !failed_before => {
                failed_before = true;
                tracing::warn!(queue, error = %e, "could not read the DLQ's delivery limit; asking again");
            }
            Err(e) => tracing::debug!(queue, error = %e, "could not read the DLQ's delivery limit"),
        }
        tokio::select! {
            _ = sleep(Duration::from_secs(5)) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Deliveries waiting to be stored, with the tag that acks all of them.
#[derive(Default)]
struct Batch {
    messages: Vec<PreparedMessage>,
    last_tag: Option<u64>,
    bytes: usize,
    started: Option<Instant>,
    /// The bodies' share of what the process holds ([`crate::support::memory::hold_bodies`]), given
    /// back once they are stored: until then the connection reads no body that would take
    /// the process past it.
    held: Vec<OwnedSemaphorePermit>,
}

impl Batch {
    fn push(
        &mut self,
        queue: &str,
        broker: &str,
        vhost: &str,
        mut delivery: Box<Delivery>,
        stream_offset: Option<u64>,
        rules: &IngestRules,
    ) {
        self.started.get_or_insert_with(Instant::now);
        self.held.extend(delivery.take_hold());
        self.last_tag = Some(delivery.delivery_tag);
        self.bytes += delivery.body.len();
        let Delivery {
            redelivered,
            exchange,
            routing_key,
            content,
            problem,
            body,
            ..
        } = *delivery;
        self.messages.push(PreparedMessage::to_append(
            IncomingMessage {
                broker: broker.to_owned(),
                vhost: vhost.to_owned(),
                queue: queue.to_owned(),
                exchange: exchange.to_text().into_owned(),
                routing_key: routing_key.to_text().into_owned(),
                redelivered,
                properties: content.properties,
                headers: content.headers,
                body,
                received_at: OffsetDateTime::now_utc(),
                decode_problems: problem.into_iter().collect(),
                stream_offset,
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

/// A batch being stored by a task of its own while the next batch fills: the broker's
/// deliveries and their decoding go on during the commit (with `--prefetch` at least one
/// `--batch-size` more than the batches in flight hold, as by default, the broker has room to
/// send the next batch meanwhile). As many batches are stored at once as the archive takes
/// ([`crate::archive::Ingest::batches_at_once`]: one on SQLite, whose writes take turns
/// anyway), and each is acked — `multiple`, up to its last delivery — only once it and every
/// batch before it are durable, in delivery order.
struct Storing {
    last_tag: u64,
    /// Body bytes of the batch.
    bytes: usize,
    /// Whether its archive ids are taken, for the batch after it ([`Numbering`]).
    numbered: Option<watch::Receiver<bool>>,
    task: tokio::task::JoinHandle<Result<(), ConsumeError>>,
}

impl Storing {
    /// Starts storing the batch, whose last delivery is `last_tag`; `before` says when the
    /// batch before it has its ids.
    fn start(
        dlq: &Dlq,
        last_tag: u64,
        batch: &mut Batch,
        ctx: &ConsumerContext,
        before: Option<watch::Receiver<bool>>,
    ) -> Self {
        let bytes = batch.bytes;
        let Batch { messages, held, .. } = std::mem::take(batch);
        let (dlq, ctx) = (dlq.clone(), ctx.clone());
        let (numbering, numbered) = Numbering::after(before);
        let task = tokio::spawn(async move {
            let stored = store(&dlq, messages, &ctx, numbering).await;
            drop(held);
            stored
        });
        Storing {
            last_tag,
            bytes,
            numbered: Some(numbered),
            task,
        }
    }

    /// Waits for the store to end (a panic in it is the consumer's: see [`supervise`]).
    async fn done(&mut self) -> Result<(), ConsumeError> {
        match (&mut self.task).await {
            Ok(stored) => stored,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: only when the runtime itself shuts down.
            Err(_) => Err(ConsumeError::ShuttingDown),
        }
    }

    /// Acks the batch once it is stored.
    async fn acked(
        self,
        channel: &Channel,
        stored: Result<(), ConsumeError>,
        dlq: &Dlq,
        ctx: &ConsumerContext,
    ) -> Result<(), ConsumeError> {
        stored?;
        // Durable now: acknowledge everything up to its last delivery in one frame.
        channel.ack(self.last_tag, true).await?;
        ctx.status.set(dlq, ConsumerState::Consuming);
        ctx.metrics.set_connected(dlq, true);
        Ok(())
    }

    /// Waits for the store, then acks the batch.
    async fn settle(
        mut self,
        channel: &Channel,
        dlq: &Dlq,
        ctx: &ConsumerContext,
    ) -> Result<(), ConsumeError> {
        let stored = self.done().await;
        self.acked(channel, stored, dlq, ctx).await
    }
}

/// The batches being stored, oldest first, and how many may be.
struct InFlight {
    batches: VecDeque<Storing>,
    at_once: usize,
}

impl InFlight {
    fn new(at_once: usize) -> Self {
        InFlight {
            batches: VecDeque::with_capacity(at_once),
            at_once,
        }
    }
}

/// Starts storing the batch once there is room: the oldest batch in flight is stored and
/// acked first when as many as the archive takes at once are.
async fn hand_over(
    channel: &Channel,
    dlq: &Dlq,
    batch: &mut Batch,
    ctx: &ConsumerContext,
    storing: &mut InFlight,
) -> Result<(), ConsumeError> {
    while storing.batches.len() >= storing.at_once {
        let oldest = storing.batches.pop_front().expect("checked");
        oldest.settle(channel, dlq, ctx).await?;
    }
    let Some(last_tag) = batch.last_tag else {
        return Ok(());
    };
    let before = storing.batches.back_mut().and_then(|b| b.numbered.take());
    let held: usize = storing.batches.iter().map(|b| b.bytes).sum();
    let started = Storing::start(dlq, last_tag, batch, ctx, before);
    // Batches cut by their size (big bodies), or in flight together past it, are stored
    // before more is read: what is held stays within twice the `--batch-max-bytes` it bounds.
    let big = held + started.bytes >= ctx.settings.max_bytes;
    storing.batches.push_back(started);
    if big {
        settle_all(channel, dlq, ctx, storing).await?;
    }
    Ok(())
}

/// Waits for every batch in flight to be stored, acking each in turn.
async fn settle_all(
    channel: &Channel,
    dlq: &Dlq,
    ctx: &ConsumerContext,
    storing: &mut InFlight,
) -> Result<(), ConsumeError> {
    while let Some(oldest) = storing.batches.pop_front() {
        oldest.settle(channel, dlq, ctx).await?;
    }
    Ok(())
}

/// Stores and acks everything held: the batches being stored, then the one filling.
async fn flush(
    channel: &Channel,
    dlq: &Dlq,
    batch: &mut Batch,
    ctx: &ConsumerContext,
    storing: &mut InFlight,
) -> Result<(), ConsumeError> {
    hand_over(channel, dlq, batch, ctx, storing).await?;
    settle_all(channel, dlq, ctx, storing).await
}

/// Stores a batch, retrying while the database is unavailable. Its rows are numbered after
/// the batch before it and keep their numbers on a retry ([`Numbering`]), so archive ids
/// follow delivery order whichever of the batches stored at once commits first.
async fn store(
    dlq: &Dlq,
    mut messages: Vec<PreparedMessage>,
    ctx: &ConsumerContext,
    mut numbering: Numbering,
) -> Result<(), ConsumeError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let started = Instant::now();
        match ctx.archive.append_numbered(&messages, &mut numbering).await {
            Ok(outcome) => {
                ctx.index.appended();
                ctx.metrics
                    .batch_commit_seconds
                    .observe(started.elapsed().as_secs_f64());
                let labels = QueueLabels::of(dlq);
                ctx.metrics
                    .ingested
                    .get_or_create(&labels)
                    .inc_by(outcome.inserted);
                ctx.metrics
                    .duplicates
                    .get_or_create(&labels)
                    .inc_by(outcome.duplicates);
                return Ok(());
            }
            Err(e) => {
                tracing::error!(queue = %dlq, error = %e, messages = messages.len(), "storing batch failed; holding it unacked and retrying");
                ctx.metrics.ingest_error(dlq, "database");
                ctx.status
                    .set(dlq, ConsumerState::DatabaseUnavailable(e.to_string()));
                ctx.metrics.set_connected(dlq, false);
                // A connection lost during COMMIT leaves its outcome unknown (PostgreSQL):
                // the retry stores only what it finds no archived copy of.
                for m in &mut messages {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letters_carried_count_is_judged_only_where_the_limit_spends_it() {
        // Before 4.3 the first delivery of a dead letter shows its source's count, which the
        // DLQ's limit does not spend.
        assert_eq!(count_warning(20, true, (4, 0), LIMIT_UNKNOWN), None);
        assert_eq!(count_warning(20, true, (3, 13), LIMIT_UNKNOWN), None);
        // From 4.3 it does.
        let carried = count_warning(20, true, (4, 3), LIMIT_UNKNOWN).expect("a warning");
        assert!(carried.contains("having spent 20 deliveries"), "{carried}");
        assert!(carried.contains("RabbitMQ 4.3 carries"), "{carried}");
        assert!(carried.contains("--management-url"), "{carried}");
        // Messages the DLQ itself gave out again are judged on every version.
        let returned = count_warning(3, false, (4, 0), LIMIT_UNKNOWN).expect("a warning");
        assert!(returned.contains("delivered 3 times"), "{returned}");
        assert!(count_warning(3, false, (3, 13), LIMIT_UNKNOWN).is_some());
        assert_eq!(count_warning(2, false, (4, 3), LIMIT_UNKNOWN), None);
    }

    #[test]
    fn the_limit_read_from_the_broker_decides() {
        assert_eq!(count_warning(50, true, (4, 3), LIMIT_UNLIMITED), None);
        assert_eq!(count_warning(50, false, (4, 0), LIMIT_UNLIMITED), None);
        let read = count_warning(5, true, (4, 3), 7).expect("a warning");
        assert!(read.contains("its delivery limit is 7"), "{read}");
        assert!(
            !read.contains("20"),
            "the limit is read, not assumed: {read}"
        );
    }
}

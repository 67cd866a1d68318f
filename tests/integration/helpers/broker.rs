//! The broker side of a test: unique names, connections, topologies declared and cleaned
//! up, workers that reject or ack, publishing, and the replayed copies that arrive.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::task::JoinHandle;

use super::poll::wait_showing;

pub use crate::brokers::Broker;

/// The default vhost of the test's broker ([`Broker::current`]: RabbitMQ 3.10 unless the
/// test is declared with `on_both_brokers!`).
pub fn amqp_url() -> String {
    Broker::current().url()
}

/// A name no other test (or earlier run) uses: `prefix.<pid>.<n>.<nanos>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t.{prefix}.{}.{}.{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn connect(url: &str) -> Connection {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ must run at {url} for the integration tests: {e}"))
}

pub fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

pub fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

/// Declares queues and exchanges on a channel and deletes them all in [`Topology::cleanup`].
pub struct Topology {
    pub channel: Channel,
    pub connection: Connection,
    queues: Vec<String>,
    exchanges: Vec<String>,
}

impl Topology {
    pub async fn new() -> Self {
        Self::on(&amqp_url()).await
    }

    pub async fn on(url: &str) -> Self {
        let connection = connect(url).await;
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Topology {
            channel,
            connection,
            queues: vec![],
            exchanges: vec![],
        }
    }

    pub async fn exchange(&mut self, name: &str, kind: ExchangeKind) {
        self.channel
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        self.exchanges.push(name.to_owned());
    }

    pub async fn queue(&mut self, name: &str, arguments: FieldTable) {
        self.channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await
            .unwrap();
        self.queues.push(name.to_owned());
    }

    pub async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Publishes and waits for the broker's confirm.
    pub async fn publish(
        &self,
        exchange: &str,
        key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) {
        self.channel
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Ready messages in a queue (unacked ones are not counted).
    pub async fn depth(&self, queue: &str) -> u32 {
        passive_declare(&self.channel, queue)
            .await
            .unwrap()
            .message_count()
    }

    /// Whether the queue exists (on a throwaway channel: a failed passive declare closes it).
    pub async fn exists(&self, queue: &str) -> bool {
        let channel = self.connection.create_channel().await.unwrap();
        passive_declare(&channel, queue).await.is_ok()
    }

    pub async fn wait_for_depth(&self, queue: &str, depth: u32, timeout: Duration) {
        self.wait_for_depth_where(queue, &depth.to_string(), timeout, |now| now == depth)
            .await
    }

    pub async fn wait_for_depth_at_least(&self, queue: &str, depth: u32, timeout: Duration) {
        let expected = format!("at least {depth}");
        self.wait_for_depth_where(queue, &expected, timeout, |now| now >= depth)
            .await
    }

    async fn wait_for_depth_where(
        &self,
        queue: &str,
        depth: &str,
        timeout: Duration,
        done: impl Fn(u32) -> bool,
    ) {
        let what = format!("{queue} to hold {depth} messages");
        wait_showing(&what, timeout, async || {
            let now = self.depth(queue).await;
            if done(now) {
                Ok(())
            } else {
                Err(format!("{queue} holds {now}"))
            }
        })
        .await
    }

    pub async fn cleanup(self) {
        for q in &self.queues {
            let _ = self
                .channel
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for e in &self.exchanges {
            let _ = self
                .channel
                .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "test done".into()).await;
    }
}

async fn passive_declare(channel: &Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
}

/// A test worker: consumes `queue` and answers each delivery with `handle`.
pub async fn spawn_worker<F, Fut>(url: &str, queue: &str, handle: F) -> JoinHandle<()>
where
    F: Fn(Channel, lapin::message::Delivery) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let connection = connect(url).await;
    let channel = connection.create_channel().await.unwrap();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    tokio::spawn(async move {
        let _connection = connection;
        while let Some(Ok(delivery)) = consumer.next().await {
            handle(channel.clone(), delivery).await;
        }
    })
}

/// Runs `rabbitmqctl` against the test's broker and returns its output, failing the test
/// when it fails.
pub fn rabbitmqctl(args: &[&str]) -> String {
    Broker::current().ctl(args)
}

/// JSON body properties the seeds publish with.
pub fn json_props(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id(message_id.into())
}

/// The count of the x-death entry for `queue` in a delivery's headers (0 when none).
pub fn death_count(properties: &BasicProperties, queue: &str) -> i64 {
    let Some(headers) = properties.headers() else {
        return 0;
    };
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        return 0;
    };
    deaths
        .as_slice()
        .iter()
        .filter_map(|d| match d {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        })
        .find(|t| matches!(t.inner().get("queue"), Some(AMQPValue::LongString(q)) if q.as_bytes() == queue.as_bytes()))
        .and_then(|t| match t.inner().get("count") {
            Some(AMQPValue::LongLongInt(n)) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// Publishes `n` messages with pipelined confirms (message-ids `{prefix}-{i}`).
pub async fn publish_many(channel: &Channel, exchange: &str, key: &str, prefix: &str, n: usize) {
    let mut confirms = Vec::with_capacity(1000);
    for i in 0..n {
        let body = format!(r#"{{"n": {i}, "padding": "{}"}}"#, "x".repeat(200));
        confirms.push(
            channel
                .basic_publish(
                    exchange.into(),
                    key.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    json_props(&format!("{prefix}-{i}")),
                )
                .await
                .unwrap(),
        );
        if confirms.len() == 1000 {
            for c in confirms.drain(..) {
                c.await.unwrap();
            }
        }
    }
    for c in confirms {
        c.await.unwrap();
    }
}

/// Deliveries of `queue` (in the default vhost) that a consumer holds unacknowledged.
pub fn unacked(queue: &str) -> u64 {
    rabbitmqctl(&[
        "list_queues",
        "-q",
        "--no-table-headers",
        "name",
        "messages_unacknowledged",
    ])
    .lines()
    .filter_map(|l| l.split_once('\t'))
    .find(|(name, _)| *name == queue)
    .map(|(_, n)| n.trim().parse().unwrap())
    .unwrap_or_else(|| panic!("{queue} not listed by rabbitmqctl"))
}

/// Declares `work`, a queue where every message dies on arrival (TTL 0) into `dlq` through
/// the default exchange: each carries a real `x-death`, as production's dead letters do.
pub async fn dying_queue(t: &mut Topology, work: &str, dlq: &str) {
    t.queue(
        work,
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(0)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s(dlq)),
        ]),
    )
    .await;
}

/// A work queue that dead-letters through a fanout DLX into a DLQ: (work, dlq).
pub async fn work_queue_with_dlq(t: &mut Topology, p: &str) -> (String, String) {
    let (work, dlx, dlq) = (format!("{p}.work"), format!("{p}.dlx"), format!("{p}.dlq"));
    t.exchange(&dlx, ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    t.queue(&work, args(&[("x-dead-letter-exchange", s(&dlx))]))
        .await;
    (work, dlq)
}

/// A topic exchange `{p}.shop` routing `order.*` to a work queue (dead-lettering into a DLQ)
/// and to an audit queue that takes every order too: (shop, work, dlq, audit). A replay to
/// the original exchange and key would give the audit queue a second copy.
pub async fn shop_with_audit(t: &mut Topology, p: &str) -> (String, String, String, String) {
    let (shop, audit) = (format!("{p}.shop"), format!("{p}.audit"));
    t.exchange(&shop, ExchangeKind::Topic).await;
    let (work, dlq) = work_queue_with_dlq(t, p).await;
    t.queue(&audit, Default::default()).await;
    t.bind(&work, &shop, "order.*").await;
    t.bind(&audit, &shop, "order.*").await;
    (shop, work, dlq, audit)
}

/// A consumer that still fails: it rejects everything, until aborted.
pub async fn rejecting_worker(queue: &str) -> tokio::task::JoinHandle<()> {
    rejecting_worker_on(&amqp_url(), queue).await
}

/// [`rejecting_worker`] on the broker (and vhost) of `url`.
pub async fn rejecting_worker_on(url: &str, queue: &str) -> tokio::task::JoinHandle<()> {
    spawn_worker(url, queue, |_, d| async move {
        d.reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
    })
    .await
}

/// A consumer that has been fixed: it acks everything, until aborted.
pub async fn acking_worker(queue: &str) -> tokio::task::JoinHandle<()> {
    spawn_worker(&amqp_url(), queue, |_, d| async move {
        d.ack(lapin::options::BasicAckOptions::default())
            .await
            .unwrap();
    })
    .await
}

/// Publishes in flight at most (the `--replay-window` default). One interruption can
/// publish at most two windows twice: the step being published and the one before it,
/// whose confirms are recorded while the next step goes out.
pub const REPLAY_WINDOW: usize = 500;

/// A replayed copy as it arrived: the archive id it copies (`x-lazarus-replay-of`) and its
/// message-id.
pub struct ReplayedCopy {
    pub replay_of: String,
    pub message_id: Option<String>,
}

/// Every copy in `queue`, consuming it empty.
pub async fn drain_copies(url: &str, queue: &str) -> Vec<ReplayedCopy> {
    let t = Topology::on(url).await;
    let depth = t.depth(queue).await as usize;
    let mut consumer = t
        .channel
        .basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    let mut copies = Vec::with_capacity(depth);
    while copies.len() < depth {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("the queue drains")
            .unwrap()
            .unwrap();
        let headers = delivery.properties.headers().clone().unwrap();
        let replay_of = match headers.inner().get("x-lazarus-replay-of") {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("a copy without its link: {other:?}"),
        };
        copies.push(ReplayedCopy {
            replay_of,
            message_id: delivery
                .properties
                .message_id()
                .as_ref()
                .map(|m| m.to_string()),
        });
    }
    let _ = t.connection.close(200, "drained".into()).await;
    copies
}

/// Every `x-lazarus-replay-of` in `queue`, consuming it empty.
pub async fn drain_links(url: &str, queue: &str) -> Vec<String> {
    drain_copies(url, queue)
        .await
        .into_iter()
        .map(|c| c.replay_of)
        .collect()
}

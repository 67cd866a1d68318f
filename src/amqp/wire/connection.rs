//! A connection to RabbitMQ: the handshake, then a reader task (frames in, deliveries put
//! together, replies and events handed to their channel) and a writer task (frames out,
//! heartbeats while idle). Channels are used one task each: requests wait for their reply,
//! everything else arrives as an [`Event`].

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use lapin::tcp::AMQPUriTcpExt;
use lapin::uri::{AMQPUri, SASLMechanism};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::method::{
    self, put_frame, CloseReason, Incoming, Method, FRAME_BODY, FRAME_END, FRAME_HEADER,
    FRAME_HEARTBEAT, FRAME_METHOD,
};
use super::nodes::{self, Placement};
use crate::message::broker_nodes::BrokerNodes;
use crate::message::codec::{decode_content_header, ContentHeader, EncodeError, MAX_INBOUND_FRAME};
use crate::message::headers::{AmqpValue, Bytes, Table};

/// What can go wrong talking to the broker.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WireError {
    /// The connection's socket failed (or did not answer in time); the source is kept.
    #[error("{0}")]
    Io(#[source] Arc<io::Error>),
    #[error("the broker closed the connection: {0}")]
    ConnectionClosed(CloseReason),
    #[error("the broker closed the channel: {0}")]
    ChannelClosed(CloseReason),
    #[error("no heartbeat from the broker for {0:?}")]
    MissedHeartbeats(Duration),
    #[error("AMQP protocol error: {0}")]
    Protocol(String),
    #[error("the connection was closed")]
    Closed,
    /// None of a broker's several nodes could be connected to: what each said.
    #[error("no node of the broker answered ({0})")]
    Unreachable(String),
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(Arc::new(e))
    }
}

impl WireError {
    /// Whether the broker answered NOT_FOUND (a passive declare of a queue or exchange that
    /// does not exist).
    pub fn is_not_found(&self) -> bool {
        self.reply_code() == Some(404)
    }

    /// The broker's reply code, when it closed a channel or the connection.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            WireError::ConnectionClosed(r) | WireError::ChannelClosed(r) => Some(r.code),
            _ => None,
        }
    }

    /// The broker refused the vhost on opening (530 NOT_ALLOWED: it does not exist, or the
    /// user may not use it): the broker is there, and waiting does not mend it.
    pub fn vhost_refused(&self) -> bool {
        matches!(self, WireError::ConnectionClosed(r) if r.code == 530)
    }

    /// The broker refused the connection on opening (530 NOT_ALLOWED, 403 ACCESS_REFUSED):
    /// the nodes of a cluster share their vhosts and users, so another would say the same.
    fn refused_by_every_node(&self) -> bool {
        matches!(self, WireError::ConnectionClosed(r) if r.code == 530 || r.code == 403)
    }

    /// Whether this end of a connection says its node is gone (its socket, its heartbeats,
    /// or the node closed it), not that Lazarus closed it or broke the protocol itself.
    fn node_lost(&self) -> bool {
        matches!(
            self,
            WireError::Io(_) | WireError::MissedHeartbeats(_) | WireError::ConnectionClosed(_)
        )
    }
}

/// Something that happened on a channel without being asked for.
#[derive(Debug)]
pub enum Event {
    Delivery(Box<Delivery>),
    /// Publisher confirms: every publish up to `tag` (or just `tag`) is settled.
    Ack {
        tag: u64,
        multiple: bool,
    },
    Nack {
        tag: u64,
        multiple: bool,
    },
    /// A `mandatory` publish no queue took; its ack follows.
    Return(Returned),
    /// The broker ended the consumer (queue deleted, ...).
    ConsumerCancelled,
    /// The channel or the connection is gone; nothing more arrives.
    Closed(WireError),
}

/// A message delivered to a consumer.
#[derive(Debug)]
pub struct Delivery {
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: Bytes,
    pub routing_key: Bytes,
    pub content: ContentHeader,
    /// Why part of the content header could not be decoded (its bytes are kept).
    pub problem: Option<String>,
    pub body: Vec<u8>,
    /// This body's share of what the process holds ([`crate::support::memory::hold_bodies`]), given
    /// back when the delivery is dropped, or by whoever takes it ([`Delivery::take_hold`]).
    held: Option<OwnedSemaphorePermit>,
}

impl Delivery {
    /// Takes this body's share of what the process holds, to give it back later than the
    /// delivery is dropped: once the body is stored.
    pub fn take_hold(&mut self) -> Option<OwnedSemaphorePermit> {
        self.held.take()
    }
}

/// A publish the broker could not route, as it came back.
#[derive(Debug)]
pub struct Returned {
    pub reply_code: u16,
    pub reply_text: String,
    pub headers: Option<Table>,
}

/// Who the broker is, from its connection.start.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub product: String,
    pub version: String,
}

impl ServerInfo {
    /// The broker's major version (0 when it did not say).
    pub fn major_version(&self) -> u32 {
        self.version
            .split('.')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The broker's (major, minor) version ((0, 0) when it did not say).
    pub fn version_pair(&self) -> (u32, u32) {
        let mut parts = self.version.split('.').map(|v| v.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }
}

/// Frame size asked for when the broker sets no limit.
const DEFAULT_FRAME_MAX: u32 = 128 * 1024;
/// Heartbeat asked for when the URL says nothing: a dead broker is noticed within a minute.
const DEFAULT_HEARTBEAT_SECS: u16 = 30;

struct ChannelSink {
    replies: mpsc::UnboundedSender<Result<Incoming, WireError>>,
    events: mpsc::UnboundedSender<Event>,
}

/// Bytes for the socket, with the share of [`Shared::queued_bodies`] they hold until written.
type Outgoing = (Vec<u8>, Option<OwnedSemaphorePermit>);

/// Body frames of publishes queued for the socket at most, per connection: a body is sent
/// as it is read, and a slow socket (or a broker that blocks publishing) holds the publisher
/// back once this much waits, not its whole body.
const QUEUED_BODY_BYTES: usize = 4 * 1024 * 1024;

/// What the reader and writer tasks share with the handles.
struct Shared {
    out: mpsc::Sender<Outgoing>,
    queued_bodies: Arc<Semaphore>,
    channels: Mutex<HashMap<u16, ChannelSink>>,
    blocked: watch::Sender<Option<String>>,
    failure: watch::Sender<Option<WireError>>,
    /// The node the connection is open to.
    node: Placement,
}

impl Shared {
    /// Ends everything: each channel hears why, and so does whoever waits on the connection.
    /// A node lost is left for the next in the broker's rotation.
    fn fail(&self, error: WireError) {
        let sinks: Vec<ChannelSink> = self
            .channels
            .lock()
            .unwrap()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for sink in sinks {
            let _ = sink.replies.send(Err(error.clone()));
            let _ = sink.events.send(Event::Closed(error.clone()));
        }
        self.failure.send_if_modified(|f| {
            if f.is_none() {
                if error.node_lost() {
                    self.node.failed();
                }
                *f = Some(error);
                true
            } else {
                false
            }
        });
    }
}

struct Inner {
    shared: Arc<Shared>,
    frame_max: u32,
    channel_max: u16,
    next_channel: Mutex<u16>,
    server: ServerInfo,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    /// Dropping the last handle closes the socket: unacked deliveries go back to the queue.
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// An open connection; cheap to clone. It closes when the last clone and channel is dropped.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl Connection {
    /// Connects to `amqp_url` (`amqp://` or `amqps://`), shown as `name` in the management UI.
    pub async fn open(amqp_url: &str, name: &str) -> Result<Self, WireError> {
        Self::open_in(amqp_url, "", name).await
    }

    /// Opens a connection to `vhost` of the URL's broker (empty: the URL's own vhost). A
    /// broker given as several addresses (`amqp://u:p@n1,n2,n3/vhost`) is tried a node at a
    /// time in its rotation ([`nodes`]): from the one after the node that failed last.
    pub async fn open_in(amqp_url: &str, vhost: &str, name: &str) -> Result<Self, WireError> {
        let invalid = |e: String| WireError::Protocol(format!("invalid AMQP URL: {e}"));
        let broker = BrokerNodes::parse(amqp_url).map_err(invalid)?;
        let mut uris: Vec<AMQPUri> = Vec::with_capacity(broker.nodes().len());
        for node in broker.nodes() {
            let mut uri: AMQPUri = node.url().parse().map_err(invalid)?;
            if !vhost.is_empty() {
                uri.vhost = vhost.to_owned();
            }
            uris.push(uri);
        }
        let rotation = nodes::rotation(&broker);
        let order = rotation.lock().expect("rotation lock poisoned").order();
        let several = order.len() > 1;
        let mut said = Vec::new();
        for index in order {
            let address = broker.nodes()[index].address();
            match open_node(&uris[index], name).await {
                Ok(tuned) => {
                    let node = Placement::connected(rotation.clone(), index, address);
                    if !said.is_empty() {
                        tracing::info!(
                            node = address,
                            connection = name,
                            "connected to another RabbitMQ node"
                        );
                    }
                    return Ok(Self::start(tuned, node));
                }
                Err(e) if !several || e.refused_by_every_node() => return Err(e),
                Err(e) => {
                    rotation
                        .lock()
                        .expect("rotation lock poisoned")
                        .failed(index);
                    tracing::warn!(node = address, connection = name, error = %e, "RabbitMQ node did not answer; trying the next");
                    said.push(format!("{address}: {e}"));
                }
            }
        }
        Err(WireError::Unreachable(said.join("; ")))
    }

    /// The connection's reader and writer tasks, on a stream that finished its handshake.
    fn start<R, W>((read, write, tuned): (R, W, Tuned), node: Placement) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, out_rx) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            out,
            queued_bodies: Arc::new(Semaphore::new(QUEUED_BODY_BYTES)),
            channels: Mutex::new(HashMap::new()),
            blocked: watch::channel(None).0,
            failure: watch::channel(None).0,
            node,
        });
        let heartbeat = Duration::from_secs(tuned.heartbeat.into());
        let reader = tokio::spawn(read_loop(read, shared.clone(), heartbeat));
        let writer = tokio::spawn(write_loop(write, out_rx, shared.clone(), heartbeat));
        Connection {
            inner: Arc::new(Inner {
                shared,
                frame_max: tuned.frame_max,
                channel_max: tuned.channel_max,
                next_channel: Mutex::new(0),
                server: tuned.server,
                tasks: vec![reader, writer],
            }),
        }
    }

    /// The node it is open to, as `host:port` (no user or password).
    pub fn node(&self) -> &str {
        self.inner.shared.node.address()
    }

    pub fn server(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// Whether the broker blocks publishing on this connection (a resource alarm), and why.
    pub fn blocked(&self) -> watch::Receiver<Option<String>> {
        self.inner.shared.blocked.subscribe()
    }

    /// Resolves with the error once the connection has failed or closed.
    pub async fn failed(&self) -> WireError {
        let mut rx = self.inner.shared.failure.subscribe();
        loop {
            if let Some(e) = rx.borrow_and_update().clone() {
                return e;
            }
            if rx.changed().await.is_err() {
                return WireError::Closed;
            }
        }
    }

    /// Opens a new channel.
    pub async fn channel(&self) -> Result<Channel, WireError> {
        if let Some(e) = self.inner.shared.failure.borrow().clone() {
            return Err(e);
        }
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let id = {
            let mut channels = self.inner.shared.channels.lock().unwrap();
            let mut next = self.inner.next_channel.lock().unwrap();
            let max = self.inner.channel_max.max(1);
            let mut id = None;
            for _ in 0..max {
                *next = if *next >= max { 1 } else { *next + 1 };
                if !channels.contains_key(&*next) {
                    id = Some(*next);
                    break;
                }
            }
            let id = id.ok_or_else(|| WireError::Protocol("no free channel".into()))?;
            channels.insert(
                id,
                ChannelSink {
                    replies: replies_tx,
                    events: events_tx,
                },
            );
            id
        };
        let mut channel = Channel {
            id,
            connection: self.clone(),
            replies,
            events,
            published: 0,
        };
        channel
            .call(Method::new(20, 10).short_string("", b"")?)
            .await?;
        Ok(channel)
    }

    /// Closes the connection politely, waiting a little for the broker to agree.
    pub async fn close(&self) {
        let m = Method::new(10, 50)
            .u16(200)
            .short_string("", b"lazarus closing")
            .map(|m| m.u16(0).u16(0));
        if let Ok(m) = m {
            if self.send_method(0, &m).await.is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(2), self.failed()).await;
            }
        }
        self.inner.shared.fail(WireError::Closed);
    }

    async fn send(&self, bytes: Vec<u8>) -> Result<(), WireError> {
        self.send_held(bytes, None).await
    }

    /// Sends body frames once fewer than [`QUEUED_BODY_BYTES`] wait for the socket.
    async fn send_body(&self, bytes: Vec<u8>) -> Result<(), WireError> {
        let share = bytes.len().min(QUEUED_BODY_BYTES) as u32;
        let queued = self.inner.shared.queued_bodies.clone();
        let permit = queued
            .acquire_many_owned(share)
            .await
            .map_err(|_| WireError::Closed)?;
        self.send_held(bytes, Some(permit)).await
    }

    async fn send_held(
        &self,
        bytes: Vec<u8>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), WireError> {
        if let Some(e) = self.inner.shared.failure.borrow().clone() {
            return Err(e);
        }
        self.inner
            .shared
            .out
            .send((bytes, permit))
            .await
            .map_err(|_| WireError::Closed)
    }

    async fn send_method(&self, channel: u16, m: &Method) -> Result<(), WireError> {
        let mut out = Vec::with_capacity(m.payload().len() + 8);
        put_frame(&mut out, FRAME_METHOD, channel, m.payload());
        self.send(out).await
    }
}

/// One channel of a connection.
pub struct Channel {
    id: u16,
    connection: Connection,
    replies: mpsc::UnboundedReceiver<Result<Incoming, WireError>>,
    events: mpsc::UnboundedReceiver<Event>,
    /// Publishes so far: in confirm mode, the delivery tag of the last one.
    published: u64,
}

impl Channel {
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Sends a request and waits for its reply (events keep arriving meanwhile).
    async fn call(&mut self, m: Method) -> Result<Incoming, WireError> {
        self.connection.send_method(self.id, &m).await?;
        match self.replies.recv().await {
            Some(reply) => reply,
            None => Err(WireError::Closed),
        }
    }

    /// Checks that the queue exists (404 if not) and returns its ready messages.
    pub async fn queue_exists(&mut self, queue: &str) -> Result<u32, WireError> {
        let m = Method::new(50, 10)
            .u16(0)
            .short_string("queue name", queue.as_bytes())?
            .bits(&[true, false, false, false, false])
            .table(&Table::new())?;
        match self.call(m).await? {
            Incoming::QueueDeclareOk { messages, .. } => Ok(messages),
            other => Err(unexpected(other)),
        }
    }

    /// Checks that the exchange exists (404 if not, which closes this channel).
    pub async fn exchange_exists(&mut self, exchange: &str) -> Result<(), WireError> {
        let m = Method::new(40, 10)
            .u16(0)
            .short_string("exchange name", exchange.as_bytes())?
            .short_string("", b"direct")?
            .bits(&[true, false, false, false, false])
            .table(&Table::new())?;
        match self.call(m).await? {
            Incoming::ExchangeDeclareOk => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Unacked deliveries the broker may push ahead on this channel.
    pub async fn qos(&mut self, prefetch: u16) -> Result<(), WireError> {
        let m = Method::new(60, 10).u32(0).u16(prefetch).bits(&[false]);
        match self.call(m).await? {
            Incoming::BasicQosOk => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Starts consuming `queue` with manual acks; deliveries arrive as events.
    pub async fn consume(&mut self, queue: &str, arguments: &Table) -> Result<(), WireError> {
        let m = Method::new(60, 20)
            .u16(0)
            .short_string("queue name", queue.as_bytes())?
            .short_string("", b"")?
            .bits(&[false, false, false, false])
            .table(arguments)?;
        match self.call(m).await? {
            Incoming::BasicConsumeOk => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Acknowledges a delivery (and, with `multiple`, all before it). The broker does not
    /// answer; a later request on this channel is processed after it.
    pub async fn ack(&self, delivery_tag: u64, multiple: bool) -> Result<(), WireError> {
        let m = Method::new(60, 80).u64(delivery_tag).bits(&[multiple]);
        self.connection.send_method(self.id, &m).await
    }

    /// Puts the channel in confirm mode: every publish is acked or nacked by the broker.
    pub async fn confirm_select(&mut self) -> Result<(), WireError> {
        match self.call(Method::new(85, 10).bits(&[false])).await? {
            Incoming::ConfirmSelectOk => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Publishes one message whose body is in hand and returns its delivery tag for confirms
    /// (a small one in one write: method, content header and body frames).
    pub async fn publish(
        &mut self,
        exchange: &[u8],
        routing_key: &[u8],
        mandatory: bool,
        content: &ContentHeader,
        body: &[u8],
    ) -> Result<u64, WireError> {
        // The header announces the body given, whatever size `content` says.
        let sized;
        let content = match content.body_size == body.len() as u64 {
            true => content,
            false => {
                sized = ContentHeader {
                    body_size: body.len() as u64,
                    ..content.clone()
                };
                &sized
            }
        };
        let mut publishing = self.begin_publish(exchange, routing_key, mandatory, content)?;
        publishing.body(body).await?;
        publishing.finish().await
    }

    /// Starts publishing one message of `content.body_size` bytes, whose body is then given
    /// a part at a time ([`Publishing::body`]) and framed as it comes: a large body is never
    /// framed whole (a copy of it).
    pub fn begin_publish(
        &mut self,
        exchange: &[u8],
        routing_key: &[u8],
        mandatory: bool,
        content: &ContentHeader,
    ) -> Result<Publishing<'_>, WireError> {
        let m = Method::new(60, 40)
            .u16(0)
            .short_string("exchange name", exchange)?
            .short_string("routing key", routing_key)?
            .bits(&[mandatory, false]);
        let mut header = Vec::with_capacity(256);
        crate::message::codec::encode_content_header(
            &mut header,
            content.body_size,
            &content.properties,
            content.headers.as_ref(),
        )?;
        let frame = (self.connection.inner.frame_max as usize)
            .saturating_sub(method::FRAME_OVERHEAD)
            .max(4096);
        let small = content.body_size.min(PUBLISH_SEND_BYTES as u64) as usize;
        let mut pending = Vec::with_capacity(m.payload().len() + header.len() + small + 32);
        put_frame(&mut pending, FRAME_METHOD, self.id, m.payload());
        put_frame(&mut pending, FRAME_HEADER, self.id, &header);
        Ok(Publishing {
            left: content.body_size,
            channel: self,
            pending,
            frame,
            sent: false,
            done: false,
        })
    }

    /// The next event; [`Event::Closed`] once the channel is gone (and from then on).
    pub async fn next_event(&mut self) -> Event {
        self.events
            .recv()
            .await
            .unwrap_or(Event::Closed(WireError::Closed))
    }

    /// Closes the channel (the connection stays open).
    pub async fn close(mut self) {
        let m = Method::new(20, 40)
            .u16(200)
            .short_string("", b"done")
            .map(|m| m.u16(0).u16(0));
        if let Ok(m) = m {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.call(m)).await;
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.connection
            .inner
            .shared
            .channels
            .lock()
            .unwrap()
            .remove(&self.id);
    }
}

/// Frames of a publish gathered before they are sent: a body's go out this many bytes at a
/// time (a small message in one write).
const PUBLISH_SEND_BYTES: usize = 256 * 1024;

/// A publish whose body is being sent ([`Channel::begin_publish`]). Should it end before all
/// of its body was sent, the connection fails: the broker holds a message that can no
/// longer be finished, and every publish on the connection ends failed.
pub struct Publishing<'c> {
    channel: &'c mut Channel,
    /// Frames not sent yet.
    pending: Vec<u8>,
    /// Body bytes still to come.
    left: u64,
    /// The largest body frame's payload.
    frame: usize,
    /// Whether part of the message is on its way to the broker.
    sent: bool,
    done: bool,
}

impl Publishing<'_> {
    /// The next `part` of the body.
    pub async fn body(&mut self, part: &[u8]) -> Result<(), WireError> {
        if part.len() as u64 > self.left {
            return Err(WireError::Protocol(format!(
                "{} more body bytes than the content header announced",
                part.len() as u64 - self.left
            )));
        }
        for piece in part.chunks(self.frame) {
            put_frame(&mut self.pending, FRAME_BODY, self.channel.id, piece);
            self.left -= piece.len() as u64;
            if self.pending.len() >= PUBLISH_SEND_BYTES {
                let frames = std::mem::take(&mut self.pending);
                self.sent = true;
                self.channel.connection.send_body(frames).await?;
            }
        }
        Ok(())
    }

    /// Sends what is left once the whole body was given; its delivery tag for confirms.
    pub async fn finish(mut self) -> Result<u64, WireError> {
        if self.left > 0 {
            return Err(WireError::Protocol(format!(
                "a publish ended {} body bytes short of its content header",
                self.left
            )));
        }
        let frames = std::mem::take(&mut self.pending);
        if !frames.is_empty() {
            self.sent = true;
            self.channel.connection.send_body(frames).await?;
        }
        self.done = true;
        self.channel.published += 1;
        Ok(self.channel.published)
    }
}

impl Drop for Publishing<'_> {
    fn drop(&mut self) {
        if self.sent && !self.done {
            self.channel
                .connection
                .inner
                .shared
                .fail(WireError::Protocol(
                    "a publish was cut short in its body; the connection cannot go on".into(),
                ));
        }
    }
}

fn unexpected(m: Incoming) -> WireError {
    WireError::Protocol(format!("unexpected reply {m:?}"))
}

/// Connects to one node and goes through the handshake: its stream, split, and what the
/// handshake settled.
async fn open_node(
    uri: &AMQPUri,
    name: &str,
) -> Result<
    (
        impl AsyncRead + Unpin + Send + 'static,
        impl AsyncWrite + Unpin + Send + 'static,
        Tuned,
    ),
    WireError,
> {
    let runtime = lapin::runtime::default_runtime()
        .map_err(|e| WireError::Protocol(format!("no async runtime: {e}")))?;
    let connect = uri.connect_async(&runtime);
    let timeout = Duration::from_millis(uri.query.connection_timeout.unwrap_or(10_000));
    let stream = tokio::time::timeout(timeout, connect).await.map_err(|_| {
        WireError::Io(Arc::new(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer from {} within {timeout:?}", uri.authority.host),
        )))
    })??;
    let (read, mut write) = stream.split();
    let mut read = BufReader::with_capacity(256 * 1024, read);
    let tuned = tokio::time::timeout(timeout, handshake(&mut read, &mut write, uri, name))
        .await
        .map_err(|_| {
            WireError::Protocol(format!(
                "the broker did not finish the handshake within {timeout:?}"
            ))
        })??;
    Ok((read, write, tuned))
}

/// What the handshake settled.
struct Tuned {
    frame_max: u32,
    channel_max: u16,
    heartbeat: u16,
    server: ServerInfo,
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<(u8, u16, Vec<u8>), WireError> {
    let mut head = [0u8; 7];
    r.read_exact(&mut head).await?;
    let size = u32::from_be_bytes(head[3..7].try_into().unwrap()) as usize;
    if size > MAX_INBOUND_FRAME {
        return Err(WireError::Protocol(format!("a frame of {size} bytes")));
    }
    let mut payload = vec![0u8; size + 1];
    r.read_exact(&mut payload).await?;
    if payload.pop() != Some(FRAME_END) {
        return Err(WireError::Protocol("a frame without its end octet".into()));
    }
    Ok((head[0], u16::from_be_bytes([head[1], head[2]]), payload))
}

async fn write_method<W: AsyncWrite + Unpin>(w: &mut W, m: &Method) -> Result<(), WireError> {
    let mut out = Vec::new();
    put_frame(&mut out, FRAME_METHOD, 0, m.payload());
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

async fn read_connection_method<R: AsyncRead + Unpin>(r: &mut R) -> Result<Incoming, WireError> {
    loop {
        let (kind, _, payload) = read_frame(r).await?;
        if kind == FRAME_METHOD {
            let m = method::parse(&payload).map_err(|e| WireError::Protocol(e.to_string()))?;
            if let Incoming::ConnectionClose(reason) = m {
                return Err(WireError::ConnectionClosed(reason));
            }
            return Ok(m);
        }
    }
}

async fn handshake<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    uri: &AMQPUri,
    name: &str,
) -> Result<Tuned, WireError> {
    w.write_all(b"AMQP\x00\x00\x09\x01").await?;
    w.flush().await?;
    let Incoming::ConnectionStart {
        server_properties,
        mechanisms,
    } = read_connection_method(r).await?
    else {
        return Err(WireError::Protocol(
            "the broker did not start the connection".into(),
        ));
    };
    let text = |k: &str| {
        server_properties
            .get(k)
            .and_then(AmqpValue::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let server = ServerInfo {
        product: text("product"),
        version: text("version"),
    };
    let user = &uri.authority.userinfo;
    let (mechanism, response) = match uri.query.auth_mechanism.unwrap_or_default() {
        SASLMechanism::External => ("EXTERNAL", Vec::new()),
        _ => (
            "PLAIN",
            format!("\0{}\0{}", user.username, user.password).into_bytes(),
        ),
    };
    if !mechanisms.to_text().split(' ').any(|m| m == mechanism) {
        return Err(WireError::Protocol(format!(
            "the broker does not offer {mechanism} authentication (it offers {})",
            mechanisms.to_text()
        )));
    }
    let yes = AmqpValue::Boolean(true);
    let capabilities = Table::from([
        ("publisher_confirms", yes.clone()),
        ("basic.nack", yes.clone()),
        ("consumer_cancel_notify", yes.clone()),
        ("connection.blocked", yes.clone()),
        ("authentication_failure_close", yes.clone()),
        ("per_consumer_qos", yes),
    ]);
    let client = Table::from([
        ("product", AmqpValue::text("lazarus")),
        ("version", AmqpValue::text(env!("CARGO_PKG_VERSION"))),
        ("platform", AmqpValue::text("Rust")),
        ("connection_name", AmqpValue::text(name)),
        ("capabilities", AmqpValue::Table(capabilities)),
    ]);
    let start_ok = Method::new(10, 11)
        .table(&client)?
        .short_string("", mechanism.as_bytes())?
        .long_string(&response)?
        .short_string("", b"en_US")?;
    write_method(w, &start_ok).await?;
    let (channel_max, frame_max, heartbeat) = match read_connection_method(r).await? {
        Incoming::ConnectionTune {
            channel_max,
            frame_max,
            heartbeat,
        } => (channel_max, frame_max, heartbeat),
        other => return Err(unexpected(other)),
    };
    // Ours when we ask for less, the broker's otherwise; 0 from the broker means no limit.
    let pick =
        |ours: Option<u32>, theirs: u32, default: u32| match (ours.filter(|&o| o != 0), theirs) {
            (Some(o), 0) => o,
            (Some(o), t) => o.min(t),
            (None, 0) => default,
            (None, t) => t,
        };
    let frame_max = pick(uri.query.frame_max, frame_max, DEFAULT_FRAME_MAX);
    let channel_max = pick(
        uri.query.channel_max.map(u32::from),
        channel_max.into(),
        2047,
    ) as u16;
    let heartbeat = match uri.query.heartbeat {
        Some(h) => h,
        None if heartbeat == 0 => DEFAULT_HEARTBEAT_SECS,
        None => heartbeat.min(DEFAULT_HEARTBEAT_SECS),
    };
    write_method(
        w,
        &Method::new(10, 31)
            .u16(channel_max)
            .u32(frame_max)
            .u16(heartbeat),
    )
    .await?;
    let open = Method::new(10, 40)
        .short_string("vhost", uri.vhost.as_bytes())?
        .short_string("", b"")?
        .bits(&[false]);
    write_method(w, &open).await?;
    match read_connection_method(r).await? {
        Incoming::ConnectionOpenOk => Ok(Tuned {
            frame_max,
            channel_max,
            heartbeat,
            server,
        }),
        other => Err(unexpected(other)),
    }
}

/// A delivery or return whose header and body frames are still arriving.
struct Partial {
    method: Incoming,
    content: Option<(ContentHeader, Option<String>)>,
    /// A delivery's body; a return's is not kept (only its headers are read).
    body: Vec<u8>,
    /// Body bytes arrived.
    received: u64,
    held: Option<OwnedSemaphorePermit>,
}

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, shared: Arc<Shared>, heartbeat: Duration) {
    let error = read_frames(&mut r, &shared, heartbeat).await;
    shared.fail(error);
}

async fn read_frames<R: AsyncRead + Unpin>(
    r: &mut R,
    shared: &Shared,
    heartbeat: Duration,
) -> WireError {
    let mut partial: HashMap<u16, Partial> = HashMap::new();
    // The broker sends a heartbeat (or anything) at least every interval.
    let silence = heartbeat * 2 + Duration::from_secs(1);
    loop {
        let next = if heartbeat.is_zero() {
            read_frame(r).await
        } else {
            match tokio::time::timeout(silence, read_frame(r)).await {
                Ok(next) => next,
                Err(_) => return WireError::MissedHeartbeats(silence),
            }
        };
        let (kind, channel, payload) = match next {
            Ok(frame) => frame,
            Err(e) => return e,
        };
        match kind {
            FRAME_METHOD => {
                let m = match method::parse(&payload) {
                    Ok(m) => m,
                    Err(e) => return WireError::Protocol(format!("method frame: {e}")),
                };
                if channel == 0 {
                    match m {
                        Incoming::ConnectionClose(reason) => {
                            let ok = Method::new(10, 51);
                            let mut out = Vec::new();
                            put_frame(&mut out, FRAME_METHOD, 0, ok.payload());
                            let _ = shared.out.try_send((out, None));
                            return WireError::ConnectionClosed(reason);
                        }
                        Incoming::ConnectionCloseOk => return WireError::Closed,
                        Incoming::ConnectionBlocked { reason } => {
                            shared.node.blocked(true);
                            shared.blocked.send_replace(Some(reason));
                        }
                        Incoming::ConnectionUnblocked => {
                            shared.node.blocked(false);
                            shared.blocked.send_replace(None);
                        }
                        _ => {}
                    }
                    continue;
                }
                if m.has_content() {
                    partial.insert(
                        channel,
                        Partial {
                            method: m,
                            content: None,
                            body: Vec::new(),
                            received: 0,
                            held: None,
                        },
                    );
                    continue;
                }
                dispatch(shared, channel, m);
            }
            FRAME_HEADER => {
                let Some(p) = partial.get_mut(&channel) else {
                    return WireError::Protocol("a content header without its method".into());
                };
                let (content, problem) = match decode_content_header(&payload) {
                    Ok(decoded) => decoded,
                    Err(e) => return WireError::Protocol(format!("content header: {e}")),
                };
                if matches!(p.method, Incoming::BasicDeliver { .. }) {
                    let size = content.body_size as usize;
                    // Wait for room before reading the body: the broker is held back
                    // meanwhile. Then it arrives into a buffer of its size, not one that
                    // grows (and copies) as frames come.
                    p.held = Some(crate::support::memory::hold_bodies(size).await);
                    p.body.reserve_exact(size);
                }
                p.content = Some((content, problem));
            }
            FRAME_BODY => {
                let Some(p) = partial.get_mut(&channel) else {
                    return WireError::Protocol("a body frame without its method".into());
                };
                p.received += payload.len() as u64;
                if p.held.is_some() {
                    p.body.extend_from_slice(&payload);
                }
            }
            FRAME_HEARTBEAT => {}
            other => return WireError::Protocol(format!("a frame of unknown type {other}")),
        }
        // A content is complete once its body has all the bytes its header announced.
        let complete = partial.get(&channel).is_some_and(|p| {
            p.content
                .as_ref()
                .is_some_and(|(c, _)| p.received >= c.body_size)
        });
        if complete {
            let p = partial.remove(&channel).expect("checked above");
            deliver(shared, channel, p);
        }
    }
}

fn dispatch(shared: &Shared, channel: u16, m: Incoming) {
    let channels = shared.channels.lock().unwrap();
    let Some(sink) = channels.get(&channel) else {
        return;
    };
    let event = match m {
        Incoming::ChannelClose(reason) => {
            drop(channels);
            let mut out = Vec::new();
            put_frame(
                &mut out,
                FRAME_METHOD,
                channel,
                Method::new(20, 41).payload(),
            );
            let _ = shared.out.try_send((out, None));
            if let Some(sink) = shared.channels.lock().unwrap().remove(&channel) {
                let e = WireError::ChannelClosed(reason);
                let _ = sink.replies.send(Err(e.clone()));
                let _ = sink.events.send(Event::Closed(e));
            }
            return;
        }
        m if m.is_reply() => {
            let _ = sink.replies.send(Ok(m));
            return;
        }
        Incoming::BasicAck {
            delivery_tag,
            multiple,
        } => Event::Ack {
            tag: delivery_tag,
            multiple,
        },
        Incoming::BasicNack {
            delivery_tag,
            multiple,
        } => Event::Nack {
            tag: delivery_tag,
            multiple,
        },
        Incoming::BasicCancel => Event::ConsumerCancelled,
        _ => return,
    };
    let _ = sink.events.send(event);
}

fn deliver(shared: &Shared, channel: u16, p: Partial) {
    let (content, problem) = p.content.expect("complete contents have a header");
    let event = match p.method {
        Incoming::BasicDeliver {
            delivery_tag,
            redelivered,
            exchange,
            routing_key,
        } => Event::Delivery(Box::new(Delivery {
            delivery_tag,
            redelivered,
            exchange,
            routing_key,
            content,
            problem,
            body: p.body,
            held: p.held,
        })),
        Incoming::BasicReturn {
            reply_code,
            reply_text,
            ..
        } => Event::Return(Returned {
            reply_code,
            reply_text,
            headers: content.headers,
        }),
        _ => return,
    };
    if let Some(sink) = shared.channels.lock().unwrap().get(&channel) {
        let _ = sink.events.send(event);
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
    heartbeat: Duration,
) {
    let mut beat = Vec::new();
    put_frame(&mut beat, FRAME_HEARTBEAT, 0, &[]);
    let error = loop {
        let next = if heartbeat.is_zero() {
            Ok(rx.recv().await)
        } else {
            tokio::time::timeout(heartbeat / 2, rx.recv()).await
        };
        let written = match next {
            Ok(Some((bytes, _queued))) => {
                async {
                    w.write_all(&bytes).await?;
                    // Whatever else is ready goes out before the flush: one syscall, not many.
                    while let Ok((more, _queued)) = rx.try_recv() {
                        w.write_all(&more).await?;
                    }
                    w.flush().await
                }
                .await
            }
            Ok(None) => break WireError::Closed,
            Err(_) => {
                async {
                    w.write_all(&beat).await?;
                    w.flush().await
                }
                .await
            }
        };
        if let Err(e) = written {
            break e.into();
        }
    };
    let _ = w.close().await;
    shared.fail(error);
}

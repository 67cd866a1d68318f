//! Replay publishing: a dedicated confirm channel, `mandatory` publishes and a window of
//! outstanding confirms. Each publish ends as published, unroutable (returned), nacked or
//! failed — only a confirmed, unreturned publish counts as published.

use std::collections::VecDeque;

use tokio::sync::watch;

use super::wire::{Channel, Connection, ContentHeader, Event, WireError};
use crate::message::conventions::Convention;
use crate::message::death::{is_death_header, ReplayTarget};
use crate::message::headers::{AmqpValue, MessageProperties, Table};

pub use crate::message::headers::{REPLAY_JOB_HEADER, REPLAY_OF_HEADER};

/// How one replayed publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Confirmed by the broker and routed to at least one queue.
    Published,
    /// Returned by the broker: no queue is bound for this exchange and routing key.
    Unroutable { reply: String },
    /// The broker refused to take responsibility for it (a nack).
    Nacked,
    /// The channel or connection failed before a confirm came.
    Failed(String),
}

/// One archived message to publish again.
#[derive(Debug, Clone)]
pub struct ReplayMessage<'a> {
    pub archive_id: i64,
    pub properties: &'a MessageProperties,
    pub headers: Option<&'a Table>,
    pub body: ReplayBody<'a>,
    pub target: &'a ReplayTarget,
    pub job: Option<&'a str>,
    /// The framework convention it follows: its failure headers are stripped.
    pub convention: Option<Convention>,
}

/// A replayed copy's body.
#[derive(Clone, Copy)]
pub enum ReplayBody<'a> {
    /// In hand.
    Bytes(&'a [u8]),
    /// `size` bytes read from `source` a piece at a time as they are published: a body too
    /// large to hold (RabbitMQ takes up to 128 MiB) costs a piece, not its size.
    Read {
        size: u64,
        source: &'a dyn BodySource,
    },
}

impl ReplayBody<'_> {
    pub fn size(&self) -> u64 {
        match self {
            ReplayBody::Bytes(bytes) => bytes.len() as u64,
            ReplayBody::Read { size, .. } => *size,
        }
    }
}

impl std::fmt::Debug for ReplayBody<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayBody::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            ReplayBody::Read { size, .. } => write!(f, "Read({size} bytes)"),
        }
    }
}

/// Where a body is read from as it is published ([`ReplayBody::Read`]): the archive.
#[async_trait::async_trait]
pub trait BodySource: Send + Sync {
    /// `len` bytes of archived message `archive_id`'s body from byte `offset` (fewer only at
    /// its end), or why not.
    async fn read(&self, archive_id: i64, offset: u64, len: usize) -> Result<Vec<u8>, String>;
}

/// How much of a [`ReplayBody::Read`] body is read at a time.
const PIECE_BYTES: u64 = 1024 * 1024;

/// The headers a replayed copy carries: the archived ones with their types, minus the death
/// headers (so the consumer's retry counting starts fresh, and brokers that read a
/// client-supplied `x-death` do not keep counting) and the failure headers of the framework
/// `convention` it follows (as the framework's own retry strips them), plus the links to the
/// archive. A copy
/// sent to its original target gets back the `CC` keys the broker dropped when it
/// dead-lettered with `x-dead-letter-routing-key`, so it reaches every queue it first did.
pub fn replay_headers(
    headers: Option<&Table>,
    target: &ReplayTarget,
    archive_id: i64,
    job: Option<&str>,
    convention: Option<Convention>,
) -> Table {
    let failure_header = |name: &crate::message::headers::Bytes| {
        convention.is_some_and(|c| name.as_str().is_some_and(|n| c.is_failure_header(n)))
    };
    let mut out: Table = headers
        .into_iter()
        .flatten()
        .filter(|(name, _)| !is_death_header(name) && !failure_header(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(cc) = headers.and_then(|h| crate::message::death::dropped_cc_keys(h, target)) {
        out.insert(
            "CC",
            AmqpValue::Array(cc.iter().map(|k| AmqpValue::text(k)).collect()),
        );
    }
    out.insert(REPLAY_OF_HEADER, AmqpValue::text(&archive_id.to_string()));
    if let Some(job) = job {
        out.insert(REPLAY_JOB_HEADER, AmqpValue::text(job));
    }
    out
}

/// A confirm channel for replays.
pub struct Publisher {
    connection: Connection,
    channel: Channel,
}

/// A publish awaiting its confirm.
struct InFlight {
    tag: u64,
    archive_id: i64,
    /// The broker returned it (no queue took it); its confirm is still to come.
    returned: Option<String>,
    outcome: Option<PublishOutcome>,
}

impl Publisher {
    pub async fn open(connection: Connection) -> Result<Self, WireError> {
        let mut channel = connection.channel().await?;
        channel.confirm_select().await?;
        Ok(Publisher {
            connection,
            channel,
        })
    }

    /// The broker node it publishes to, as `host:port`.
    pub fn node(&self) -> &str {
        self.connection.node()
    }

    /// `Some(reason)` while the broker blocks publishing on this connection (a memory or
    /// disk alarm): publishes wait in the socket until it clears.
    pub fn blocked(&self) -> watch::Receiver<Option<String>> {
        self.connection.blocked()
    }

    /// Whether the exchange exists (the default exchange always does). Checked on a channel
    /// of its own: a failed passive declare closes the channel it ran on.
    pub async fn exchange_exists(&self, exchange: &str) -> Result<bool, WireError> {
        if exchange.is_empty() {
            return Ok(true);
        }
        let mut probe = self.connection.channel().await?;
        match probe.exchange_exists(exchange).await {
            Ok(()) => {
                probe.close().await;
                Ok(true)
            }
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Publishes `m` (its body framed as it is read: never whole a second time) and returns
    /// its delivery tag, or why it could not be sent. A body that cannot be read to its end
    /// fails the connection: the broker holds a message that cannot be finished.
    async fn send(&mut self, m: &ReplayMessage<'_>) -> Result<u64, String> {
        let content = ContentHeader {
            body_size: m.body.size(),
            properties: m.properties.clone(),
            headers: Some(replay_headers(
                m.headers,
                m.target,
                m.archive_id,
                m.job,
                m.convention,
            )),
        };
        let mut publishing = self
            .channel
            .begin_publish(
                m.target.exchange.as_bytes(),
                m.target.routing_key.as_bytes(),
                true,
                &content,
            )
            .map_err(|e| e.to_string())?;
        match m.body {
            ReplayBody::Bytes(bytes) => publishing.body(bytes).await.map_err(|e| e.to_string())?,
            ReplayBody::Read { size, source } => {
                let mut offset = 0;
                while offset < size {
                    let want = (size - offset).min(PIECE_BYTES) as usize;
                    let piece = source
                        .read(m.archive_id, offset, want)
                        .await
                        .map_err(|e| format!("reading its body to publish: {e}"))?;
                    if piece.is_empty() {
                        return Err(format!("its archived body ends at byte {offset} of {size}"));
                    }
                    let piece = &piece[..piece.len().min(want)];
                    publishing.body(piece).await.map_err(|e| e.to_string())?;
                    offset += piece.len() as u64;
                }
            }
        }
        publishing.finish().await.map_err(|e| e.to_string())
    }

    /// Publishes every message with at most `window` confirms outstanding (pipelined, not
    /// one round trip each), reporting each outcome in order as its confirm arrives.
    pub async fn publish_all<'a>(
        &mut self,
        messages: impl IntoIterator<Item = ReplayMessage<'a>>,
        window: usize,
        mut on_outcome: impl FnMut(i64, PublishOutcome),
    ) {
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut broken: Option<String> = None;
        for m in messages {
            while in_flight.len() >= window.max(1) {
                self.settle(&mut in_flight, &mut broken).await;
                report_settled(&mut in_flight, &mut on_outcome);
            }
            let (tag, outcome) = match &broken {
                Some(e) => (0, Some(PublishOutcome::Failed(e.clone()))),
                None => match self.send(&m).await {
                    Ok(tag) => (tag, None),
                    Err(e) => {
                        broken = Some(e.clone());
                        (0, Some(PublishOutcome::Failed(e)))
                    }
                },
            };
            in_flight.push_back(InFlight {
                tag,
                archive_id: m.archive_id,
                returned: None,
                outcome,
            });
            report_settled(&mut in_flight, &mut on_outcome);
        }
        while !in_flight.is_empty() {
            self.settle(&mut in_flight, &mut broken).await;
            report_settled(&mut in_flight, &mut on_outcome);
        }
    }

    /// Waits for the broker's next word on the channel and applies it.
    async fn settle(&mut self, in_flight: &mut VecDeque<InFlight>, broken: &mut Option<String>) {
        if let Some(e) = broken.as_ref() {
            fail_unsettled(in_flight, e);
            return;
        }
        match self.channel.next_event().await {
            Event::Ack { tag, multiple } => {
                settle_tags(in_flight, tag, multiple, |returned| match returned {
                    Some(reply) => PublishOutcome::Unroutable { reply },
                    None => PublishOutcome::Published,
                })
            }
            Event::Nack { tag, multiple } => {
                settle_tags(in_flight, tag, multiple, |_| PublishOutcome::Nacked)
            }
            Event::Return(r) => {
                // A return names no delivery tag; the copy's link header says which it was.
                let id = r
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(REPLAY_OF_HEADER))
                    .and_then(|v| v.as_str()?.parse::<i64>().ok());
                let reply = format!("{} {}", r.reply_code, r.reply_text);
                if let Some(entry) = in_flight.iter_mut().find(|f| {
                    f.outcome.is_none()
                        && f.returned.is_none()
                        && id.is_none_or(|id| f.archive_id == id)
                }) {
                    entry.returned = Some(reply);
                }
            }
            Event::Closed(e) => {
                let e = e.to_string();
                fail_unsettled(in_flight, &e);
                *broken = Some(e);
            }
            Event::Delivery(_) | Event::ConsumerCancelled => {}
        }
    }

    pub async fn close(self) {
        self.channel.close().await;
        self.connection.close().await;
    }
}

fn settle_tags(
    in_flight: &mut VecDeque<InFlight>,
    tag: u64,
    multiple: bool,
    outcome: impl Fn(Option<String>) -> PublishOutcome,
) {
    // Unsettled publishes are in the order of their tags: none past the first one beyond
    // `tag` is settled by it, so a confirm costs what it settles, not the window.
    for f in in_flight.iter_mut().filter(|f| f.outcome.is_none()) {
        if f.tag > tag {
            break;
        }
        if f.tag == tag || multiple {
            f.outcome = Some(outcome(f.returned.take()));
        }
    }
}

fn fail_unsettled(in_flight: &mut VecDeque<InFlight>, error: &str) {
    for f in in_flight.iter_mut().filter(|f| f.outcome.is_none()) {
        f.outcome = Some(PublishOutcome::Failed(error.to_owned()));
    }
}

/// Reports outcomes in publishing order, as far as they are known.
fn report_settled(
    in_flight: &mut VecDeque<InFlight>,
    on_outcome: &mut impl FnMut(i64, PublishOutcome),
) {
    while in_flight.front().is_some_and(|f| f.outcome.is_some()) {
        let f = in_flight.pop_front().expect("checked");
        on_outcome(f.archive_id, f.outcome.expect("checked"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_headers_drop_the_death_headers_and_link_the_record() {
        let text = AmqpValue::text;
        let headers = Table::from([
            ("x-death", AmqpValue::Array(vec![])),
            ("x-first-death-queue", text("work")),
            ("x-last-death-reason", text("expired")),
            ("x-delivery-count", AmqpValue::LongInt(3)),
            ("x-acquired-count", AmqpValue::LongInt(3)),
            ("tenant", AmqpValue::ShortShortUint(7)),
            ("retry-times", AmqpValue::LongInt(2)),
        ]);
        let target = ReplayTarget {
            exchange: "".into(),
            routing_key: "work".into(),
        };
        let out = replay_headers(Some(&headers), &target, 42, Some("job-1"), None);
        assert_eq!(
            out.keys().map(|k| k.to_text()).collect::<Vec<_>>(),
            ["tenant", "retry-times", REPLAY_OF_HEADER, REPLAY_JOB_HEADER]
        );
        assert_eq!(
            out.get("tenant").unwrap(),
            &AmqpValue::ShortShortUint(7),
            "types are kept"
        );
        assert_eq!(out.get(REPLAY_OF_HEADER).unwrap().as_str(), Some("42"));
        assert_eq!(replay_headers(None, &target, 1, None, None).len(), 1);
    }

    #[test]
    fn replay_headers_drop_the_failure_headers_of_the_convention_only() {
        let text = AmqpValue::text;
        let headers = Table::from([
            ("x-exception-message", text("boom")),
            (
                "x-exception-stacktrace",
                text("java.lang.IllegalStateException: boom"),
            ),
            ("x-original-exchange", text("orders")),
            ("x-original-routingKey", text("order.created")),
            ("MT-Fault-Message", text("kept: not Spring's")),
            ("tenant", AmqpValue::ShortShortUint(7)),
        ]);
        let target = ReplayTarget {
            exchange: "orders".into(),
            routing_key: "order.created".into(),
        };
        let names = |convention| {
            let out = replay_headers(Some(&headers), &target, 1, None, convention);
            out.keys()
                .map(|k| k.to_text().into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Some(Convention::SpringAmqp)),
            ["MT-Fault-Message", "tenant", REPLAY_OF_HEADER]
        );
        assert_eq!(names(None).len(), headers.len() + 1);
    }

    fn in_flight(entries: &[(u64, Option<PublishOutcome>)]) -> VecDeque<InFlight> {
        entries
            .iter()
            .enumerate()
            .map(|(i, (tag, outcome))| InFlight {
                tag: *tag,
                archive_id: i as i64,
                returned: None,
                outcome: outcome.clone(),
            })
            .collect()
    }

    fn outcomes(in_flight: &VecDeque<InFlight>) -> Vec<Option<PublishOutcome>> {
        in_flight.iter().map(|f| f.outcome.clone()).collect()
    }

    #[test]
    fn a_confirm_settles_its_tag_or_every_tag_up_to_it_and_no_later_one() {
        let failed = Some(PublishOutcome::Failed("never sent".into()));
        let published = Some(PublishOutcome::Published);
        // Tag 0: failed before it was sent, between tags 4 and 5.
        let mut window = in_flight(&[(3, None), (4, None), (0, failed.clone()), (5, None)]);
        settle_tags(&mut window, 4, false, |_| PublishOutcome::Published);
        assert_eq!(
            outcomes(&window),
            [None, published.clone(), failed.clone(), None]
        );
        settle_tags(&mut window, 5, true, |_| PublishOutcome::Nacked);
        let nacked = Some(PublishOutcome::Nacked);
        assert_eq!(
            outcomes(&window),
            [nacked.clone(), published.clone(), failed.clone(), nacked]
        );
        // A confirm of a tag nothing awaits any more settles nothing else.
        let mut window = in_flight(&[(7, None), (8, None)]);
        settle_tags(&mut window, 6, true, |_| PublishOutcome::Published);
        assert_eq!(outcomes(&window), [None, None]);
    }
}

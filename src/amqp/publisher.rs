//! Replay publishing: a dedicated confirm channel, `mandatory` publishes and a window of
//! outstanding confirms. Each publish ends as published, unroutable (returned), nacked or
//! failed — only a confirmed, unreturned publish counts as published.

use std::collections::VecDeque;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation, Connection, ExchangeKind, PublisherConfirm};

use super::connection::is_not_found;
use super::headers::{AmqpValue, Bytes, MessageProperties, Table};
use crate::death::{is_death_header, ReplayTarget};

/// Links a replayed copy to the archive record it came from: when the copy dies again, its
/// new record points back to the old one.
pub const REPLAY_OF_HEADER: &str = "x-lazarus-replay-of";
/// The replay job that published the copy, where there is one.
pub const REPLAY_JOB_HEADER: &str = "x-lazarus-replay-job";

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
    pub body: &'a [u8],
    pub target: &'a ReplayTarget,
    pub job: Option<&'a str>,
}

/// The headers a replayed copy carries: the archived ones with their types, minus the death
/// headers (so the consumer's retry counting starts fresh, and brokers that read a
/// client-supplied `x-death` do not keep counting), plus the links to the archive.
pub fn replay_headers(headers: Option<&Table>, archive_id: i64, job: Option<&str>) -> Table {
    let mut out: Table = headers
        .into_iter()
        .flatten()
        .filter(|(name, _)| !is_death_header(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(
        REPLAY_OF_HEADER.into(),
        AmqpValue::LongString(Bytes(archive_id.to_string().into_bytes())),
    );
    if let Some(job) = job {
        out.insert(
            REPLAY_JOB_HEADER.into(),
            AmqpValue::LongString(Bytes(job.as_bytes().to_vec())),
        );
    }
    out
}

/// A confirm channel for replays.
pub struct Publisher {
    connection: Connection,
    channel: Channel,
}

impl Publisher {
    pub async fn open(connection: Connection) -> Result<Self, lapin::Error> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Publisher {
            connection,
            channel,
        })
    }

    /// Whether the exchange exists (the default exchange always does). Checked on a channel
    /// of its own: a failed passive declare closes the channel it ran on.
    pub async fn exchange_exists(&self, exchange: &str) -> Result<bool, lapin::Error> {
        if exchange.is_empty() {
            return Ok(true);
        }
        let probe = self.connection.create_channel().await?;
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        match probe
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Direct,
                passive,
                FieldTable::default(),
            )
            .await
        {
            Ok(()) => {
                let _ = probe.close(200, "checked".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn send(&self, m: &ReplayMessage<'_>) -> Result<PublisherConfirm, lapin::Error> {
        let headers = replay_headers(m.headers, m.archive_id, m.job);
        self.channel
            .basic_publish(
                m.target.exchange.as_str().into(),
                m.target.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                m.body,
                m.properties.to_amqp(Some(&headers)),
            )
            .await
    }

    /// Publishes every message with at most `window` confirms outstanding (pipelined, not
    /// one round trip each), reporting each outcome in order as its confirm arrives.
    pub async fn publish_all<'a>(
        &self,
        messages: impl IntoIterator<Item = ReplayMessage<'a>>,
        window: usize,
        mut on_outcome: impl FnMut(i64, PublishOutcome),
    ) {
        let mut pending: VecDeque<(i64, Result<PublisherConfirm, lapin::Error>)> = VecDeque::new();
        for m in messages {
            if pending.len() >= window.max(1) {
                let (id, confirm) = pending.pop_front().expect("the window is not empty");
                on_outcome(id, outcome(confirm).await);
            }
            pending.push_back((m.archive_id, self.send(&m).await));
        }
        for (id, confirm) in pending {
            on_outcome(id, outcome(confirm).await);
        }
    }

    pub async fn close(self) {
        let _ = self.channel.close(200, "replay done".into()).await;
        let _ = self.connection.close(200, "replay done".into()).await;
    }
}

async fn outcome(confirm: Result<PublisherConfirm, lapin::Error>) -> PublishOutcome {
    let confirmation = match confirm {
        Ok(confirm) => confirm.await,
        Err(e) => return PublishOutcome::Failed(e.to_string()),
    };
    match confirmation {
        Ok(Confirmation::Ack(None)) => PublishOutcome::Published,
        Ok(Confirmation::Ack(Some(returned))) => PublishOutcome::Unroutable {
            reply: format!("{} {}", returned.reply_code, returned.reply_text.as_str()),
        },
        Ok(Confirmation::Nack(_)) => PublishOutcome::Nacked,
        Ok(Confirmation::NotRequested) => {
            PublishOutcome::Failed("the channel is not in confirm mode".into())
        }
        Err(e) => PublishOutcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_headers_drop_the_death_headers_and_link_the_record() {
        let text = |s: &str| AmqpValue::LongString(Bytes(s.as_bytes().to_vec()));
        let headers = Table::from([
            ("x-death".to_owned(), AmqpValue::Array(vec![])),
            ("x-first-death-queue".to_owned(), text("work")),
            ("x-last-death-reason".to_owned(), text("expired")),
            ("x-delivery-count".to_owned(), AmqpValue::LongInt(3)),
            ("tenant".to_owned(), AmqpValue::ShortShortUint(7)),
            ("retry-times".to_owned(), AmqpValue::LongInt(2)),
        ]);
        let out = replay_headers(Some(&headers), 42, Some("job-1"));
        assert_eq!(
            out.keys().collect::<Vec<_>>(),
            ["retry-times", "tenant", REPLAY_JOB_HEADER, REPLAY_OF_HEADER]
        );
        assert_eq!(
            out["tenant"],
            AmqpValue::ShortShortUint(7),
            "types are kept"
        );
        assert_eq!(out[REPLAY_OF_HEADER].as_str(), Some("42"));
        assert_eq!(replay_headers(None, 1, None).len(), 1);
    }
}

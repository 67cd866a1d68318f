//! What the webhooks are told, and how it reads (pure): each event as a [`Line`] and as JSON
//! under `lazarus` (the values as they came, as data), with a link into the dashboard when
//! `--public-url` says where it is; for Slack and anything else as `{"text", "blocks"}` in
//! Slack's mrkdwn, for a Microsoft Teams (Power Automate) webhook as the Adaptive Card
//! message it expects. How outside values are escaped for each is [`Line`]'s.

use hyper::body::Bytes;
use serde_json::{json, Value};

use super::line::Line;
use crate::archive::selection::{group_link, query_value};
use crate::archive::{FailureGroup, GroupBy, JobState, ReplayJob};
use crate::support::format::thousands;

/// A link longer than this (a long `--public-url`) points to the overview instead.
const LINK: usize = 1_000;
/// The failure groups a digest names; it counts the others.
pub const DIGEST_NAMES: usize = 5;

/// How a receiver wants its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"text": "… <url>", "blocks": [a verbatim mrkdwn section]}`: Slack's incoming
    /// webhooks; Mattermost, Rocket.Chat and scripts read `text` (or `lazarus`).
    Text,
    /// A message with an Adaptive Card: Teams' workflow ("Power Automate") webhooks, told by
    /// their host.
    Teams,
}

impl Format {
    pub fn of(target: &crate::support::http::Target) -> Self {
        let host = target.host().to_ascii_lowercase();
        let teams = [
            "webhook.office.com",
            "logic.azure.com",
            "powerplatform.com",
            "powerautomate.com",
        ];
        if teams
            .iter()
            .any(|t| host == *t || host.ends_with(&format!(".{t}")))
        {
            Format::Teams
        } else {
            Format::Text
        }
    }
}

/// Something the webhooks are told of.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Messages died in a way (DLQ, reason, error) not seen before.
    NewFailureGroup(FailureGroup),
    /// More new failure groups than a webhook's rate lets it tell one by one: `count` of
    /// them, the first few in `named`.
    Digest {
        named: Vec<FailureGroup>,
        count: u64,
    },
    /// A DLQ's open messages passed a threshold...
    OverThreshold {
        queue: String,
        open: i64,
        threshold: u64,
    },
    /// ...or fell back to it or under.
    BackUnder {
        queue: String,
        open: i64,
        threshold: u64,
    },
    /// A replay job completed, was cancelled, or paused (its `detail` says why).
    Job(Box<ReplayJob>),
    /// `lazarus webhook-test`: the channel is reachable.
    Test,
}

impl Event {
    /// Its name in the JSON (`lazarus.event`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::NewFailureGroup(_) => "failure_group",
            Event::Digest { .. } => "failure_groups",
            Event::OverThreshold { .. } => "dlq_over_threshold",
            Event::BackUnder { .. } => "dlq_back_under_threshold",
            Event::Job(job) => match job.state {
                JobState::Completed => "job_completed",
                JobState::Cancelled => "job_cancelled",
                _ => "job_paused",
            },
            Event::Test => "test",
        }
    }

    /// The dashboard page it is about (a path).
    fn path(&self) -> String {
        match self {
            Event::NewFailureGroup(g) => group_link(g, GroupBy::Cause),
            Event::OverThreshold { queue, .. } | Event::BackUnder { queue, .. } => {
                format!("/messages?queue={}&status=open", query_value(queue))
            }
            Event::Job(job) => format!("/replays/{}", job.id),
            Event::Digest { .. } | Event::Test => "/".to_owned(),
        }
    }

    /// The line as plain text (logs, the overview).
    pub fn text(&self) -> String {
        self.line().plain()
    }

    /// What a person reads in a chat channel: Lazarus's words, and the values that came from
    /// outside kept apart for each format to escape.
    pub fn line(&self) -> Line {
        match self {
            Event::NewFailureGroup(g) => Line::new().ours("New failure group: ").then(group(g)),
            Event::Digest { named, count } => {
                let mut line = Line::new().ours(format!(
                    "{} new failure groups, more than this webhook may be told one by one: ",
                    thousands(*count)
                ));
                for (i, g) in named.iter().enumerate() {
                    if i > 0 {
                        line = line.ours("; ");
                    }
                    line = line.then(group(g));
                }
                let more = count.saturating_sub(named.len() as u64);
                if more > 0 {
                    line = line.ours(format!("; and {} more", thousands(more)));
                }
                line
            }
            Event::OverThreshold {
                queue,
                open,
                threshold,
            } => Line::new().name(queue).ours(format!(
                " holds {} open dead letters, over its threshold of {}",
                thousands(*open as u64),
                thousands(*threshold)
            )),
            Event::BackUnder {
                queue,
                open,
                threshold,
            } => Line::new().name(queue).ours(format!(
                " is back under its threshold of {}: {} open dead letters",
                thousands(*threshold),
                thousands(*open as u64)
            )),
            Event::Test => Line::new().ours(
                "Lazarus can reach this channel: its notifications about dead letters and replay \
                 jobs will come here",
            ),
            Event::Job(job) => {
                let c = &job.counts;
                let mut words = format!(
                    "Replay job {} {}: {} of {} published",
                    job.id,
                    job.state.as_str(),
                    thousands(c.published as u64),
                    thousands(job.total as u64)
                );
                for (n, what) in [
                    (c.unroutable, "unroutable"),
                    (c.nacked, "refused by the broker"),
                    (c.failed, "failed"),
                    (c.skipped, "skipped"),
                    (c.cancelled, "cancelled"),
                    (c.pending, "still to publish"),
                ] {
                    if n > 0 {
                        words.push_str(&format!(", {} {what}", thousands(n as u64)));
                    }
                }
                let line = Line::new().ours(words);
                match job.detail.as_deref().filter(|_| !job.state.is_final()) {
                    Some(detail) => line.ours(" (").text(detail).ours(")"),
                    None => line,
                }
            }
        }
    }

    /// The bytes POSTed to `target`: [`Event::payload`] in the format its host wants.
    pub fn body_for(
        &self,
        target: &crate::support::http::Target,
        public_url: Option<&str>,
    ) -> Bytes {
        Bytes::from(self.payload(public_url, Format::of(target)).to_string())
    }

    /// The JSON POSTed: what the receiver shows (`text` and a Slack section with the link, or
    /// a Teams card), and the event's fields under `lazarus` (for everything else).
    pub fn payload(&self, public_url: Option<&str>, format: Format) -> Value {
        let url = public_url.map(|base| {
            let base = base.trim_end_matches('/');
            match format!("{base}{}", self.path()) {
                url if url.len() <= LINK => url,
                _ => format!("{base}/"),
            }
        });
        let mut details = self.details();
        details["event"] = json!(self.name());
        details["url"] = json!(url);
        let line = self.line();
        match format {
            Format::Text => {
                let text = match &url {
                    Some(url) => format!("{} <{url}>", line.slack()),
                    None => line.slack(),
                };
                // Verbatim: Slack links nothing by itself in it (URLs, channel names).
                let section = json!({"type": "mrkdwn", "text": text, "verbatim": true});
                json!({
                    "text": text,
                    "blocks": [{"type": "section", "text": section}],
                    "lazarus": details,
                })
            }
            Format::Teams => {
                let actions: Vec<Value> = url
                    .iter()
                    .map(|url| json!({"type": "Action.OpenUrl", "title": "Open in Lazarus", "url": url}))
                    .collect();
                json!({
                    "type": "message",
                    "attachments": [{
                        "contentType": "application/vnd.microsoft.card.adaptive",
                        "content": {
                            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                            "type": "AdaptiveCard",
                            "version": "1.4",
                            "body": [{"type": "RichTextBlock", "inlines": line.teams()}],
                            "actions": actions,
                        },
                    }],
                    "lazarus": details,
                })
            }
        }
    }

    /// The event's fields, as they came.
    fn details(&self) -> Value {
        match self {
            Event::NewFailureGroup(g) => group_details(g),
            Event::Digest { named, count } => json!({
                "count": count,
                "groups": named.iter().map(group_details).collect::<Vec<_>>(),
            }),
            Event::OverThreshold {
                queue,
                open,
                threshold,
            }
            | Event::BackUnder {
                queue,
                open,
                threshold,
            } => json!({ "queue": queue, "open": open, "threshold": threshold }),
            Event::Job(job) => json!({
                "job": job.id.to_string(),
                "state": job.state,
                "detail": job.detail,
                "actor": job.actor,
                "total": job.total,
                "counts": job.counts,
            }),
            Event::Test => json!({}),
        }
    }
}

/// A cause group in a line: `rejected in invoices, ValueError: amount < <n> (3 messages so
/// far)` — where its messages failed, and its cause.
fn group(g: &FailureGroup) -> Line {
    let line = Line::new()
        .name(g.reason.as_deref().unwrap_or_default())
        .ours(" in ")
        .name(g.first_death_queue.as_deref().unwrap_or_default())
        .ours(", ");
    let cause = g.cause();
    let line = if cause.is_empty() {
        line.ours("no error given")
    } else {
        line.text(&cause)
    };
    line.ours(format!(" ({} so far)", messages(g.total)))
}

/// A group as `GET /api/groups` answers it.
fn group_details(g: &FailureGroup) -> Value {
    serde_json::to_value(g).expect("a group serializes")
}

fn messages(n: i64) -> String {
    match n {
        1 => "1 message".to_owned(),
        n => format!("{} messages", thousands(n as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{JobCounts, Plan};
    use time::macros::datetime;

    fn group() -> FailureGroup {
        FailureGroup {
            id: Some(17),
            queue: Some("invoices.dlq".into()),
            first_death_queue: Some("invoices".into()),
            reason: Some("rejected".into()),
            error_type: Some("ValueError".into()),
            error: Some("amount < <n>".into()),
            example: Some("ValueError: amount < 0".into()),
            message_type: None,
            open: 1200,
            total: 1204,
            settling: 0,
            first_seen: datetime!(2026-12-05 04:00 UTC),
            last_seen: datetime!(2026-12-05 04:10 UTC),
        }
    }

    #[test]
    fn a_new_group_says_where_how_and_links_to_its_open_messages() {
        let event = Event::NewFailureGroup(group());
        assert_eq!(
            event.text(),
            "New failure group: rejected in invoices, ValueError: amount < <n> (1,204 messages so far)"
        );
        let slack =
            "New failure group: `rejected` in `invoices`, `ValueError: amount &lt; &lt;n&gt;` \
                     (1,204 messages so far)";
        assert_eq!(event.line().slack(), slack);
        let payload = event.payload(Some("https://lazarus.example.com/"), Format::Text);
        let url = "https://lazarus.example.com/messages?group=17&status=open";
        assert_eq!(payload["text"], format!("{slack} <{url}>"));
        let section = &payload["blocks"][0];
        assert_eq!(section["type"], "section");
        assert_eq!(section["text"]["type"], "mrkdwn");
        assert_eq!(section["text"]["verbatim"], true);
        assert_eq!(section["text"]["text"], payload["text"]);
        assert_eq!(payload["lazarus"]["event"], "failure_group");
        assert_eq!(payload["lazarus"]["url"], url);
        assert_eq!(payload["lazarus"]["first_seen"], "2026-12-05T04:00:00Z");
        assert_eq!(payload["lazarus"]["open"], 1200);
        // The group as `GET /api/groups` answers it.
        assert_eq!(payload["lazarus"]["id"], "17");
        assert_eq!(payload["lazarus"]["queue"], "invoices.dlq");
        assert_eq!(payload["lazarus"]["first_death_queue"], "invoices");
        assert_eq!(payload["lazarus"]["error_type"], "ValueError");
        assert_eq!(payload["lazarus"]["error"], "amount < <n>");
        assert_eq!(payload["lazarus"]["example"], "ValueError: amount < 0");
        assert_eq!(payload["lazarus"]["total"], 1204);
        let unlinked = event.payload(None, Format::Text);
        assert_eq!(unlinked["text"], slack);
        // A link too long for a chat (a long base URL) goes to the overview.
        let long = format!("http://h/{}", "é".repeat(500));
        let payload = Event::NewFailureGroup(group()).payload(Some(&long), Format::Text);
        assert_eq!(payload["lazarus"]["url"], format!("{long}/"));
        assert_eq!(unlinked["lazarus"]["url"], Value::Null);
    }

    #[test]
    fn thresholds_read_both_ways() {
        let over = Event::OverThreshold {
            queue: "q".into(),
            open: 10_001,
            threshold: 10_000,
        };
        assert_eq!(
            over.text(),
            "q holds 10,001 open dead letters, over its threshold of 10,000"
        );
        assert_eq!(
            over.line().slack(),
            "`q` holds 10,001 open dead letters, over its threshold of 10,000"
        );
        let under = Event::BackUnder {
            queue: "q".into(),
            open: 12,
            threshold: 10_000,
        };
        assert_eq!(
            under.text(),
            "q is back under its threshold of 10,000: 12 open dead letters"
        );
        assert_eq!(
            under.payload(None, Format::Text)["lazarus"]["event"],
            "dlq_back_under_threshold"
        );
    }

    #[test]
    fn a_job_tells_its_outcomes_and_why_it_paused() {
        let job = ReplayJob {
            id: 7,
            state: JobState::Paused,
            detail: Some("canary: 2 of 10 died again".into()),
            actor: "alice".into(),
            created_at: datetime!(2026-12-05 04:00 UTC),
            started_at: None,
            finished_at: None,
            selection: json!({}),
            target: None,
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: false,
            canary: None,
            plan: Plan::default(),
            counts: JobCounts {
                published: 10,
                pending: 49_990,
                ..JobCounts::default()
            },
            total: 50_000,
            estimated_seconds: None,
            waiting_for_brokers: Vec::new(),
        };
        let event = Event::Job(Box::new(job.clone()));
        assert_eq!(event.name(), "job_paused");
        assert_eq!(
            event.text(),
            "Replay job 7 paused: 10 of 50,000 published, 49,990 still to publish \
             (canary: 2 of 10 died again)"
        );
        let payload = event.payload(Some("http://h"), Format::Text);
        assert_eq!(payload["lazarus"]["url"], "http://h/replays/7");
        assert_eq!(payload["lazarus"]["job"], "7");
        assert_eq!(payload["lazarus"]["state"], "paused");
        let done = ReplayJob {
            state: JobState::Completed,
            detail: None,
            counts: JobCounts {
                published: 49_998,
                unroutable: 2,
                ..JobCounts::default()
            },
            ..job
        };
        assert_eq!(
            Event::Job(Box::new(done)).text(),
            "Replay job 7 completed: 49,998 of 50,000 published, 2 unroutable"
        );
    }

    #[test]
    fn teams_webhooks_get_an_adaptive_card() {
        let teams: crate::support::http::Target =
            "https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual"
                .parse()
                .unwrap();
        assert_eq!(Format::of(&teams), Format::Teams);
        let office: crate::support::http::Target = "https://contoso.webhook.office.com/webhookb2/x"
            .parse()
            .unwrap();
        assert_eq!(Format::of(&office), Format::Teams);
        let slack: crate::support::http::Target =
            "https://hooks.slack.com/services/T/B/X".parse().unwrap();
        assert_eq!(Format::of(&slack), Format::Text);
        let lookalike: crate::support::http::Target =
            "https://notlogic.azure.com.evil/x".parse().unwrap();
        assert_eq!(Format::of(&lookalike), Format::Text);

        let event = Event::NewFailureGroup(group());
        let card = event.payload(Some("https://l.example"), Format::Teams);
        assert_eq!(card["type"], "message");
        let content = &card["attachments"][0]["content"];
        assert_eq!(
            card["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert_eq!(content["type"], "AdaptiveCard");
        assert_eq!(content["body"][0]["type"], "RichTextBlock");
        assert_eq!(content["body"][0]["inlines"], json!(event.line().teams()));
        assert_eq!(
            content["body"][0]["inlines"][1],
            json!({"type": "TextRun", "text": "rejected", "fontType": "Monospace"})
        );
        assert_eq!(
            content["actions"][0]["url"], card["lazarus"]["url"],
            "the card opens the page"
        );
        assert_eq!(card["lazarus"]["event"], "failure_group");
        let plain = event.payload(None, Format::Teams);
        assert_eq!(plain["attachments"][0]["content"]["actions"], json!([]));
    }

    #[test]
    fn a_digest_counts_every_group_and_names_the_first() {
        let mut other = group();
        other.queue = Some("orders.dlq".into());
        other.first_death_queue = Some("orders".into());
        other.error_type = None;
        other.error = Some(String::new());
        other.total = 1;
        let digest = Event::Digest {
            named: vec![group(), other],
            count: 1_200,
        };
        assert_eq!(digest.name(), "failure_groups");
        assert_eq!(
            digest.text(),
            "1,200 new failure groups, more than this webhook may be told one by one: rejected \
             in invoices, ValueError: amount < <n> (1,204 messages so far); rejected in orders, no \
             error given (1 message so far); and 1,198 more"
        );
        let payload = digest.payload(Some("https://l.example"), Format::Text);
        assert_eq!(payload["lazarus"]["count"], 1_200);
        assert_eq!(payload["lazarus"]["groups"][1]["queue"], "orders.dlq");
        assert_eq!(payload["lazarus"]["url"], "https://l.example/");
        assert!(payload["text"]
            .as_str()
            .unwrap()
            .ends_with("and 1,198 more <https://l.example/>"));
    }
}

//! What producers write reaches the webhooks shown, never obeyed: a hostile corpus (mentions
//! of every form, links of every form, Markdown and mrkdwn, code fences, HTML, Teams' `<at>`
//! and date functions, zero-width and bidi characters, line breaks, very long text, text that
//! looks like JSON) in every field that comes from outside, in each format — Slack mrkdwn,
//! the Teams card (read by the Adaptive Cards library), the generic JSON — and through the
//! real server from real dead letters.

use std::time::Duration;

use lazarus::archive::{FailureGroup, JobCounts, JobState, Plan, ReplayJob};
use lazarus::notify::event::{Event, Format};
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::{adaptive_cards_say, Receiver};
use crate::helpers::*;

const LAZARUS: &str = "https://lazarus.example.com";

/// What a producer (or a broker, or whoever names a queue) may write.
fn corpus() -> Vec<String> {
    let mut corpus: Vec<String> = [
        // Slack's mentions, and the issue's own two.
        "<!channel> the database is down",
        "<!here> <!everyone> <!subteam^SAZ94GDB8|@oncall> <@U024BE7LH> <#C024BE7LR|general>",
        "<!date^1392734382^{date_num}|Feb 18>",
        "<https://evil.example|Open in Lazarus>",
        "<https://evil.example>",
        "@channel @here @everyone @all please look",
        // Links in every form.
        "see https://evil.example/login?next=/ now",
        "HTTPS://EVIL.EXAMPLE/x and hTtP://evil.example",
        "ftp://files.evil.example/a.zip",
        "www.evil.example/reset",
        "[Open in Lazarus](https://evil.example) [x]( https://evil.example )",
        "![img](https://evil.example/pixel.png)",
        "mail bob@evil.example or mailto:bob@evil.example or tel:+15551234",
        "//evil.example/protocol-relative",
        "slack://open?team=T0 msteams:/l/chat/0/0",
        "<a href=\"https://evil.example\">Open in Lazarus</a>",
        "https://evil\u{3002}example/ideographic-dot https://evil\u{ff0e}example",
        // Formatting.
        "*bold* _italic_ ~strike~ **double** __under__ ~~strikes~~",
        "```\ncode fence <!channel>\n```",
        "`inline` code and a lone ` backtick",
        "> quoted\n- a list\n1. numbered\n# heading",
        ":rotating_light: :skull: 👩\u{200d}💻 emoji",
        // HTML and Teams.
        "<script>alert(1)</script><img src=x onerror=alert(1)><b>bold</b>",
        "<at>Everyone</at> <at id=\"0\">Alice</at>",
        "{{DATE(2017-02-14T06:08:00Z, SHORT)}} {{TIME(2017-02-14T06:08:00Z)}} ${secret}",
        // What is not seen, and what breaks lines.
        "pay\u{200b}pal zero\u{200c}width\u{200d}joiner\u{2060}word\u{feff}bom",
        "invoice_\u{202e}fdp.exe \u{2066}isolated\u{2069} \u{200f}rtl\u{200e}",
        "line one\nline two\r\n<!channel> on line three\u{2028}and four",
        "bell\u{7} nul\u{0} escape\u{1b}[31mred\u{1b}[0m delete\u{7f} c1\u{85}next",
        // Text that looks like JSON, and other scripts.
        "\"}],\"text\":\"<!channel>\",\"blocks\":[{\"type\":\"section\"",
        "\\u003c!channel\\u003e \\\" \\n",
        "发票 失败 حساب خطأ Ошибка",
    ]
    .map(String::from)
    .to_vec();
    corpus.push(format!(
        "{} <!channel> https://evil.example",
        "A".repeat(100_000)
    ));
    corpus.push("<!channel>".repeat(500));
    corpus.push("\u{202e}".repeat(2_000) + "end");
    corpus
}

fn group(text: &str) -> FailureGroup {
    FailureGroup {
        id: Some(3),
        queue: Some(text.to_owned()),
        first_death_queue: Some(text.to_owned()),
        reason: Some(text.to_owned()),
        error_type: None,
        error: Some(text.to_owned()),
        example: Some(text.to_owned()),
        message_type: None,
        open: 3,
        total: 3,
        settling: 0,
        first_seen: OffsetDateTime::UNIX_EPOCH,
        last_seen: OffsetDateTime::UNIX_EPOCH,
    }
}

fn paused_job(detail: &str) -> ReplayJob {
    ReplayJob {
        id: 7,
        state: JobState::Paused,
        detail: Some(detail.to_owned()),
        actor: detail.to_owned(),
        created_at: OffsetDateTime::UNIX_EPOCH,
        started_at: None,
        finished_at: None,
        selection: json!({}),
        target: None,
        to_first_death_queue: false,
        rate_per_sec: None,
        include_replayed: false,
        canary: None,
        plan: Plan::default(),
        counts: JobCounts::default(),
        total: 10,
        estimated_seconds: None,
        waiting_for_brokers: Vec::new(),
    }
}

/// Each event that carries outside text, with it in every such field, and those fields as
/// the generic JSON must keep them.
fn events(text: &str) -> Vec<(Event, Vec<(&'static str, Value)>)> {
    let raw = json!(text);
    vec![
        (
            Event::NewFailureGroup(group(text)),
            vec![
                ("/queue", raw.clone()),
                ("/reason", raw.clone()),
                ("/error", raw.clone()),
            ],
        ),
        (
            Event::Digest {
                named: vec![group(text), group(text)],
                count: 7,
            },
            vec![("/groups/1/error", raw.clone()), ("/count", json!(7))],
        ),
        (
            Event::OverThreshold {
                queue: text.to_owned(),
                open: 5,
                threshold: 4,
            },
            vec![("/queue", raw.clone())],
        ),
        (
            Event::Job(Box::new(paused_job(text))),
            vec![("/detail", raw.clone()), ("/actor", raw)],
        ),
    ]
}

/// Where in `text` a chat could find a link of its own making: a scheme's `://`, `www.`, an
/// e-mail address's host, a scheme linked without `//`.
fn links(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let chars: Vec<char> = lower.chars().collect();
    let mut found = Vec::new();
    let around = |i: usize| {
        chars[i.saturating_sub(12)..(i + 12).min(chars.len())]
            .iter()
            .collect::<String>()
    };
    for i in 0..chars.len() {
        let at = |s: &str| {
            s.chars()
                .enumerate()
                .all(|(k, c)| chars.get(i + k) == Some(&c))
        };
        let host_dot = |from: usize| {
            let mut j = from;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '-') {
                j += 1;
            }
            j > from
                && j + 1 < chars.len()
                && ".\u{3002}\u{ff0e}\u{ff61}".contains(chars[j])
                && chars[j + 1].is_alphanumeric()
        };
        if at("://") && i > 0 && (chars[i - 1].is_alphanumeric() || "+-.".contains(chars[i - 1])) {
            found.push(around(i));
        }
        if at("//") && host_dot(i + 2) {
            found.push(around(i));
        }
        if at("www.") && chars.get(i + 4).is_some_and(|c| c.is_alphanumeric()) {
            found.push(around(i));
        }
        if chars[i] == '@' && host_dot(i + 1) {
            found.push(around(i));
        }
        for scheme in [
            "mailto:", "tel:", "sms:", "slack:", "msteams:", "callto:", "skype:", "sip:",
        ] {
            if at(scheme)
                && (i == 0 || !chars[i - 1].is_alphanumeric())
                && chars
                    .get(i + scheme.len())
                    .is_some_and(|c| !c.is_whitespace())
            {
                found.push(around(i));
            }
        }
    }
    found
}

/// The producer's words, in order, within `shown`: the alphanumeric runs of what the first
/// 60 characters of `raw` hold.
fn readable(raw: &str, shown: &str) -> Result<(), String> {
    let head: String = raw.chars().take(60).collect();
    let mut rest = shown;
    for word in head
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        match rest.find(word) {
            Some(at) => rest = &rest[at + word.len()..],
            None => return Err(format!("{word:?} of {raw:?} is not in {shown:?}")),
        }
    }
    Ok(())
}

/// Slack: one verbatim mrkdwn section, the same as `text`; no `<` but the one of Lazarus's
/// own link (so no mention, no link written by hand); every `&` an entity; nothing a chat
/// links by itself; outside values only inside code spans, with no backtick of their own.
fn check_slack(payload: &Value, linked: bool, raw: &str) -> Result<(), String> {
    let text = payload["text"].as_str().ok_or("no text")?;
    let rest = match linked {
        true => {
            let at = text.rfind(" <").ok_or(format!("no link: {text}"))?;
            let link = &text[at..];
            if !link.starts_with(&format!(" <{LAZARUS}/")) || !link.ends_with('>') {
                return Err(format!("not Lazarus's link at the end: {link}"));
            }
            &text[..at]
        }
        false => text,
    };
    if let Some(at) = rest.find(['<', '>']) {
        return Err(format!(
            "a mention or link: {:?}",
            &rest[at..(at + 40).min(rest.len())]
        ));
    }
    for (i, _) in rest.match_indices('&') {
        if !["&amp;", "&lt;", "&gt;"]
            .iter()
            .any(|e| rest[i..].starts_with(e))
        {
            return Err(format!("a bare &: {rest}"));
        }
    }
    let found = links(rest);
    if !found.is_empty() {
        return Err(format!("links {found:?} in {rest}"));
    }
    let spans: Vec<&str> = rest.split('`').collect();
    if spans.len().is_multiple_of(2) {
        return Err(format!("an open code span: {rest}"));
    }
    for ours in spans.iter().step_by(2) {
        if let Some(c) = ours.chars().find(|c| "*_~@[]".contains(*c)) {
            return Err(format!("{c:?} outside a code span: {rest}"));
        }
    }
    let section = &payload["blocks"][0]["text"];
    if section["text"] != text || section["verbatim"] != true || section["type"] != "mrkdwn" {
        return Err(format!("no verbatim section with the text: {payload}"));
    }
    let read = rest
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    readable(raw, &read)
}

/// Teams: a card of text runs only (no Markdown, no `selectAction`, no mention entities),
/// nothing a chat links by itself, no date function; Lazarus's link its only action.
fn check_teams(payload: &Value, linked: bool, raw: &str) -> Result<(), String> {
    let card = &payload["attachments"][0]["content"];
    fn keys(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    out.push(k.clone());
                    keys(v, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    keys(card, &mut all);
    if let Some(k) = all
        .iter()
        .find(|k| ["selectAction", "msteams"].contains(&k.as_str()))
    {
        return Err(format!("{k} in {card}"));
    }
    let body = card["body"].as_array().ok_or("no body")?;
    if body.len() != 1 || body[0]["type"] != "RichTextBlock" {
        return Err(format!("not one RichTextBlock: {card}"));
    }
    let mut shown = String::new();
    for run in body[0]["inlines"].as_array().ok_or("no inlines")? {
        if run["type"] != "TextRun" {
            return Err(format!("not a text run: {run}"));
        }
        let text = run["text"].as_str().ok_or("a run without text")?;
        let found = links(text);
        if !found.is_empty() || text.contains("{{DATE(") || text.contains("{{TIME(") {
            return Err(format!("links {found:?} or a date function in {text}"));
        }
        shown.push_str(text);
    }
    let actions = card["actions"].as_array().ok_or("no actions")?;
    match (linked, actions.as_slice()) {
        (true, [open]) if open["url"].as_str().is_some_and(|u| u.starts_with(LAZARUS)) => {}
        (false, []) => {}
        _ => return Err(format!("actions other than Lazarus's link: {actions:?}")),
    }
    readable(raw, &shown)
}

/// Every hostile text in every field that comes from outside, in each format: Slack and
/// Teams show it without a mention or a link, still readable; the Adaptive Cards library
/// reads every card without a word; the generic JSON keeps it as it came.
#[test]
fn hostile_text_is_shown_not_obeyed_in_every_format() {
    let corpus = corpus();
    let mut cards = Vec::new();
    let mut checked = 0;
    let mut failures = Vec::new();
    for raw in &corpus {
        for (event, fields) in events(raw) {
            for public_url in [Some(LAZARUS), None] {
                let linked = public_url.is_some();
                for format in [Format::Text, Format::Teams] {
                    let body = event.payload(public_url, format).to_string();
                    // The generic JSON: parsed back, the values as they came.
                    let payload: Value = serde_json::from_str(&body).expect("valid JSON");
                    for (pointer, want) in &fields {
                        let got = payload["lazarus"].pointer(pointer);
                        if got != Some(want) {
                            failures.push(format!("{} {pointer}: {got:?}", event.name()));
                        }
                    }
                    let said = match format {
                        Format::Text => check_slack(&payload, linked, raw),
                        Format::Teams => {
                            cards.push(payload["attachments"][0]["content"].clone());
                            check_teams(&payload, linked, raw)
                        }
                    };
                    if let Err(e) = said {
                        failures.push(format!("{} {format:?}: {e}", event.name()));
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(
        checked,
        corpus.len() * 4 * 2 * 2,
        "every text, event, link and format"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(cards.len(), corpus.len() * 4 * 2);
    let (clean, said) = adaptive_cards_say(&Value::Array(cards));
    assert!(clean, "the Adaptive Cards library: {said}");
}

/// The checks above can fail: what they must catch, caught.
#[test]
fn the_hostile_text_checks_catch_mentions_and_links() {
    let slack = |text: &str| {
        json!({"text": text, "blocks": [{"type": "section",
        "text": {"type": "mrkdwn", "text": text, "verbatim": true}}]})
    };
    for wrong in [
        "<!channel> x",
        "`a` <https://evil.example|Open>",
        "`https://evil.example`",
        "`see www.evil.example`",
        "`bob@evil.example`",
        "*bold* `x`",
        "`x` & y",
        "`unclosed",
    ] {
        assert!(check_slack(&slack(wrong), false, "x").is_err(), "{wrong}");
    }
    assert!(check_slack(&slack("`words`"), false, "other words").is_err());
    assert!(check_slack(
        &slack("`https[://]evil[.]example`"),
        false,
        "https evil example"
    )
    .is_ok());
    let teams = |inlines: Value| {
        json!({"attachments": [{"content": {"body": [{"type": "RichTextBlock", "inlines": inlines}],
            "actions": []}}]})
    };
    for wrong in [
        json!([{"type": "TextRun", "text": "https://evil.example"}]),
        json!([{"type": "TextRun", "text": "x", "selectAction": {"type": "Action.OpenUrl", "url": "https://e"}}]),
        json!([{"type": "TextRun", "text": "{{DATE(2017-02-14T06:08:00Z)}}"}]),
        json!([{"type": "TextBlock", "text": "x"}]),
    ] {
        assert!(
            check_teams(&teams(wrong.clone()), false, "x").is_err(),
            "{wrong}"
        );
    }
    assert!(check_teams(
        &teams(json!([{"type": "TextRun", "text": "x"}])),
        false,
        "x"
    )
    .is_ok());
}

on_both_backends!(hostile_dead_letters_reach_the_webhook_escaped);
/// Real dead letters with hostile errors, from a work queue with a hostile name, through the
/// real server to a receiver: Slack's text and section hold no mention and no link but
/// Lazarus's, the words still there; `lazarus` holds the values as archived.
async fn hostile_dead_letters_reach_the_webhook_escaped() {
    // The work queue, whose name the groups carry, named by someone hostile.
    let p = unique("hookesc");
    let (work, dlx, dlq) = (
        format!("{p} <!channel> *x* https://evil.example/ [a](https://evil.example)"),
        format!("{p}.dlx"),
        format!("{p}.dlq"),
    );
    let mut t = Topology::new().await;
    t.exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    t.queue(&work, args(&[("x-dead-letter-exchange", s(&dlx))]))
        .await;
    let receiver = Receiver::start(0).await;
    let mut app = TestApp::spawn_with(&[&dlq], |c| {
        c.webhooks.webhooks = vec![receiver.url.parse().unwrap()];
        c.webhooks.webhook_interval_secs = 1;
        c.webhooks.public_url = Some(format!("{LAZARUS}/"));
    })
    .await;
    let errors = [
        "<!channel> <https://evil.example|Open in Lazarus> please",
        "[Open in Lazarus](https://evil.example) *bold* `code` <at>Everyone</at> www.evil.example",
        "invoice_\u{202e}fdp.exe pay\u{200b}pal {{DATE(2017-02-14T06:08:00Z, SHORT)}} bob@evil.example",
    ];
    let worker = super::die_each(&t, &work, &errors.map(String::from)).await;
    app.wait_for_archived(3, Duration::from_secs(20)).await;
    worker.abort();
    for error in errors {
        let told = receiver
            .wait_for("failure_group", |e| e["example"] == error)
            .await;
        // The name as it came, keyed as the archive keys a name holding `/` (issue 32).
        assert_eq!(
            told["lazarus"]["first_death_queue"],
            format!("/{work}"),
            "the name as it came"
        );
        // The line names the group's cause: the error with what varies as placeholders.
        let cause = told["lazarus"]["error"].as_str().unwrap().to_owned();
        check_slack(&told, true, &cause).unwrap_or_else(|e| panic!("{e}: {told}"));
        check_slack(&told, true, &work).unwrap_or_else(|e| panic!("{e}: {told}"));
    }
    assert_eq!(receiver.count("failure_group"), 3);
    app.stop().await;
    t.cleanup().await;
}

//! `lazarus webhook-test`: a test event to each `--webhook`, as `serve` would send its events.

use std::time::Duration;

use crate::config::WebhookArgs;
use crate::notify::Event;

/// `lazarus webhook-test`: POSTs a test event to each webhook once (no retries) and prints what
/// each answered; whether every one took it.
pub async fn run(args: &WebhookArgs) -> bool {
    let (webhooks, public_url) = (&args.webhooks, args.public_url.as_deref());
    if webhooks.is_empty() {
        eprintln!("no --webhook (or LAZARUS_WEBHOOK) to test");
        return false;
    }
    let mut all = true;
    for target in webhooks {
        let body = Event::Test.body_for(target, public_url);
        match crate::support::http::post_json(target, body, Duration::from_secs(10)).await {
            Ok(answer) if answer.status.is_success() => {
                println!("{}: took it ({})", target.redacted(), answer.status);
            }
            Ok(answer) => {
                eprintln!("{}: answered {}", target.redacted(), answer.status);
                all = false;
            }
            Err(e) => {
                eprintln!("{e}");
                all = false;
            }
        }
    }
    all
}

//! `lazarus demo` pushes real failures through every seed topology into its four DLQs.

use std::time::Duration;

use lazarus::cli::demo::{DEMO_FIELDS, DEMO_QUEUES};

use crate::helpers::*;

#[tokio::test]
async fn demo_fills_every_demo_dlq_through_real_dead_lettering() {
    let vhost = Vhost::create("demo");
    let app = TestApp::spawn_with(&DEMO_QUEUES, |c| {
        c.connection.amqp_url = vhost.url().into();
        c.fields = DEMO_FIELDS.iter().map(|f| f.parse().unwrap()).collect();
    })
    .await;
    let _workers = lazarus::cli::demo::run(&vhost.url(), 50)
        .await
        .expect("the demo runs");
    // 20 invoices rejected, 10 payments parked after three failures, 10 notifications
    // expired, 10 orders whose retries ran out.
    app.wait_for_archived(50, Duration::from_secs(60)).await;
    let counts = app.archive.counts().await.unwrap();
    for queue in DEMO_QUEUES {
        assert!(
            counts.iter().any(|c| c.queue == queue),
            "nothing in {queue}: {counts:?}"
        );
    }
    let parked = app.all_messages("demo.payments.parking").await;
    assert_eq!(
        parked[0]["deaths"][0]["queue"], "demo.payments.retry",
        "newest death in the retry queue"
    );
    assert_eq!(
        parked[0]["replay_target"]["routing_key"], "demo.payments",
        "target is the work queue"
    );
    let invoice = app
        .json("/api/messages?q=invoice:INV-2026-00042", 200)
        .await;
    assert_eq!(
        invoice["messages"][0]["fields"]["invoice"],
        "INV-2026-00042"
    );
}

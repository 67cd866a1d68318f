//! The broker closes Lazarus's connection mid-stream: ingest resumes by itself, nothing lost
//! or doubled.

use std::collections::HashSet;
use std::time::Duration;

use crate::helpers::*;

const BACKLOG: usize = 20_000;

on_both_backends!(broker_closing_the_connection_mid_stream_loses_and_doubles_nothing);
async fn broker_closing_the_connection_mid_stream_loses_and_doubles_nothing() {
    let vhost = Vhost::create("reconnect");
    let dlq = "dlq";
    let mut t = Topology::on(&vhost.url()).await;
    t.queue(dlq, Default::default()).await;
    publish_many(&t.channel, "", dlq, "rc", BACKLOG).await;

    let app = TestApp::spawn_with(&[dlq], |c| {
        c.connection.amqp_url = vhost.url().into();
        c.batch_size = 50;
        c.prefetch = 100;
    })
    .await;
    // Looking every 10 ms: the connection closes as soon after the first 1,000 as it can.
    let soon = Patience::within(Duration::from_secs(30)).every(Duration::from_millis(10));
    wait_until("ingest to start (1,000 archived)", soon, async || {
        app.archived().await >= 1_000
    })
    .await;
    vhost.broker().close_connections(&vhost.name).await;
    let at_close = app.archived().await;
    assert!(
        (at_close as usize) < BACKLOG,
        "connection closed too late to test anything"
    );

    app.wait_for_archived(BACKLOG as i64, Duration::from_secs(120))
        .await;
    let all = app.all_messages(dlq).await;
    assert_eq!(all.len(), BACKLOG, "rows in the archive");
    let ids: HashSet<String> = all
        .iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), BACKLOG);
    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains("kind=\"broker\""),
        "the consumer never saw its connection closed: {metrics}"
    );
    assert!(
        metrics.contains("lazarus_consumer_connected{broker=\"default\",queue=\"dlq\"} 1"),
        "{metrics}"
    );
    // Nothing left once the last ack is in, not even unacknowledged.
    // Each look runs rabbitmqctl: every 100 ms.
    let patience = Patience::within(Duration::from_secs(30)).every(Duration::from_millis(100));
    wait_showing("the DLQ to be empty", patience, async || {
        match vhost.broker().queue_messages(&vhost.name, dlq).await {
            0 => Ok(()),
            left => Err(format!("{left} left")),
        }
    })
    .await;
    eprintln!("connection closed at {at_close} of {BACKLOG} archived");
}

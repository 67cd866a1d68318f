//! A stream as a DLQ: acks remove nothing from a stream, so Lazarus reads it from where its
//! archive left off — all it holds the first time, then exactly what came while it was away.

use std::time::Duration;

use crate::brokers::on_both_brokers;
use crate::helpers::*;

async fn stream_dlq(t: &mut Topology, p: &str) -> (String, String) {
    let (work, dlq, dlx) = (format!("{p}.work"), format!("{p}.dlq"), format!("{p}.dlx"));
    t.exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    t.queue(&dlq, args(&[("x-queue-type", s("stream"))])).await;
    t.bind(&dlq, &dlx, "").await;
    // Rejected, not expired: RabbitMQ 3.10 does not dead-letter expired messages into a
    // stream (4.x does).
    t.queue(&work, args(&[("x-dead-letter-exchange", s(&dlx))]))
        .await;
    (work, dlq)
}

/// Puts `n` messages into the stream DLQ: dead-lettered by the broker from `work` on RabbitMQ
/// 4.x; on 3.10, which does not dead-letter into streams at all (measured: the stream stays
/// empty), published straight into it as a worker parking a failed message would.
async fn fill(t: &Topology, work: &str, dlq: &str, from: usize, n: usize) {
    let broker = lazarus::amqp::wire::Connection::open(&amqp_url(), "probe")
        .await
        .unwrap();
    let queue = if broker.server().major_version() >= 4 {
        work
    } else {
        dlq
    };
    broker.close().await;
    for i in from..from + n {
        let id = format!("m-{i}");
        t.publish("", queue, id.as_bytes(), json_props(&id)).await;
    }
}

on_both_brokers!(
    a_stream_dlq_is_read_from_where_the_archive_left_off,
    on_both_backends
);
async fn a_stream_dlq_is_read_from_where_the_archive_left_off() {
    let mut t = Topology::new().await;
    let p = unique("stream");
    let (work, dlq) = stream_dlq(&mut t, &p).await;
    let worker = rejecting_worker(&work).await;
    // What the stream holds before Lazarus ever attaches.
    fill(&t, &work, &dlq, 0, 15).await;
    t.wait_for_depth(&work, 0, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut first = TestApp::spawn(&[&dlq]).await;
    first.wait_for_archived(15, Duration::from_secs(20)).await;
    first.stop().await;

    // What arrives while it is away, then a restart on the same archive.
    fill(&t, &work, &dlq, 15, 7).await;
    let url = first.database_url.clone();
    let second = TestApp::spawn_with(&[&dlq], |c| c.connection.database_url = url.into()).await;
    second.wait_for_archived(22, Duration::from_secs(20)).await;
    // Nothing more comes: the stream is read on, not again from its start.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let archived = second.all_messages(&dlq).await;
    let mut ids: Vec<&str> = archived
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 22, "rows archived");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 22, "distinct messages");
    // Dead letters on 4.x carry their history; 3.10's parked copies have none.
    let detail = second.detail_by_message_id(&dlq, "m-16").await;
    if let Some(death) = detail["deaths"].as_array().unwrap().first() {
        assert_eq!(death["queue"], work.as_str());
        assert_eq!(death["reason"], "rejected");
    }
    let ready = second.json("/readyz", 200).await;
    assert_eq!(ready["queues"][&dlq]["state"], "consuming", "{ready}");
    worker.abort();
    t.cleanup().await;
}

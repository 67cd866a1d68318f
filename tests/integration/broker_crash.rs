//! RabbitMQ itself SIGKILLed mid-ingest, twice, and restarted on its data. A classic queue
//! forgets the acks it had not written down yet: messages Lazarus archived and saw acked come
//! back, flagged redelivered, long after their ack. Every message is still archived once.

use std::time::Duration;

use crate::brokers::{on_both_brokers, Broker, PrivateBroker};
use crate::helpers::*;

const BACKLOG: usize = 20_000;
const KILLS: usize = 2;
const DUPLICATES: &str = r#"lazarus_duplicate_deliveries_total{broker="default",queue="dlq"}"#;

on_both_brokers!(
    broker_sigkilled_mid_ingest_every_message_archived_once,
    on_both_backends
);
async fn broker_sigkilled_mid_ingest_every_message_archived_once() {
    let mut broker = PrivateBroker::new(Broker::current()).await;
    let (work, dlq) = ("work", "dlq");
    let mut t = Topology::on(&broker.url()).await;
    t.queue(dlq, Default::default()).await;
    // Every persistent message dies on arrival (TTL 0) into the durable classic DLQ.
    dying_queue(&mut t, work, dlq).await;
    publish_many(&t.channel, "", work, "bk", BACKLOG).await;
    t.wait_for_depth(dlq, BACKLOG as u32, Duration::from_secs(60))
        .await;
    let _ = t.connection.close(200, "filled".into()).await;
    // Dead-lettering has no publisher confirm: a clean restart first puts the whole backlog on
    // disk, so that the kills below can only lose acks.
    broker.stop().await;
    broker.start().await;
    let messages_in = broker.queue_messages(dlq).await;
    assert_eq!(
        messages_in, BACKLOG as u64,
        "the backlog survived a clean restart"
    );

    let url = broker.url();
    let app = TestApp::spawn_with(&[dlq], |c| c.connection.amqp_url = url.into()).await;
    let mut archived_at_kills: Vec<i64> = Vec::new();
    for kill in 1..=KILLS {
        // Early, so that the rest takes longer than the kill on a busy machine: the first an
        // eighth in, each later one soon after ingest resumed (redelivered backlogs drain fast).
        let target = match archived_at_kills.last() {
            None => (BACKLOG / 8) as i64,
            Some(last) => last + 200,
        };
        // Looking every 5 ms: the kill lands as close to the target as it can.
        let soon = Patience::within(Duration::from_secs(120)).every(Duration::from_millis(5));
        let what = format!("{target} archived before kill {kill}");
        wait_showing(&what, soon, async || {
            let archived = app.archived().await;
            if archived >= target {
                Ok(())
            } else {
                Err(format!("{archived} archived"))
            }
        })
        .await;
        broker.kill9().await;
        let archived = app.archived().await;
        broker.start().await;
        if archived >= BACKLOG as i64 {
            // Ingest outran this kill; the ones before it did land mid-ingest.
            assert!(kill > 1, "kill 1 came too late to test anything");
            break;
        }
        archived_at_kills.push(archived);
    }
    // Lazarus reconnects by itself; the DLQ ends empty, nothing unacked either.
    // Each look runs rabbitmqctl: every 200 ms.
    let patience = Patience::within(Duration::from_secs(180)).every(Duration::from_millis(200));
    wait_showing("the DLQ to be empty", patience, async || {
        match broker.queue_messages(dlq).await {
            0 => Ok(()),
            left => Err(format!("{left} left, {} archived", app.archived().await)),
        }
    })
    .await;

    let db = &app.database_url;
    let rows = count_rows(db, "SELECT count(*) FROM messages").await;
    let distinct = count_rows(db, "SELECT count(DISTINCT message_id) FROM messages").await;
    let duplicated = count_rows(
        db,
        "SELECT count(*) FROM (SELECT message_id FROM messages GROUP BY message_id HAVING count(*) > 1) AS d",
    )
    .await;
    let skipped = app.counter(DUPLICATES).await;
    eprintln!(
        "{:?} {:?}: {messages_in} messages in; SIGKILLed the broker at {archived_at_kills:?} archived; \
         {rows} rows, {distinct} distinct, {duplicated} messages with more than one row; \
         {skipped} redeliveries recognised as archived",
        Broker::current(),
        Backend::current()
    );
    assert_eq!(rows, messages_in as i64, "rows archived");
    assert_eq!(distinct, rows, "distinct messages");
    assert_eq!(duplicated, 0, "messages archived more than once");
    // The kills made the broker forget acks (thousands, measured on 3.10 and 4.3): else
    // nothing above was tested.
    assert!(skipped > 0, "no acked message came back after the kills");
    assert_eq!(
        count_rows(db, "SELECT count(*) FROM message_bodies").await,
        rows
    );
    assert_eq!(app.archived().await, rows, "the totals");
}

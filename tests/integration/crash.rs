//! The real `lazarus` binary, SIGKILLed in the middle of a 20,000-message backlog and
//! restarted: every message archived exactly once, the DLQ empty.

use std::time::Duration;

use tokio::process::Child;

use crate::helpers::*;

const BACKLOG: i64 = 20_000;

fn start_lazarus(dlq: &str, db: &str) -> Child {
    lazarus_process(&amqp_url(), dlq, db, &["--batch-size", "100"])
}

async fn rows(db: &str) -> i64 {
    count_rows(db, "SELECT COUNT(*) FROM messages").await
}

on_both_backends!(sigkill_mid_ingest_loses_nothing_and_doubles_nothing);
async fn sigkill_mid_ingest_loses_nothing_and_doubles_nothing() {
    let p = unique("crash");
    let (work, dlq) = (format!("{p}.work"), format!("{p}.dlq"));
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    // Every message dies on arrival (TTL 0) into the DLQ: a real x-death on each.
    dying_queue(&mut t, &work, &dlq).await;
    publish_many(&t.channel, "", &work, "crash", BACKLOG as usize).await;
    t.wait_for_depth(&dlq, BACKLOG as u32, Duration::from_secs(60))
        .await;

    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let mut first = start_lazarus(&dlq, &db);
    // Looking every 5 ms: the kill lands as soon after the first 2,000 as it can.
    let soon = Patience::within(Duration::from_secs(60)).every(Duration::from_millis(5));
    wait_until("ingest to start (2,000 archived)", soon, async || {
        rows(&db).await >= 2_000
    })
    .await;
    first.start_kill().unwrap(); // SIGKILL
    first.wait().await.unwrap();
    let at_kill = rows(&db).await;
    assert!(
        at_kill < BACKLOG,
        "killed too late to test anything ({at_kill} archived)"
    );

    let mut second = start_lazarus(&dlq, &db);
    let what = format!("the restart to archive all {BACKLOG}");
    wait_showing(&what, Duration::from_secs(120), async || {
        match rows(&db).await {
            n if n >= BACKLOG => Ok(()),
            n => Err(format!("{n} archived")),
        }
    })
    .await;
    sigterm(&mut second).await;

    assert_eq!(rows(&db).await, BACKLOG);
    assert_eq!(
        count_rows(&db, "SELECT COUNT(DISTINCT message_id) FROM messages").await,
        BACKLOG
    );
    assert_eq!(
        count_rows(&db, "SELECT COUNT(*) FROM message_bodies").await,
        BACKLOG
    );
    assert_eq!(
        count_rows(
            &db,
            "SELECT CAST(COALESCE(SUM(messages), 0) AS BIGINT) FROM queue_reason_counts"
        )
        .await,
        BACKLOG
    );
    assert_eq!(t.depth(&dlq).await, 0, "the DLQ still holds messages");
    eprintln!("killed at {at_kill} of {BACKLOG} archived; the restart finished the rest");
    t.cleanup().await;
}

//! A broker resource alarm blocks publishers (on a broker of the test's own: an alarm stops
//! every publisher on it). A single replay caught by one answers at once that it waits, is
//! not published twice by a retry, and settles when the alarm clears; a job says what it
//! waits for and then completes.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::brokers::{on_both_brokers, Broker, PrivateBroker};
use crate::helpers::*;

/// A private broker with `n` messages dead-lettered from `work` into `dlq` and archived.
async fn archived_dead_letters(n: usize) -> (PrivateBroker, Topology, TestApp, String, String) {
    let broker = PrivateBroker::new(Broker::current()).await;
    let mut t = Topology::on(&broker.url()).await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &unique("alarm")).await;
    let app = TestApp::spawn_with(&[&dlq], |c| c.connection.amqp_url = broker.url().into()).await;
    for i in 0..n {
        let id = format!("a-{i}");
        t.publish("", &work, id.as_bytes(), json_props(&id)).await;
    }
    let worker = rejecting_worker_on(&broker.url(), &work).await;
    app.wait_for_archived(n as i64, Duration::from_secs(20))
        .await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    (broker, t, app, work, dlq)
}

async fn memory_alarm(broker: &PrivateBroker, on: bool) {
    let watermark = if on { "0.000001" } else { "0.4" };
    broker
        .ctl(&["set_vm_memory_high_watermark", watermark])
        .await;
}

async fn a_single_replay_held_back_by_an_alarm_says_so_and_settles() {
    let (broker, t, app, work, dlq) = archived_dead_letters(1).await;
    let id = app.all_messages(&dlq).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    memory_alarm(&broker, true).await;
    let answered = Instant::now();
    let record = app
        .post_json(
            &format!("/api/messages/{id}/replay"),
            json!({"request_key": "alarm-1"}),
            202,
        )
        .await;
    assert!(answered.elapsed() < Duration::from_secs(25), "no 30 s wait");
    assert_eq!(record["outcome"], "publishing", "{record}");
    let detail = record["detail"].as_str().unwrap();
    assert!(detail.contains("blocks publishing"), "{detail}");
    // A retry with a new key cannot publish a second copy meanwhile.
    let retry = app
        .post_json(
            &format!("/api/messages/{id}/replay"),
            json!({"request_key": "alarm-2"}),
            409,
        )
        .await;
    assert!(
        retry["error"].as_str().unwrap().contains("still waiting"),
        "{retry}"
    );
    // The same key gives the same record.
    let same = app
        .post_json(
            &format!("/api/messages/{id}/replay"),
            json!({"request_key": "alarm-1"}),
            200,
        )
        .await;
    assert_eq!(same["id"], record["id"]);

    memory_alarm(&broker, false).await;
    wait_until(
        "the record to settle",
        Duration::from_secs(30),
        async || {
            let detail = app.json(&format!("/api/messages/{id}"), 200).await;
            detail["status"] == "replayed"
        },
    )
    .await;
    let replays = app.archive.replays_of(id.parse().unwrap()).await.unwrap();
    assert_eq!(replays.len(), 1, "one replay, {replays:?}");
    assert_eq!(replays[0].outcome, "published");
    t.wait_for_depth(&work, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(t.depth(&work).await, 1, "published once");
}

on_both_brokers!(a_single_replay_held_back_by_an_alarm_says_so_and_settles);

async fn a_job_held_back_by_an_alarm_says_so_and_completes() {
    let (broker, t, app, work, dlq) = archived_dead_letters(20).await;
    memory_alarm(&broker, true).await;
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "request_key": "alarm-job"}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let waiting = app
        .wait_for_job(&id, Duration::from_secs(30), |j| {
            j["detail"]
                .as_str()
                .is_some_and(|d| d.contains("blocks publishing"))
        })
        .await;
    assert_eq!(waiting["state"], "running", "{waiting}");
    memory_alarm(&broker, false).await;
    let done = app
        .wait_for_job(&id, Duration::from_secs(60), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 20, "{done}");
    assert!(done["detail"].is_null(), "{done}");
    t.wait_for_depth(&work, 20, Duration::from_secs(10)).await;
}

on_both_brokers!(a_job_held_back_by_an_alarm_says_so_and_completes);

//! `--replay-exchange` against a producer that forges its death history: `x-death` is only
//! a header, so without an allow-list a replay without an explicit target publishes, with
//! Lazarus' broker credentials, to the exchange the producer chose. With one, every replay
//! path — single replays, plans and jobs, the job runner, `lazarus replay` — refuses it.

use std::time::Duration;

use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use lazarus::archive::{Actor, JobSpec, Selection};
use lazarus::message::exchange_policy::ExchangePolicy;
use serde_json::json;

use crate::helpers::*;

/// A message that claims to have died in `queue` after being published to `exchange`.
fn forged(message_id: &str, exchange: &str, queue: &str) -> BasicProperties {
    let text = |s: &str| AMQPValue::LongString(s.into());
    let mut death = FieldTable::default();
    for (k, v) in [
        ("queue", text(queue)),
        ("reason", text("rejected")),
        ("exchange", text(exchange)),
    ] {
        death.insert(k.into(), v);
    }
    death.insert("count".into(), AMQPValue::LongLongInt(1));
    death.insert("time".into(), AMQPValue::Timestamp(1_764_669_600));
    death.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![text("stolen")])),
    );
    let mut headers = FieldTable::default();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    headers.insert("x-first-death-exchange".into(), text(exchange));
    headers.insert("x-first-death-queue".into(), text(queue));
    headers.insert("x-first-death-reason".into(), text("rejected"));
    json_props(message_id).with_headers(headers)
}

/// The archive id of the message with this message-id.
async fn id_of(app: &TestApp, dlq: &str, message_id: &str) -> String {
    app.detail_by_message_id(dlq, message_id).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

on_both_backends!(a_forged_death_history_cannot_send_a_replay_elsewhere);
async fn a_forged_death_history_cannot_send_a_replay_elsewhere() {
    let p = unique("forge");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let billing = format!("{p}.billing");
    t.exchange(&billing, ExchangeKind::Direct).await;
    t.bind(&work, &billing, "invoice").await;
    // Where the producer would like Lazarus to publish.
    let (evil, stolen) = (format!("{p}.evil"), format!("{p}.stolen"));
    t.exchange(&evil, ExchangeKind::Fanout).await;
    t.queue(&stolen, Default::default()).await;
    t.bind(&stolen, &evil, "").await;

    // Without an allow-list, the forged history decides where a replay goes.
    let mut open = TestApp::spawn(&[&dlq]).await;
    t.publish("", &dlq, b"{}", forged("forged-0", &evil, &work))
        .await;
    open.wait_for_archived(1, Duration::from_secs(10)).await;
    let id = id_of(&open, &dlq, "forged-0").await;
    let replayed = open
        .post_json(&format!("/api/messages/{id}/replay"), json!({}), 200)
        .await;
    assert_eq!(replayed["target"]["exchange"], evil.as_str());
    t.wait_for_depth(&stolen, 1, Duration::from_secs(5)).await;
    open.stop().await;

    // With one, nothing goes there, whichever way the replay is asked for.
    let pattern = format!("{p}.bill*");
    let app = TestApp::spawn_with(&[&dlq], |c| c.replay_exchanges = vec![pattern.clone()]).await;
    t.publish("", &dlq, b"{}", forged("forged-1", &evil, &work))
        .await;
    t.publish(&billing, "invoice", b"{}", json_props("real-1"))
        .await;
    let worker = rejecting_worker(&work).await;
    app.wait_for_archived(2, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (forged_id, real_id) = (
        id_of(&app, &dlq, "forged-1").await,
        id_of(&app, &dlq, "real-1").await,
    );
    let refused = app
        .post_json(&format!("/api/messages/{forged_id}/replay"), json!({}), 403)
        .await;
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains(&evil) && error.contains("--replay-exchange"),
        "{error}"
    );
    let chosen = json!({"target": {"exchange": evil, "routing_key": ""}});
    app.post_json(&format!("/api/messages/{forged_id}/replay"), chosen, 403)
        .await;
    let real = app
        .post_json(&format!("/api/messages/{real_id}/replay"), json!({}), 200)
        .await;
    assert_eq!(real["outcome"], "published", "{real}");

    // A plan flags it and skips it; the job publishes the rest.
    let plan = app
        .post_json(
            "/api/replays",
            json!({"ids": [forged_id, real_id], "include_replayed": true, "dry_run": true}),
            200,
        )
        .await;
    assert_eq!(plan["plan"]["to_publish"], 1, "{plan}");
    assert_eq!(plan["plan"]["not_allowed"], 1, "{plan}");
    assert_eq!(
        plan["plan"]["refused_targets"][0]["exchange"],
        evil.as_str()
    );
    let job = plan["id"].as_str().unwrap().to_owned();
    let page = app.get(&format!("/replays/{job}")).await.text();
    assert!(
        page.contains(&evil) && page.contains("--replay-exchange"),
        "the plan page says where they will not go"
    );
    app.post_json(&format!("/api/replays/{job}/start"), json!({}), 200)
        .await;
    let done = app
        .wait_for_job(&job, Duration::from_secs(20), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 1, "{done}");
    assert_eq!(done["counts"]["skipped"], 1, "{done}");

    // A job planned where any exchange was allowed (another instance, an older setting):
    // the runner here refuses its message all the same.
    let elsewhere = app
        .archive
        .create_job(&JobSpec {
            request_key: "planned-elsewhere",
            actor: &Actor::system("test"),
            selection: &Selection::Ids(vec![forged_id.parse().unwrap()]),
            selection_text: "{}",
            target: None,
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: true,
            canary: None,
            start: true,
            policy: &ExchangePolicy::default(),
        })
        .await
        .unwrap();
    let done = app
        .wait_for_job(&elsewhere.id.to_string(), Duration::from_secs(20), |j| {
            j["state"] == "completed"
        })
        .await;
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    let items = app
        .json(&format!("/api/replays/{}/items", elsewhere.id), 200)
        .await;
    assert!(
        items["items"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("--replay-exchange"),
        "{items}"
    );

    // `lazarus replay` plans by the same rule.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args([
            "replay",
            "--id",
            &forged_id,
            "--include-replayed",
            "--dry-run",
        ])
        .args(["--replay-exchange", &pattern])
        .args(["--database-url", &app.database_url])
        .env("LAZARUS_AMQP_URL", amqp_url())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&cli.stdout);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        out.contains(&evil) && out.contains("not an exchange --replay-exchange allows"),
        "{out}"
    );

    assert_eq!(
        t.depth(&stolen).await,
        1,
        "nothing more reached the producer's queue"
    );
    t.cleanup().await;
}

//! Bulk replay against the real broker: plans freeze their selection, jobs publish with
//! per-message outcomes, skip what was replayed, report unroutable messages and missing
//! exchanges, pause, resume and cancel promptly, and a canary stops a replay whose copies
//! die again. Dismissals and the audit log ride along.

use std::time::Duration;

use lapin::options::BasicGetOptions;
use lapin::ExchangeKind;
use serde_json::{json, Value};

use crate::helpers::*;

/// Dead-letters `n` JSON messages through `work` into `dlq` with a rejecting consumer, and
/// waits until Lazarus archived them (`already` archived before).
async fn dead_letter(t: &Topology, app: &TestApp, work: &str, n: usize, already: i64) {
    publish_many(&t.channel, "", work, "m", n).await;
    let worker = rejecting_worker(work).await;
    app.wait_for_archived(already + n as i64, Duration::from_secs(30))
        .await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await; // its channel closes
}

/// A work queue dead-lettering into a DLQ that Lazarus archives, with `n` messages already
/// dead-lettered and archived: (topology, app, work, dlq).
async fn dead_lettered(prefix: &str, n: usize) -> (Topology, TestApp, String, String) {
    let p = unique(prefix);
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    dead_letter(&t, &app, &work, n, 0).await;
    (t, app, work, dlq)
}

/// A queue to replay into and a DLQ holding `n` archived messages without death history
/// (message-ids `{prefix}-{i}`), with Lazarus archiving the DLQ: (topology, app, queue, dlq).
async fn archived_bare(prefix: &str, n: usize) -> (Topology, TestApp, String, String) {
    let p = unique(prefix);
    let (queue, dlq) = (format!("{p}.q"), format!("{p}.dlq"));
    let mut t = Topology::new().await;
    t.queue(&queue, Default::default()).await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    publish_many(&t.channel, "", &dlq, prefix, n).await;
    app.wait_for_archived(n as i64, Duration::from_secs(20))
        .await;
    (t, app, queue, dlq)
}

fn state(job: &Value) -> &str {
    job["state"].as_str().unwrap()
}

fn count(job: &Value, outcome: &str) -> i64 {
    job["counts"][outcome].as_i64().unwrap()
}

on_both_backends!(a_plan_freezes_its_selection_and_its_job_publishes_it_once);
async fn a_plan_freezes_its_selection_and_its_job_publishes_it_once() {
    let (t, app, work, dlq) = dead_lettered("plan", 5).await;
    // A bare copy in the DLQ: no death history, so no known target.
    t.publish("", &dlq, b"bare", json_props("bare-1")).await;
    app.wait_for_archived(6, Duration::from_secs(10)).await;
    let ids = app.ids(&dlq).await;

    // One was replayed on its own already.
    let single = app
        .post_json(&format!("/api/messages/{}/replay", ids[0]), json!({}), 200)
        .await;
    assert_eq!(single["outcome"], "published");
    t.wait_for_depth(&work, 1, Duration::from_secs(5)).await;
    t.channel
        .queue_purge(work.as_str().into(), Default::default())
        .await
        .unwrap();

    let plan = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "dry_run": true}),
            200,
        )
        .await;
    assert_eq!(state(&plan), "planned");
    assert_eq!(
        plan["plan"],
        json!({
            "messages": 6, "to_publish": 4,
            "targets": [{"exchange": "", "routing_key": work, "messages": 4}],
            "no_target": 1, "already_replayed": 1, "dismissed": 0, "in_other_jobs": 0,
            "not_allowed": 0, "refused_targets": []
        })
    );
    assert_eq!(t.depth(&work).await, 0, "a plan publishes nothing");

    // Archived after the plan: not swept in.
    dead_letter(&t, &app, &work, 1, 6).await;
    let id = plan["id"].as_str().unwrap();
    let started = app
        .post_json(&format!("/api/replays/{id}/start"), json!({}), 200)
        .await;
    assert_ne!(state(&started), "planned");
    let job = app
        .wait_for_job(id, Duration::from_secs(20), |j| state(j) == "completed")
        .await;
    assert_eq!(count(&job, "published"), 4);
    assert_eq!(count(&job, "skipped"), 2);
    assert_eq!(count(&job, "pending"), 0);
    assert_eq!(job["total"], 6);
    t.wait_for_depth(&work, 4, Duration::from_secs(5)).await;

    // The copies carry the links to their record and their job.
    let got = t
        .channel
        .basic_get(work.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    let headers = got.delivery.properties.headers().clone().unwrap();
    let text = |name: &str| match headers.inner().get(name) {
        Some(lapin::types::AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(text("x-lazarus-replay-job"), id);
    assert_eq!(text("x-lazarus-replay-of"), ids[1]);
    assert!(!headers.inner().contains_key("x-death"));

    // Per-message outcomes.
    let skipped = app
        .json(&format!("/api/replays/{id}/items?outcome=skipped"), 200)
        .await;
    let details: Vec<&str> = skipped["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["detail"].as_str().unwrap())
        .collect();
    assert_eq!(details, ["already replayed", "no known target"]);
    let published = app
        .json(
            &format!("/api/replays/{id}/items?outcome=published&limit=2"),
            200,
        )
        .await;
    assert_eq!(published["items"].as_array().unwrap().len(), 2);
    assert!(published["next_after"].is_string());
    for id in &ids[1..5] {
        assert_eq!(
            app.json(&format!("/api/messages/{id}"), 200).await["status"],
            "replayed"
        );
    }

    // Clear answers for what cannot be done.
    let again = app
        .post_json(&format!("/api/replays/{id}/start"), json!({}), 409)
        .await;
    assert!(
        again["error"].as_str().unwrap().contains("completed"),
        "{again}"
    );
    app.post_json("/api/replays/999999/cancel", json!({}), 404)
        .await;
    app.post_json(&format!("/api/replays/{id}/explode"), json!({}), 404)
        .await;
    app.json(&format!("/api/replays/{id}/items?outcome=lost"), 400)
        .await;
    for bad in [
        json!({}),
        json!({"ids": ["1"], "filter": {}}),
        json!({"ids": []}),
        json!({"ids": ["abc"]}),
        json!({"ids": ["1"], "rate_per_sec": 0}),
        json!({"ids": ["1"], "canary": {"count": 0, "wait_secs": 1}}),
        json!({"filter": {"q": "\"open"}}),
        json!({"filter": {}}),
    ] {
        let answer = app.post_json("/api/replays", bad.clone(), 400).await;
        assert!(answer["error"].is_string(), "{bad} → {answer}");
    }

    // The same request key gives the same job back.
    let keyed = json!({"ids": [ids[5]], "request_key": "k-1", "dry_run": true});
    let a = app.post_json("/api/replays", keyed.clone(), 200).await;
    let b = app.post_json("/api/replays", keyed, 200).await;
    assert_eq!(a["id"], b["id"]);

    let audit = app.json("/api/audit", 200).await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in ["replay", "job_plan", "job_start", "job_complete"] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
    t.cleanup().await;
}

on_both_backends!(unroutable_copies_are_reported_and_stay_replayable);
async fn unroutable_copies_are_reported_and_stay_replayable() {
    let (mut t, app, queue, dlq) = archived_bare("u", 3).await;
    let (p, exchange) = (
        queue.trim_end_matches(".q").to_owned(),
        format!("{queue}.direct"),
    );
    t.exchange(&exchange, ExchangeKind::Direct).await;
    let target = json!({"exchange": exchange, "routing_key": "orders"});

    // Nothing is bound for the key: every copy comes back unroutable.
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "target": target}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap();
    let job = app
        .wait_for_job(id, Duration::from_secs(20), |j| state(j) == "completed")
        .await;
    assert_eq!(count(&job, "unroutable"), 3);
    assert_eq!(count(&job, "published"), 0);
    let items = app.json(&format!("/api/replays/{id}/items"), 200).await;
    assert!(items["items"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("NO_ROUTE"));
    for m in app.all_messages(&dlq).await {
        assert_eq!(m["status"], "replay_failed");
    }

    // Bound again, the same messages replay (a failed replay is not "already replayed").
    t.bind(&queue, &exchange, "orders").await;
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "target": target}),
            200,
        )
        .await;
    let job = app
        .wait_for_job(job["id"].as_str().unwrap(), Duration::from_secs(20), |j| {
            state(j) == "completed"
        })
        .await;
    assert_eq!(count(&job, "published"), 3);
    t.wait_for_depth(&queue, 3, Duration::from_secs(5)).await;

    // A target exchange that does not exist pauses the job before anything is published.
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "target": {"exchange": format!("{p}.gone"), "routing_key": "x"}, "include_replayed": true}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap();
    let job = app
        .wait_for_job(id, Duration::from_secs(20), |j| state(j) == "paused")
        .await;
    assert!(
        job["detail"].as_str().unwrap().contains("does not exist"),
        "{job}"
    );
    assert_eq!(count(&job, "pending"), 3);
    let job = app
        .post_json(&format!("/api/replays/{id}/cancel"), json!({}), 200)
        .await;
    assert_eq!(state(&job), "cancelled");
    assert_eq!(count(&job, "cancelled"), 3);
    t.cleanup().await;
}

on_both_backends!(pause_resume_and_cancel_take_effect_within_a_second);
async fn pause_resume_and_cancel_take_effect_within_a_second() {
    let (t, app, queue, dlq) = archived_bare("c", 400).await;

    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "target": {"exchange": "", "routing_key": queue}, "rate_per_sec": 50}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    // Settles within a second, then stays put for another.
    let still = |t: &Topology, queue: String| {
        let channel = t.channel.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let depth = |c: lapin::Channel, q: String| async move {
                c.queue_declare(
                    q.as_str().into(),
                    lapin::options::QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    Default::default(),
                )
                .await
                .unwrap()
                .message_count()
            };
            let settled = depth(channel.clone(), queue.clone()).await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            (settled, depth(channel, queue).await)
        }
    };

    t.wait_for_depth_at_least(&queue, 25, Duration::from_secs(10))
        .await;
    let paused = app
        .post_json(&format!("/api/replays/{id}/pause"), json!({}), 200)
        .await;
    assert_eq!(state(&paused), "paused");
    let (settled, later) = still(&t, queue.clone()).await;
    assert_eq!(settled, later, "publishing went on after the pause");
    assert!(settled < 400);

    app.post_json(&format!("/api/replays/{id}/resume"), json!({}), 200)
        .await;
    t.wait_for_depth_at_least(&queue, settled + 25, Duration::from_secs(10))
        .await;
    let cancelled = app
        .post_json(&format!("/api/replays/{id}/cancel"), json!({}), 200)
        .await;
    assert_eq!(state(&cancelled), "cancelled");
    let at_cancel = t.depth(&queue).await;
    let (settled, later) = still(&t, queue.clone()).await;
    assert_eq!(settled, later, "publishing went on after the cancel");
    assert!(settled < 400, "the job ended before the cancel");
    let job = app
        .wait_for_job(&id, Duration::from_secs(5), |j| count(j, "pending") == 0)
        .await;
    assert_eq!(
        count(&job, "published") + count(&job, "cancelled"),
        400,
        "every message has one final outcome: {job}"
    );
    assert_eq!(count(&job, "published"), i64::from(settled));
    eprintln!(
        "cancelled at {at_cancel} of 400 in the queue; {} more confirmed after the cancel answered",
        settled - at_cancel
    );
    t.cleanup().await;
}

on_both_backends!(a_canary_pauses_the_job_when_its_copies_die_again);
async fn a_canary_pauses_the_job_when_its_copies_die_again() {
    let (t, app, work, dlq) = dead_lettered("canary", 20).await;

    // The consumer still fails: the first 3 copies die again and come back archived.
    let worker = rejecting_worker(&work).await;
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "canary": {"count": 3, "wait_secs": 2, "max_deaths": 0}}),
            200,
        )
        .await;
    let id = job["id"].as_str().unwrap();
    let job = app
        .wait_for_job(id, Duration::from_secs(20), |j| state(j) == "paused")
        .await;
    assert!(
        job["detail"]
            .as_str()
            .unwrap()
            .contains("3 of the first 3 replayed copies died again"),
        "{job}"
    );
    assert_eq!(count(&job, "published"), 3);
    assert_eq!(count(&job, "pending"), 17);
    // What the LazarusReplayPausedByCanary alert (deploy/prometheus) fires on.
    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains("lazarus_replay_canary_pauses_total 1"),
        "{metrics}"
    );
    app.wait_for_archived(23, Duration::from_secs(5)).await;
    let copies = app.all_messages(&dlq).await.into_iter().skip(20).count();
    assert_eq!(copies, 3, "the copies that died again are archived");
    worker.abort();

    // Fixed: resuming publishes the rest without judging the canary again.
    let fixed = acking_worker(&work).await;
    app.post_json(&format!("/api/replays/{id}/resume"), json!({}), 200)
        .await;
    let job = app
        .wait_for_job(id, Duration::from_secs(20), |j| state(j) == "completed")
        .await;
    assert_eq!(count(&job, "published"), 20);
    fixed.abort();
    t.cleanup().await;
}

on_both_backends!(dismissing_one_or_a_search_keeps_a_note_and_an_audit_entry);
async fn dismissing_one_or_a_search_keeps_a_note_and_an_audit_entry() {
    let (t, app, _, dlq) = archived_bare("d", 4).await;
    let ids = app.ids(&dlq).await;

    let missing_note = app
        .post_json(&format!("/api/messages/{}/dismiss", ids[0]), json!({}), 400)
        .await;
    assert!(missing_note["error"].as_str().unwrap().contains("note"));
    let one = app
        .post_json(
            &format!("/api/messages/{}/dismiss", ids[0]),
            json!({"note": "duplicate of INV-7, refunded by hand"}),
            200,
        )
        .await;
    assert_eq!(one["dismissed"], 1);
    let detail = app.json(&format!("/api/messages/{}", ids[0]), 200).await;
    assert_eq!(detail["status"], "dismissed");
    assert_eq!(
        detail["status_note"],
        "duplicate of INV-7, refunded by hand"
    );

    let rest = app
        .post_json(
            "/api/messages/dismiss",
            json!({"filter": {"queue": dlq, "status": "archived"}, "note": "test traffic"}),
            200,
        )
        .await;
    assert_eq!(rest["dismissed"], 3);
    let dismissed = app
        .json(&format!("/api/messages?queue={dlq}&status=dismissed"), 200)
        .await;
    assert_eq!(dismissed["messages"].as_array().unwrap().len(), 4);
    app.post_json("/api/messages/999999/dismiss", json!({"note": "x"}), 404)
        .await;

    // A bulk replay skips dismissed messages unless asked to include them.
    let plan = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "target": {"exchange": "", "routing_key": dlq}, "dry_run": true}),
            200,
        )
        .await;
    assert_eq!(plan["plan"]["dismissed"], 4);
    assert_eq!(plan["plan"]["to_publish"], 0);
    let audit = app.json("/api/audit?limit=5", 200).await;
    let dismissals: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "dismiss")
        .map(|e| e["summary"].as_str().unwrap())
        .collect();
    assert_eq!(dismissals.len(), 2, "{audit}");
    assert!(dismissals[0].contains("test traffic"));
    t.cleanup().await;
}

on_both_backends!(edit_and_replay_publishes_the_edit_and_keeps_the_original);
async fn edit_and_replay_publishes_the_edit_and_keeps_the_original() {
    let (t, app, work, dlq) = dead_lettered("edit", 1).await;
    let id = app.ids(&dlq).await.remove(0);
    let path = format!("/api/messages/{id}/replay");

    let invalid = app
        .post_json(&path, json!({"body": "{\"n\": 0,"}), 400)
        .await;
    assert!(
        invalid["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{invalid}"
    );
    assert_eq!(t.depth(&work).await, 0);

    let edited = app
        .post_json(
            &path,
            json!({
                "body": "{\"n\": 0, \"fixed\": true}",
                "headers": {"tenant": {"type": "short-short-uint", "value": 9}}
            }),
            200,
        )
        .await;
    assert_eq!(edited["outcome"], "published");
    assert_eq!(edited["edited"], true);
    let got = t
        .channel
        .basic_get(work.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, b"{\"n\": 0, \"fixed\": true}");
    let headers = got.delivery.properties.headers().clone().unwrap();
    assert_eq!(
        headers.inner().get("tenant"),
        Some(&lapin::types::AMQPValue::ShortShortUInt(9))
    );
    assert!(headers.inner().contains_key("x-lazarus-replay-of"));
    // The archived original is untouched.
    assert!(String::from_utf8(app.body(&id).await)
        .unwrap()
        .starts_with("{\"n\": 0, \"padding\""));
    let audit = app.json("/api/audit", 200).await;
    assert_eq!(audit["entries"][0]["action"], "edit_replay");
    t.cleanup().await;
}

on_both_backends!(a_body_whose_content_encoding_names_its_charset_is_edited_as_text);
/// kombu and Celery send `content_encoding: utf-8`, Java publishers `UTF-8`: such a body is
/// text, and Edit & replay takes it (page and API); a real transfer encoding does not.
async fn a_body_whose_content_encoding_names_its_charset_is_edited_as_text() {
    let (t, app, queue, dlq) = archived_bare("charset", 0).await;
    let props = |id: &str, encoding: &str| json_props(id).with_content_encoding(encoding.into());
    let celery = br#"{"task": "tasks.add", "args": [1, 2]}"#;
    t.publish("", &dlq, celery, props("celery", "utf-8")).await;
    t.publish("", &dlq, b"{\"java\": true}", props("java", "UTF-8"))
        .await;
    t.publish("", &dlq, b"not really gzip", props("gzip", "gzip"))
        .await;
    app.wait_for_archived(3, Duration::from_secs(20)).await;
    let id = |message_id: &'static str| {
        let app = &app;
        let dlq = &dlq;
        async move {
            app.detail_by_message_id(dlq, message_id).await["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (celery_id, java_id, gzip_id) = (id("celery").await, id("java").await, id("gzip").await);

    let page = app.get(&format!("/messages/{celery_id}")).await.text();
    assert!(
        page.contains("<textarea name=\"body\""),
        "the edit form is offered"
    );
    assert!(page.contains("tasks.add"));
    let gzip_page = app.get(&format!("/messages/{gzip_id}")).await.text();
    assert!(!gzip_page.contains("<textarea name=\"body\""));

    let target = json!({"exchange": "", "routing_key": queue});
    for (id, body) in [
        (&celery_id, r#"{"task": "tasks.add", "args": [2, 2]}"#),
        (&java_id, r#"{"java": "fixed"}"#),
    ] {
        let edited = app
            .post_json(
                &format!("/api/messages/{id}/replay"),
                json!({"target": target, "body": body}),
                200,
            )
            .await;
        assert_eq!(edited["outcome"], "published", "{edited}");
        let got = t
            .channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("the edited copy arrived");
        assert_eq!(got.delivery.data, body.as_bytes());
    }
    let refused = app
        .post_json(
            &format!("/api/messages/{gzip_id}/replay"),
            json!({"target": target, "body": "{}"}),
            400,
        )
        .await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("encoded or binary"),
        "{refused}"
    );
    assert_eq!(t.depth(&queue).await, 0);
    t.cleanup().await;
}

const JOB_SIZE: usize = 20_000;

on_both_backends!(a_20000_message_job_survives_a_closed_connection_and_a_sigkill);
async fn a_20000_message_job_survives_a_closed_connection_and_a_sigkill() {
    use lazarus::archive::{JobSpec, MessageFilter, Selection};
    use lazarus::message::death::ReplayTarget;

    let vhost = Vhost::create("jobcrash");
    let (dlq, work) = ("dlq", "work");
    let mut t = Topology::on(&vhost.url()).await;
    t.queue(dlq, Default::default()).await;
    t.queue(work, Default::default()).await;
    publish_many(&t.channel, "", dlq, "jc", JOB_SIZE).await;

    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let flags = ["--job-lease-secs", "2"];
    let mut first = lazarus_process(&vhost.url(), dlq, &db, &flags);
    let what = format!("all {JOB_SIZE} archived (ingest too slow)");
    wait_showing(&what, Duration::from_secs(60), async || {
        match count_rows(&db, "SELECT COUNT(*) FROM messages").await {
            n if n >= JOB_SIZE as i64 => Ok(()),
            n => Err(format!("{n} archived")),
        }
    })
    .await;

    // The job is made in the archive file the process runs from (as `lazarus replay` does).
    let archive = lazarus::archive::open(&db).await.unwrap();
    let selection = Selection::Filter(Box::new(MessageFilter {
        queue: Some(dlq.into()),
        ..Default::default()
    }));
    let target = ReplayTarget {
        exchange: String::new(),
        routing_key: work.into(),
    };
    let job = archive
        .create_job(&JobSpec {
            request_key: "crash-test",
            actor: &lazarus::archive::Actor::system("test"),
            selection: &selection,
            selection_text: "{}",
            target: Some(&target),
            to_first_death_queue: false,
            rate_per_sec: Some(2_500),
            include_replayed: false,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    let published = || async { archive.job(job.id).await.unwrap().unwrap().counts.published };
    // Looking every 20 ms: the close and the kill land soon after their mark.
    let soon = Patience::within(Duration::from_secs(60)).every(Duration::from_millis(20));
    let wait_published = |n: i64| async move {
        let what = format!("the job to publish {n} (it stalled)");
        wait_showing(&what, soon, async || match published().await {
            now if now >= n => Ok(()),
            now => Err(format!("{now} published")),
        })
        .await
    };
    wait_published(3_000).await;
    rabbitmqctl(&[
        "close_all_connections",
        "-p",
        &vhost.name,
        "closed by the job test",
    ]);
    let at_close = published().await;
    wait_published(at_close + 4_000).await;
    first.start_kill().unwrap(); // SIGKILL
    first.wait().await.unwrap();
    let at_kill = published().await;
    assert!(
        at_kill < JOB_SIZE as i64,
        "killed too late ({at_kill} published)"
    );

    let mut second = lazarus_process(&vhost.url(), dlq, &db, &flags);
    let job = wait_showing("the job to finish", Duration::from_secs(120), async || {
        let job = archive.job(job.id).await.unwrap().unwrap();
        if job.state.is_final() {
            Ok(job)
        } else {
            Err(format!("{job:?}"))
        }
    })
    .await;
    assert_eq!(job.state.as_str(), "completed");
    assert_eq!(job.total, JOB_SIZE as i64);
    assert_eq!(job.counts.published, JOB_SIZE as i64, "{:?}", job.counts);
    assert_eq!(job.counts.pending, 0);
    assert_eq!(
        count_rows(
            &db,
            "SELECT COUNT(*) FROM replay_job_items WHERE outcome = 'published'"
        )
        .await,
        JOB_SIZE as i64,
        "every message has exactly one final outcome"
    );

    let links = drain_links(&vhost.url(), work).await;
    let distinct: std::collections::HashSet<&String> = links.iter().collect();
    assert_eq!(distinct.len(), JOB_SIZE, "every message arrived");
    let duplicates = links.len() - distinct.len();
    assert!(
        duplicates <= 2 * 2 * REPLAY_WINDOW,
        "{duplicates} copies published twice: more than two windows per interruption"
    );
    eprintln!(
        "connection closed at {at_close}, SIGKILL at {at_kill} of {JOB_SIZE} published; \
         {duplicates} published twice"
    );
    sigterm(&mut second).await;
}

on_both_backends!(the_pages_plan_start_and_follow_a_replay_without_script);
async fn the_pages_plan_start_and_follow_a_replay_without_script() {
    let (t, app, queue, dlq) = archived_bare("pg", 3).await;
    let ids = app.ids(&dlq).await;

    let list = app.get(&format!("/messages?queue={dlq}")).await.text();
    assert!(list.contains(r#"<form id="selection""#), "{list}");
    assert!(list.contains(&format!(
        r#"<input type="hidden" form="selection" name="queue" value="{dlq}">"#
    )));

    // Nothing ticked: a clear page, not a plan.
    let none = post_form(
        app.addr,
        "/messages/select",
        &format!("queue={dlq}&action=plan"),
    )
    .await;
    assert_eq!(none.status, 400);
    assert!(none.text().contains("tick the messages"));

    // Two ticked rows, a chosen target and a rate: a plan page.
    let form = format!(
        "id={}&id={}&target_exchange=&target_routing_key={queue}&rate_per_sec=100&action=plan",
        ids[0], ids[1]
    );
    let planned = post_form(app.addr, "/messages/select", &form).await;
    assert_eq!(planned.status, 303, "{}", planned.text());
    let location = planned.header("location").unwrap().to_owned();
    let page = app.get(&location).await.text();
    assert!(page.contains("Replay plan"), "{page}");
    assert!(
        page.contains("<strong>2</strong>"),
        "two to publish: {page}"
    );
    assert!(page.contains("Start replay"));
    assert_eq!(t.depth(&queue).await, 0);

    // Start from the page; the progress partial is what htmx polls.
    let started = post_form(app.addr, &format!("{location}/start"), "").await;
    assert_eq!(started.status, 303);
    t.wait_for_depth(&queue, 2, Duration::from_secs(10)).await;
    let id = location.trim_start_matches("/replays/");
    app.wait_for_job(id, Duration::from_secs(10), |j| state(j) == "completed")
        .await;
    let progress = app.get(&format!("{location}/progress")).await.text();
    assert!(progress.contains("completed"), "{progress}");
    assert!(
        !progress.contains("hx-trigger"),
        "a finished job is not polled"
    );
    let page = app
        .get(&format!("{location}?outcome=published"))
        .await
        .text();
    assert!(page.contains(&format!(r#"href="/messages/{}""#, ids[1])));
    assert!(app.get("/replays").await.text().contains(&location));
    assert_eq!(app.get("/replays/12345678").await.status, 404);
    assert_eq!(
        app.get(&format!("{location}?outcome=bogus")).await.status,
        400
    );

    // Every message matching the filters, dismissed with a note.
    let dismissed = post_form(
        app.addr,
        "/messages/select",
        &format!("queue={dlq}&all_matching=1&action=dismiss&note=load+test"),
    )
    .await;
    assert_eq!(dismissed.status, 303);
    assert_eq!(
        app.json(&format!("/api/messages/{}", ids[2]), 200).await["status"],
        "dismissed"
    );
    let audit = app.get("/audit").await.text();
    assert!(audit.contains("load test"), "{audit}");
    assert!(audit.contains(&format!(r#"href="{location}""#)));
    t.cleanup().await;
}

/// Runs `lazarus replay` against an archive file and broker; returns (exit code, stdout).
async fn lazarus_replay(db: &str, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .arg("replay")
        .args(args)
        .args(["--database-url", db])
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("lazarus replay {args:?}:\n{stdout}{stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

on_both_backends!(the_cli_plans_replays_and_exits_non_zero_when_something_failed);
async fn the_cli_plans_replays_and_exits_non_zero_when_something_failed() {
    let (mut t, mut app, queue, dlq) = archived_bare("cli", 5).await;
    let exchange = format!("{queue}.ex");
    t.exchange(&exchange, ExchangeKind::Direct).await;
    app.stop().await; // the CLI runs its job itself
    let db = app.database_url.clone();
    let target = format!("/{queue}");

    let (code, out) =
        lazarus_replay(&db, &["--queue", &dlq, "--target", &target, "--dry-run"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("5 messages selected, 5 to publish"), "{out}");
    assert!(out.contains("Dry run"));
    assert_eq!(t.depth(&queue).await, 0);

    let (code, out) = lazarus_replay(
        &db,
        &["--queue", &dlq, "--target", &target, "--rate", "1000"],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("completed: 5/5 done · published 5"), "{out}");
    t.wait_for_depth(&queue, 5, Duration::from_secs(5)).await;

    // Already replayed: skipped, nothing to publish, still a clean run.
    let (code, out) = lazarus_replay(&db, &["--queue", &dlq, "--target", &target]).await;
    assert_eq!(code, 0);
    assert!(out.contains("5 already replayed"), "{out}");

    // Nothing bound for the key: unroutable, so the exit code says it failed.
    let unbound = format!("{exchange}/nowhere");
    let (code, out) = lazarus_replay(
        &db,
        &["--queue", &dlq, "--target", &unbound, "--include-replayed"],
    )
    .await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unroutable 5"), "{out}");

    let (code, _) = lazarus_replay(&db, &["--target", &target]).await;
    assert_ne!(code, 0, "no selection is refused");
    t.cleanup().await;
}

on_both_backends!(purging_deletes_messages_with_their_bodies_search_entries_and_totals);
async fn purging_deletes_messages_with_their_bodies_search_entries_and_totals() {
    let p = unique("purge");
    let (keep, dlq) = (format!("{p}.keep"), format!("{p}.dlq"));
    let mut t = Topology::new().await;
    t.queue(&keep, Default::default()).await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq, &keep]).await;
    publish_many(&t.channel, "", &dlq, "gone", 4).await;
    publish_many(&t.channel, "", &keep, "kept", 2).await;
    app.wait_for_archived(6, Duration::from_secs(10)).await;
    let ids = app.ids(&dlq).await;
    // One of them was replayed: its replay record goes with it.
    app.post_json(
        &format!("/api/messages/{}/replay", ids[0]),
        json!({"target": {"exchange": "", "routing_key": keep}}),
        200,
    )
    .await;
    app.wait_for_archived(7, Duration::from_secs(10)).await;

    let no_note = app
        .post_json("/api/admin/purge", json!({"filter": {"queue": dlq}}), 400)
        .await;
    assert!(no_note["error"].as_str().unwrap().contains("note"));
    let purged = app
        .post_json(
            "/api/admin/purge",
            json!({"filter": {"queue": dlq}, "note": "retention: test traffic"}),
            200,
        )
        .await;
    assert_eq!(purged["purged"], 4);
    assert_eq!(
        app.archived().await,
        3,
        "the totals lost the purged messages"
    );
    assert!(app.all_messages(&dlq).await.is_empty());
    app.json(&format!("/api/messages/{}", ids[1]), 404).await;
    assert_eq!(
        app.get(&format!("/api/messages/{}/body", ids[1]))
            .await
            .status,
        404
    );
    // (The replayed copy of gone-0 now lives in the other queue.)
    let found = app
        .json(&format!("/api/messages?q=gone%20queue:{dlq}"), 200)
        .await;
    assert_eq!(
        found["messages"],
        json!([]),
        "gone from the search index too"
    );
    assert_eq!(
        app.all_messages(&keep).await.len(),
        3,
        "the rest is untouched"
    );
    let metrics = app.get("/metrics").await.text();
    assert!(
        !metrics.contains(&format!(
            "lazarus_archived_messages{{broker=\"default\",queue=\"{dlq}\""
        )),
        "no stale total left: {metrics}"
    );
    let audit = app.json("/api/audit", 200).await;
    assert_eq!(audit["entries"][0]["action"], "purge");
    assert!(audit["entries"][0]["summary"]
        .as_str()
        .unwrap()
        .contains("purged 4 messages"));
    t.cleanup().await;
}

on_both_backends!(a_body_over_a_mib_replays_as_read_and_is_edited_only_up_to_8_mib);
/// A 9 MiB text body: replayed as archived (read from the archive as it is published) and
/// with only its headers edited, it arrives byte for byte; an edit of its body is refused,
/// saying why (it would be read whole to check it), and nothing is published.
async fn a_body_over_a_mib_replays_as_read_and_is_edited_only_up_to_8_mib() {
    let (t, app, queue, dlq) = archived_bare("bigedit", 0).await;
    let body: Vec<u8> = (0..9 * 1024 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) ^ ((i >> 20) as u8 & 1))
        .collect();
    t.publish("", &dlq, &body, json_props("big")).await;
    app.wait_for_archived(1, Duration::from_secs(30)).await;
    let id = app.ids(&dlq).await.remove(0);
    let path = format!("/api/messages/{id}/replay");
    let target = json!({"exchange": "", "routing_key": queue});

    let refused = app
        .post_json(&path, json!({"target": target, "body": "{}"}), 400)
        .await;
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("over 8 MiB cannot be edited"), "{error}");
    assert_eq!(t.depth(&queue).await, 0, "nothing was published");

    for (key, request) in [
        ("as-archived", json!({"target": target})),
        (
            "headers-only",
            json!({"target": target, "headers": {"tenant": {"type": "short-short-uint", "value": 9}}}),
        ),
    ] {
        let mut request = request;
        request["request_key"] = json!(key);
        let answer = app.post_json(&path, request, 200).await;
        assert_eq!(answer["outcome"], "published", "{key}: {answer}");
        let got = t
            .channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("the copy");
        assert!(got.delivery.data == body, "{key}: the copy is the body");
    }
    t.cleanup().await;
}

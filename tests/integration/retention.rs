//! Retention against real dead letters on both backends: ages, resolved ages and caps delete
//! what the policy no longer keeps — never what an unfinished job holds — with totals, groups
//! and sparklines exact and one audit entry a pass; `serve` runs it in the background, and
//! `lazarus retention [--dry-run]` from the command line; SQLite gives the space back.

use std::time::Duration;

use lazarus::retention::{self, Policy, RetentionSpec};
use serde_json::json;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

/// `n` messages dead-lettered by the broker (rejected by a failing consumer of `work`) and
/// archived by `app`.
async fn dead_letter(t: &Topology, app: &TestApp, work: &str, prefix: &str, n: usize) {
    publish_many(&t.channel, "", work, prefix, n).await;
    let worker = rejecting_worker(work).await;
    app.wait_for_archived(n as i64, Duration::from_secs(30))
        .await;
    worker.abort();
}

fn policy(specs: &[&str]) -> Policy {
    let specs: Vec<RetentionSpec> = specs.iter().map(|s| s.parse().unwrap()).collect();
    Policy::new(&specs, "/").unwrap()
}

/// One pass as if it were `days` from now.
async fn pass_at(app: &TestApp, policy: &Policy, days: i64) -> retention::Pass {
    let now = OffsetDateTime::now_utc() + time::Duration::days(days);
    retention::run_pass(
        app.archive.as_ref(),
        policy,
        "test",
        Duration::from_secs(3600),
        &CancellationToken::new(),
        now,
    )
    .await
    .unwrap()
    .expect("no other run under way")
}

/// The totals ingest keeps, recounted from the messages: every mismatch found (none when the
/// totals are exact).
async fn totals_mismatches(database_url: &str) -> i64 {
    let of_total = "FROM messages m WHERE m.queue = c.queue \
                    AND coalesce(m.first_death_reason, 'none') = c.reason";
    let per_queue = count_rows(
        database_url,
        &format!(
            "SELECT count(*) FROM queue_reason_counts c WHERE c.messages <> (SELECT count(*) {of_total}) \
             OR c.bytes <> (SELECT CAST(coalesce(sum(m.body_size), 0) AS BIGINT) {of_total})"
        ),
    )
    .await;
    let messages = count_rows(database_url, "SELECT count(*) FROM messages").await;
    let sum =
        |table: &str| format!("SELECT CAST(coalesce(sum(messages), 0) AS BIGINT) FROM {table}");
    let groups = count_rows(database_url, &sum("failure_groups")).await;
    let hours = count_rows(database_url, &sum("hourly_counts")).await;
    let totals = count_rows(database_url, &sum("queue_reason_counts")).await;
    per_queue + (groups - messages).abs() + (hours - messages).abs() + (totals - messages).abs()
}

on_both_backends!(ages_delete_what_the_policy_no_longer_keeps_but_not_what_a_job_holds);
async fn ages_delete_what_the_policy_no_longer_keeps_but_not_what_a_job_holds() {
    let p = unique("retain");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    dead_letter(&t, &app, &work, "m", 30).await;
    let ids = app.ids(&dlq).await;
    assert_eq!(ids.len(), 30);

    // A job holds the five oldest: its canary's one copy went out (nobody consumes it) and it
    // waits ten minutes to judge it.
    let job = app
        .post_json(
            "/api/replays",
            json!({"ids": ids[..5], "canary": {"count": 1, "wait_secs": 600}}),
            200,
        )
        .await;
    let job_id = job["id"].as_str().unwrap().to_owned();
    app.wait_for_job(&job_id, Duration::from_secs(20), |j| {
        j["counts"]["published"] == 1
    })
    .await;
    // Three others are resolved.
    for id in &ids[10..13] {
        app.post_json(
            &format!("/api/messages/{id}/dismiss"),
            json!({"note": "handled by hand"}),
            200,
        )
        .await;
    }

    let policy = policy(&["days=30,resolved-days=1"]);
    // Nothing is due yet.
    let pass = pass_at(&app, &policy, 0).await;
    assert_eq!(pass.run.deleted, 0);
    // Ten days on: only the resolved ones (resolved more than a day before).
    let pass = pass_at(&app, &policy, 10).await;
    assert_eq!(pass.run.deleted, 3, "{:?}", pass.run);
    assert_eq!(pass.run.counts[0].rule, "resolved-days=1");
    for id in &ids[10..13] {
        app.json(&format!("/api/messages/{id}"), 404).await;
    }
    // Forty days on: every message archived more than 30 days before, but the job's.
    let pass = pass_at(&app, &policy, 40).await;
    assert_eq!(pass.run.deleted, 22, "{:?}", pass.run);
    assert_eq!(pass.run.counts[0].rule, "days=30");
    assert!(!pass.more);
    let left = app.ids(&dlq).await;
    assert_eq!(left, ids[..5], "what the job holds is kept");
    assert_eq!(app.archived().await, 5);
    assert_eq!(totals_mismatches(&app.database_url).await, 0);
    let job = app.json(&format!("/api/replays/{job_id}"), 200).await;
    assert_eq!(
        job["counts"]["pending"], 4,
        "the job still has its messages: {job}"
    );

    // One audit entry a pass that deleted anything.
    let audit = app.json("/api/audit", 200).await;
    let entries: Vec<&serde_json::Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "retention")
        .collect();
    assert_eq!(entries.len(), 2, "{audit}");
    let newest = entries[0]["summary"].as_str().unwrap();
    assert!(
        newest.starts_with("retention deleted 22 messages (")
            && newest.contains(&format!("{dlq} 22 by days=30")),
        "{newest}"
    );
    assert_eq!(entries[0]["actor"], "retention");

    // Once the job is cancelled, its messages may go too.
    app.post_json(&format!("/api/replays/{job_id}/cancel"), json!({}), 200)
        .await;
    let pass = pass_at(&app, &policy, 40).await;
    assert_eq!(pass.run.deleted, 5);
    assert_eq!(app.archived().await, 0);
    assert_eq!(totals_mismatches(&app.database_url).await, 0);
    let metrics = app.get("/metrics").await.text();
    assert!(
        !metrics.contains(&format!(
            "lazarus_archived_messages{{broker=\"default\",queue=\"{dlq}\""
        )),
        "no stale total: {metrics}"
    );
    t.cleanup().await;
}

on_both_backends!(serve_keeps_each_dlq_under_its_caps_and_the_cli_shows_the_next_pass);
async fn serve_keeps_each_dlq_under_its_caps_and_the_cli_shows_the_next_pass() {
    let p = unique("caps");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let (other_work, other) = work_queue_with_dlq(&mut t, &format!("{p}.other")).await;
    let cap = format!("{dlq}:messages=10");
    let mut app = TestApp::spawn_with(&[&dlq, &other], |c| {
        c.retention.specs = vec![cap.parse().unwrap()];
        c.retention.retention_interval_secs = 1;
    })
    .await;
    publish_many(&t.channel, "", &work, "m", 25).await;
    publish_many(&t.channel, "", &other_work, "o", 12).await;
    let workers = [
        rejecting_worker(&work).await,
        rejecting_worker(&other_work).await,
    ];
    let ingested = format!("lazarus_ingested_messages_total{{broker=\"default\",queue=\"{dlq}\"}}");
    // A pass counts what it deleted once it has committed: the count is waited for too.
    let deleted = "lazarus_retention_deleted_messages_total";
    let what = format!(
        "all 25 of {dlq} ingested, 10 of them kept and 15 counted deleted, and all 12 of {other}"
    );
    wait_showing(&what, Duration::from_secs(30), async || {
        let kept = app.all_messages(&dlq).await.len();
        let counted = app.counter(deleted).await;
        if app.counter(&ingested).await == 25
            && kept == 10
            && counted >= 15
            && app.all_messages(&other).await.len() == 12
        {
            Ok(())
        } else {
            Err(format!("kept {kept} of {dlq}, {counted} counted deleted"))
        }
    })
    .await;
    for w in workers {
        w.abort();
    }
    // The newest ten are kept; the other DLQ has no policy.
    let kept: Vec<String> = app
        .all_messages(&dlq)
        .await
        .iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect();
    let newest: Vec<String> = (15..25).map(|i| format!("m-{i}")).collect();
    let mut sorted = kept.clone();
    sorted.sort_by_key(|m| m[2..].parse::<u32>().unwrap());
    assert_eq!(sorted, newest);
    assert_eq!(totals_mismatches(&app.database_url).await, 0);
    let overview = app.get("/").await.text();
    assert!(
        overview.contains(&format!("Retention: {dlq}: messages=10.")),
        "{overview}"
    );
    assert!(overview.contains("Next pass"), "{overview}");

    // The command line, with a size cap on the other DLQ: first what it would do.
    app.stop().await;
    let db = app.database_url.clone();
    let of_other = format!("FROM messages WHERE queue = '{other}'");
    let body = count_rows(&db, &format!("SELECT max(body_size) {of_other}")).await;
    let rule = retention::Rule::Size(body as u64 * 4).to_string();
    let cli = |dry: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
        c.args(["retention", "--retention", &format!("{other}:{rule}")])
            .args(["--database-url", &db]);
        if dry {
            c.arg("--dry-run");
        }
        c.output().unwrap()
    };
    let dry = cli(true);
    let out = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(out.contains(&format!("{other}\t12 (")), "{out}");
    assert!(out.contains(&format!("\t{rule}\t8 (")), "{out}");
    assert!(out.contains(&format!("{dlq}\t10 (")), "{out}");
    assert!(out.contains("8 messages would be deleted"), "{out}");
    let count = format!("SELECT count(*) {of_other}");
    assert_eq!(
        count_rows(&db, &count).await,
        12,
        "a dry run deletes nothing"
    );
    let real = cli(false);
    let out = String::from_utf8_lossy(&real.stdout);
    assert!(
        real.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&real.stderr)
    );
    assert!(out.contains("deleted 8 messages"), "{out}");
    assert_eq!(count_rows(&db, &count).await, 4);
    assert_eq!(totals_mismatches(&db).await, 0);
    t.cleanup().await;
}

#[tokio::test]
async fn a_wrong_policy_is_refused_and_none_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("a.db").display());
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .arg("retention")
            .args(args)
            .args(["--database-url", &db])
            .env_remove("LAZARUS_RETENTION")
            .output()
            .unwrap()
    };
    let wrong = run(&["--retention", "weeks=3"]);
    assert_eq!(wrong.status.code(), Some(2));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        said.contains("expected days, resolved-days, messages or size"),
        "{said}"
    );
    let twice = run(&["--retention", "q:days=1", "--retention", "q:days=2"]);
    assert!(!twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stderr).contains("given twice"));
    let none = run(&["--dry-run"]);
    assert!(none.status.success());
    assert!(String::from_utf8_lossy(&none.stdout).contains("everything is kept"));

    // serve refuses to start with a wrong policy.
    let mut config = lazarus::config::ServeConfig::defaults();
    config.connection.database_url = db.clone().into();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.retention.specs = vec!["q:days=1".parse().unwrap(), "q:days=2".parse().unwrap()];
    let refused = lazarus::startup::Application::build(config).await;
    assert!(format!("{:#}", refused.err().expect("refused")).contains("given twice"));
}

/// A SQLite archive of 40 dead letters of 256 KiB in DLQ `<p>.dlq` (checked to vacuum
/// incrementally, as a new archive does), and its size in pages.
async fn forty_big_messages(p: &str) -> (Topology, TestApp, String, i64) {
    let mut t = Topology::new().await;
    let dlq = format!("{p}.dlq");
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let auto_vacuum = count_rows(&app.database_url, "PRAGMA auto_vacuum").await;
    assert_eq!(auto_vacuum, 2, "a new archive vacuums incrementally");
    let body = vec![b'z'; 256 * 1024];
    for i in 0..40 {
        t.channel
            .basic_publish(
                "".into(),
                dlq.as_str().into(),
                Default::default(),
                &body,
                json_props(&format!("big-{i}")),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    app.wait_for_archived(40, Duration::from_secs(30)).await;
    let pages = count_rows(&app.database_url, "PRAGMA page_count").await;
    (t, app, dlq, pages)
}

/// A purge (`POST /api/admin/purge`) gives the space back as retention does: the file shrinks
/// once the answer is sent, with no free page left in it.
#[tokio::test]
async fn sqlite_gives_the_space_of_purged_messages_back() {
    let (t, app, dlq, pages) = forty_big_messages(&unique("purge-vacuum")).await;
    let purged = app
        .post_json(
            "/api/admin/purge",
            json!({"filter": {"queue": dlq}, "note": "a customer's data removal request"}),
            200,
        )
        .await;
    assert_eq!(purged["purged"], 40);
    let url = app.database_url.clone();
    wait_showing(
        "the purged messages' space given back",
        Duration::from_secs(30),
        async || {
            let free = count_rows(&url, "PRAGMA freelist_count").await;
            let now = count_rows(&url, "PRAGMA page_count").await;
            match free == 0 && now < pages / 2 {
                true => Ok(()),
                false => Err(format!("{free} free pages; {now} pages, {pages} before")),
            }
        },
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn sqlite_gives_the_space_of_deleted_messages_back() {
    let (t, app, _dlq, pages) = forty_big_messages(&unique("vacuum")).await;
    let pass = pass_at(&app, &policy(&["messages=1"]), 0).await;
    assert_eq!(pass.run.deleted, 39);
    let after = count_rows(&app.database_url, "PRAGMA page_count").await;
    let free = count_rows(&app.database_url, "PRAGMA freelist_count").await;
    assert_eq!(free, 0, "every freed page given back");
    assert!(
        after < pages / 2,
        "the file shrank: {pages} pages before, {after} after"
    );
    t.cleanup().await;
}

//! One instance archiving DLQs of two vhosts (`--queue vhost/name`): same-named queues stay
//! apart in the archive, the vhost is a filter and a search field, and every replay — a job
//! spanning both vhosts, a single one, one to the queue it died in — goes back into the
//! message's own vhost.

use std::time::Duration;

use lapin::ExchangeKind;

use lazarus::archive::selection::query_value as encoded;
use lazarus::message::dlq::escape as escaped;

use crate::helpers::*;

/// In the vhost at `url`: exchange `orders` routing `order` to `orders.work` (where every
/// message dies at once into `orders.dlq`) and to `orders.audit`, which keeps a copy.
pub(crate) async fn shop(url: &str, prefix: &str, n: usize) -> Topology {
    let mut t = Topology::on(url).await;
    t.exchange("orders", ExchangeKind::Direct).await;
    t.queue("orders.dlq", Default::default()).await;
    dying_queue(&mut t, "orders.work", "orders.dlq").await;
    t.queue("orders.audit", Default::default()).await;
    t.bind("orders.work", "orders", "order").await;
    t.bind("orders.audit", "orders", "order").await;
    for i in 0..n {
        t.publish(
            "orders",
            "order",
            b"{}",
            json_props(&format!("{prefix}-{i}")),
        )
        .await;
    }
    t.wait_for_depth("orders.audit", n as u32, Duration::from_secs(5))
        .await;
    t
}

/// The `x-lazarus-replay-of` of every copy in `orders.audit`, consuming them.
async fn replayed_into(url: &str) -> Vec<String> {
    let mut links = drain_links(url, "orders.audit").await;
    links.sort();
    links
}

/// Lazarus with `home` as its AMQP URL's vhost, archiving `queues`.
async fn serve(home: &Vhost, queues: &[&str]) -> TestApp {
    TestApp::spawn_with(queues, |c| c.connection.amqp_url = home.url().into()).await
}

/// Plans and starts a job as `request` says; the job once it has paused, and its detail.
async fn paused_job(app: &TestApp, request: serde_json::Value) -> (serde_json::Value, String) {
    let job = app.post_json("/api/replays", request, 200).await;
    let id = job["id"].as_str().unwrap();
    let paused = app
        .wait_for_job(id, Duration::from_secs(30), |j| j["state"] == "paused")
        .await;
    let detail = paused["detail"].as_str().unwrap_or_default().to_owned();
    assert_eq!(paused["counts"]["published"], 0, "{paused}");
    (paused, detail)
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

on_both_backends!(two_vhosts_are_archived_apart_and_replayed_each_into_its_own);
async fn two_vhosts_are_archived_apart_and_replayed_each_into_its_own() {
    let home = Vhost::create("home");
    // A vhost name with / and %, escaped in `--queue` and in the archive's keys.
    let other = Vhost::create("other/eu%");
    let key = escaped(&other.name);
    let home_shop = shop(&home.url(), "home", 3).await;
    let other_shop = shop(&other.url(), "other", 2).await;
    let other_dlq = format!("{key}/orders.dlq");
    let app = serve(&home, &["orders.dlq", &other_dlq]).await;
    app.wait_for_archived(5, Duration::from_secs(20)).await;
    // The audit queues hold the first copies; from here on they catch replays only.
    for t in [&home_shop, &other_shop] {
        t.channel
            .queue_purge("orders.audit".into(), Default::default())
            .await
            .unwrap();
    }

    // Same-named DLQs, counted apart.
    let counts = app.archive.counts().await.unwrap();
    let total = |queue: &str| -> i64 {
        counts
            .iter()
            .filter(|c| c.queue == queue)
            .map(|c| c.messages)
            .sum()
    };
    assert_eq!(
        (total("orders.dlq"), total(&other_dlq)),
        (3, 2),
        "{counts:?}"
    );
    let groups = app.archive.failure_groups(100).await.unwrap();
    let first_died = |queue: &str| {
        groups
            .iter()
            .any(|g| g.first_death_queue.as_deref() == Some(queue))
    };
    assert!(
        first_died("orders.work") && first_died(&format!("{key}/orders.work")),
        "{groups:?}"
    );

    // The vhost is a filter and a search field, by its name (the home one too).
    let app = &app;
    let of = |query: String| async move {
        let page = app.json(&format!("/api/messages?{query}"), 200).await;
        page["messages"].as_array().unwrap().clone()
    };
    let in_other = of(format!("vhost={}", encoded(&other.name))).await;
    assert_eq!(in_other.len(), 2);
    for m in &in_other {
        assert_eq!(m["vhost"], other.name.as_str(), "{m}");
        assert_eq!(m["queue"], other_dlq.as_str(), "{m}");
        assert_eq!(
            m["first_death"]["queue"],
            format!("{key}/orders.work"),
            "{m}"
        );
    }
    let at_home = of(format!("vhost={}", encoded(&home.name))).await;
    assert_eq!(at_home.len(), 3);
    assert!(at_home.iter().all(|m| m["vhost"] == home.name.as_str()));
    let search = format!("vhost:\"{}\"", other.name);
    assert_eq!(of(format!("q={}", encoded(&search))).await.len(), 2);
    assert_eq!(of("vhost=nowhere".into()).await.len(), 0);
    let home_ids = sorted(app.ids("orders.dlq").await);
    let other_ids = sorted(app.ids(&other_dlq).await);

    // The message page names the vhost, and offers the queue it died in by its own name.
    let page = app.get(&format!("/messages/{}", other_ids[0])).await.text();
    assert!(page.contains(&format!(">{}</a>", other.name)), "{page}");
    assert!(
        page.contains(r#"<input type="hidden" name="routing_key" value="orders.work">"#),
        "{page}"
    );

    // One job over both vhosts: each message back into its own.
    let job = app
        .post_json(
            "/api/replays",
            serde_json::json!({"filter": {"status": "open"}, "request_key": "both",
                "dry_run": true}),
            200,
        )
        .await;
    // Its plan has a target per vhost: the other one named, the AMQP URL's left out.
    let targets = job["plan"]["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2, "{job}");
    let vhosts: Vec<&str> = targets
        .iter()
        .map(|t| t["vhost"].as_str().unwrap_or(""))
        .collect();
    assert!(
        vhosts.contains(&other.name.as_str()) && vhosts.contains(&""),
        "{job}"
    );
    let id = job["id"].as_str().unwrap();
    let page = app.get(&format!("/replays/{id}")).await.text();
    assert!(page.contains(&format!("in vhost {}", other.name)), "{page}");
    app.post_json(
        &format!("/api/replays/{id}/start"),
        serde_json::json!({}),
        200,
    )
    .await;
    let done = app
        .wait_for_job(id, Duration::from_secs(30), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 5, "{done}");
    home_shop
        .wait_for_depth("orders.audit", 3, Duration::from_secs(5))
        .await;
    other_shop
        .wait_for_depth("orders.audit", 2, Duration::from_secs(5))
        .await;
    assert_eq!(replayed_into(&home.url()).await, home_ids);
    assert_eq!(replayed_into(&other.url()).await, other_ids);

    // A single replay, and a job to the queue it first died in: the other vhost again.
    let single = app
        .post_json(
            &format!("/api/messages/{}/replay", other_ids[0]),
            serde_json::json!({"request_key": "one"}),
            200,
        )
        .await;
    assert_eq!(single["outcome"], "published", "{single}");
    let died_in = app
        .post_json(
            "/api/replays",
            serde_json::json!({"ids": [other_ids[1]], "to_first_death_queue": true,
                "include_replayed": true, "request_key": "died-in"}),
            200,
        )
        .await;
    assert_eq!(
        died_in["plan"]["targets"][0]["routing_key"], "orders.work",
        "{died_in}"
    );
    let id = died_in["id"].as_str().unwrap();
    let done = app
        .wait_for_job(id, Duration::from_secs(30), |j| j["state"] == "completed")
        .await;
    assert_eq!(done["counts"]["published"], 1, "{done}");
    other_shop
        .wait_for_depth("orders.audit", 1, Duration::from_secs(5))
        .await;
    assert_eq!(replayed_into(&other.url()).await, [other_ids[0].clone()]);
    // Both copies died again, in the other vhost: archived from its DLQ.
    app.wait_for_archived(5 + 5 + 2, Duration::from_secs(20))
        .await;
    assert_eq!(app.ids(&other_dlq).await.len(), 2 + 2 + 2);
    assert_eq!(home_shop.depth("orders.audit").await, 0);

    home_shop.cleanup().await;
    other_shop.cleanup().await;
}

on_both_backends!(a_vhost_that_does_not_exist_is_said_and_the_others_are_archived);
async fn a_vhost_that_does_not_exist_is_said_and_the_others_are_archived() {
    let home = Vhost::create("home");
    let home_shop = shop(&home.url(), "home", 1).await;
    let app = serve(&home, &["orders.dlq", "no-such-vhost/orders.dlq"]).await;
    app.wait_for_archived(1, Duration::from_secs(20)).await;
    // The broker's refusal is said for that DLQ, with the spelling of a home queue with a /.
    let what = "/readyz to say RabbitMQ refuses the vhost";
    let ready = wait_showing(what, Duration::from_secs(10), async || {
        let ready = app.get("/readyz").await;
        if ready.text().contains("refuses the vhost") {
            Ok(ready)
        } else {
            Err(format!("{}: {}", ready.status, ready.text()))
        }
    })
    .await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    let said: serde_json::Value = serde_json::from_str(&ready.text()).unwrap();
    let detail = said.to_string();
    assert!(
        detail.contains("no-such-vhost/orders.dlq")
            && detail.contains("RabbitMQ refuses the vhost \\\"no-such-vhost\\\"")
            && detail.contains("--queue /no-such-vhost/orders.dlq"),
        "{detail}"
    );
    home_shop.cleanup().await;
}

on_both_backends!(a_job_into_a_vhost_that_is_gone_pauses_saying_so);
async fn a_job_into_a_vhost_that_is_gone_pauses_saying_so() {
    let home = Vhost::create("home");
    let other = Vhost::create("other");
    let other_shop = shop(&other.url(), "other", 2).await;
    let other_dlq = format!("{}/orders.dlq", other.name);
    let app = serve(&home, &[&other_dlq]).await;
    app.wait_for_archived(2, Duration::from_secs(20)).await;
    other_shop.cleanup().await;
    let name = other.name.clone();
    drop(other);
    let request = serde_json::json!({"filter": {"status": "open"}, "request_key": "gone"});
    let (paused, detail) = paused_job(&app, request).await;
    assert!(
        detail.contains(&format!("RabbitMQ refuses the vhost {name:?}")),
        "{paused}"
    );
    let id = paused["id"].as_str().unwrap();
    // Nothing was handed to the broker: cancelled, nothing "may have been published".
    app.post_json(
        &format!("/api/replays/{id}/cancel"),
        serde_json::json!({}),
        200,
    )
    .await;
    let items = app.json(&format!("/api/replays/{id}/items"), 200).await;
    assert!(
        !items.to_string().contains("may have been published"),
        "{items}"
    );
}

on_both_backends!(a_target_exchange_missing_in_the_messages_vhost_pauses_the_job_naming_it);
async fn a_target_exchange_missing_in_the_messages_vhost_pauses_the_job_naming_it() {
    let home = Vhost::create("home");
    let other = Vhost::create("other");
    let mut home_shop = shop(&home.url(), "home", 1).await;
    let other_shop = shop(&other.url(), "other", 1).await;
    // `only-home` exists at home and not in the other vhost.
    home_shop.exchange("only-home", ExchangeKind::Fanout).await;
    let other_dlq = format!("{}/orders.dlq", other.name);
    let app = serve(&home, &["orders.dlq", &other_dlq]).await;
    app.wait_for_archived(2, Duration::from_secs(20)).await;
    let request = serde_json::json!({"filter": {"status": "open"}, "request_key": "to-only-home",
        "target": {"exchange": "only-home", "routing_key": "x"}});
    let (paused, detail) = paused_job(&app, request).await;
    assert!(
        detail.contains("\"only-home\"") && detail.contains(&format!("vhost {:?}", other.name)),
        "{paused}"
    );
    home_shop.cleanup().await;
    other_shop.cleanup().await;
}

on_both_backends!(an_export_names_vhosts_and_imports_into_an_instance_of_another_vhost);
async fn an_export_names_vhosts_and_imports_into_an_instance_of_another_vhost() {
    let home = Vhost::create("home");
    let other = Vhost::create("other");
    let home_shop = shop(&home.url(), "home", 2).await;
    let other_shop = shop(&other.url(), "other", 3).await;
    let other_dlq = format!("{}/orders.dlq", other.name);
    let app = serve(&home, &["orders.dlq", &other_dlq]).await;
    app.wait_for_archived(5, Duration::from_secs(20)).await;
    home_shop
        .channel
        .queue_purge("orders.audit".into(), Default::default())
        .await
        .unwrap();
    let lazarus = |args: &[&str], database_url: &str, amqp_url: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .args(args)
            .args(["--database-url", database_url])
            .env("LAZARUS_AMQP_URL", amqp_url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let lines = |out: std::process::Output| -> Vec<serde_json::Value> {
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // Each line names its vhost, the AMQP URL's too, and its queue within that vhost.
    let of_other = lines(lazarus(
        &["export", "--vhost", &other.name],
        &app.database_url,
        &home.url(),
    ));
    assert_eq!(of_other.len(), 3);
    let of_home = lines(lazarus(
        &["export", "--vhost", &home.name],
        &app.database_url,
        &home.url(),
    ));
    assert_eq!(of_home.len(), 2);
    for (line, vhost) in of_other
        .iter()
        .map(|l| (l, &other.name))
        .chain(of_home.iter().map(|l| (l, &home.name)))
    {
        assert_eq!(line["vhost"], vhost.as_str(), "{line}");
        assert_eq!(line["queue"], "orders.dlq", "{line}");
    }

    // Into an instance whose AMQP URL is the other vhost: its messages are at home there, and
    // the first instance's home is the other vhost now. Exported again, nothing differs.
    let file_dir = tempfile::tempdir().unwrap();
    let file = file_dir.path().join("all.ndjson");
    let all = lazarus(&["export"], &app.database_url, &home.url());
    std::fs::write(&file, &all.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    lazarus(&["import", file.to_str().unwrap()], &url, &other.url());
    let stored = "SELECT count(*) FROM messages WHERE";
    let at_home_there = format!("{stored} vhost = '' AND queue = 'orders.dlq'");
    assert_eq!(count_rows(&url, &at_home_there).await, 3);
    let home_key = format!("{}/orders.dlq", home.name);
    let elsewhere = format!("{stored} vhost = '{}' AND queue = '{home_key}'", home.name);
    assert_eq!(count_rows(&url, &elsewhere).await, 2);
    let strip = |mut lines: Vec<serde_json::Value>| {
        for line in &mut lines {
            line.as_object_mut().unwrap().remove("id");
        }
        lines.sort_by_key(|l| l.to_string());
        lines
    };
    let again = lines(lazarus(&["export"], &url, &other.url()));
    let before = lines(all);
    assert_eq!(strip(again), strip(before));

    // Replayed from there, a message goes back into its own vhost.
    let mut there = TestApp::spawn_with(&[], |c| {
        c.connection.amqp_url = other.url().into();
        c.connection.database_url = url.clone().into();
    })
    .await;
    let id = there.ids(&home_key).await[0].clone();
    let replayed = there
        .post_json(
            &format!("/api/messages/{id}/replay"),
            serde_json::json!({}),
            200,
        )
        .await;
    assert_eq!(replayed["outcome"], "published", "{replayed}");
    home_shop
        .wait_for_depth("orders.audit", 1, Duration::from_secs(5))
        .await;
    there.stop().await;
    home_shop.cleanup().await;
    other_shop.cleanup().await;
}

on_both_backends!(an_archive_of_an_earlier_version_gets_one_key_per_dlq);
/// An archive an earlier version wrote, where a home queue `x/y` was keyed `x/y` — the key of
/// the queue `y` of vhost `x` — is given one key per DLQ when opened: the home queue's
/// messages, first-death queue, totals, counts and failure group read `/x/y`; the queue `b`
/// of vhost `a` keeps `a/b`.
async fn an_archive_of_an_earlier_version_gets_one_key_per_dlq() {
    use lazarus::archive::{IncomingMessage, PreparedMessage};
    use lazarus::message::headers::{AmqpValue, MessageProperties, Table};
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let message = |vhost: &str, queue: &str, first_died_in: &str| {
        let death = Table::from([
            ("queue", AmqpValue::text(first_died_in)),
            ("reason", AmqpValue::text("rejected")),
            ("count", AmqpValue::LongLongInt(1)),
            ("exchange", AmqpValue::text("")),
            (
                "routing-keys",
                AmqpValue::Array(vec![AmqpValue::text(first_died_in)]),
            ),
        ]);
        let headers = Table::from([
            ("x-death", AmqpValue::Array(vec![AmqpValue::Table(death)])),
            ("x-first-death-queue", AmqpValue::text(first_died_in)),
            ("x-first-death-reason", AmqpValue::text("rejected")),
            ("x-first-death-exchange", AmqpValue::text("")),
        ]);
        PreparedMessage::new(IncomingMessage {
            broker: "default".into(),
            vhost: vhost.into(),
            queue: queue.into(),
            exchange: String::new(),
            routing_key: first_died_in.into(),
            redelivered: false,
            properties: MessageProperties::default(),
            headers: Some(headers),
            body: queue.as_bytes().to_vec(),
            received_at: time::OffsetDateTime::now_utc(),
            decode_problems: Vec::new(),
            stream_offset: None,
        })
    };
    {
        let archive = lazarus::archive::open(&url).await.unwrap();
        let batch = [
            message("", "x/y", "x/y.work"),
            message("a", "a/b", "b.work"),
        ];
        archive.store_batch(&batch).await.unwrap();
    }
    // As the earlier version keyed them: a home name bare (its first-death queue too), the
    // other vhost's prefixed; its last migration not run yet.
    let (last, status) = match url.starts_with("sqlite://") {
        true => (24, ""),
        false => (
            18,
            "UPDATE message_status SET group_queue = 'x/y.work' WHERE group_queue = '/x/y.work';",
        ),
    };
    execute_sql(
        &url,
        &format!(
            "UPDATE messages SET first_death_queue = 'x/y.work' WHERE queue = 'x/y'; \
             UPDATE failure_groups SET queue = 'x/y.work' WHERE queue = '/x/y.work'; {status} \
             DELETE FROM _sqlx_migrations WHERE version = {last}"
        ),
    )
    .await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    for (sql, n) in [
        (
            "SELECT count(*) FROM messages WHERE vhost = '' AND queue = '/x/y' \
          AND first_death_queue = '/x/y.work'",
            1,
        ),
        (
            "SELECT count(*) FROM messages WHERE vhost = 'a' AND queue = 'a/b' \
          AND first_death_queue = 'a/b.work'",
            1,
        ),
        (
            "SELECT count(*) FROM queue_reason_counts WHERE queue = '/x/y' AND messages = 1",
            1,
        ),
        (
            "SELECT count(*) FROM queue_reason_counts WHERE queue = 'a/b' AND messages = 1",
            1,
        ),
        ("SELECT count(*) FROM queue_reason_counts", 2),
        ("SELECT count(*) FROM hourly_counts WHERE queue = '/x/y'", 1),
        ("SELECT count(*) FROM hourly_counts WHERE queue = 'a/b'", 1),
        (
            "SELECT count(*) FROM failure_groups WHERE queue = '/x/y.work'",
            1,
        ),
        (
            "SELECT count(*) FROM failure_groups WHERE queue = 'a/b.work'",
            1,
        ),
        ("SELECT count(*) FROM failure_groups", 2),
    ] {
        assert_eq!(count_rows(&url, sql).await, n, "{sql}");
    }
    if !url.starts_with("sqlite://") {
        let sql = "SELECT count(*) FROM message_status WHERE group_queue = '/x/y.work'";
        assert_eq!(count_rows(&url, sql).await, 1);
    }
    drop(archive);
}

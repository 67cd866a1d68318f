//! A fleet: several Lazarus instances on one PostgreSQL archive, with several clusters
//! (`--broker`). Two instances, both given `--broker r4=…` for the 4.x, each consume one
//! cluster's DLQ of real dead letters (rejected on the 3.10, expired on the 4.x): each sees
//! both clusters' messages, and a replay job over both, run by whichever claims it, puts each
//! copy once into its own cluster's queue. Then an instance without `--broker r4` is alone: it
//! leaves a job of r4's messages queued (saying it waits for an instance with that broker)
//! instead of claiming and pausing it, and the instance with the broker, started again, runs it.

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicRejectOptions};
use lapin::ExchangeKind;
use serde_json::{json, Value};

use crate::brokers::{Broker, Vhost};
use crate::helpers::*;
use crate::instances::Instance;

/// In the vhost at `url`: exchange `orders` routes `order` to `orders.work`, which
/// dead-letters through the fanout `orders.dlx` into `orders.dlq`. Nothing consumes the work
/// queue, so a replayed copy stays there to be counted.
async fn orders(url: &str) -> Topology {
    let mut t = Topology::on(url).await;
    t.exchange("orders", ExchangeKind::Direct).await;
    let (work, dlq) = work_queue_with_dlq(&mut t, "orders").await;
    assert_eq!((work.as_str(), dlq.as_str()), ("orders.work", "orders.dlq"));
    t.bind("orders.work", "orders", "order").await;
    t
}

/// `n` orders that a consumer of `orders.work` rejects: dead-lettered as `rejected`.
async fn rejected(t: &Topology, prefix: &str, n: usize) {
    for i in 0..n {
        t.publish(
            "orders",
            "order",
            b"{}",
            json_props(&format!("{prefix}-{i}")),
        )
        .await;
    }
    for _ in 0..n {
        let got = t
            .channel
            .basic_get("orders.work".into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap()
            .expect("an order to reject");
        got.delivery
            .reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
    }
}

/// `n` orders whose own TTL is 0: dead-lettered as `expired` (the broker removes the
/// expiration, so a replayed copy stays in the work queue).
async fn expired(t: &Topology, prefix: &str, n: usize) {
    for i in 0..n {
        let props = json_props(&format!("{prefix}-{i}")).with_expiration("0".into());
        t.publish("orders", "order", b"{}", props).await;
    }
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// The ids of the messages `query` lists on `instance`, and the messages.
async fn listed(instance: &Instance, query: &str) -> (Vec<String>, Vec<Value>) {
    let page = instance
        .json(&format!("/api/messages?limit=500&{query}"))
        .await;
    let messages = page["messages"].as_array().unwrap().clone();
    let ids = messages
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    (sorted(ids), messages)
}

/// Waits until job `id`, as `instance` shows it, is `state`; returns it.
async fn job_in_state(instance: &Instance, id: &str, state: &str) -> Value {
    let what = format!("job {id} to be {state}");
    wait_showing(&what, Duration::from_secs(60), async || {
        let job = instance.json(&format!("/api/replays/{id}")).await;
        match job["state"] == state {
            true => Ok(job),
            false => Err(job.to_string()),
        }
    })
    .await
}

#[tokio::test]
async fn a_fleet_on_one_postgres_archive_replays_each_cluster_from_the_instance_that_has_it() {
    Backend::Postgres.scope(fleet()).await
}

async fn fleet() {
    let a = Vhost::on(Broker::Rabbitmq3, "fleet-a");
    let b = Vhost::on(Broker::Rabbitmq4, "fleet-b");
    let (shop_a, shop_b) = (orders(&a.url()).await, orders(&b.url()).await);
    rejected(&shop_a, "a", 3).await;
    expired(&shop_b, "b", 2).await;
    shop_a
        .wait_for_depth("orders.dlq", 3, Duration::from_secs(10))
        .await;
    shop_b
        .wait_for_depth("orders.dlq", 2, Duration::from_secs(10))
        .await;

    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (url, r4) = (a.url(), format!("r4={}", b.url()));
    let with_r4 = ["--broker", r4.as_str(), "--job-lease-secs", "2"];
    // A archives the 3.10's DLQ, B the 4.x's; both may publish to either.
    let (inst_a, inst_b) = tokio::join!(
        Instance::consuming("A", &url, "orders.dlq", &db, &with_r4),
        Instance::consuming("B", &url, "r4:orders.dlq", &db, &with_r4),
    );
    let all = [&inst_a, &inst_b];
    wait_until("5 messages archived", Duration::from_secs(30), async || {
        listed(&inst_a, "").await.0.len() == 5
    })
    .await;

    // Each instance sees both clusters' messages: in the list, by the broker filter and the
    // `broker:` search, and in the archive totals.
    let (a_ids, on_a) = listed(&inst_a, "broker=default").await;
    let (b_ids, on_b) = listed(&inst_a, "broker=r4").await;
    assert_eq!((a_ids.len(), b_ids.len()), (3, 2));
    for (m, broker, reason) in on_a
        .iter()
        .map(|m| (m, "default", "rejected"))
        .chain(on_b.iter().map(|m| (m, "r4", "expired")))
    {
        assert_eq!(m["broker"], broker, "{m}");
        assert_eq!(m["first_death"]["reason"], reason, "{m}");
        assert_eq!(m["deaths"].as_array().map(Vec::len), Some(1), "{m}");
    }
    for instance in all {
        assert_eq!(listed(instance, "broker=default").await.0, a_ids);
        assert_eq!(listed(instance, "broker=r4").await.0, b_ids);
        assert_eq!(listed(instance, "q=broker%3Ar4").await.0, b_ids);
        assert_eq!(listed(instance, "q=broker%3Adefault").await.0, a_ids);
        assert_eq!(listed(instance, "queue=r4%3Aorders.dlq").await.0, b_ids);
        let metrics = http_get(instance.addr, "/metrics").await.text();
        for series in [
            r#"lazarus_archived_messages{broker="default",queue="orders.dlq",reason="rejected"} 3"#,
            r#"lazarus_archived_messages{broker="r4",queue="orders.dlq",reason="expired"} 2"#,
        ] {
            assert!(metrics.contains(series), "{series} in {metrics}");
        }
    }
    // Each counts what it consumed itself, under its DLQ's broker.
    let ingested = |instance: &Instance, broker: &str| {
        let series =
            format!(r#"lazarus_ingested_messages_total{{broker="{broker}",queue="orders.dlq"}} "#);
        let addr = instance.addr;
        async move {
            http_get(addr, "/metrics")
                .await
                .text()
                .lines()
                .find_map(|l| l.strip_prefix(&series)?.trim().parse::<u64>().ok())
        }
    };
    assert_eq!(ingested(&inst_a, "default").await, Some(3));
    assert_eq!(ingested(&inst_b, "r4").await, Some(2));

    // One job over both clusters, claimed by whichever instance: each copy once, each in its
    // own cluster's work queue.
    let job = inst_a
        .post_json(
            "/api/replays",
            json!({"filter": {"status": "open"}, "request_key": "fleet-both"}),
        )
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["total"], 5, "{job}");
    let done = job_in_state(&inst_b, &id, "completed").await;
    assert_eq!(done["counts"]["published"], 5, "{done}");
    shop_a
        .wait_for_depth("orders.work", 3, Duration::from_secs(10))
        .await;
    shop_b
        .wait_for_depth("orders.work", 2, Duration::from_secs(10))
        .await;
    assert_eq!(sorted(drain_links(&a.url(), "orders.work").await), a_ids);
    assert_eq!(sorted(drain_links(&b.url(), "orders.work").await), b_ids);

    // --- The fault a fleet hits: an instance without `--broker r4`, alone on the archive.
    inst_a.sigterm().await;
    inst_b.sigterm().await;
    let without_r4 = ["--job-lease-secs", "2"];
    let inst_c = Instance::consuming("C", &url, "orders.dlq", &db, &without_r4).await;
    // A job of r4's messages first, then one of the default broker's: C runs the second, so
    // it has looked at the first and passed it over.
    let again = |ids: &[String], key: &str| json!({"ids": ids, "include_replayed": true, "request_key": key});
    let j1 = inst_c
        .post_json("/api/replays", again(&b_ids, "fleet-r4"))
        .await;
    let j2 = inst_c
        .post_json("/api/replays", again(&a_ids, "fleet-default"))
        .await;
    let (j1, j2) = (
        j1["id"].as_str().unwrap().to_owned(),
        j2["id"].as_str().unwrap().to_owned(),
    );
    let done = job_in_state(&inst_c, &j2, "completed").await;
    assert_eq!(done["counts"]["published"], 3, "{done}");
    let waiting = inst_c.json(&format!("/api/replays/{j1}")).await;
    assert_eq!(
        (waiting["state"].as_str(), &waiting["counts"]["published"]),
        (Some("queued"), &json!(0)),
        "an instance without --broker r4 must leave the job to one with it: {waiting}"
    );
    // It says what it waits for, on its API and its page.
    let waiting = wait_for(
        "the job to say it waits for an instance with --broker r4",
        Duration::from_secs(60),
        async || {
            let job = inst_c.json(&format!("/api/replays/{j1}")).await;
            (job["waiting_for_brokers"] == json!(["r4"])).then_some(job)
        },
    )
    .await;
    assert_eq!(waiting["state"], "queued", "{waiting}");
    let page = http_get(inst_c.addr, &format!("/replays/{j1}"))
        .await
        .text();
    assert!(page.contains("--broker r4=AMQP_URL"), "{page}");
    // Without the broker it still shows its messages, and labels their totals with it.
    assert_eq!(listed(&inst_c, "broker=r4").await.0, b_ids);
    let metrics = http_get(inst_c.addr, "/metrics").await.text();
    assert!(
        metrics.contains(
            r#"lazarus_archived_messages{broker="r4",queue="orders.dlq",reason="expired"} 2"#
        ),
        "{metrics}"
    );
    shop_a
        .wait_for_depth("orders.work", 3, Duration::from_secs(10))
        .await;
    assert_eq!(sorted(drain_links(&a.url(), "orders.work").await), a_ids);
    assert_eq!(shop_b.depth("orders.work").await, 0);

    // The instance with the broker, back, runs it: each copy once, into the 4.x.
    let inst_b = Instance::consuming("B2", &url, "r4:orders.dlq", &db, &with_r4).await;
    let done = job_in_state(&inst_b, &j1, "completed").await;
    assert_eq!(done["counts"]["published"], 2, "{done}");
    assert_eq!(done["detail"], Value::Null, "{done}");
    shop_b
        .wait_for_depth("orders.work", 2, Duration::from_secs(10))
        .await;
    assert_eq!(sorted(drain_links(&b.url(), "orders.work").await), b_ids);
    assert_eq!(shop_a.depth("orders.work").await, 0);
    assert_eq!(
        inst_c.json(&format!("/api/replays/{j1}")).await["waiting_for_brokers"],
        json!([])
    );
    inst_c.sigterm().await;
    inst_b.sigterm().await;
}

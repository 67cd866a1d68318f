//! DLQ discovery through RabbitMQ's management API (`--management-url`, on the 4.x broker
//! whose management plugin the CI starts): dead-letter targets found through queue arguments,
//! a policy and the default exchange in three vhosts, which of them is archived, and the
//! settings that put their messages at risk, and the queues whose dead letters reach no queue,
//! at `GET /api/dlqs` and on the overview.

use std::time::{Duration, Instant};

use lapin::types::AMQPValue;
use lapin::ExchangeKind;
use serde_json::Value;

use crate::brokers::{Broker, Vhost};
use crate::helpers::*;

/// The DLQ `name` of `vhost` in a `/api/dlqs` answer.
fn dlq<'a>(answer: &'a Value, vhost: &str, name: &str) -> Option<&'a Value> {
    answer["dlqs"]
        .as_array()?
        .iter()
        .find(|d| d["vhost"] == vhost && d["name"] == name)
}

#[tokio::test]
async fn dead_letter_queues_are_found_in_every_vhost_rabbitmq4() {
    let broker = Broker::Rabbitmq4;
    broker
        .scope(async {
            // Vhost a (Lazarus' own): a work queue's argument names a fanout DLX; its DLQ is
            // archived, and holds at most 100,000 messages.
            let a = Vhost::create("disc-a");
            let mut ta = Topology::on(&a.url()).await;
            ta.exchange("dlx", ExchangeKind::Fanout).await;
            ta.queue(
                "a.dlq",
                args(&[("x-max-length", AMQPValue::LongInt(100_000))]),
            )
            .await;
            ta.bind("a.dlq", "dlx", "").await;
            ta.queue("work", args(&[("x-dead-letter-exchange", s("dlx"))]))
                .await;
            // Vhost b: a policy gives every `work.*` queue its DLX; the DLQ is a quorum queue
            // (RabbitMQ 4's default delivery limit of 20 applies).
            let b = Vhost::create("disc-b");
            broker.ctl(&[
                "set_policy",
                "-p",
                &b.name,
                "--apply-to",
                "queues",
                "dead-letters",
                "^work\\.",
                r#"{"dead-letter-exchange": "dlx"}"#,
            ]);
            let mut tb = Topology::on(&b.url()).await;
            tb.exchange("dlx", ExchangeKind::Direct).await;
            tb.queue("b.dlq", args(&[("x-queue-type", s("quorum"))]))
                .await;
            tb.bind("b.dlq", "dlx", "billing").await;
            tb.queue("work.billing", Default::default()).await;
            // Vhost c: through the default exchange to a DLQ whose messages expire.
            let c = Vhost::create("disc-c");
            let mut tc = Topology::on(&c.url()).await;
            tc.queue(
                "c.dlq",
                args(&[("x-message-ttl", AMQPValue::LongInt(60_000))]),
            )
            .await;
            tc.queue(
                "work",
                args(&[
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("c.dlq")),
                ]),
            )
            .await;
            tc.queue("plain", Default::default()).await;
            // Dead ends: a DLX that does not exist, one with nothing bound to it.
            tc.queue(
                "lost",
                args(&[("x-dead-letter-exchange", s("no-such-dlx"))]),
            )
            .await;
            tc.exchange("empty-dlx", ExchangeKind::Fanout).await;
            tc.queue(
                "unbound",
                args(&[("x-dead-letter-exchange", s("empty-dlx"))]),
            )
            .await;

            let management = broker
                .management_url()
                .expect("4.x runs the management API");
            let app = TestApp::spawn_with(&["a.dlq"], |config| {
                config.connection.amqp_url = a.url();
                config.management_url = Some(management.clone());
            })
            .await;

            // The broker reports a queue's policy (and 4.0 a quorum queue's delivery limit)
            // only once it gathered its statistics (seconds; more than 40 s under load on
            // 4.0): ask until vhost b's DLQ is found through its source's policy, with its
            // delivery limit known.
            let start = Instant::now();
            let answer = loop {
                let answer = app.json("/api/dlqs", 200).await;
                let known = dlq(&answer, &b.name, "b.dlq")
                    .is_some_and(|d| d["warnings"].as_array().is_some_and(|w| !w.is_empty()));
                if known {
                    break answer;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "b.dlq is found through its source's policy, with its delivery limit: {answer}"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            };
            assert_eq!(answer["enabled"], true);

            let found_a = dlq(&answer, &a.name, "a.dlq").expect("a.dlq is found");
            assert_eq!(found_a["archived"], true, "{found_a}");
            assert_eq!(found_a["sources"], serde_json::json!(["work"]));
            assert_eq!(found_a["type"], "classic");
            assert!(
                found_a["warnings"][0]
                    .as_str()
                    .unwrap()
                    .contains("length limit of 100000 messages"),
                "{found_a}"
            );

            let found_b = dlq(&answer, &b.name, "b.dlq").unwrap();
            assert_eq!(found_b["archived"], false, "{found_b}");
            assert_eq!(found_b["sources"], serde_json::json!(["work.billing"]));
            assert_eq!(found_b["type"], "quorum");
            assert!(
                found_b["warnings"][0]
                    .as_str()
                    .unwrap()
                    .contains("delivery limit of 20"),
                "{found_b}"
            );

            let found_c = dlq(&answer, &c.name, "c.dlq").expect("c.dlq is found");
            assert_eq!(found_c["archived"], false);
            assert_eq!(found_c["sources"], serde_json::json!(["work"]));
            assert!(found_c["warnings"][0]
                .as_str()
                .unwrap()
                .contains("TTL of 60000 ms"));
            // Queues nothing dead-letters into are not DLQs.
            for (vhost, name) in [
                (&a.name, "work"),
                (&c.name, "plain"),
                (&b.name, "work.billing"),
            ] {
                assert!(
                    dlq(&answer, vhost, name).is_none(),
                    "{vhost}/{name}: {answer}"
                );
            }

            // Queues whose dead letters the broker drops are named, with why.
            let ends: Vec<(&str, &str)> = answer["dead_ends"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["vhost"] == c.name.as_str())
                .map(|e| (e["queue"].as_str().unwrap(), e["reason"].as_str().unwrap()))
                .collect();
            assert_eq!(ends.len(), 2, "{answer}");
            assert_eq!(ends[0].0, "lost");
            assert!(
                ends[0].1.contains("\"no-such-dlx\" does not exist"),
                "{ends:?}"
            );
            assert_eq!(ends[1].0, "unbound");
            assert!(ends[1].1.contains("nothing is bound"), "{ends:?}");
            assert!(answer["dead_ends"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["vhost"] != a.name.as_str() && e["vhost"] != b.name.as_str()));

            // The overview lists the DLQs not archived, the archived one's risk, and the
            // dead ends.
            let page = app.get("/").await.text();
            assert!(
                page.contains("Dead-letter queues Lazarus does not archive"),
                "{page}"
            );
            assert!(page.contains(&b.name) && page.contains("b.dlq"), "{page}");
            assert!(page.contains("c.dlq") && page.contains("TTL of 60000 ms"));
            assert!(page.contains("length limit of 100000 messages"));
            assert!(
                page.contains("nothing is bound to its dead-letter exchange"),
                "{page}"
            );
            for t in [ta, tb, tc] {
                t.cleanup().await;
            }
        })
        .await
}

/// Without `--management-url`, the API says how to turn discovery on; a management API that
/// does not answer is a 503 that names it, and the overview says so too.
#[tokio::test]
async fn discovery_is_off_without_a_management_url_and_says_when_it_fails() {
    let app = TestApp::spawn(&[]).await;
    let answer = app.json("/api/dlqs", 200).await;
    assert_eq!(answer["enabled"], false);
    assert!(answer["detail"]
        .as_str()
        .unwrap()
        .contains("--management-url"));
    assert!(!app
        .get("/")
        .await
        .text()
        .contains("Dead-letter queues Lazarus does not archive"));

    let silent = TestApp::spawn_with(&[], |c| {
        c.management_url = Some("http://127.0.0.1:9".into());
    })
    .await;
    let answer = silent.json("/api/dlqs", 503).await;
    assert!(
        answer["error"].as_str().unwrap().contains("management API"),
        "{answer}"
    );
    let page = silent.get("/").await.text();
    assert!(page.contains("did not say"), "{page}");
}

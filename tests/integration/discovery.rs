//! DLQ discovery through RabbitMQ's management API (`--management-url`, on the 4.x broker
//! whose management plugin the CI starts): dead-letter targets found through queue arguments,
//! a policy and the default exchange in three vhosts, which of them is archived, and the
//! settings that put their messages at risk, and the queues whose dead letters reach no queue,
//! at `GET /api/dlqs` and on the overview.

use std::time::Duration;

use lapin::types::AMQPValue;
use lapin::ExchangeKind;
use serde_json::Value;

use crate::brokers::{Broker, PrivateBroker, Vhost};
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
                config.connection.amqp_url = a.url().into();
                config.management_urls = vec![management.parse().unwrap()];
            })
            .await;

            // Ask until vhost b's DLQ is found through its source's policy, with its delivery
            // limit known.
            let answer = wait_for_dlqs(&app, |answer| {
                dlq(answer, &b.name, "b.dlq")
                    .is_some_and(|d| d["warnings"].as_array().is_some_and(|w| !w.is_empty()))
            })
            .await;
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
        c.management_urls = vec!["http://127.0.0.1:9".parse().unwrap()];
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

/// `--discover` on the 4.x broker: in a vhost of its own, the terminal DLQs the management API
/// shows are archived without `--queue` — one made after Lazarus started too — while a retry
/// queue (TTL and a dead-letter exchange back to work), an excluded DLQ and a DLQ of another
/// vhost keep their messages; each start is audited.
#[tokio::test]
async fn discover_archives_the_terminal_dlqs_of_its_vhost_rabbitmq4() {
    let broker = Broker::Rabbitmq4;
    broker
        .scope(async {
            let v = Vhost::create("adopt");
            let other = Vhost::create("adopt-other");
            let mut t = Topology::on(&v.url()).await;
            // orders: work → dlx (fanout) → orders.dlq.
            t.exchange("dlx", ExchangeKind::Fanout).await;
            t.queue("orders.dlq", Default::default()).await;
            t.bind("orders.dlq", "dlx", "").await;
            t.queue("orders", args(&[("x-dead-letter-exchange", s("dlx"))]))
                .await;
            // mail: through the default exchange into a retry queue that sends its messages
            // back after a minute — not the end of the line.
            t.queue(
                "mail.retry",
                args(&[
                    ("x-message-ttl", AMQPValue::LongInt(60_000)),
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("mail")),
                ]),
            )
            .await;
            t.queue(
                "mail",
                args(&[
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("mail.retry")),
                ]),
            )
            .await;
            // audit: a DLQ the operator excludes.
            t.queue("audit.dlq", Default::default()).await;
            t.queue(
                "audit",
                args(&[
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("audit.dlq")),
                ]),
            )
            .await;
            // Another vhost's DLQ.
            let mut to = Topology::on(&other.url()).await;
            to.queue("elsewhere.dlq", Default::default()).await;
            to.queue(
                "elsewhere",
                args(&[
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("elsewhere.dlq")),
                ]),
            )
            .await;

            let management = broker.management_url().unwrap();
            let app = TestApp::spawn_with(&[], |c| {
                c.connection.amqp_url = v.url().into();
                c.management_urls = vec![management.parse().unwrap()];
                c.discover.discover = true;
                c.discover.patterns.exclude = vec!["audit.*".into()];
                c.discover.discover_interval_secs = 1;
            })
            .await;
            for queue in ["orders", "mail", "audit"] {
                publish_many(&t.channel, "", queue, queue, 3).await;
            }
            publish_many(&to.channel, "", "elsewhere", "e", 3).await;
            let workers = vec![
                rejecting_worker_on(&v.url(), "orders").await,
                rejecting_worker_on(&v.url(), "mail").await,
                rejecting_worker_on(&v.url(), "audit").await,
                rejecting_worker_on(&other.url(), "elsewhere").await,
            ];
            app.wait_for_archived(3, Duration::from_secs(30)).await;
            assert_eq!(app.ids("orders.dlq").await.len(), 3);

            // A DLQ made after Lazarus started is found at a later look.
            t.queue("late.dlq", Default::default()).await;
            t.queue(
                "late",
                args(&[
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("late.dlq")),
                ]),
            )
            .await;
            publish_many(&t.channel, "", "late", "l", 2).await;
            let late = rejecting_worker_on(&v.url(), "late").await;
            app.wait_for_archived(5, Duration::from_secs(30)).await;
            assert_eq!(app.ids("late.dlq").await.len(), 2);

            // What discovery leaves alone keeps its messages.
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(app.archived().await, 5, "only orders.dlq and late.dlq");
            assert_eq!(t.depth("audit.dlq").await, 3);
            assert_eq!(t.depth("mail.retry").await, 3);
            assert_eq!(to.depth("elsewhere.dlq").await, 3);

            // The overview and the API show which are archived; each start is audited.
            let answer = app.json("/api/dlqs", 200).await;
            for (vhost, name, archived) in [
                (&v.name, "orders.dlq", true),
                (&v.name, "late.dlq", true),
                (&v.name, "audit.dlq", false),
                (&v.name, "mail.retry", false),
                (&other.name, "elsewhere.dlq", false),
            ] {
                let found = dlq(&answer, vhost, name)
                    .unwrap_or_else(|| panic!("{vhost}/{name} found: {answer}"));
                assert_eq!(found["archived"], archived, "{found}");
            }
            let audit = app.json("/api/audit", 200).await;
            let discovered: Vec<&str> = audit["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["action"] == "discover")
                .map(|e| e["summary"].as_str().unwrap())
                .collect();
            assert_eq!(discovered.len(), 2, "{audit}");
            assert!(discovered
                .contains(&"archiving orders.dlq, found as the dead-letter queue of orders"));
            let page = app.get("/").await.text();
            assert!(page.contains("late.dlq"), "{page}");

            // `lazarus discover` shows the same choice beforehand, consuming nothing.
            let preview = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
                .args([
                    "discover",
                    "--discover-exclude",
                    "audit.*",
                    "--queue",
                    "late.dlq",
                ])
                .env("LAZARUS_AMQP_URL", v.url())
                .env("LAZARUS_MANAGEMENT_URL", &management)
                .output()
                .unwrap();
            let shown = String::from_utf8_lossy(&preview.stdout);
            assert!(preview.status.success(), "{shown} {preview:?}");
            let line = |name: &str| {
                shown
                    .lines()
                    .find(|l| l.starts_with(&format!("{}/{name}\t", v.name)))
                    .unwrap_or_else(|| panic!("{name} is listed: {shown}"))
                    .to_owned()
            };
            assert_eq!(
                line("orders.dlq"),
                format!("{}/orders.dlq\tarchive\tfed by orders", v.name)
            );
            assert!(
                line("late.dlq").contains("\tarchived already (--queue)"),
                "{shown}"
            );
            assert!(line("audit.dlq").contains("\tleave: --discover-include/--discover-exclude"));
            assert!(line("mail.retry").contains("\tleave: it dead-letters again"));
            assert!(shown.contains(&format!("{}/elsewhere.dlq\tleave: in vhost", other.name)));
            assert_eq!(to.depth("elsewhere.dlq").await, 3, "nothing consumed");

            for w in workers {
                w.abort();
            }
            late.abort();
            let mut app = app;
            app.stop().await;
            t.cleanup().await;
            to.cleanup().await;
        })
        .await
}

/// `--discover-include vhost/pattern` reaches DLQs of other vhosts: archived under
/// `vhost/name`, shown as archived, previewed by `lazarus discover`; a vhost no pattern names
/// is left alone.
#[tokio::test]
async fn discover_archives_other_vhosts_a_pattern_names_rabbitmq4() {
    let broker = Broker::Rabbitmq4;
    broker
        .scope(async {
            let home = Vhost::create("vh-home");
            let named = Vhost::create("vh-named");
            let unnamed = Vhost::create("vh-unnamed");
            let mut topologies = Vec::new();
            for v in [&home, &named, &unnamed] {
                let mut t = Topology::on(&v.url()).await;
                dying_queue(&mut t, "orders", "orders.dlq").await;
                t.queue("orders.dlq", Default::default()).await;
                topologies.push(t);
            }
            let management = broker.management_url().unwrap();
            let include = vec!["*.dlq".to_owned(), format!("{}/*", named.name)];
            let app = TestApp::spawn_with(&[], |c| {
                c.connection.amqp_url = home.url().into();
                c.management_urls = vec![management.parse().unwrap()];
                c.discover.discover = true;
                c.discover.patterns.include = include.clone();
                c.discover.discover_interval_secs = 1;
            })
            .await;
            for t in &topologies {
                publish_many(&t.channel, "", "orders", "o", 2).await;
            }
            app.wait_for_archived(4, Duration::from_secs(30)).await;
            let named_dlq = format!("{}/orders.dlq", named.name);
            assert_eq!(app.ids("orders.dlq").await.len(), 2);
            assert_eq!(app.ids(&named_dlq).await.len(), 2);
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(app.archived().await, 4, "the unnamed vhost is left alone");
            assert_eq!(topologies[2].depth("orders.dlq").await, 2);

            let answer = wait_for_dlqs(&app, |a| {
                dlq(a, &named.name, "orders.dlq").is_some_and(|d| d["archived"] == true)
            })
            .await;
            assert_eq!(
                dlq(&answer, &home.name, "orders.dlq").unwrap()["archived"],
                true
            );
            assert_eq!(
                dlq(&answer, &unnamed.name, "orders.dlq").unwrap()["archived"],
                false
            );
            let audit = app.json("/api/audit", 200).await;
            assert!(
                audit.to_string().contains(&format!(
                    "archiving {named_dlq}, found as the dead-letter queue of orders"
                )),
                "{audit}"
            );

            let preview = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
                .args(["discover", "--discover-include", &include.join(",")])
                .env("LAZARUS_AMQP_URL", home.url())
                .env("LAZARUS_MANAGEMENT_URL", &management)
                .output()
                .unwrap();
            let shown = String::from_utf8_lossy(&preview.stdout);
            assert!(preview.status.success(), "{shown} {preview:?}");
            for (v, decision) in [
                (&home, "\tarchive\t"),
                (&named, "\tarchive\t"),
                (&unnamed, "\tleave: --discover-include/--discover-exclude"),
            ] {
                let line = format!("{}/orders.dlq{decision}", v.name);
                assert!(shown.contains(&line), "{line} in {shown}");
            }

            let mut app = app;
            app.stop().await;
            for t in topologies {
                t.cleanup().await;
            }
        })
        .await
}

/// `/api/dlqs` until `ready` holds for it: the broker reports a queue's policy (and 4.0 a
/// quorum queue's delivery limit) only once it gathered its statistics (seconds; more than
/// 40 s under load on 4.0).
async fn wait_for_dlqs(app: &TestApp, ready: impl Fn(&Value) -> bool) -> Value {
    // Each look asks the management API: every second.
    let patience = Patience::within(Duration::from_secs(120)).every(Duration::from_secs(1));
    wait_showing("/api/dlqs to be ready", patience, async || {
        let answer = app.json("/api/dlqs", 200).await;
        if ready(&answer) {
            Ok(answer)
        } else {
            Err(answer)
        }
    })
    .await
}

/// `--discover` without `--management-url` stops at start with what to give.
#[tokio::test]
async fn discover_needs_a_management_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = lazarus::config::ServeConfig::defaults();
    config.connection.database_url =
        format!("sqlite://{}", dir.path().join("a.db").display()).into();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.discover.discover = true;
    let error = lazarus::startup::Application::build(config)
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("--management-url"), "{error}");
}

/// `--management-url https://…` against RabbitMQ's own TLS management listener: a private
/// 4.x node whose `management.ssl.*` presents a certificate a test CA signed. `lazarus
/// discover` lists the node's DLQ when that CA is trusted (`SSL_CERT_FILE`), and says the
/// certificate is not trusted when it is not, without the password in what it prints.
#[tokio::test]
async fn discover_reads_the_management_api_over_https_rabbitmq4() {
    let dir = tempfile::tempdir().unwrap();
    let TestCa { ca, cert, key } = TestCa::localhost(dir.path());
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = format!(
        "management.ssl.port = {tls_port}\nmanagement.ssl.ip = 127.0.0.1\n\
         management.ssl.cacertfile = {ca}\nmanagement.ssl.certfile = {cert}\n\
         management.ssl.keyfile = {key}\n"
    );
    let mut node =
        PrivateBroker::configured(Broker::Rabbitmq4, "[rabbitmq_management].", &conf).await;
    let mut t = Topology::on(&node.url()).await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &unique("tls")).await;
    let management = format!("https://guest:guest@localhost:{tls_port}");
    let discover = |trusted: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
        command
            .arg("discover")
            .env("LAZARUS_AMQP_URL", node.url())
            .env("LAZARUS_MANAGEMENT_URL", &management);
        match trusted {
            Some(ca) => command.env("SSL_CERT_FILE", ca),
            // A CA bundle without the test CA.
            None => command.env("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
        };
        let out = command.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    // The TLS listener starts with the plugin, a moment after AMQP.
    // Each look runs `lazarus discover`: every 500 ms.
    let patience = Patience::within(Duration::from_secs(60)).every(Duration::from_millis(500));
    let shown = wait_showing(
        "discover over https to succeed",
        patience,
        async || match discover(Some(&ca)) {
            (true, said) => Ok(said),
            (false, said) => Err(said),
        },
    )
    .await;
    assert!(
        shown.contains(&format!("{dlq}\tarchive\tfed by {work}")),
        "{shown}"
    );
    let (ok, said) = discover(None);
    assert!(!ok, "an untrusted certificate is refused: {said}");
    assert!(
        said.contains("invalid peer certificate") && said.contains("SSL_CERT_FILE"),
        "{said}"
    );
    assert!(!said.contains("guest:guest"), "{said}");
    node.stop().await;
}

/// A home-vhost queue named `<vhost>/orders.dlq` and the queue `orders.dlq` of that vhost,
/// both DLQs, found through the management API with `--discover-include '*/*'`: each is
/// archived under its own key (`/<vhost>/orders.dlq` and `<vhost>/orders.dlq`), in either
/// order the API lists them, with its own metrics series, `/readyz` entry and retention rule.
/// (Before, they shared the key `<vhost>/orders.dlq`: the one listed first was archived, the
/// other left alone.)
async fn a_home_queue_named_like_another_vhosts_is_its_own_dlq(home_listed_first: bool) {
    let broker = Broker::Rabbitmq4;
    broker
        .scope(async {
            let (home_prefix, other_prefix) = match home_listed_first {
                true => ("keys-a", "keys-b"),
                false => ("keys-b", "keys-a"),
            };
            let home = Vhost::create(home_prefix);
            let other = Vhost::create(other_prefix);
            assert_eq!(home.name < other.name, home_listed_first);
            let impostor = format!("{}/orders.dlq", other.name);
            let mut th = Topology::on(&home.url()).await;
            th.queue(&impostor, Default::default()).await;
            dying_queue(&mut th, "orders", &impostor).await;
            let mut to = Topology::on(&other.url()).await;
            to.queue("orders.dlq", Default::default()).await;
            dying_queue(&mut to, "orders", "orders.dlq").await;

            let management = broker.management_url().unwrap();
            let app = TestApp::spawn_with(&[], |c| {
                c.connection.amqp_url = home.url().into();
                c.management_urls = vec![management.parse().unwrap()];
                c.discover.discover = true;
                // `*/*` as the attack had it, narrowed to this test's two vhosts: on the
                // shared broker `*/*` would also take the DLQs of the tests running beside it.
                c.discover.patterns.include =
                    vec![format!("{}/*", home.name), format!("{}/*", other.name)];
                c.discover.discover_interval_secs = 1;
            })
            .await;
            publish_many(&th.channel, "", "orders", "home", 2).await;
            publish_many(&to.channel, "", "orders", "other", 3).await;
            app.wait_for_archived(5, Duration::from_secs(60)).await;

            let (home_key, other_key) = (format!("/{impostor}"), impostor.clone());
            let home_messages = app.all_messages(&home_key).await;
            let other_messages = app.all_messages(&other_key).await;
            assert_eq!(home_messages.len(), 2, "{home_messages:?}");
            assert_eq!(other_messages.len(), 3, "{other_messages:?}");
            assert!(home_messages
                .iter()
                .all(|m| m["vhost"] == home.name.as_str()));
            assert!(other_messages
                .iter()
                .all(|m| m["vhost"] == other.name.as_str()));
            assert_eq!(th.depth(&impostor).await, 0);
            assert_eq!(to.depth("orders.dlq").await, 0);

            // Each has its own series and consumer state.
            let series = |name: &str, queue: &str| {
                format!("{name}{{broker=\"default\",queue=\"{queue}\"}} ")
            };
            let ingested = "lazarus_ingested_messages_total";
            assert_eq!(app.counter(&series(ingested, &home_key)).await, 2);
            assert_eq!(app.counter(&series(ingested, &other_key)).await, 3);
            let connected = "lazarus_consumer_connected";
            assert_eq!(app.counter(&series(connected, &home_key)).await, 1);
            assert_eq!(app.counter(&series(connected, &other_key)).await, 1);
            let ready = app.json("/readyz", 200).await;
            assert_eq!(ready["queues"][&home_key]["state"], "consuming", "{ready}");
            assert_eq!(ready["queues"][&other_key]["state"], "consuming", "{ready}");
            let answer = app.json("/api/dlqs", 200).await;
            for (vhost, name) in [(&home.name, impostor.as_str()), (&other.name, "orders.dlq")] {
                let found = dlq(&answer, vhost, name).unwrap_or_else(|| panic!("{answer}"));
                assert_eq!(found["archived"], true, "{found}");
            }

            // A retention rule per DLQ, named as --queue names it.
            let specs: Vec<lazarus::retention::RetentionSpec> = [
                format!("{home_key}:messages=1"),
                format!("{other_key}:messages=2"),
            ]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
            let policy = lazarus::retention::Policy::new(&specs, &home.name).unwrap();
            let pass = lazarus::retention::run_pass(
                app.archive.as_ref(),
                &policy,
                "test",
                Duration::from_secs(3600),
                &tokio_util::sync::CancellationToken::new(),
                time::OffsetDateTime::now_utc(),
            )
            .await
            .unwrap()
            .expect("no other run under way");
            assert_eq!(pass.run.deleted, 2, "{:?}", pass.run);
            assert_eq!(app.all_messages(&home_key).await.len(), 1);
            assert_eq!(app.all_messages(&other_key).await.len(), 2);

            let mut app = app;
            app.stop().await;
            th.cleanup().await;
            to.cleanup().await;
        })
        .await
}

#[tokio::test]
async fn a_home_queue_named_like_another_vhosts_listed_first_is_its_own_dlq_rabbitmq4() {
    a_home_queue_named_like_another_vhosts_is_its_own_dlq(true).await
}

#[tokio::test]
async fn a_home_queue_named_like_another_vhosts_listed_second_is_its_own_dlq_rabbitmq4() {
    a_home_queue_named_like_another_vhosts_is_its_own_dlq(false).await
}

/// A quorum queue dead-letters at most once unless told otherwise: a dead letter its DLQ
/// cannot take at that moment is dropped. The DLQ it feeds says so, naming it; a source set
/// to at-least-once (with reject-publish, which that needs) is not named.
#[tokio::test]
async fn quorum_sources_that_dead_letter_at_most_once_are_named_rabbitmq4() {
    let broker = Broker::Rabbitmq4;
    broker
        .scope(async {
            let v = Vhost::create("amo");
            let mut t = Topology::on(&v.url()).await;
            t.exchange("dlx", ExchangeKind::Fanout).await;
            t.queue("orders.dlq", Default::default()).await;
            t.bind("orders.dlq", "dlx", "").await;
            let quorum = |extra: &[(&str, AMQPValue)]| {
                let mut all = vec![
                    ("x-queue-type", s("quorum")),
                    ("x-dead-letter-exchange", s("dlx")),
                ];
                all.extend(extra.iter().cloned());
                args(&all)
            };
            t.queue("orders", quorum(&[])).await;
            t.queue(
                "payments",
                quorum(&[
                    ("x-dead-letter-strategy", s("at-least-once")),
                    ("x-overflow", s("reject-publish")),
                ]),
            )
            .await;
            let management = broker.management_url().unwrap();
            let app = TestApp::spawn_with(&["orders.dlq"], |config| {
                config.connection.amqp_url = v.url().into();
                config.management_urls = vec![management.parse().unwrap()];
            })
            .await;
            let answer = wait_for_dlqs(&app, |answer| {
                dlq(answer, &v.name, "orders.dlq")
                    .is_some_and(|d| d["sources"].as_array().is_some_and(|s| s.len() == 2))
            })
            .await;
            let found = dlq(&answer, &v.name, "orders.dlq").unwrap();
            let warnings: Vec<&str> = found["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let at_most_once: Vec<&&str> = warnings
                .iter()
                .filter(|w| w.contains("fed at most once"))
                .collect();
            assert_eq!(at_most_once.len(), 1, "{found}");
            assert!(at_most_once[0].contains("quorum queue orders:"), "{found}");
            assert!(!at_most_once[0].contains("payments"), "{found}");
            // The DLQ is archived: its sources' risk is on the overview.
            let page = app.get("/").await.text();
            assert!(
                page.contains("fed at most once by quorum queue orders"),
                "{page}"
            );
            t.cleanup().await;
        })
        .await
}

//! Each framework's failure archived by Lazarus from its error queue through the real broker,
//! on SQLite and PostgreSQL: the API and the message page say its convention, the queue it
//! failed in, its error and where its target came from; a replay with no target given (one
//! message, or a job) lands in the queue that failed, without the framework's failure headers
//! and with every other header and property, as a plain consumer takes it. Malformed
//! convention headers of every kind are archived and said.

use lapin::types::{AMQPValue, FieldTable};
use serde_json::{json, Value};

use super::*;

/// The text of a page as askama escaped it, read back.
fn unescaped(html: &str) -> String {
    html.replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#38;", "&")
}

/// The message page of archive record `id`, its text unescaped.
async fn page(app: &TestApp, id: &str) -> String {
    let page = app.get(&format!("/messages/{id}")).await;
    assert_eq!(page.status, 200);
    unescaped(&String::from_utf8_lossy(&page.body))
}

/// Archives `produced` from its error queue and checks what the API and page say of it;
/// the archive id and the message as the API gives it.
async fn archived(app: &TestApp, produced: &Produced) -> (String, Value) {
    app.wait_for_archived(1, Duration::from_secs(20)).await;
    let ids = app.ids(&produced.dlq).await;
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0].clone();
    let m = app.json(&format!("/api/messages/{id}"), 200).await;
    assert_eq!(m["convention"], produced.convention.name(), "{m}");
    assert!(
        m["replay_target"].is_object(),
        "a target without asking: {m}"
    );
    let html = page(app, &id).await;
    assert!(html.contains(produced.convention.label()), "{html}");
    match &produced.target {
        Some(target) => {
            assert_eq!(m["replay_target"], json!(target), "{m}");
            let from = m["replay_target_from"].as_str().expect("said");
            let said = format!("target from {}'s {from}", produced.convention.label());
            assert!(html.contains(&said), "{said}: {html}");
        }
        // Dramatiq's: the broker dead-lettered it, `x-death` gives the target.
        None => assert_eq!(m["replay_target_from"], Value::Null, "{m}"),
    }
    if let Some(queue) = &produced.failed_queue {
        assert_eq!(m["failed_queue"], queue.as_str(), "{m}");
    }
    if let Some(kind) = &produced.message_type {
        assert_eq!(m["message_type"], kind.as_str(), "{m}");
    }
    if !produced.root_type.is_empty() {
        assert_eq!(m["error_type"], produced.root_type.as_str(), "{m}");
        let error = m["error"].as_str().expect("an error");
        assert!(error.starts_with(&produced.root_type), "{error}");
        // The error first, whatever header held it.
        let at = html
            .find("class=\"card error-first\"")
            .expect("the error section");
        assert!(at < html.find("aria-label=\"Summary\"").unwrap());
    }
    assert!(m["cause"].is_string(), "{m}");
    (id, m)
}

/// What landed in the queue that failed is the archived message, without the framework's
/// failure headers (and the broker's death headers) and with every other header and property.
fn landed_as_archived(back: &Taken, archived: &Value, produced: &Produced, id: &str) {
    let names = back.header_names();
    for h in &produced.failure_headers {
        assert!(!names.contains(h), "{h} was stripped: {names:?}");
    }
    for h in &produced.kept_headers {
        assert!(names.contains(h), "{h} was kept: {names:?}");
    }
    assert!(!names.iter().any(|n| n == "x-death"), "{names:?}");
    let kept = archived["headers"].as_object().unwrap();
    for (name, _) in kept {
        let failure = produced.convention.is_failure_header(name)
            || name == "x-death"
            || name.starts_with("x-first-death-")
            || name.starts_with("x-last-death-");
        assert_eq!(names.contains(name), !failure, "{name}: {names:?}");
    }
    let link = back.headers.as_ref().unwrap().get("x-lazarus-replay-of");
    assert_eq!(link.and_then(|v| v.as_str()), Some(id));
    assert_eq!(
        serde_json::to_value(&back.properties).unwrap(),
        archived["properties"],
        "every property kept"
    );
}

/// Archives, replays with no target given, and checks what a plain consumer takes.
async fn replayed_where_it_failed(produced: Produced) {
    let url = amqp_url();
    let app = TestApp::spawn(&[&produced.dlq]).await;
    let (id, m) = archived(&app, &produced).await;
    let body = app.body(&id).await;
    let path = format!("/api/messages/{id}/replay");
    let key = unique("replay");
    let replayed = app
        .post_json(&path, json!({ "request_key": key }), 200)
        .await;
    assert_eq!(replayed["outcome"], "published", "{replayed}");
    assert_eq!(replayed["target"], m["replay_target"]);
    let back = take(&url, &produced.lands_in).await;
    assert_eq!(back.body, body);
    landed_as_archived(&back, &m, &produced, &id);
    produced.cleanup(&url).await;
}

on_both_backends!(spring_failures_are_archived_and_replayed_where_they_failed);
async fn spring_failures_are_archived_and_replayed_where_they_failed() {
    let url = amqp_url();
    replayed_where_it_failed(spring(&url, &unique("spring"), "1107").await).await;
}

on_both_backends!(masstransit_faults_are_archived_and_replayed_where_they_failed);
async fn masstransit_faults_are_archived_and_replayed_where_they_failed() {
    let url = amqp_url();
    replayed_where_it_failed(masstransit_fault(&url, &unique("mt"), "142").await).await;
}

on_both_backends!(masstransit_skipped_is_archived_and_replayed_where_it_failed);
async fn masstransit_skipped_is_archived_and_replayed_where_it_failed() {
    let url = amqp_url();
    replayed_where_it_failed(masstransit_skipped(&url, &unique("mt"), "144").await).await;
}

on_both_backends!(nservicebus_failures_are_archived_and_replayed_where_they_failed);
async fn nservicebus_failures_are_archived_and_replayed_where_they_failed() {
    let url = amqp_url();
    replayed_where_it_failed(nservicebus(&url, &unique("nsb"), "145").await).await;
}

on_both_backends!(watermill_poison_is_archived_and_replayed_where_it_failed);
async fn watermill_poison_is_archived_and_replayed_where_it_failed() {
    let url = amqp_url();
    replayed_where_it_failed(watermill(&url, &unique("wm"), "146").await).await;
}

on_both_backends!(dramatiq_failures_are_archived_and_replayed_where_they_failed);
async fn dramatiq_failures_are_archived_and_replayed_where_they_failed() {
    let url = amqp_url();
    replayed_where_it_failed(dramatiq(&url, &unique("dq"), "147").await).await;
}

on_both_backends!(symfony_failures_are_archived_and_replayed_where_they_failed);
async fn symfony_failures_are_archived_and_replayed_where_they_failed() {
    let url = amqp_url();
    let json = symfony(&url, &unique("sf"), SymfonySerializer::Json, "INV-148").await;
    replayed_where_it_failed(json).await;
    let php = symfony(&url, &unique("sf"), SymfonySerializer::Php, "INV-149").await;
    replayed_where_it_failed(php).await;
}

on_both_backends!(a_job_replays_framework_failures_where_they_failed_and_its_plan_says_why);
async fn a_job_replays_framework_failures_where_they_failed_and_its_plan_says_why() {
    let url = amqp_url();
    let produced = nservicebus(&url, &unique("nsbjob"), "151").await;
    let app = TestApp::spawn(&[&produced.dlq]).await;
    let (id, m) = archived(&app, &produced).await;
    let plan = json!({ "ids": [id], "dry_run": true });
    let plan = app.post_json("/api/replays", plan, 200).await;
    let targets = plan["plan"]["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 1, "{plan}");
    assert_eq!(
        targets[0]["target_from"],
        format!(
            "NServiceBus's {}",
            m["replay_target_from"].as_str().unwrap()
        ),
        "{plan}"
    );
    let plan_page = app
        .get(&format!("/replays/{}", plan["id"].as_str().unwrap()))
        .await;
    let html = unescaped(&String::from_utf8_lossy(&plan_page.body));
    assert!(
        html.contains("target from NServiceBus's NServiceBus.FailedQ"),
        "{html}"
    );
    // A job with no target given; a Node.js consumer of the queue that failed takes it.
    let job = json!({ "ids": [id], "request_key": unique("job") });
    let job = app.post_json("/api/replays", job, 200).await;
    let job_id = job["id"].as_str().unwrap();
    let done = app
        .wait_for_job(job_id, Duration::from_secs(30), |j| {
            j["state"] == "completed"
        })
        .await;
    assert_eq!(done["counts"]["published"], 1, "{done}");
    let seen = take_with_amqplib(&url, &produced.lands_in).await;
    let headers = seen["headers"].as_object().unwrap();
    assert!(!produced.failure_headers.is_empty());
    for h in &produced.failure_headers {
        assert!(!headers.contains_key(h), "{h}: {seen}");
    }
    assert!(!produced.kept_headers.is_empty());
    for h in &produced.kept_headers {
        assert!(headers.contains_key(h), "{h}: {seen}");
    }
    assert_eq!(headers["x-lazarus-replay-of"], id.as_str());
    assert_eq!(seen["properties"]["type"], "Shop.Messages.PlaceOrder");
    produced.cleanup(&url).await;
}

on_both_backends!(replay_exchange_still_bounds_a_framework_target);
async fn replay_exchange_still_bounds_a_framework_target() {
    let url = amqp_url();
    let produced = spring(&url, &unique("springpol"), "1152").await;
    let exchange = produced.target.clone().unwrap().exchange;
    assert!(!exchange.is_empty());
    let app = TestApp::spawn_with(&[&produced.dlq], |c| {
        c.replay_exchanges = vec!["only-this-one".into()]
    })
    .await;
    let (id, _) = archived(&app, &produced).await;
    let path = format!("/api/messages/{id}/replay");
    let refused = app
        .post_json(&path, json!({ "request_key": unique("r") }), 403)
        .await;
    assert!(refused.to_string().contains(&exchange), "{refused}");
    produced.cleanup(&url).await;
}

/// A message of `convention`'s kind whose headers `wrong` breaks, and what a test expects.
struct Malformed {
    message_id: &'static str,
    /// The DLQ it is published to (`.XQ` for Dramatiq's).
    xq: bool,
    headers: Vec<(&'static str, AMQPValue)>,
    body: &'static [u8],
}

fn text(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.as_bytes().to_vec().into())
}

/// Every kind of malformed convention header: a value of the wrong AMQP type, not a URL, an
/// unknown vhost, empty, missing, too long, a broken body or stamp.
fn malformed() -> Vec<Malformed> {
    let mt = |id, address: AMQPValue, message: AMQPValue| Malformed {
        message_id: id,
        xq: false,
        headers: vec![
            ("MT-Reason", text("fault")),
            ("MT-Fault-ExceptionType", text("Shop.OrderException")),
            ("MT-Fault-Message", message),
            ("MT-Fault-InputAddress", address),
        ],
        body: b"{}",
    };
    vec![
        mt(
            "mt-not-a-url",
            text("not-a-url"),
            text("order O-1 has no lines"),
        ),
        mt(
            "mt-other-vhost",
            text("rabbitmq://mq/elsewhere/submit-order"),
            text("order O-2 has no lines"),
        ),
        mt(
            "mt-wrong-type",
            AMQPValue::LongInt(42),
            AMQPValue::Boolean(true),
        ),
        Malformed {
            message_id: "spring-wrong-type",
            xq: false,
            headers: vec![
                ("x-exception-message", text("boom")),
                ("x-original-exchange", AMQPValue::Boolean(true)),
                ("x-original-routingKey", text(&"k".repeat(300))),
            ],
            body: b"{}",
        },
        Malformed {
            message_id: "nsb-empty-failed-q",
            xq: false,
            headers: vec![
                ("NServiceBus.FailedQ", text("")),
                ("NServiceBus.ExceptionInfo.Message", AMQPValue::LongInt(7)),
            ],
            body: b"{}",
        },
        Malformed {
            message_id: "watermill-wrong-topic",
            xq: false,
            headers: vec![
                ("reason_poisoned", text("handler failed")),
                ("topic_poisoned", AMQPValue::Void),
            ],
            body: b"{}",
        },
        Malformed {
            message_id: "symfony-broken-stamp",
            xq: false,
            headers: vec![(
                "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\ErrorDetailsStamp",
                text("not json ["),
            )],
            body: b"{}",
        },
        Malformed {
            message_id: "dramatiq-not-json",
            xq: true,
            headers: vec![],
            body: b"not a dramatiq message",
        },
    ]
}

on_both_backends!(malformed_convention_headers_are_archived_and_said);
async fn malformed_convention_headers_are_archived_and_said() {
    let url = amqp_url();
    let dlq = unique("malformed_error");
    let xq = format!("{}.XQ", unique("malformed"));
    let mut t = Topology::new().await;
    t.queue(&dlq, FieldTable::default()).await;
    t.queue(&xq, FieldTable::default()).await;
    let app = TestApp::spawn(&[&dlq, &xq]).await;
    let cases = malformed();
    for case in &cases {
        let mut headers = FieldTable::default();
        for (name, value) in &case.headers {
            headers.insert((*name).into(), value.clone());
        }
        let queue = if case.xq { &xq } else { &dlq };
        let props = json_props(case.message_id).with_headers(headers);
        t.publish("", queue, case.body, props).await;
    }
    app.wait_for_archived(cases.len() as i64, Duration::from_secs(20))
        .await;
    let vhost = vhost_of(&url);
    for case in &cases {
        let queue = if case.xq { &xq } else { &dlq };
        let m = app.detail_by_message_id(queue, case.message_id).await;
        let id = m["id"].as_str().unwrap();
        // What the convention reads of it, said on the message as it is.
        let stored = serde_json::from_value::<Table>(m["headers"].clone()).unwrap();
        let read = lazarus::message::conventions::read(&lazarus::message::conventions::Delivery {
            queue,
            vhost: &vhost,
            routing_key: queue,
            headers: Some(&stored),
            body_text: std::str::from_utf8(case.body).ok(),
        })
        .unwrap_or_else(|| panic!("{}: a convention", case.message_id));
        assert!(!read.problems.is_empty(), "{}: {read:?}", case.message_id);
        assert_eq!(m["convention"], read.convention.name(), "{m}");
        assert_eq!(m["convention_problems"], json!(read.problems), "{m}");
        let html = page(&app, id).await;
        for problem in &read.problems {
            assert!(html.contains(problem.as_str()), "{problem}: {html}");
        }
    }
    let not_a_url = app.detail_by_message_id(&dlq, "mt-not-a-url").await;
    let said = not_a_url["convention_problems"][0].as_str().unwrap();
    assert!(
        said.starts_with("target unknown: MT-Fault-InputAddress is not a rabbitmq:// address"),
        "{said}"
    );
    // Without a target it still has its error, and counts under its DLQ.
    assert_eq!(not_a_url["replay_target"], Value::Null);
    assert_eq!(not_a_url["failed_queue"], Value::Null);
    assert_eq!(not_a_url["error_type"], "Shop.OrderException");
    t.cleanup().await;
}

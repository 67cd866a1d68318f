//! Failures by cause (issue 33), on both backends with dead letters made by the broker: four
//! bugs whose 200 errors each name their own id, duration or request UUID — a plain error
//! line, one with a duration, Spring's message and stack trace from a real Java program,
//! and a Python traceback from a real interpreter — are four open groups of 50 on the
//! overview and in `GET /api/groups`, grouped also by exception type, message type, failing
//! queue and reason; one group's filter replays exactly its 50.

use std::process::Command;
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::{json, Value};

use crate::helpers::*;

/// Failures of one bug: its messages' headers, its message type, and what it is grouped as.
pub struct Bug {
    pub message_type: &'static str,
    pub error_type: &'static str,
    pub template: &'static str,
    /// Each failure's headers.
    pub headers: Vec<Vec<(&'static str, String)>>,
}

/// What a program prints, split at its lines "----".
fn printed(command: &mut Command) -> Vec<String> {
    let out = command.output().expect("the runtime runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split("----\n")
        .filter(|t| !t.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// `n` failures of each of four bugs, each naming its own id, duration or request UUID.
pub fn four_bugs(n: usize) -> Vec<Bug> {
    let dir = tempfile::tempdir().unwrap();
    let java = dir.path().join("Invoices.java");
    std::fs::write(&java, include_str!("causes/Invoices.java")).unwrap();
    let invoices: Vec<String> = (0..n).map(|i| format!("INV-2026-{:05}", 40 + i)).collect();
    let traces = printed(Command::new("java").arg(&java).args(&invoices));
    assert_eq!(traces.len(), n);
    let python = dir.path().join("pricing.py");
    std::fs::write(&python, include_str!("causes/pricing.py")).unwrap();
    let requests: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "3f2a9c1e-{:04x}-4a2b-9c3d-{:012x}",
                i * 7919 % 65536,
                i * 104729
            )
        })
        .collect();
    let tracebacks = printed(Command::new("python3").arg(&python).args(&requests));
    assert_eq!(tracebacks.len(), n);
    vec![
        Bug {
            message_type: "customer.lookup",
            error_type: "CustomerNotFoundException",
            template: "no customer with id C-<n>",
            headers: (0..n)
                .map(|i| {
                    let id = 1007 + 10 * i;
                    vec![(
                        "x-exception-message",
                        format!("CustomerNotFoundException: no customer with id C-{id}"),
                    )]
                })
                .collect(),
        },
        Bug {
            message_type: "tax.quote",
            error_type: "TimeoutException",
            template: "tax service did not answer within <n> ms",
            headers: (0..n)
                .map(|i| {
                    let ms = 3012 + 37 * i;
                    vec![(
                        "error",
                        format!("TimeoutException: tax service did not answer within {ms} ms"),
                    )]
                })
                .collect(),
        },
        // Spring AMQP's RepublishMessageRecoverer: the cause's message, and the whole trace.
        Bug {
            message_type: "invoice.post",
            error_type: "com.acme.billing.Invoices$InvoiceNotFoundException",
            template: "no invoice INV-<n>-<n> in ledger",
            headers: invoices
                .iter()
                .zip(&traces)
                .map(|(id, trace)| {
                    vec![
                        ("x-exception-message", format!("no invoice {id} in ledger")),
                        ("x-exception-stacktrace", trace.clone()),
                    ]
                })
                .collect(),
        },
        // A worker that leaves its traceback in a header of its own.
        Bug {
            message_type: "invoice.price",
            error_type: "UpstreamRejected",
            template: "request <uuid> rejected by the tax service",
            headers: tracebacks
                .iter()
                .map(|t| vec![("exception", t.clone())])
                .collect(),
        },
    ]
}

/// Publishes every failure of `bugs` to `work`, whose consumer (returned: abort it once they
/// are archived) rejects them all into the DLQ.
pub async fn dead_letter_all(
    t: &Topology,
    work: &str,
    bugs: &[Bug],
) -> tokio::task::JoinHandle<()> {
    for (b, bug) in bugs.iter().enumerate() {
        for (i, headers) in bug.headers.iter().enumerate() {
            let mut table = FieldTable::default();
            for (name, value) in headers {
                table.insert((*name).into(), AMQPValue::LongString(value.as_str().into()));
            }
            let properties = BasicProperties::default()
                .with_message_id(format!("bug{b}-{i}").into())
                .with_type(bug.message_type.into())
                .with_headers(table);
            t.publish("", work, format!("{{\"n\": {i}}}").as_bytes(), properties)
                .await;
        }
    }
    let worker = rejecting_worker(work).await;
    t.wait_for_depth(work, 0, Duration::from_secs(30)).await;
    worker
}

/// The groups `/api/groups?{query}` answers.
async fn groups(app: &TestApp, query: &str) -> Vec<Value> {
    app.json(&format!("/api/groups?{query}"), 200).await["groups"]
        .as_array()
        .unwrap()
        .clone()
}

/// The message-ids of what `/api/messages?{query}` lists, sorted.
async fn listed(app: &TestApp, query: &str) -> Vec<String> {
    let page = app
        .json(&format!("/api/messages?{query}&limit=500"), 200)
        .await;
    let mut ids: Vec<String> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn query_of(filter: &Value) -> String {
    filter
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let v: String =
                form_urlencoded::byte_serialize(v.as_str().unwrap().as_bytes()).collect();
            format!("{k}={v}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

on_both_backends!(two_hundred_failures_of_four_bugs_are_four_groups_of_fifty);
async fn two_hundred_failures_of_four_bugs_are_four_groups_of_fifty() {
    let p = unique("bugs");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let bugs = four_bugs(50);
    let worker = dead_letter_all(&t, &work, &bugs).await;
    app.wait_for_archived(200, Duration::from_secs(60)).await;
    worker.abort();

    // The overview: four groups, each of 50 open messages.
    let overview = app.get("/").await.text();
    let rows = overview.matches(r#"class="row-link""#).count();
    assert_eq!(rows, 4, "group rows on the overview");
    assert_eq!(
        overview.matches("data-group-open>50<").count(),
        4,
        "{overview}"
    );

    // The API: the same four, each a cause in one place.
    let all = groups(&app, "").await;
    assert_eq!(all.len(), 4, "{all:#?}");
    for bug in &bugs {
        let group = all
            .iter()
            .find(|g| g["error_type"] == bug.error_type)
            .unwrap_or_else(|| panic!("no group of {}: {all:#?}", bug.error_type));
        assert_eq!(group["error"], bug.template, "{group}");
        assert_eq!(
            (&group["open"], &group["total"], &group["settling"]),
            (&json!(50), &json!(50), &json!(0))
        );
        assert_eq!(group["queue"], dlq.as_str());
        assert_eq!(group["first_death_queue"], work.as_str());
        assert_eq!(group["reason"], "rejected");
        assert_eq!(group["message_type"], bug.message_type);
        let example = group["example"].as_str().unwrap();
        assert!(
            example.starts_with(&format!("{}: ", bug.error_type)),
            "the example is one error as shown, its root cause's type first: {example}"
        );
        assert!(!example.contains('<'), "{example}");
        // Its filter lists exactly its 50.
        let id = group["id"].as_str().unwrap();
        assert_eq!(group["filter"], json!({ "group": id }));
        let b = bugs
            .iter()
            .position(|x| x.error_type == bug.error_type)
            .unwrap();
        let mine = listed(&app, &format!("group={id}&status=open")).await;
        assert_eq!(mine.len(), 50);
        assert!(
            mine.iter().all(|m| m.starts_with(&format!("bug{b}-"))),
            "{mine:?}"
        );
    }
    // The error shown is the root cause's, as written: the Spring one names its type.
    let shown = listed(&app, "error=com.acme.billing.Invoices%24InvoiceNotFoundException%3A+no+invoice+INV-2026-00042+in+ledger").await;
    assert_eq!(shown, ["bug2-2"]);

    // Grouped otherwise.
    for (by, n, each) in [
        ("error_type", 4, 50),
        ("message_type", 4, 50),
        ("queue", 1, 200),
        ("reason", 1, 200),
    ] {
        let grouped = groups(&app, &format!("group_by={by}")).await;
        assert_eq!(grouped.len(), n, "group_by={by}: {grouped:#?}");
        for g in &grouped {
            assert_eq!(g["open"], each, "group_by={by}: {g}");
            assert_eq!(g["id"], Value::Null);
            assert_eq!(
                listed(&app, &query_of(&g["filter"])).await.len(),
                each as usize,
                "group_by={by}: {g}"
            );
        }
        let page = app.get(&format!("/?group_by={by}")).await.text();
        assert_eq!(page.matches(r#"class="row-link""#).count(), n, "{by}");
    }
    // Filtered by what groups know.
    let spring = "com.acme.billing.Invoices%24InvoiceNotFoundException";
    let one = groups(
        &app,
        &format!("error_type={spring}&queue={dlq}&status=open"),
    )
    .await;
    assert_eq!(one.len(), 1);
    assert!(groups(&app, "queue=elsewhere").await.is_empty());
    assert!(groups(&app, "status=resolved").await.is_empty());
    let refused = app.json("/api/groups?q=timeout", 400).await;
    assert!(
        refused["error"].as_str().unwrap().contains("\"q\""),
        "{refused}"
    );

    // A replay of one group selects exactly its 50; they settle, still open.
    let group = &one[0];
    let mut filter = group["filter"].clone();
    filter["status"] = json!("open");
    let plan = app
        .post_json(
            "/api/replays",
            json!({"filter": filter, "dry_run": true}),
            200,
        )
        .await;
    assert_eq!(plan["plan"]["messages"], 50, "{plan}");
    assert_eq!(plan["plan"]["to_publish"], 50, "{plan}");
    let id = plan["id"].as_str().unwrap();
    app.post_json(&format!("/api/replays/{id}/start"), json!({}), 200)
        .await;
    let job = app
        .wait_for_job(id, Duration::from_secs(30), |j| j["state"] == "completed")
        .await;
    assert_eq!(job["counts"]["published"], 50, "{job}");
    t.wait_for_depth(&work, 50, Duration::from_secs(10)).await;
    let after = groups(&app, &format!("error_type={spring}")).await;
    assert_eq!(
        (&after[0]["open"], &after[0]["settling"]),
        (&json!(50), &json!(50)),
        "replayed, settling: {after:#?}"
    );
    let others = groups(&app, "").await;
    assert_eq!(
        others
            .iter()
            .map(|g| &g["settling"])
            .filter(|s| **s == 0)
            .count(),
        3
    );
    t.cleanup().await;
}

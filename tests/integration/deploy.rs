//! The operator's kit in `deploy/` and the image's health check, checked with the real tools:
//! the alert rules pass `promtool check rules` and their `promtool test rules`, every Lazarus
//! series the rules and the Grafana dashboard name is one the server's metrics render (they
//! cannot drift from the code), the dashboard's queries parse, the compose file passes
//! `docker-compose config` and the Kubernetes manifest strict schema validation, the
//! Dockerfile passes `hadolint`, and `lazarus health` (the Dockerfile's HEALTHCHECK) tells a
//! live server from a missing one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::helpers::*;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a tool the CI installs (a missing one fails the test: it checks nothing otherwise).
fn run(tool: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{tool} runs (scripts/test installs it): {e}"))
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `lazarus_*` names in a text (PromQL in YAML or JSON).
fn lazarus_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in text.match_indices("lazarus_") {
        // A name starts here only if no name character comes before it.
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

/// The series names an exposition serves: from its `# TYPE` lines, with the suffixes each
/// type's samples carry.
fn served_series(exposition: &str) -> BTreeSet<String> {
    let mut series = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for suffix in suffixes {
            series.insert(format!("{name}{suffix}"));
        }
    }
    series
}

#[test]
fn the_alert_rules_pass_promtool_and_their_tests() {
    let dir = repo("deploy/prometheus");
    let check = run("promtool", &["check", "rules", "lazarus-rules.yml"], &dir);
    assert_success("promtool check rules", &check);
    let test = run(
        "promtool",
        &["test", "rules", "lazarus-rules.test.yml"],
        &dir,
    );
    assert_success("promtool test rules", &test);
}

/// The compose file as a real Compose reads it: Debian's docker-compose 1.29 (`config`
/// interpolates variables, merges the anchors and checks the schema; it needs no engine).
/// It predates the top-level `name`, which is taken out of its copy.
#[test]
fn the_compose_file_passes_docker_compose_config() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    std::fs::create_dir(&deploy).unwrap();
    let compose = std::fs::read_to_string(repo("deploy/docker-compose.yml")).unwrap();
    assert!(
        compose.contains("\nname: lazarus\n"),
        "the project is named"
    );
    let without_name = compose.replace("\nname: lazarus\n", "\n");
    std::fs::write(deploy.join("docker-compose.yml"), without_name).unwrap();
    std::fs::copy(
        repo("deploy/lazarus.env.example"),
        deploy.join("lazarus.env"),
    )
    .unwrap();
    let out = run("docker-compose", &["config"], &deploy);
    assert_success("docker-compose config", &out);
    let config = String::from_utf8_lossy(&out.stdout);
    for service in [
        "rabbitmq:",
        "postgres:",
        "lazarus-a:",
        "lazarus-b:",
        "oauth2-proxy:",
    ] {
        assert!(config.contains(service), "{service} in {config}");
    }
    // `$$` is a literal `$` to Compose: the proxy gets the regular expression it needs.
    assert!(config.contains("^/(healthz|readyz)$"), "{config}");
}

/// The Kubernetes manifest against the API's own schemas (kubernetes-validate bundles them;
/// `--strict` refuses fields the API does not know).
#[test]
fn the_kubernetes_manifest_passes_strict_schema_validation() {
    let out = run(
        "kubernetes-validate",
        &["--strict", "lazarus.yaml"],
        &repo("deploy/kubernetes"),
    );
    assert_success("kubernetes-validate", &out);
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    for resource in [
        "service/lazarus",
        "service/lazarus-pods",
        "statefulset/lazarus",
    ] {
        assert!(
            said.contains(&format!("passed for resource {resource}")),
            "{said}"
        );
    }
}

#[test]
fn the_dashboards_queries_parse() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/lazarus-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut n = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            // Grafana's variables, as "All" expands them.
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$queue", ".*")
                .replace("$broker", ".*");
            n += 1;
            rules.push_str(&format!(
                "      - record: dashboard:query_{n}\n        expr: {}\n",
                serde_json::to_string(&expr).unwrap()
            ));
        }
    }
    assert!(n >= 9, "{n} queries");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    let check = run("promtool", &["check", "rules", "dashboard.yml"], dir.path());
    assert_success("the dashboard's queries as recording rules", &check);
}

/// Every metric family the server has, each with a sample (a family without one is not
/// written at all), as `/metrics` renders them.
fn exposition_with_every_family() -> String {
    use lazarus::archive::QueueReasonCount;
    use lazarus::runtime::metrics::{Metrics, QueueLabels};
    let metrics = Metrics::default();
    let queue = QueueLabels {
        broker: "default".into(),
        queue: "orders.dlq".into(),
    };
    metrics.ingested.get_or_create(&queue).inc();
    metrics.duplicates.get_or_create(&queue).inc();
    metrics.set_connected(&lazarus::message::dlq::Dlq::home("orders.dlq"), true);
    metrics.ingest_error(&lazarus::message::dlq::Dlq::home("orders.dlq"), "database");
    metrics.batch_commit_seconds.observe(0.01);
    metrics.replayed("published", 1);
    metrics.canary_paused();
    metrics.webhook("failed", 1);
    let count = QueueReasonCount {
        queue: "orders.dlq".into(),
        broker: "default".into(),
        reason: "rejected".into(),
        messages: 1,
        open: 1,
        oldest: time::OffsetDateTime::UNIX_EPOCH,
        newest: time::OffsetDateTime::UNIX_EPOCH,
    };
    metrics.render(Some(std::slice::from_ref(&count)), &[])
}

#[test]
fn every_series_the_kit_names_is_one_lazarus_serves() {
    let exposition = exposition_with_every_family();
    let served = served_series(&exposition);
    assert!(
        served.contains("lazarus_ingested_messages_total"),
        "{exposition}"
    );
    for file in [
        "deploy/prometheus/lazarus-rules.yml",
        "deploy/prometheus/lazarus-rules.test.yml",
        "deploy/grafana/lazarus-dashboard.json",
    ] {
        let named = lazarus_names(&std::fs::read_to_string(repo(file)).unwrap());
        assert!(!named.is_empty(), "{file} names no Lazarus series");
        let unknown: Vec<&String> = named.iter().filter(|n| !served.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} names series Lazarus does not serve: {unknown:?}\n{exposition}"
        );
    }
}

#[test]
fn the_dockerfile_passes_hadolint_and_checks_its_health() {
    let out = run("hadolint", &["Dockerfile"], &repo(""));
    assert_success("hadolint Dockerfile", &out);
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(r#"CMD ["lazarus", "health""#),
        "the image's HEALTHCHECK asks `lazarus health`"
    );
}

/// `lazarus health ARGS` with `LAZARUS_LISTEN` as given: (exit code, stdout + stderr).
async fn health(listen: &str, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .arg("health")
        .args(args)
        .env("LAZARUS_LISTEN", listen)
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap(), said)
}

#[tokio::test]
async fn lazarus_health_tells_a_live_server_from_a_missing_one() {
    let p = unique("health");
    let missing_dlq = format!("{p}.missing");
    // Its one DLQ does not exist: alive (healthz) but not ready (readyz).
    let app = TestApp::spawn(&[missing_dlq.as_str()]).await;
    let port = app.addr.port();

    // As the image runs it: LAZARUS_LISTEN on every interface, asked on loopback.
    let (code, said) = health(&format!("0.0.0.0:{port}"), &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("/healthz 200"), "{said}");

    let (code, said) = health(&format!("127.0.0.1:{port}"), &["--ready"]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("/readyz 503"), "{said}");

    // Nothing listens there any more.
    drop(app);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let (code, said) = health(&closed.to_string(), &["--timeout-secs", "2"]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("cannot connect"), "{said}");
}

//! A running Lazarus: in process (`TestApp`, an archive of its own on the backend under
//! test) or as the real binary (`lazarus_process`), and how tests ask it things.

use std::net::SocketAddr;
use std::time::Duration;

use lazarus::archive::Archive;
use lazarus::config::ServeConfig;
use lazarus::startup::Application;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;

/// A running Lazarus with an archive of its own on the current backend.
pub struct TestApp {
    pub addr: SocketAddr,
    pub archive: Arc<dyn Archive>,
    pub database_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl TestApp {
    pub async fn spawn(queues: &[&str]) -> Self {
        Self::spawn_with(queues, |_| {}).await
    }

    pub async fn spawn_with(queues: &[&str], tweak: impl FnOnce(&mut ServeConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database_url = archive_url(dir.path()).await;
        let mut config = ServeConfig::defaults();
        config.connection.amqp_url = amqp_url().into();
        config.connection.database_url = database_url.clone().into();
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.queues = queues.iter().map(|q| q.to_string()).collect();
        config.batch_interval_ms = 50;
        tweak(&mut config);
        let app = Application::build(config).await.expect("lazarus starts");
        let addr = app.local_addr();
        let archive = app.archive();
        let (tx, rx) = oneshot::channel();
        let handle = tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));
        TestApp {
            addr,
            archive,
            database_url,
            shutdown: Some(tx),
            handle: Some(handle),
            _dir: dir,
        }
    }

    /// Shuts down as SIGTERM would, and waits for the drain.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle.await.unwrap().unwrap();
        }
    }

    pub async fn get(&self, path: &str) -> HttpResponse {
        http_get(self.addr, path).await
    }

    /// GET and parse JSON, asserting the status.
    pub async fn json(&self, path: &str, status: u16) -> Value {
        let response = self.get(path).await;
        assert_eq!(response.status, status, "GET {path}: {}", response.text());
        serde_json::from_slice(&response.body)
            .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {}", response.text()))
    }

    /// POST JSON and parse the JSON answer, asserting the status.
    pub async fn post_json(&self, path: &str, body: Value, status: u16) -> Value {
        let response = http_request(self.addr, "POST", path, Some(&body.to_string())).await;
        assert_eq!(response.status, status, "POST {path}: {}", response.text());
        serde_json::from_slice(&response.body).unwrap()
    }

    /// Messages archived so far, by the incremental totals.
    pub async fn archived(&self) -> i64 {
        self.archive
            .counts()
            .await
            .unwrap()
            .iter()
            .map(|c| c.messages)
            .sum()
    }

    /// A counter of its `/metrics`, by its name and labels (0 before it is first counted).
    pub async fn counter(&self, name_and_labels: &str) -> u64 {
        self.get("/metrics")
            .await
            .text()
            .lines()
            .find_map(|l| l.strip_prefix(name_and_labels))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits until `n` messages are archived and searchable (the indexer caught up with
    /// what ingest appended).
    pub async fn wait_for_archived(&self, n: i64, timeout: Duration) {
        let now = wait_showing(&format!("{n} messages archived"), timeout, async || {
            let now = self.archived().await;
            let behind = self.archive.index_behind().await.unwrap();
            if now >= n && behind == 0 {
                Ok(now)
            } else {
                Err(format!("{now} archived, {behind} of them not indexed yet"))
            }
        })
        .await;
        assert_eq!(now, n, "more messages archived than expected");
    }

    /// Every archived message of a queue, oldest first, following the cursors.
    pub async fn all_messages(&self, queue: &str) -> Vec<Value> {
        let queue: String = form_urlencoded::byte_serialize(queue.as_bytes()).collect();
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self
                .json(
                    &format!("/api/messages?queue={queue}&limit=500&cursor={cursor}"),
                    200,
                )
                .await;
            out.extend(page["messages"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_owned(),
                None => break,
            }
        }
        out.reverse();
        out
    }

    /// The detail of the archived message whose message-id is `message_id`.
    pub async fn detail_by_message_id(&self, queue: &str, message_id: &str) -> Value {
        let all = self.all_messages(queue).await;
        let summary = all
            .iter()
            .find(|m| m["message_id"] == message_id)
            .unwrap_or_else(|| panic!("{message_id} not archived from {queue}"));
        self.json(
            &format!("/api/messages/{}", summary["id"].as_str().unwrap()),
            200,
        )
        .await
    }

    /// The message-ids of what `q` finds in `queue` through the API, sorted.
    pub async fn found(&self, queue: &str, q: &str) -> Vec<String> {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let queue: String = form_urlencoded::byte_serialize(queue.as_bytes()).collect();
        let listed = self
            .json(&format!("/api/messages?queue={queue}&q={q}&limit=200"), 200)
            .await;
        let mut ids: Vec<String> = listed["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["message_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        ids.sort();
        ids
    }

    pub async fn body(&self, id: &str) -> Vec<u8> {
        let response = self.get(&format!("/api/messages/{id}/body")).await;
        assert_eq!(response.status, 200);
        response.body
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The real `lazarus` binary serving `dlq` into the archive at `database_url`, with extra flags.
pub fn lazarus_process(
    amqp_url: &str,
    dlq: &str,
    database_url: &str,
    extra: &[&str],
) -> tokio::process::Child {
    lazarus_command(amqp_url, dlq, database_url, extra)
        .spawn()
        .expect("the lazarus binary starts")
}

/// The command [`lazarus_process`] runs, to change (its log level, its stderr) before spawning.
pub fn lazarus_command(
    amqp_url: &str,
    dlq: &str,
    database_url: &str,
    extra: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
    command
        .args(["serve", "--queue", dlq, "--listen", "127.0.0.1:0"])
        .args(extra)
        .args(["--database-url", database_url])
        .env("LAZARUS_AMQP_URL", amqp_url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Stops a `lazarus` process as an orchestrator would (SIGTERM) and asserts it drained and
/// exited cleanly.
pub async fn sigterm(child: &mut tokio::process::Child) {
    let pid = child.id().expect("the process runs").to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("SIGTERM stops lazarus")
        .unwrap();
    assert!(status.success(), "lazarus exited with {status}");
}

impl TestApp {
    /// Polls a replay job until `done` holds for it, and returns it.
    pub async fn wait_for_job(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_showing(&format!("job {id} to be done"), timeout, async || {
            let job = self.json(&format!("/api/replays/{id}"), 200).await;
            if done(&job) {
                Ok(job)
            } else {
                Err(job)
            }
        })
        .await
    }

    /// The archive id of every message archived from `queue`, oldest first.
    pub async fn ids(&self, queue: &str) -> Vec<String> {
        self.all_messages(queue)
            .await
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

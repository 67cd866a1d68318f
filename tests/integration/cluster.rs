//! Every node of a cluster: three private RabbitMQ 4.x nodes in one cluster, a quorum DLQ on
//! all three fed by real dead-lettering, and the `lazarus` binary given every node's address
//! (`amqp://guest:guest@n1,n2,n3/%2f`). SIGKILLed mid-ingest: the node Lazarus consumes
//! through (the DLQ's leader elsewhere), then the DLQ's leader (Lazarus's node alive). Then
//! mid-replay-job: the node the job publishes through, then the target queue's leader. Every
//! message is archived once, every replayed message arrives, and copies published twice stay
//! within the replay window. The counts and the times to resume are printed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::brokers::PrivateCluster;
use crate::helpers::*;

const BACKLOG: usize = 30_000;
/// `--replay-window`: after an interruption at most twice this many copies go out twice.
const WINDOW: usize = 500;
/// Small batches: ingest slow enough that a node restarts between its two kills.
const BATCH: usize = 5;
const PREFETCH: usize = 3 * BATCH;
/// The job held back by an alarm: this many of the archived messages, 20 a second.
const ALARM_JOB: i64 = 200;
const DUPLICATES: &str = r#"lazarus_duplicate_deliveries_total{broker="default",queue="dlq"}"#;
/// Generous: three nodes and Lazarus share two cores with whatever else runs.
const LONG: Duration = Duration::from_secs(240);

/// `lazarus serve` (the binary) on the cluster, with what it logged and when.
struct Lazarus {
    child: tokio::process::Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Lazarus {
    async fn start(amqp_url: &str, db: &str, flags: &[&str]) -> Lazarus {
        let mut child = lazarus_command(amqp_url, "dlq", db, flags)
            .env(
                "RUST_LOG",
                "warn,lazarus::startup=info,lazarus::amqp=info,lazarus::replay=info",
            )
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the lazarus binary starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line
                    .contains("lazarus is serving")
                    .then(|| line.split("address=").nth(1))
                    .flatten()
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse::<SocketAddr>().ok())
                {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
                eprintln!("[lazarus] {line}");
                kept.lock().unwrap().push((Instant::now(), line));
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .expect("lazarus serves within a minute")
            .expect("lazarus exited before serving");
        Lazarus { child, addr, log }
    }

    async fn json(&self, path: &str) -> Value {
        let response = http_get(self.addr, path).await;
        serde_json::from_slice(&response.body)
            .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {}", response.text()))
    }

    /// The node the DLQ's consumer is connected to, as `/readyz` says (`host:port`).
    async fn consumer_node(&self) -> Option<String> {
        let ready = self.json("/readyz").await;
        let consuming = ready["queues"]["dlq"]["state"] == "consuming";
        let node = ready["nodes"]["dlq"].as_str().map(str::to_owned);
        node.filter(|_| consuming)
    }

    async fn counter(&self, name_and_labels: &str) -> u64 {
        http_get(self.addr, "/metrics")
            .await
            .text()
            .lines()
            .find_map(|l| l.strip_prefix(name_and_labels))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Stops the process where it is (SIGSTOP; SIGCONT goes on): ingest holds still while the
    /// cluster heals between kills, however long that takes on a busy machine.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("lazarus runs").to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// When it first logged a line holding every one of `words` after `since`.
    fn logged_after(&self, since: Instant, words: &[&str]) -> Option<Instant> {
        let log = self.log.lock().unwrap();
        log.iter()
            .find(|(at, line)| *at >= since && words.iter().all(|w| line.contains(w)))
            .map(|(at, _)| *at)
    }
}

/// What the cluster says of a quorum queue: its leader and its members online.
async fn quorum_queue(cluster: &PrivateCluster, queue: &str) -> Value {
    let listing = cluster
        .any_running()
        .ctl(&[
            "list_queues",
            "name",
            "leader",
            "online",
            "messages",
            "--formatter",
            "json",
        ])
        .await;
    let queues: Vec<Value> = serde_json::from_str(&listing).unwrap_or_default();
    queues
        .into_iter()
        .find(|q| q["name"] == queue)
        .unwrap_or(Value::Null)
}

/// The node leading the quorum queue.
async fn leader(cluster: &PrivateCluster, queue: &str) -> Option<usize> {
    let q = quorum_queue(cluster, queue).await;
    cluster.index_of(q["leader"].as_str()?)
}

/// Waits until every node holds the quorum queue online.
async fn wait_all_online(cluster: &PrivateCluster, queue: &str) {
    let n = cluster.nodes.len();
    wait_until(&format!("{queue} online on {n} nodes"), LONG, || async {
        let q = quorum_queue(cluster, queue).await;
        q["online"].as_array().map_or(0, Vec::len) == n
    })
    .await;
}

/// Moves the quorum queue's leadership to node `to`, and waits until it is there.
async fn lead_from(cluster: &PrivateCluster, queue: &str, to: usize) {
    let target = cluster.nodes[to].node_name();
    let start = Instant::now();
    while leader(cluster, queue).await != Some(to) {
        assert!(
            start.elapsed() < LONG,
            "{queue}'s leadership does not move to {target}"
        );
        // Asked again until it holds: a transfer while a member catches up can be refused.
        let _ = cluster
            .any_running()
            .queues(&["transfer_leadership", queue, &target])
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The node a connection named `name` is open to, as the broker lists its connections.
async fn connection_node(cluster: &PrivateCluster, name: &str) -> Option<usize> {
    let listing = cluster
        .any_running()
        .ctl(&[
            "list_connections",
            "port",
            "client_properties",
            "--formatter",
            "json",
        ])
        .await;
    let connections: Vec<Value> = serde_json::from_str(&listing).unwrap_or_default();
    let port = connections
        .iter()
        .find(|c| c["client_properties"].to_string().contains(name))?["port"]
        .as_u64()?;
    cluster.index_of(&format!("127.0.0.1:{port}"))
}

async fn archived(db: &str) -> i64 {
    count_rows(db, "SELECT count(*) FROM messages").await
}

/// Waits for `count` to pass `past`, and returns how long after `since` it did.
async fn grew_past(
    since: Instant,
    past: i64,
    what: &str,
    count: impl AsyncFn() -> i64,
) -> Duration {
    let start = Instant::now();
    loop {
        if count().await > past {
            return since.elapsed();
        }
        assert!(start.elapsed() < LONG, "{what} stayed at or below {past}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One SIGKILL and what followed it.
struct Kill {
    what: String,
    at_count: i64,
    /// Until the connection that died was open again, on another node (from the log).
    reconnected: Option<Duration>,
    /// Until the count went on past what the kill could have left in flight.
    resumed: Duration,
}

impl std::fmt::Display for Kill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.what, self.at_count)?;
        if let Some(r) = self.reconnected {
            write!(f, ", reconnected in {:.1} s", r.as_secs_f64())?;
        }
        write!(f, ", going on in {:.1} s", self.resumed.as_secs_f64())
    }
}

#[tokio::test]
async fn a_three_node_cluster_loses_nodes_and_leaders_mid_ingest_and_mid_replay() {
    let mut cluster = PrivateCluster::new(3).await;
    let url = cluster.url();

    // Real dead letters (x-death) from a classic work queue into a quorum DLQ on all three
    // nodes; a quorum queue on all three for the replayed copies.
    let mut t = Topology::on(&cluster.nodes[0].url()).await;
    let quorum = || {
        args(&[
            ("x-queue-type", s("quorum")),
            (
                "x-quorum-initial-group-size",
                lapin::types::AMQPValue::LongInt(3),
            ),
        ])
    };
    t.queue("dlq", quorum()).await;
    t.queue("replayed", quorum()).await;
    dying_queue(&mut t, "work", "dlq").await;
    publish_many(&t.channel, "", "work", "cl", BACKLOG).await;
    t.wait_for_depth("dlq", BACKLOG as u32, LONG).await;
    // As the queue's leader counts them (the listing's statistics lag behind).
    let messages_in = t.depth("dlq").await;
    let _ = t.connection.close(200, "filled".into()).await;
    assert_eq!(messages_in, BACKLOG as u32, "the backlog dead-lettered");
    wait_all_online(&cluster, "dlq").await;
    // The first kill is of Lazarus's node only: the DLQ is led from another.
    lead_from(&cluster, "dlq", 1).await;

    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (window, batch, prefetch) = (WINDOW.to_string(), BATCH.to_string(), PREFETCH.to_string());
    let flags = [
        "--batch-size",
        &batch,
        "--prefetch",
        &prefetch,
        "--replay-window",
        &window,
    ];
    let mut lazarus = Lazarus::start(&url, &db, &flags).await;
    let mut kills: Vec<Kill> = Vec::new();

    // Mid-ingest 1: the node Lazarus consumes through.
    wait_until("ingest under way", LONG, || async {
        archived(&db).await >= (BACKLOG / 10) as i64
    })
    .await;
    let on = lazarus.consumer_node().await.expect("consuming");
    let a = cluster.index_of(&on).expect("a node of the cluster");
    assert_eq!(
        connection_node(&cluster, "lazarus consumer dlq").await,
        Some(a),
        "the broker lists Lazarus's consumer on the node /readyz names"
    );
    assert_ne!(
        leader(&cluster, "dlq").await,
        Some(a),
        "the DLQ led elsewhere"
    );
    let killed = Instant::now();
    cluster.nodes[a].kill9().await;
    let at = archived(&db).await;
    let consuming_again = ["consuming", "queue=\"dlq\""];
    wait_until("the consumer on another node", LONG, || async {
        lazarus
            .consumer_node()
            .await
            .is_some_and(|n| cluster.index_of(&n) != Some(a))
    })
    .await;
    let reconnected = lazarus
        .logged_after(killed, &consuming_again)
        .map(|at| at - killed);
    let resumed = grew_past(killed, at + PREFETCH as i64, "ingest", || archived(&db)).await;
    kills.push(Kill {
        what: format!("ingest: SIGKILL of node {a}, Lazarus's"),
        at_count: at,
        reconnected,
        resumed,
    });
    assert!(
        at < BACKLOG as i64,
        "the first kill came after ingest ended"
    );
    let b = cluster
        .index_of(&lazarus.consumer_node().await.expect("consuming"))
        .unwrap();
    // Lazarus held still while node a restarts and the DLQ's leadership moves: ingest would
    // otherwise race those (seconds each on a busy machine) to the end of the backlog.
    lazarus.signal("-STOP");
    cluster.nodes[a].start().await;
    cluster.wait_until_all_running().await;
    wait_all_online(&cluster, "dlq").await;

    // Mid-ingest 2: the DLQ's leader, on a node Lazarus is not connected to.
    let c = (0..3).find(|&i| i != b).unwrap();
    lead_from(&cluster, "dlq", c).await;
    lazarus.signal("-CONT");
    let at = archived(&db).await;
    assert!(
        at < (BACKLOG - 2_000) as i64,
        "ingest ({at} of {BACKLOG}) nearly over before the leader's kill"
    );
    // Ingest under way again before the kill.
    wait_until("ingest resumed", LONG, || async {
        archived(&db).await > at
    })
    .await;
    let killed = Instant::now();
    cluster.nodes[c].kill9().await;
    let at = archived(&db).await;
    let resumed = grew_past(killed, at + PREFETCH as i64, "ingest", || archived(&db)).await;
    let reconnected = lazarus
        .logged_after(killed, &consuming_again)
        .map(|at| at - killed);
    kills.push(Kill {
        what: format!("ingest: SIGKILL of node {c}, the DLQ's leader (Lazarus on {b})"),
        at_count: at,
        reconnected,
        resumed,
    });
    cluster.nodes[c].start().await;
    cluster.wait_until_all_running().await;

    // The DLQ drains; every message is archived once.
    wait_until("the DLQ empty", LONG, || async {
        quorum_queue(&cluster, "dlq").await["messages"].as_u64() == Some(0)
    })
    .await;
    wait_until("every message archived", LONG, || async {
        archived(&db).await >= BACKLOG as i64
    })
    .await;
    let rows = archived(&db).await;
    let distinct = count_rows(&db, "SELECT count(DISTINCT message_id) FROM messages").await;
    let deaths = count_rows(
        &db,
        "SELECT count(*) FROM messages WHERE first_death_queue = 'work'",
    )
    .await;
    let recognised = lazarus.counter(DUPLICATES).await;

    // Mid-replay-job: the node the job publishes through, then the target queue's leader.
    wait_all_online(&cluster, "replayed").await;
    let archive = lazarus::archive::open(&db).await.unwrap();
    let selection =
        lazarus::archive::Selection::Filter(Box::new(lazarus::archive::MessageFilter {
            queue: Some("dlq".into()),
            ..Default::default()
        }));
    let target = lazarus::message::death::ReplayTarget {
        exchange: String::new(),
        routing_key: "replayed".into(),
    };
    let job = archive
        .create_job(&lazarus::archive::JobSpec {
            request_key: "cluster-test",
            actor: &lazarus::archive::Actor::system("test"),
            selection: &selection,
            selection_text: "{}",
            target: Some(&target),
            to_first_death_queue: false,
            rate_per_sec: Some(400),
            include_replayed: false,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    let published = || async { archive.job(job.id).await.unwrap().unwrap().counts.published };
    wait_until("the job under way", LONG, || async {
        published().await >= (BACKLOG / 10) as i64
    })
    .await;
    let p = connection_node(&cluster, "lazarus replay job")
        .await
        .expect("the job's connection listed");
    if leader(&cluster, "replayed").await == Some(p) {
        lead_from(&cluster, "replayed", (p + 1) % 3).await;
    }
    let killed = Instant::now();
    cluster.nodes[p].kill9().await;
    let at = published().await;
    let resumed = grew_past(killed, at + WINDOW as i64, "the job", published).await;
    let reconnected = lazarus
        .logged_after(killed, &["replay job publishing"])
        .map(|at| at - killed);
    kills.push(Kill {
        what: format!("replay: SIGKILL of node {p}, the job's"),
        at_count: at,
        reconnected,
        resumed,
    });
    cluster.nodes[p].start().await;
    cluster.wait_until_all_running().await;
    wait_all_online(&cluster, "replayed").await;
    let q = connection_node(&cluster, "lazarus replay job")
        .await
        .expect("the job's connection listed");
    let r = (0..3).find(|&i| i != q).unwrap();
    lead_from(&cluster, "replayed", r).await;
    let at = published().await;
    assert!(
        at < (BACKLOG - 2_000) as i64,
        "the job ({at} of {BACKLOG}) nearly over before the leader's kill"
    );
    let killed = Instant::now();
    cluster.nodes[r].kill9().await;
    let at = published().await;
    let resumed = grew_past(killed, at + WINDOW as i64, "the job", published).await;
    let reconnected = lazarus
        .logged_after(killed, &["replay job publishing"])
        .map(|at| at - killed);
    kills.push(Kill {
        what: format!("replay: SIGKILL of node {r}, the target's leader (the job on {q})"),
        at_count: at,
        reconnected,
        resumed,
    });
    cluster.nodes[r].start().await;
    cluster.wait_until_all_running().await;
    let job = {
        let start = Instant::now();
        loop {
            let job = archive.job(job.id).await.unwrap().unwrap();
            if job.state.is_final() {
                break job;
            }
            assert!(start.elapsed() < LONG, "job not finished: {job:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    wait_all_online(&cluster, "replayed").await;
    let links = drain_links(&cluster.any_running().url(), "replayed").await;
    let mut arrivals: HashMap<&str, usize> = HashMap::new();
    for link in &links {
        *arrivals.entry(link.as_str()).or_default() += 1;
    }
    let twice = links.len() - arrivals.len();
    let most = arrivals.values().copied().max().unwrap_or(0);

    // A memory alarm on one node blocks publishing through every node (RabbitMQ's alarms
    // hold the whole cluster): a job publishing through another node waits where it is, says
    // so, and completes once the alarm clears.
    let small = archive
        .create_job(&lazarus::archive::JobSpec {
            request_key: "cluster-alarm",
            actor: &lazarus::archive::Actor::system("test"),
            selection: &lazarus::archive::Selection::Ids((1..=ALARM_JOB).collect()),
            selection_text: "{}",
            target: Some(&target),
            to_first_death_queue: false,
            rate_per_sec: Some(20),
            include_replayed: true,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    assert_eq!(small.total, ALARM_JOB, "{small:?}");
    let small_job = || async { archive.job(small.id).await.unwrap().unwrap() };
    wait_until("the small job under way", LONG, || async {
        small_job().await.counts.published >= 20
    })
    .await;
    let j = connection_node(&cluster, "lazarus replay job")
        .await
        .expect("the job's connection listed");
    let x = (j + 1) % 3;
    cluster.nodes[x]
        .ctl(&["set_vm_memory_high_watermark", "0.000001"])
        .await;
    wait_until("the job blocked by another node's alarm", LONG, || async {
        small_job()
            .await
            .detail
            .is_some_and(|d| d.contains("blocks publishing"))
    })
    .await;
    let blocked_at = small_job().await.counts.published;
    assert_eq!(
        connection_node(&cluster, "lazarus replay job").await,
        Some(j),
        "the job waits on its node"
    );
    cluster.nodes[x]
        .ctl(&["set_vm_memory_high_watermark", "0.4"])
        .await;
    let small = {
        let start = Instant::now();
        loop {
            let job = small_job().await;
            if job.state.is_final() {
                break job;
            }
            assert!(start.elapsed() < LONG, "small job not finished: {job:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    assert_eq!(small.state.as_str(), "completed", "{small:?}");
    assert_eq!(small.counts.published, ALARM_JOB, "{:?}", small.counts);
    sigterm(&mut lazarus.child).await;

    let kills: Vec<String> = kills.iter().map(Kill::to_string).collect();
    eprintln!(
        "three-node RabbitMQ {} cluster, quorum DLQ: {messages_in} messages in; {rows} rows \
         archived, {distinct} distinct, {} archived twice, {deaths} with their x-death; \
         {recognised} redeliveries recognised as archived. Replay job: {} published, {} \
         copies arrived for {} messages (at most {most} each), {twice} copies published \
         twice (window {WINDOW}). Kills: {}. A memory alarm on node {x} held the job on node \
         {j} at {blocked_at} of {ALARM_JOB}; it completed once cleared",
        cluster.any_running().ctl(&["-q", "version"]).await.trim(),
        rows - distinct,
        job.counts.published,
        links.len(),
        arrivals.len(),
        kills.join("; ")
    );
    assert_eq!(rows, messages_in as i64, "rows archived");
    assert_eq!(distinct, rows, "distinct messages");
    assert_eq!(deaths, rows, "each archived with its death");
    assert_eq!(job.state.as_str(), "completed", "{job:?}");
    assert_eq!(job.counts.published, rows, "{:?}", job.counts);
    assert_eq!(
        arrivals.len() as i64,
        rows,
        "every replayed message arrived"
    );
    assert!(
        twice <= 2 * 2 * WINDOW,
        "{twice} copies published twice: more than two windows per interrupting kill"
    );
    drop(cluster);
}

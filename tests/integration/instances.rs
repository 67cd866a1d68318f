//! Several instances on one PostgreSQL database: two real `lazarus` processes consume one
//! 20,000-message DLQ as competing consumers and one is SIGKILLed mid-ingest; then a replay
//! job of all 20,000 runs on one instance, which is SIGKILLed mid-publish, and the other
//! takes the job over when its lease expires. Nothing is archived twice, nothing is lost,
//! every message ends with exactly one replay outcome.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lazarus::archive::{Actor, JobSpec, MessageFilter, Selection};
use lazarus::death::ReplayTarget;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::helpers::*;

const BACKLOG: usize = 20_000;
const INGESTED: &str = r#"lazarus_ingested_messages_total{queue="dlq"}"#;
const DUPLICATES: &str = r#"lazarus_duplicate_deliveries_total{queue="dlq"}"#;
const REPLAYED: &str = r#"lazarus_replayed_messages_total{outcome="published"}"#;

/// A `lazarus serve` process, with the address it serves on (read from its log) and its pid
/// (which its replay runner's lease owner name carries: `host:pid:nanos`).
struct Instance {
    name: &'static str,
    child: Child,
    pid: u32,
    addr: SocketAddr,
}

impl Instance {
    async fn start(name: &'static str, amqp_url: &str, db: &str, flags: &[&str]) -> Instance {
        let mut child = lazarus_command(amqp_url, "dlq", db, flags)
            .env(
                "RUST_LOG",
                "warn,lazarus::startup=info,lazarus::replay::job=info",
            )
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the lazarus binary starts");
        let pid = child.id().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Its log goes on to the test's stderr, named; the serving line tells the address.
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line = strip_ansi(&line);
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
                eprintln!("[{name} {pid}] {line}");
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .unwrap_or_else(|_| panic!("{name} did not serve within a minute"))
            .unwrap_or_else(|_| panic!("{name} exited before serving"));
        Instance {
            name,
            child,
            pid,
            addr,
        }
    }

    /// A counter from this process's own `/metrics` (0 before it is first counted).
    async fn counter(&self, series: &str) -> u64 {
        let text = http_get(self.addr, "/metrics").await.text();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .map(|v: f64| v as u64)
            .unwrap_or(0)
    }

    async fn sigkill(&mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// The log without colour codes, whatever the subscriber decided.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

async fn count(pg: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pg).await.unwrap()
}

/// The items of a job where `condition` holds.
async fn items(pg: &PgPool, job: i64, condition: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM replay_job_items WHERE job_id = $1 AND {condition}"
    ))
    .bind(job)
    .fetch_one(pg)
    .await
    .unwrap()
}

async fn lease_owner(pg: &PgPool, job: i64) -> Option<String> {
    sqlx::query_scalar("SELECT lease_owner FROM replay_jobs WHERE id = $1")
        .bind(job)
        .fetch_one(pg)
        .await
        .unwrap()
}

/// The pid in a runner's lease owner name (`host:pid:nanos`).
fn owner_pid(owner: &str) -> u32 {
    owner
        .rsplit(':')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a lease owner without a pid: {owner}"))
}

/// Ready plus unacknowledged messages of a queue in a vhost.
fn queue_messages(vhost: &str, queue: &str) -> u64 {
    rabbitmqctl(&[
        "list_queues",
        "-p",
        vhost,
        "-q",
        "--no-table-headers",
        "name",
        "messages",
    ])
    .lines()
    .filter_map(|l| l.split_once('\t'))
    .find(|(name, _)| *name == queue)
    .map(|(_, n)| n.trim().parse().unwrap())
    .unwrap_or_else(|| panic!("{queue} not listed by rabbitmqctl"))
}

#[tokio::test]
async fn two_instances_share_a_backlog_and_a_replay_job_across_sigkills() {
    Backend::Postgres.scope(two_instances()).await
}

async fn two_instances() {
    let vhost = Vhost::create("instances");
    let url = vhost.url();
    let (dlq, work) = ("dlq", "work");
    let mut t = Topology::on(&url).await;
    t.queue(dlq, Default::default()).await;
    t.queue(work, Default::default()).await;
    publish_many(&t.channel, "", dlq, "in", BACKLOG).await;
    assert_eq!(t.depth(dlq).await, BACKLOG as u32);

    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    // Small batches and prefetch, so the two take turns on the backlog in small slices and
    // the kill finds A holding deliveries; a short lease, so a takeover comes quickly.
    let flags = [
        "--job-lease-secs",
        "2",
        "--batch-size",
        "100",
        "--prefetch",
        "200",
    ];
    let started = Instant::now();
    let (mut a, b) = tokio::join!(
        Instance::start("A", &url, &db, &flags),
        Instance::start("B", &url, &db, &flags),
    );
    let pg = PgPool::connect(&db).await.unwrap();
    let rows = || count(&pg, "SELECT count(*) FROM messages");

    // --- Ingest: both consume the DLQ; A is SIGKILLed once both have archived some.
    let (a_ingested, b_ingested_at_kill) = loop {
        let (n, a_n, b_n) = (
            rows().await,
            a.counter(INGESTED).await,
            b.counter(INGESTED).await,
        );
        if n >= 4_000 && a_n > 0 && b_n > 0 {
            break (a_n, b_n);
        }
        assert!(
            n < BACKLOG as i64 && started.elapsed() < Duration::from_secs(60),
            "both instances should be archiving: {n} rows, A {a_n}, B {b_n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    a.sigkill().await;
    let rows_at_kill = rows().await;
    assert!(
        rows_at_kill < BACKLOG as i64,
        "A was killed too late to test anything ({rows_at_kill} archived)"
    );

    let ingest_deadline = Instant::now() + Duration::from_secs(60);
    while rows().await < BACKLOG as i64 || t.depth(dlq).await > 0 {
        assert!(
            Instant::now() < ingest_deadline,
            "B archived {} of {BACKLOG}",
            rows().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The last batch is acked after its commit: wait for the DLQ to be empty, unacked too.
    while queue_messages(&vhost.name, dlq) > 0 {
        assert!(Instant::now() < ingest_deadline, "the DLQ kept messages");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (b_ingested, b_duplicates) = (b.counter(INGESTED).await, b.counter(DUPLICATES).await);
    assert_eq!(rows().await, BACKLOG as i64, "every message archived once");
    assert_eq!(
        count(&pg, "SELECT count(DISTINCT message_id) FROM messages").await,
        BACKLOG as i64
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM messages WHERE message_id LIKE 'in-%'"
        )
        .await,
        BACKLOG as i64
    );
    assert_eq!(
        count(&pg, "SELECT count(*) FROM message_bodies").await,
        BACKLOG as i64
    );
    assert_eq!(
        count(
            &pg,
            "SELECT CAST(coalesce(sum(messages), 0) AS BIGINT) FROM queue_reason_counts"
        )
        .await,
        BACKLOG as i64,
        "the totals"
    );
    // B archived what A had not committed when it died, and no more.
    assert!(b_ingested >= BACKLOG as u64 - rows_at_kill as u64);
    assert!(b_ingested + a_ingested <= BACKLOG as u64);
    eprintln!(
        "ingest: A archived {a_ingested}+ and was SIGKILLed at {rows_at_kill} rows (B had \
         {b_ingested_at_kill}); B archived {b_ingested} in all and skipped {b_duplicates} \
         redeliveries A had committed; {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // --- Replay: a job of all 20,000, made in the shared database as `lazarus replay`
    // does; whichever instance claims it is SIGKILLed mid-publish.
    let c = Instance::start("C", &url, &db, &flags).await;
    let mut instances = vec![b, c];
    let archive = lazarus::archive::open(&db).await.unwrap();
    let selection = Selection::Filter(Box::new(MessageFilter {
        queue: Some(dlq.into()),
        ..Default::default()
    }));
    let target = ReplayTarget {
        exchange: String::new(),
        routing_key: work.into(),
    };
    let creating = Instant::now();
    let job = archive
        .create_job(&JobSpec {
            request_key: "instances-test",
            actor: &Actor::system("test"),
            selection: &selection,
            selection_text: "{}",
            target: Some(&target),
            rate_per_sec: Some(2_500),
            include_replayed: false,
            canary: None,
            start: true,
        })
        .await
        .unwrap();
    assert_eq!(job.total, BACKLOG as i64);
    let made_in = creating.elapsed();
    let replay_started = Instant::now();
    let published = || async { archive.job(job.id).await.unwrap().unwrap().counts.published };
    while lease_owner(&pg, job.id).await.is_none() {
        assert!(
            replay_started.elapsed() < Duration::from_secs(60),
            "the job was not claimed: {:?}",
            archive.job(job.id).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let claimed_in = replay_started.elapsed();

    // Meanwhile a plan of the same messages, made as another instance would, leaves out
    // what the running job still holds (and is made promptly: the check of the other jobs'
    // items once took minutes on PostgreSQL).
    let planning = Instant::now();
    let plan = archive
        .create_job(&JobSpec {
            request_key: "instances-test-plan",
            actor: &Actor::system("test"),
            selection: &selection,
            selection_text: "{}",
            target: Some(&target),
            rate_per_sec: None,
            include_replayed: true,
            canary: None,
            start: false,
        })
        .await
        .unwrap()
        .plan;
    let planned_in = planning.elapsed();
    assert_eq!(plan.messages, BACKLOG as i64);
    assert!(plan.in_other_jobs > 0, "{plan:?}");
    assert_eq!(
        plan.in_other_jobs + plan.to_publish,
        BACKLOG as i64,
        "{plan:?}"
    );
    assert!(
        planned_in < Duration::from_secs(20),
        "a plan took {planned_in:?}"
    );

    let first_owner = loop {
        let owner = lease_owner(&pg, job.id).await;
        if published().await >= 3_000 {
            break owner.expect("the job is running");
        }
        assert!(
            replay_started.elapsed() < Duration::from_secs(60),
            "the job stalled: {:?}",
            archive.job(job.id).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let victim = instances
        .iter()
        .position(|i| i.pid == owner_pid(&first_owner))
        .unwrap_or_else(|| panic!("{first_owner} is none of the running instances"));
    let mut victim = instances.remove(victim);
    let mut survivor = instances.pop().unwrap();
    let victim_reported = victim.counter(REPLAYED).await;
    victim.sigkill().await;
    let killed = Instant::now();
    // The runners' clock is this host's, as the database's is.
    let lease_left: Option<i64> = sqlx::query_scalar(
        "SELECT lease_until - CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT) \
         FROM replay_jobs WHERE id = $1",
    )
    .bind(job.id)
    .fetch_one(&pg)
    .await
    .unwrap();
    let published_at_kill = published().await;
    assert!(
        published_at_kill < BACKLOG as i64,
        "killed too late ({published_at_kill} published)"
    );

    let mut owners = vec![first_owner.clone()];
    let mut takeover = None;
    let job = loop {
        let j = archive.job(job.id).await.unwrap().unwrap();
        if j.state.is_final() {
            break j;
        }
        if let Some(owner) = lease_owner(&pg, job.id).await {
            if owners.last() != Some(&owner) {
                takeover.get_or_insert(killed.elapsed());
                owners.push(owner);
            }
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "the job was not finished after the kill: {j:?}, owners {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        owners.len(),
        2,
        "the job ran on the victim, then on the survivor only: {owners:?}"
    );
    assert_eq!(
        owner_pid(&owners[1]),
        survivor.pid,
        "the survivor took the job over"
    );
    let takeover = takeover.unwrap();

    assert_eq!(job.state.as_str(), "completed", "{job:?}");
    assert_eq!(job.total, BACKLOG as i64);
    assert_eq!(job.counts.published, BACKLOG as i64, "{:?}", job.counts);
    assert_eq!(job.counts.pending, 0);
    assert_eq!(job.counts.problems() + job.counts.skipped, 0);
    assert_eq!(items(&pg, job.id, "TRUE").await, BACKLOG as i64);
    assert_eq!(
        items(&pg, job.id, "outcome = 'published'").await,
        BACKLOG as i64,
        "every message has exactly one final outcome"
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM message_status WHERE status = 'replayed'"
        )
        .await,
        BACKLOG as i64
    );
    let completions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'job_complete' AND job_id = $1",
    )
    .bind(job.id)
    .fetch_one(&pg)
    .await
    .unwrap();
    assert_eq!(completions, 1, "the job was completed once");
    let republished = items(&pg, job.id, "attempts > 1").await;
    // The survivor published exactly what the victim had not recorded as confirmed.
    let survivor_reported = survivor.counter(REPLAYED).await;
    assert_eq!(survivor_reported, BACKLOG as u64 - published_at_kill as u64);

    // The work queue got a copy of every message, each with its own message-id.
    let message_ids: HashMap<String, String> =
        sqlx::query_as::<_, (i64, String)>("SELECT id, message_id FROM messages")
            .fetch_all(&pg)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, m)| (id.to_string(), m))
            .collect();
    let copies = drain_copies(&url, work).await;
    for copy in &copies {
        let original = message_ids
            .get(&copy.replay_of)
            .unwrap_or_else(|| panic!("a copy of {} which is not archived", copy.replay_of));
        assert_eq!(copy.message_id.as_ref(), Some(original));
    }
    let distinct: HashSet<&str> = copies.iter().map(|c| c.replay_of.as_str()).collect();
    assert_eq!(distinct.len(), BACKLOG, "every message arrived");
    let duplicates = copies.len() - distinct.len();
    assert!(
        duplicates as i64 <= republished,
        "{duplicates} copies arrived twice, {republished} items were published again"
    );
    assert!(
        duplicates <= 2 * REPLAY_WINDOW,
        "{duplicates} copies published twice: more than two windows for one interruption"
    );
    eprintln!(
        "replay: the job was made in {:.1} s and claimed {:.1} s later; a plan of the same \
         messages meanwhile took {:.1} s and left out the {} the job still held",
        made_in.as_secs_f64(),
        claimed_in.as_secs_f64(),
        planned_in.as_secs_f64(),
        plan.in_other_jobs
    );
    eprintln!(
        "replay: {} ran the job and was SIGKILLed at {published_at_kill} recorded ({} \
         reported); {} took it over {:.1} s later (the lease had {lease_left:?} ms left) \
         and published {survivor_reported}; {republished} items published again, \
         {duplicates} copies arrived twice; {:.1} s in all",
        victim.name,
        victim_reported,
        survivor.name,
        takeover.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    sigterm(&mut survivor.child).await;
    pg.close().await;
    t.cleanup().await;
}

//! Several instances on one PostgreSQL database: two real `lazarus` processes consume one
//! 20,000-message DLQ as competing consumers and one is SIGKILLed mid-ingest; then a replay
//! job of all 20,000 runs on one instance, which is SIGKILLed mid-publish, and the other
//! takes the job over when its lease expires. Nothing is archived twice, nothing is lost,
//! every message ends with exactly one replay outcome. Also: a runner frozen inside a step's
//! transaction is taken over when its lease ends; an instance restarted under its name takes
//! its job back at once, and a second live process under the same name never does; work on
//! a whole selection waits out the lock bound of other statements; the sessions say they are
//! Lazarus', and their scans start at a table's first page.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazarus::archive::{Actor, JobSpec, MessageFilter, Selection};
use lazarus::message::death::ReplayTarget;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::helpers::*;

const BACKLOG: usize = 20_000;
const INGESTED: &str = r#"lazarus_ingested_messages_total{broker="default",queue="dlq"}"#;
const DUPLICATES: &str = r#"lazarus_duplicate_deliveries_total{broker="default",queue="dlq"}"#;
const REPLAYED: &str = r#"lazarus_replayed_messages_total{outcome="published"}"#;

/// A `lazarus serve` process, with the address it serves on (read from its log) and its pid
/// (which its replay runner's lease owner name carries: `host:pid:nanos`).
pub(crate) struct Instance {
    name: &'static str,
    child: Child,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
    /// Every line it logged so far.
    log: Arc<Mutex<Vec<String>>>,
    /// The PostgreSQL archive it was started on, if it was.
    postgres: Option<String>,
}

impl Instance {
    async fn start(name: &'static str, amqp_url: &str, db: &str, flags: &[&str]) -> Instance {
        Self::consuming(name, amqp_url, "dlq", db, flags).await
    }

    /// An instance archiving `queue` (a `--queue` spec).
    pub(crate) async fn consuming(
        name: &'static str,
        amqp_url: &str,
        queue: &str,
        db: &str,
        flags: &[&str],
    ) -> Instance {
        // Its PostgreSQL sessions carry its name, so that a kill can wait for them to end.
        let postgres = db.starts_with("postgres").then(|| db.to_owned());
        let db_url = match postgres {
            Some(_) => format!("{db}?application_name={}", Self::session_name(name)),
            None => db.to_owned(),
        };
        let mut child = lazarus_command(amqp_url, queue, &db_url, flags)
            .env(
                "RUST_LOG",
                "warn,lazarus::startup=info,lazarus::replay::job=info,lazarus::runtime::instance=info,\
                 lazarus::archive::sql::index=info",
            )
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the lazarus binary starts");
        let pid = child.id().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
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
                kept.lock().unwrap().push(line);
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
            log,
            postgres,
        }
    }

    /// The `application_name` of its database sessions.
    fn session_name(name: &str) -> String {
        format!("lazarus-test-{}", name.replace(' ', "-"))
    }

    /// GET `path` and parse the JSON answer, asserting a 200.
    pub(crate) async fn json(&self, path: &str) -> serde_json::Value {
        let answer = http_get(self.addr, path).await;
        assert_eq!(
            answer.status,
            200,
            "{} GET {path}: {}",
            self.name,
            answer.text()
        );
        serde_json::from_slice(&answer.body).unwrap()
    }

    /// POST JSON to `path` and parse the answer, asserting a 200.
    pub(crate) async fn post_json(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let answer = http_request(self.addr, "POST", path, Some(&body.to_string())).await;
        assert_eq!(
            answer.status,
            200,
            "{} POST {path}: {}",
            self.name,
            answer.text()
        );
        serde_json::from_slice(&answer.body).unwrap()
    }

    /// Stops it as an orchestrator would (SIGTERM): it drains and exits cleanly.
    pub(crate) async fn sigterm(mut self) {
        sigterm(&mut self.child).await;
    }

    /// Whether it logged a line with `text` in it.
    fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
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

    /// SIGKILLs it and, on PostgreSQL, waits until its sessions have ended: a COMMIT it sent
    /// just before it died is still carried out by the server, and what is read from the
    /// database before its session ends may not show it yet.
    async fn sigkill(&mut self) {
        use sqlx::Connection;
        let Some(db) = &self.postgres else {
            self.child.start_kill().unwrap();
            self.child.wait().await.unwrap();
            return;
        };
        let mut pg = sqlx::PgConnection::connect(db).await.unwrap();
        let name = Self::session_name(self.name);
        let mut sessions = async || -> i64 {
            // Tests running at once name their instances alike; each has its own database.
            sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(&name)
            .fetch_one(&mut pg)
            .await
            .unwrap()
        };
        assert!(
            sessions().await > 0,
            "{} has no session named {name}",
            self.name
        );
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        // Looking every 10 ms: the test goes on the moment they have.
        let soon = Patience::within(Duration::from_secs(30)).every(Duration::from_millis(10));
        let what = format!("the sessions of the killed {} to end", self.name);
        wait_showing(&what, soon, async || match sessions().await {
            0 => Ok(()),
            left => Err(format!("{left} left")),
        })
        .await;
        let _ = pg.close().await;
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
    // Looking every 5 ms: A is killed as soon after as it can be.
    let soon = Patience::until(started + Duration::from_secs(60)).every(Duration::from_millis(5));
    let what = "both instances archiving, 4,000 rows in";
    let (a_ingested, b_ingested_at_kill) = wait_showing(what, soon, async || {
        let (n, a_n, b_n) = (
            rows().await,
            a.counter(INGESTED).await,
            b.counter(INGESTED).await,
        );
        if n >= 4_000 && a_n > 0 && b_n > 0 {
            return Ok((a_n, b_n));
        }
        let state = format!("{n} rows, A {a_n}, B {b_n}");
        assert!(
            n < BACKLOG as i64,
            "both instances should be archiving: {state}"
        );
        Err(state)
    })
    .await;
    a.sigkill().await;
    let rows_at_kill = rows().await;
    assert!(
        rows_at_kill < BACKLOG as i64,
        "A was killed too late to test anything ({rows_at_kill} archived)"
    );

    let ingest_deadline = Instant::now() + Duration::from_secs(60);
    let what = format!("B to archive all {BACKLOG}, the DLQ drained");
    wait_showing(&what, ingest_deadline, async || {
        let n = rows().await;
        if n >= BACKLOG as i64 && t.depth(dlq).await == 0 {
            Ok(())
        } else {
            Err(format!("{n} archived"))
        }
    })
    .await;
    // The last batch is acked after its commit: wait for the DLQ to be empty, unacked too.
    // Each look runs rabbitmqctl: every 200 ms.
    let patience = Patience::until(ingest_deadline).every(Duration::from_millis(200));
    wait_until("the DLQ to be empty, unacked too", patience, async || {
        queue_messages(&vhost.name, dlq) == 0
    })
    .await;
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
            to_first_death_queue: false,
            rate_per_sec: Some(2_500),
            include_replayed: false,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    assert_eq!(job.total, BACKLOG as i64);
    let made_in = creating.elapsed();
    let replay_started = Instant::now();
    let published = || async { archive.job(job.id).await.unwrap().unwrap().counts.published };
    // Looking every 20 ms, as the time to claim it and to publish are measured.
    let soon =
        Patience::until(replay_started + Duration::from_secs(60)).every(Duration::from_millis(20));
    wait_showing("the job to be claimed", soon, async || {
        match lease_owner(&pg, job.id).await {
            Some(_) => Ok(()),
            None => Err(format!("{:?}", archive.job(job.id).await.unwrap())),
        }
    })
    .await;
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
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: true,
            canary: None,
            start: false,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
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

    let first_owner = wait_showing("the job to publish 3,000 (it stalled)", soon, async || {
        let owner = lease_owner(&pg, job.id).await;
        let j = archive.job(job.id).await.unwrap().unwrap();
        if j.counts.published >= 3_000 {
            Ok(owner.expect("the job is running"))
        } else {
            Err(format!("{j:?}"))
        }
    })
    .await;
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

    // Every owner it has meanwhile, and when the first one after the kill took it.
    let mut owners = vec![first_owner.clone()];
    let mut takeover = None;
    let until = killed + Duration::from_secs(60);
    let job = wait_showing("the job to finish after the kill", until, async || {
        let j = archive.job(job.id).await.unwrap().unwrap();
        if j.state.is_final() {
            return Ok(j);
        }
        if let Some(owner) = lease_owner(&pg, job.id).await {
            if owners.last() != Some(&owner) {
                takeover.get_or_insert(killed.elapsed());
                owners.push(owner);
            }
        }
        Err(format!("{j:?}, owners {owners:?}"))
    })
    .await;
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

/// Sends a signal (`STOP`, `CONT`, ...) to a process.
fn signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

/// Sessions of this database, other than the asking one, inside a transaction that has
/// touched `replay_jobs` (the job rows a runner locks), which have been `idle in transaction`
/// for at least `idle_ms` (0: or are running a statement now).
async fn job_lock_holders(pg: &PgPool, idle_ms: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity a \
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() \
         AND (a.state = 'idle in transaction' AND a.state_change < now() - make_interval(secs => $1 / 1000.0) \
              OR ($1 = 0 AND a.state = 'active')) \
         AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.relation = 'replay_jobs'::regclass)",
    )
    .bind(idle_ms)
    .fetch_one(pg)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_frozen_job_runner_is_taken_over_when_its_lease_ends() {
    Backend::Postgres.scope(frozen_runner()).await
}

/// The instance running a replay job is frozen (SIGSTOP: as hung, or cut off by a
/// partition) inside a step's transaction, holding the job's row. The database ends that
/// transaction, so the other instance takes the job over once the lease runs out (rather
/// than skipping the locked row forever), and completes it; then the frozen one wakes up,
/// finds the job is no longer its own, and lets go. Every message ends with one outcome.
async fn frozen_runner() {
    const MESSAGES: usize = 10_000;
    const LEASE_SECS: u64 = 8;
    let vhost = Vhost::create("frozen");
    let url = vhost.url();
    let (dlq, work) = ("dlq", "work");
    let mut t = Topology::on(&url).await;
    t.queue(dlq, Default::default()).await;
    t.queue(work, Default::default()).await;
    publish_many(&t.channel, "", dlq, "in", MESSAGES).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let lease = LEASE_SECS.to_string();
    let flags = ["--job-lease-secs", lease.as_str()];
    let (a, b) = tokio::join!(
        Instance::start("A", &url, &db, &flags),
        Instance::start("B", &url, &db, &flags),
    );
    let pg = PgPool::connect(&db).await.unwrap();
    let started = Instant::now();
    // Once all are in, each look runs rabbitmqctl: every 100 ms.
    let patience =
        Patience::until(started + Duration::from_secs(60)).every(Duration::from_millis(100));
    let what = format!("all {MESSAGES} archived and the DLQ empty (ingest stalled)");
    wait_until(&what, patience, async || {
        count(&pg, "SELECT count(*) FROM messages").await >= MESSAGES as i64
            && queue_messages(&vhost.name, dlq) == 0
    })
    .await;

    let archive = lazarus::archive::open(&db).await.unwrap();
    let job = archive
        .create_job(&JobSpec {
            request_key: "frozen-test",
            actor: &Actor::system("test"),
            selection: &Selection::Filter(Box::new(MessageFilter {
                queue: Some(dlq.into()),
                ..Default::default()
            })),
            selection_text: "{}",
            target: Some(&ReplayTarget {
                exchange: String::new(),
                routing_key: work.into(),
            }),
            to_first_death_queue: false,
            rate_per_sec: Some(2_000),
            include_replayed: false,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    let published = || async { archive.job(job.id).await.unwrap().unwrap().counts.published };
    // Looking every 20 ms: the runner is frozen soon after.
    let soon = Patience::until(started + Duration::from_secs(120)).every(Duration::from_millis(20));
    let runner = wait_for("the job to run (1,000 published)", soon, async || {
        let owner = lease_owner(&pg, job.id).await?;
        (published().await >= 1_000).then_some(owner)
    })
    .await;
    let mut instances = vec![a, b];
    let victim = instances
        .iter()
        .position(|i| i.pid == owner_pid(&runner))
        .expect("one of the instances runs the job");
    let victim = instances.remove(victim);
    let mut survivor = instances.pop().unwrap();

    // Freeze the runner while it is inside a step's transaction: stop it the moment one is
    // seen, and keep it stopped only if it sits there holding the job's row.
    let mut attempts = 0;
    let frozen_at = loop {
        attempts += 1;
        assert!(
            published().await < MESSAGES as i64 && attempts <= 200,
            "the runner was never caught inside a transaction ({attempts} attempts)"
        );
        while job_lock_holders(&pg, 0).await == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        signal(victim.pid, "STOP");
        let stopped = Instant::now();
        tokio::time::sleep(Duration::from_millis(700)).await;
        if job_lock_holders(&pg, 500).await > 0 {
            break stopped;
        }
        signal(victim.pid, "CONT");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let published_at_freeze = published().await;

    let until = frozen_at + Duration::from_secs(4 * LEASE_SECS);
    let takeover = wait_showing("the survivor to take the job over", until, async || {
        let owner = lease_owner(&pg, job.id).await;
        if owner
            .as_deref()
            .is_some_and(|o| owner_pid(o) == survivor.pid)
        {
            return Ok(frozen_at.elapsed());
        }
        Err(format!(
            "the job stayed with the frozen instance: owner {owner:?}, {:?}, {} sessions \
             holding the job's row",
            archive.job(job.id).await.unwrap(),
            job_lock_holders(&pg, 500).await
        ))
    })
    .await;
    // The partition heals: the frozen instance runs again.
    signal(victim.pid, "CONT");

    let until = frozen_at + Duration::from_secs(120);
    let job = wait_showing("the job to finish after the takeover", until, async || {
        let j = archive.job(job.id).await.unwrap().unwrap();
        if j.state.is_final() {
            Ok(j)
        } else {
            Err(format!("{j:?}"))
        }
    })
    .await;
    assert_eq!(job.state.as_str(), "completed", "{job:?}");
    assert_eq!(job.counts.published, MESSAGES as i64, "{:?}", job.counts);
    assert_eq!(
        job.counts.pending + job.counts.problems() + job.counts.skipped,
        0
    );
    assert_eq!(items(&pg, job.id, "TRUE").await, MESSAGES as i64);
    assert_eq!(
        items(&pg, job.id, "outcome = 'published'").await,
        MESSAGES as i64,
        "every message has exactly one final outcome"
    );
    assert_eq!(
        lease_owner(&pg, job.id).await,
        None,
        "nobody holds a finished job"
    );
    let copies = drain_copies(&url, work).await;
    let distinct: HashSet<&str> = copies.iter().map(|c| c.replay_of.as_str()).collect();
    assert_eq!(distinct.len(), MESSAGES, "every message arrived");
    let duplicates = copies.len() - distinct.len();
    assert!(
        duplicates <= 2 * REPLAY_WINDOW,
        "{duplicates} copies published twice: more than two windows for one interruption"
    );
    eprintln!(
        "frozen runner: {} was stopped inside a step's transaction (attempt {attempts}) at \
         {published_at_freeze} published; {} took the job over {:.1} s later (lease {LEASE_SECS} s); \
         {duplicates} copies arrived twice",
        victim.name,
        survivor.name,
        takeover.as_secs_f64()
    );

    let mut victim = victim;
    sigterm(&mut victim.child).await;
    sigterm(&mut survivor.child).await;
    pg.close().await;
    t.cleanup().await;
}

/// A dead letter of `queue` with a death history (so it has a replay target), as ingest
/// would store it.
fn dead_letter(queue: &str, n: usize) -> lazarus::archive::PreparedMessage {
    use lazarus::message::headers::{AmqpValue, Bytes, MessageProperties, Table};
    let text = |s: &str| AmqpValue::LongString(Bytes(s.as_bytes().to_vec()));
    let mut death = Table::new();
    death.insert("queue", text("work"));
    death.insert("reason", text("rejected"));
    death.insert("count", AmqpValue::LongLongInt(1));
    death.insert("exchange", text(""));
    death.insert("routing-keys", AmqpValue::Array(vec![text("work")]));
    let mut headers = Table::new();
    headers.insert("x-death", AmqpValue::Array(vec![AmqpValue::Table(death)]));
    headers.insert("x-first-death-queue", text("work"));
    headers.insert("x-first-death-reason", text("rejected"));
    headers.insert("x-first-death-exchange", text(""));
    lazarus::archive::PreparedMessage::new(lazarus::archive::IncomingMessage {
        broker: "default".into(),
        vhost: String::new(),
        queue: queue.into(),
        exchange: String::new(),
        routing_key: queue.into(),
        redelivered: false,
        properties: MessageProperties {
            message_id: Some(format!("bulk-{n}").into()),
            ..Default::default()
        },
        headers: Some(headers),
        body: format!(r#"{{"n": {n}}}"#).into_bytes(),
        received_at: time::OffsetDateTime::now_utc(),
        decode_problems: Vec::new(),
        stream_offset: None,
    })
}

#[tokio::test]
async fn work_on_a_whole_selection_outwaits_the_lock_bound_of_other_statements() {
    Backend::Postgres
        .scope(bulk_work_outwaits_the_lock_bound())
        .await
}

/// Every pooled connection gives up waiting for a lock after 10 s, so that nothing queues
/// for long behind a stuck holder; work on a whole selection (here a job's plan) may rightly
/// wait longer for another change to the same messages, and does.
async fn bulk_work_outwaits_the_lock_bound() {
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&db).await.unwrap();
    let batch: Vec<_> = (0..10).map(|n| dead_letter("bulk.dlq", n)).collect();
    archive.store_batch(&batch).await.unwrap();

    // Another session holds the first message as a purge or a dismissal would, for longer
    // than the lock bound.
    let pg = PgPool::connect(&db).await.unwrap();
    let first: i64 = sqlx::query_scalar("SELECT min(id) FROM messages")
        .fetch_one(&pg)
        .await
        .unwrap();
    let mut holder = pg.begin().await.unwrap();
    sqlx::query("SELECT id FROM messages WHERE id = $1 FOR UPDATE")
        .bind(first)
        .execute(&mut *holder)
        .await
        .unwrap();
    let held = Instant::now();
    let plan = {
        let archive = archive.clone();
        tokio::spawn(async move {
            archive
                .create_job(&JobSpec {
                    request_key: "bulk-plan",
                    actor: &Actor::system("test"),
                    selection: &Selection::Filter(Box::new(MessageFilter {
                        queue: Some("bulk.dlq".into()),
                        ..Default::default()
                    })),
                    selection_text: "{}",
                    target: None,
                    to_first_death_queue: false,
                    rate_per_sec: None,
                    include_replayed: false,
                    canary: None,
                    start: false,
                    policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
                })
                .await
                .map(|job| (job, held.elapsed()))
        })
    };
    // A single replay records itself against the message (its foreign key waits for the
    // row): an ordinary statement, which gives up.
    let single = {
        let archive = archive.clone();
        tokio::spawn(async move {
            let target = ReplayTarget {
                exchange: String::new(),
                routing_key: "work".into(),
            };
            let started = archive
                .begin_replay(first, "bulk-single", &Actor::system("test"), &target, None)
                .await;
            (started.map(|_| ()), held.elapsed())
        })
    };
    let (refused, waited) = single.await.unwrap();
    let refused = refused.expect_err("a replay waited on past the lock bound");
    // Refused by the lock bound, not by anything else (how long it waited is printed below,
    // not asserted: timings on a shared machine make no test).
    assert!(refused.to_string().contains("lock timeout"), "{refused}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !plan.is_finished(),
        "the plan stopped waiting: {:?}",
        plan.await
    );
    holder.commit().await.unwrap();
    let (job, planned_in) = plan.await.unwrap().expect("the plan waited and was made");
    assert_eq!(job.plan.messages, 10, "{job:?}");
    eprintln!(
        "a single replay gave up after {:.1} s; the plan waited {:.1} s and was made",
        waited.as_secs_f64(),
        planned_in.as_secs_f64()
    );
    pg.close().await;
}

#[tokio::test]
async fn two_instances_index_a_backlog_without_deriving_a_batch_twice() {
    Backend::Postgres.scope(two_indexers()).await
}

/// Two instances draining one DLQ into one database both index what waits: each indexer
/// locks the batch it takes (SKIP LOCKED), so the other takes the next one instead of
/// deriving the same messages only for one commit to win. Every message is indexed once.
async fn two_indexers() {
    let vhost = Vhost::create("indexers");
    let url = vhost.url();
    let mut t = Topology::on(&url).await;
    t.queue("dlq", Default::default()).await;
    // Dead letters as the broker makes them (x-death), expiring out of a work queue.
    dying_queue(&mut t, "work", "dlq").await;
    publish_many(&t.channel, "", "work", "ix", BACKLOG).await;
    t.wait_for_depth("dlq", BACKLOG as u32, Duration::from_secs(60))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let (a, b) = tokio::join!(
        Instance::start("A", &url, &db, &[]),
        Instance::start("B", &url, &db, &[]),
    );
    let pg = PgPool::connect(&db).await.unwrap();
    wait_until(
        "every message archived and indexed",
        Duration::from_secs(120),
        async || {
            count(&pg, "SELECT count(*) FROM messages").await == BACKLOG as i64
                && count(&pg, "SELECT count(*) FROM index_pending").await == 0
        },
    )
    .await;
    let (a_in, b_in) = (a.counter(INGESTED).await, b.counter(INGESTED).await);
    assert!(a_in > 0 && b_in > 0, "both archived: A {a_in}, B {b_in}");
    assert_eq!(
        count(&pg, "SELECT count(*) FROM message_search").await,
        BACKLOG as i64,
        "every message indexed once"
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM messages WHERE first_death_queue = 'work'"
        )
        .await,
        BACKLOG as i64,
        "each archived with its death"
    );
    let in_vain: Vec<String> = [&a, &b]
        .iter()
        .flat_map(|i| {
            let log = i.log.lock().unwrap();
            log.iter()
                .filter(|l| l.contains("taken first by another indexer"))
                .map(|l| format!("{}: {l}", i.name))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        in_vain.is_empty(),
        "batches derived twice:\n{}",
        in_vain.join("\n")
    );
    a.sigterm().await;
    b.sigterm().await;
}

#[tokio::test]
async fn sessions_are_named_lazarus_unless_the_url_names_them() {
    Backend::Postgres.scope(session_names()).await
}

/// A DBA reading `pg_stat_activity` sees which sessions are Lazarus': the background pool's
/// and the requests' are `lazarus`; a URL's own `application_name` (one per instance, say)
/// is kept.
async fn session_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let name_of = async |pool: &PgPool| -> String {
        sqlx::query_scalar(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let archive = lazarus::archive::PostgresArchive::open(&db).await.unwrap();
    assert_eq!(name_of(archive.pool()).await, "lazarus");
    assert_eq!(name_of(archive.for_requests().pool()).await, "lazarus");
    archive.pool().close().await;

    let own = format!("{db}?application_name=billing-archive");
    let archive = lazarus::archive::PostgresArchive::open(&own).await.unwrap();
    assert_eq!(name_of(archive.pool()).await, "billing-archive");
    assert_eq!(
        name_of(archive.for_requests().pool()).await,
        "billing-archive"
    );
    archive.pool().close().await;
}

#[tokio::test]
async fn a_scan_starts_at_the_first_page_whatever_the_last_one_read() {
    Backend::Postgres.scope(scans_from_the_start()).await
}

/// On a table past a quarter of `shared_buffers` PostgreSQL synchronizes sequential scans: a
/// scan starts where the last one stopped. A capped count of a common word then read new
/// pages every time (from disk, on an archive larger than memory); Lazarus' sessions, both
/// pools, start every scan at the first page.
async fn scans_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let archive = lazarus::archive::PostgresArchive::open(&archive_url(dir.path()).await)
        .await
        .unwrap();
    // Half again the size from which the server synchronizes scans, in rows of ~1 KB.
    let shared_buffers: i64 = sqlx::query_scalar(
        "SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'",
    )
    .fetch_one(archive.pool())
    .await
    .unwrap();
    let rows = shared_buffers / 4 * 3 / 2 / 1024;
    sqlx::query(
        "CREATE TABLE probe AS SELECT n AS id, repeat('x', 1000) AS pad \
         FROM generate_series(1, $1::bigint) AS n",
    )
    .bind(rows)
    .execute(archive.pool())
    .await
    .unwrap();
    let bytes: i64 = sqlx::query_scalar("SELECT pg_relation_size('probe')")
        .fetch_one(archive.pool())
        .await
        .unwrap();
    assert!(
        bytes > shared_buffers / 4,
        "{bytes} bytes: too small to synchronize"
    );

    for pool in [archive.pool(), archive.for_requests().pool()] {
        let mut conn = pool.acquire().await.unwrap();
        // One plain sequential scan each (no parallel workers), as a capped count is.
        sqlx::query("SET max_parallel_workers_per_gather = 0")
            .execute(&mut *conn)
            .await
            .unwrap();
        // A scan that stops halfway through the table, then one that takes its first row.
        let half: i64 = sqlx::query_scalar("SELECT id FROM probe WHERE id > $1 LIMIT 1")
            .bind(rows / 2)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(half, rows / 2 + 1);
        let first: i64 = sqlx::query_scalar("SELECT id FROM probe LIMIT 1")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(first, 1, "the scan started where the one before it stopped");
    }
    archive.pool().close().await;
}

#[tokio::test]
#[ignore = "a measurement: minutes on a million messages (LAZARUS_BULK_MESSAGES)"]
async fn bulk_work_on_a_large_archive_within_its_bounds() {
    Backend::Postgres.scope(bulk_work_at_scale()).await
}

/// How long work on a whole selection takes on a large PostgreSQL archive, through the
/// archive's own pool (the session bounds of every connection, lifted for such work):
/// a plan of every message, starting and cancelling it, dismissing and purging them all.
/// `LAZARUS_BULK_MESSAGES` messages (1,000,000 by default), copied in SQL from 1,000 stored
/// by ingest's `store_batch`.
async fn bulk_work_at_scale() {
    use sqlx::Connection;
    let messages: i64 = std::env::var("LAZARUS_BULK_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&db).await.unwrap();
    let batch: Vec<_> = (0..1_000).map(|n| dead_letter("bulk.dlq", n)).collect();
    archive.store_batch(&batch).await.unwrap();

    let filling = Instant::now();
    let mut fill = sqlx::PgConnection::connect(&db).await.unwrap();
    let columns = "fingerprint, queue, archived_at, exchange, routing_key, redelivered, \
         message_id, correlation_id, content_type, content_encoding, body_size, properties, \
         headers, deaths, death_problems, first_death_queue, first_death_reason, \
         first_death_exchange, replay_exchange, replay_routing_key, error";
    loop {
        let have: i64 = sqlx::query_scalar("SELECT count(*) FROM messages")
            .fetch_one(&mut fill)
            .await
            .unwrap();
        if have >= messages {
            break;
        }
        sqlx::query(&format!(
            "INSERT INTO messages ({columns}) SELECT {columns} FROM messages LIMIT $1"
        ))
        .bind(messages - have)
        .execute(&mut fill)
        .await
        .unwrap();
    }
    for sql in [
        "INSERT INTO message_status (id) SELECT id FROM messages m \
         WHERE NOT EXISTS (SELECT 1 FROM message_status s WHERE s.id = m.id)",
        "INSERT INTO message_bodies (message_id, body) SELECT id, '\\x7b7d' FROM messages m \
         WHERE NOT EXISTS (SELECT 1 FROM message_bodies b WHERE b.message_id = m.id)",
        "INSERT INTO message_search (id, search) SELECT id, 'bulk:1'::tsvector FROM messages m \
         WHERE NOT EXISTS (SELECT 1 FROM message_search s WHERE s.id = m.id)",
        "UPDATE queue_reason_counts SET messages = (SELECT count(*) FROM messages)",
        "VACUUM (ANALYZE)",
    ] {
        sqlx::query(sql).execute(&mut fill).await.unwrap();
    }
    fill.close().await.unwrap();
    eprintln!(
        "bulk: {messages} messages in {:.0} s",
        filling.elapsed().as_secs_f64()
    );

    let actor = Actor::system("test");
    let selection = Selection::Filter(Box::new(MessageFilter {
        queue: Some("bulk.dlq".into()),
        ..Default::default()
    }));
    let timed = Instant::now();
    let job = archive
        .create_job(&JobSpec {
            request_key: "bulk-scale",
            actor: &actor,
            selection: &selection,
            selection_text: "{}",
            target: None,
            to_first_death_queue: false,
            rate_per_sec: None,
            include_replayed: false,
            canary: None,
            start: false,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    let planned = timed.elapsed();
    assert_eq!(job.plan.messages, messages);
    let timed = Instant::now();
    let job = archive
        .control_job(job.id, lazarus::archive::JobAction::Start, &actor)
        .await
        .unwrap();
    let started = timed.elapsed();
    let timed = Instant::now();
    archive
        .control_job(job.id, lazarus::archive::JobAction::Cancel, &actor)
        .await
        .unwrap();
    let cancelled = timed.elapsed();
    let timed = Instant::now();
    let dismissed = archive
        .dismiss(&selection, "{}", "bulk", &actor)
        .await
        .unwrap();
    let dismissed_in = timed.elapsed();
    let timed = Instant::now();
    let purged = archive
        .purge(&selection, "{}", "bulk", &actor)
        .await
        .unwrap();
    let purged_in = timed.elapsed();
    assert_eq!((dismissed, purged), (messages as u64, messages as u64));
    eprintln!(
        "bulk, {messages} messages: plan {:.1} s, start {:.1} s, cancel {:.1} s, \
         dismiss {:.1} s, purge {:.1} s",
        planned.as_secs_f64(),
        started.as_secs_f64(),
        cancelled.as_secs_f64(),
        dismissed_in.as_secs_f64(),
        purged_in.as_secs_f64()
    );
}

/// The lease owner of a job, read from outside (either backend).
async fn owner_of(database_url: &str, job: i64) -> Option<String> {
    use sqlx::{ConnectOptions, Connection};
    let sql = "SELECT lease_owner FROM replay_jobs WHERE id = $1";
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .connect()
            .await
            .unwrap();
        let owner = sqlx::query_scalar(&sql.replace("$1", "?"))
            .bind(job)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        owner
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
        let owner = sqlx::query_scalar(sql)
            .bind(job)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        owner
    }
}

/// A DLQ of `messages` archived by `instance`, and a started job replaying all of them
/// to `work` at `rate` per second, made in the archive as `lazarus replay` would.
async fn archived_and_replaying(
    instance: &Instance,
    t: &Topology,
    db: &str,
    messages: usize,
    rate: u32,
) -> (std::sync::Arc<dyn lazarus::archive::Archive>, i64) {
    publish_many(&t.channel, "", "dlq", "in", messages).await;
    let what = format!(
        "{} to archive all {messages} (ingest stalled)",
        instance.name
    );
    wait_until(&what, Duration::from_secs(60), async || {
        instance.counter(INGESTED).await >= messages as u64 && t.depth("dlq").await == 0
    })
    .await;
    let archive = lazarus::archive::open(db).await.unwrap();
    let job = archive
        .create_job(&JobSpec {
            request_key: "identity-test",
            actor: &Actor::system("test"),
            selection: &Selection::Filter(Box::new(MessageFilter {
                queue: Some("dlq".into()),
                ..Default::default()
            })),
            selection_text: "{}",
            target: Some(&ReplayTarget {
                exchange: String::new(),
                routing_key: "work".into(),
            }),
            to_first_death_queue: false,
            rate_per_sec: Some(rate),
            include_replayed: false,
            canary: None,
            start: true,
            policy: &lazarus::message::exchange_policy::ExchangePolicy::default(),
        })
        .await
        .unwrap();
    (archive, job.id)
}

/// Waits until `instance` runs job `id` and has published at least `published` of it.
async fn running_on(
    instance: &Instance,
    archive: &dyn lazarus::archive::Archive,
    db: &str,
    id: i64,
    published: i64,
) {
    // Looking every 20 ms: how soon it took the job is measured.
    let soon = Patience::within(Duration::from_secs(60)).every(Duration::from_millis(20));
    let what = format!("{} to run the job ({published} published)", instance.name);
    wait_showing(&what, soon, async || {
        let owner = owner_of(db, id).await;
        let job = archive.job(id).await.unwrap().unwrap();
        if owner.as_deref().map(owner_pid) == Some(instance.pid)
            && job.counts.published >= published
        {
            return Ok(());
        }
        let state = format!("owner {owner:?}, {job:?}");
        assert!(
            !job.state.is_final(),
            "{} did not run the job: {state}",
            instance.name
        );
        Err(state)
    })
    .await
}

/// Waits for the job to complete, and checks every message was published once (and
/// arrived), with at most two windows published twice.
async fn completed_once(
    archive: &dyn lazarus::archive::Archive,
    url: &str,
    id: i64,
    messages: usize,
) -> usize {
    let job = wait_showing("the job to finish", Duration::from_secs(120), async || {
        let j = archive.job(id).await.unwrap().unwrap();
        if j.state.is_final() {
            Ok(j)
        } else {
            Err(format!("{j:?}"))
        }
    })
    .await;
    assert_eq!(job.state.as_str(), "completed", "{job:?}");
    assert_eq!(job.counts.published, messages as i64, "{:?}", job.counts);
    assert_eq!(
        job.counts.pending + job.counts.problems() + job.counts.skipped,
        0
    );
    let items = archive
        .job_items(id, Some("published"), None, 500)
        .await
        .unwrap();
    assert!(!items.is_empty());
    let copies = drain_copies(url, "work").await;
    let distinct: HashSet<&str> = copies.iter().map(|c| c.replay_of.as_str()).collect();
    assert_eq!(distinct.len(), messages, "every message arrived");
    let duplicates = copies.len() - distinct.len();
    assert!(
        duplicates <= 2 * REPLAY_WINDOW,
        "{duplicates} copies published twice: more than two windows for one interruption"
    );
    duplicates
}

on_both_backends!(a_restarted_instance_takes_its_job_back_at_once);
/// An instance SIGKILLed mid-job and started again under the same name (`--instance-name`)
/// resumes its job at once: its name is free, so the lease still held in it is its earlier
/// life's, not another live process's. The lease (60 s) is not waited for.
async fn a_restarted_instance_takes_its_job_back_at_once() {
    const MESSAGES: usize = 4_000;
    let vhost = Vhost::create("restart");
    let url = vhost.url();
    let mut t = Topology::on(&url).await;
    t.queue("dlq", Default::default()).await;
    t.queue("work", Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let flags = ["--job-lease-secs", "60", "--instance-name", "lazarus-0"];
    let mut first = Instance::start("A", &url, &db, &flags).await;
    let (archive, job) = archived_and_replaying(&first, &t, &db, MESSAGES, 1_000).await;
    running_on(&first, &*archive, &db, job, 1_000).await;
    first.sigkill().await;
    let published_at_kill = archive.job(job).await.unwrap().unwrap().counts.published;

    let restarted = Instant::now();
    let again = Instance::start("A again", &url, &db, &flags).await;
    let serving = Instant::now();
    running_on(&again, &*archive, &db, job, published_at_kill + 1).await;
    let resumed = serving.elapsed();
    assert!(
        resumed < Duration::from_secs(10),
        "the restart took its job back {resumed:?} after serving (lease 60 s)"
    );
    assert!(again.logged("holding the instance name"));
    let duplicates = completed_once(&*archive, &url, job, MESSAGES).await;
    eprintln!(
        "restart ({:?}): SIGKILLed at {published_at_kill} published; started again in {:.1} s \
         and took its job back {:.2} s after serving (lease 60 s); {duplicates} copies twice",
        Backend::current(),
        (serving - restarted).as_secs_f64(),
        resumed.as_secs_f64()
    );
    let mut again = again;
    sigterm(&mut again.child).await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_second_live_process_under_the_same_name_never_takes_the_job() {
    Backend::Postgres.scope(same_name_twice()).await
}

/// Two live processes given the same `--instance-name` (a copied configuration): the
/// second finds the name taken, says so, and leaves the first's job alone however often it
/// looks; once the first is gone (SIGKILL) it takes the name, and with it the job, without
/// waiting for the lease.
async fn same_name_twice() {
    const MESSAGES: usize = 4_000;
    let vhost = Vhost::create("samename");
    let url = vhost.url();
    let mut t = Topology::on(&url).await;
    t.queue("dlq", Default::default()).await;
    t.queue("work", Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let flags = ["--job-lease-secs", "60", "--instance-name", "copied"];
    let mut first = Instance::start("A", &url, &db, &flags).await;
    let (archive, job) = archived_and_replaying(&first, &t, &db, MESSAGES, 500).await;
    running_on(&first, &*archive, &db, job, 200).await;

    let second = Instance::start("B", &url, &db, &flags).await;
    wait_until(
        "B to say its name was taken",
        Duration::from_secs(20),
        async || second.logged("another live process goes by this instance name"),
    )
    .await;
    // B has looked for jobs every second meanwhile (and once more now): A keeps its job.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let owner = owner_of(&db, job).await;
    assert_eq!(
        owner.as_deref().map(owner_pid),
        Some(first.pid),
        "{owner:?}"
    );
    assert!(!second.logged("holding the instance name"));

    first.sigkill().await;
    let killed = Instant::now();
    running_on(&second, &*archive, &db, job, 0).await;
    let takeover = killed.elapsed();
    assert!(
        takeover < Duration::from_secs(30),
        "B took the job over {takeover:?} after A died (lease 60 s)"
    );
    assert!(second.logged("holding the instance name"));
    let duplicates = completed_once(&*archive, &url, job, MESSAGES).await;
    eprintln!(
        "same name twice: B left A's job alone while A lived, took it {:.1} s after A's \
         SIGKILL (lease 60 s); {duplicates} copies twice",
        takeover.as_secs_f64()
    );
    let mut second = second;
    sigterm(&mut second.child).await;
    t.cleanup().await;
}

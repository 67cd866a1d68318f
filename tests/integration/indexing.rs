//! Append, then index (issue 37), through the real `lazarus` binary on both backends: a
//! drained message is listed and counted at once and found by search once the indexer has
//! caught up; SIGKILL between the append and the index, and again while the indexer catches
//! up, loses nothing and indexes nothing twice; while the indexer is behind, the list, the
//! overview and the API say so.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::process::Child;

use crate::helpers::*;

const BACKLOG: i64 = 12_000;

fn start_lazarus(dlq: &str, db: &str, addr: SocketAddr) -> Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
        .args(["serve", "--queue", dlq, "--listen", &addr.to_string()])
        .args(["--database-url", db, "--field", "n=/n"])
        .env("LAZARUS_AMQP_URL", amqp_url())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the lazarus binary starts")
}

/// Where each backend keeps a message's full-text entry: the table and its message id column.
fn full_text() -> (&'static str, &'static str) {
    match Backend::current() {
        Backend::Sqlite => ("messages_fts", "rowid"),
        Backend::Postgres => ("message_search", "id"),
    }
}

/// What the archive holds: messages, ids waiting for the indexer, full-text rows, business
/// field rows (one field, `n`, a message).
#[derive(Debug, Clone, Copy)]
struct Held {
    messages: i64,
    waiting: i64,
    indexed: i64,
    fields: i64,
}

async fn held(db: &str) -> Held {
    Held {
        messages: count_rows(db, "SELECT count(*) FROM messages").await,
        waiting: count_rows(db, "SELECT count(*) FROM index_pending").await,
        indexed: count_rows(db, &format!("SELECT count(*) FROM {}", full_text().0)).await,
        fields: count_rows(db, "SELECT count(*) FROM message_fields").await,
    }
}

/// Every message indexed or waiting, never both, and none indexed twice.
async fn assert_whole(db: &str, when: &str) -> Held {
    let h = held(db).await;
    assert_eq!(h.indexed + h.waiting, h.messages, "{when}: {h:?}");
    assert_eq!(
        h.fields, h.indexed,
        "{when}: a field row per indexed message: {h:?}"
    );
    let (table, id) = full_text();
    let both = format!("SELECT count(*) FROM {table} WHERE {id} IN (SELECT id FROM index_pending)");
    assert_eq!(
        count_rows(db, &both).await,
        0,
        "{when}: indexed and waiting"
    );
    let distinct = format!("SELECT count(DISTINCT {id}) FROM {table}");
    assert_eq!(
        count_rows(db, &distinct).await,
        h.indexed,
        "{when}: indexed twice"
    );
    h
}

/// SIGKILL, then (PostgreSQL) until the server has ended the process's sessions: a COMMIT it
/// sent just before it died may still complete on the server, and the counts read next must
/// not change between one and the other.
async fn kill(child: &mut Child, db: &str) {
    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();
    if Backend::current() == Backend::Postgres {
        let others = "SELECT count(*) FROM pg_stat_activity \
                      WHERE datname = current_database() AND pid <> pg_backend_pid()";
        wait_until(
            "the killed process's sessions to end",
            Duration::from_secs(30),
            async || count_rows(db, others).await == 0,
        )
        .await;
    }
}

on_both_backends!(sigkill_between_append_and_index_loses_nothing_and_indexes_nothing_twice);
async fn sigkill_between_append_and_index_loses_nothing_and_indexes_nothing_twice() {
    let p = unique("indexing");
    let (work, dlq) = (format!("{p}.work"), format!("{p}.dlq"));
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    // Every message dies on arrival (TTL 0) into the DLQ: a real x-death on each.
    dying_queue(&mut t, &work, &dlq).await;
    publish_many(&t.channel, "", &work, &p, BACKLOG as usize).await;
    t.wait_for_depth(&dlq, BACKLOG as u32, Duration::from_secs(60))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = archive_url(dir.path()).await;
    let addr: SocketAddr = ([127, 0, 0, 1], free_local_port()).into();
    let soon = |secs| Patience::within(Duration::from_secs(secs)).every(Duration::from_millis(5));

    // 1. Killed mid-drain: the indexer yields to the drain, so appended messages wait.
    let mut first = start_lazarus(&dlq, &db, addr);
    wait_until("3,000 archived", soon(90), async || {
        count_rows(&db, "SELECT count(*) FROM messages").await >= 3_000
    })
    .await;
    kill(&mut first, &db).await;
    let at_kill = assert_whole(&db, "killed mid-drain").await;
    assert!(
        at_kill.waiting > 0 && at_kill.messages < BACKLOG,
        "the kill did not land between append and index: {at_kill:?}"
    );

    // 2. Restarted: it drains the rest, the pages say the index is behind, and it is killed
    // again while the indexer catches up.
    let mut second = start_lazarus(&dlq, &db, addr);
    // Mid-drain, the indexer yields: what waits is said.
    wait_until("the restart to be serving", soon(60), async || {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    let api: serde_json::Value =
        serde_json::from_slice(&http_get(addr, "/api/messages?limit=1").await.body).unwrap();
    let behind = api["indexing_behind"].as_u64().unwrap();
    let overview = http_get(addr, "/").await.text();
    let list = http_get(addr, "/messages").await.text();
    wait_until("the DLQ drained", soon(120), async || {
        count_rows(&db, "SELECT count(*) FROM messages").await >= BACKLOG
    })
    .await;
    let waiting = held(&db).await.waiting;
    wait_until("the indexer to be under way", soon(60), async || {
        let now = held(&db).await.waiting;
        now < waiting || now == 0
    })
    .await;
    kill(&mut second, &db).await;
    let mid = assert_whole(&db, "killed while the indexer caught up").await;
    assert!(
        behind > 0 && behind <= BACKLOG as u64,
        "the API says how far behind: {api}"
    );
    for (page, text) in [("/", &overview), ("/messages", &list)] {
        assert!(
            text.contains("Indexing: ") && text.contains(" behind."),
            "{page} says the index is behind: {text}"
        );
    }
    assert!(
        mid.waiting > 0 && mid.waiting < waiting,
        "the kill did not land while the indexer caught up ({waiting} waited before): {mid:?}"
    );

    // 3. Restarted again: everything indexed, once; search finds each message.
    let mut third = start_lazarus(&dlq, &db, addr);
    wait_until("the index to catch up", soon(120), async || {
        held(&db).await.waiting == 0
    })
    .await;
    let done = assert_whole(&db, "caught up").await;
    assert_eq!(
        (done.messages, done.indexed),
        (BACKLOG, BACKLOG),
        "{done:?}"
    );
    // Each message-id ends in the test's own number (nanoseconds): a word of its own.
    let own = p.rsplit('.').next().unwrap();
    let words = match Backend::current() {
        Backend::Sqlite => {
            format!("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH '{own}'")
        }
        Backend::Postgres => format!("SELECT count(*) FROM message_search WHERE search @@ '{own}'"),
    };
    assert_eq!(
        count_rows(&db, &words).await,
        BACKLOG,
        "each found by its id's words"
    );
    let one: serde_json::Value =
        serde_json::from_slice(&http_get(addr, "/api/messages?q=n:4321").await.body).unwrap();
    let found: Vec<&str> = one["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(found, [format!("{p}-4321")], "the field search: {one}");
    assert_eq!(one["indexing_behind"], 0);
    let list = http_get(addr, "/messages").await.text();
    assert!(!list.contains("Indexing: "), "caught up, nothing said");
    sigterm(&mut third).await;
    assert_eq!(t.depth(&dlq).await, 0, "the DLQ still holds messages");
    eprintln!(
        "killed with {} of {} waiting, then with {} of {}",
        at_kill.waiting, at_kill.messages, mid.waiting, mid.messages
    );
    t.cleanup().await;
}

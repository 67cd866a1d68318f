//! Shared test scaffolding: unique names, a broker connection, topology set-up and clean-up,
//! a running Lazarus (`TestApp`) with an archive of its own on the backend under test, and a
//! tiny HTTP client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use lazarus::archive::Archive;
use lazarus::config::ServeConfig;
use lazarus::startup::Application;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use crate::brokers::{Broker, Vhost};

/// The archive backend a test runs on. A test declared with [`on_both_backends!`] runs
/// once on each, as `<name>::sqlite` and `<name>::postgres`; others run on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The backend of the running test, and the PostgreSQL databases it made.
#[derive(Clone)]
struct TestBackend {
    backend: Backend,
    databases: Arc<std::sync::Mutex<Vec<String>>>,
}

tokio::task_local! {
    static BACKEND: TestBackend;
}

impl Backend {
    pub fn current() -> Backend {
        BACKEND.try_with(|b| b.backend).unwrap_or(Backend::Sqlite)
    }

    /// Runs `test` with this backend as the current one; the databases it made are dropped
    /// when it passes (a failed test's are kept to look at, and dropped by a later run).
    pub async fn scope<F: std::future::Future>(self, test: F) -> F::Output {
        let scope = TestBackend {
            backend: self,
            databases: Default::default(),
        };
        let out = BACKEND.scope(scope.clone(), test).await;
        let databases = std::mem::take(&mut *scope.databases.lock().unwrap());
        if !databases.is_empty() {
            use sqlx::Connection;
            let mut admin = sqlx::PgConnection::connect(&postgres_admin_url())
                .await
                .unwrap();
            for name in databases {
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            }
        }
        out
    }
}

/// Declares the tests `<name>::sqlite` and `<name>::postgres`, each running the async fn
/// `<name>` with that backend current: one suite, parameterised by backend.
macro_rules! on_both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                $crate::helpers::Backend::Sqlite.scope(super::$name()).await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::helpers::Backend::Postgres
                    .scope(super::$name())
                    .await
            }
        }
    };
}
pub(crate) use on_both_backends;

/// The PostgreSQL server tests make their databases on (override with
/// `LAZARUS_TEST_POSTGRES_URL`; any database of it to connect to as admin).
pub fn postgres_admin_url() -> String {
    std::env::var("LAZARUS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A new, empty archive for the current backend: a file in `dir`, or a PostgreSQL database
/// of its own (`lazarus_test_<pid>_<n>`, dropped when the test passes). Databases that test
/// processes which have ended left behind are dropped here.
pub async fn archive_url(dir: &std::path::Path) -> String {
    match Backend::current() {
        Backend::Sqlite => format!("sqlite://{}", dir.join("archive.db").display()),
        Backend::Postgres => {
            use sqlx::Connection;
            static N: AtomicU32 = AtomicU32::new(0);
            let admin = postgres_admin_url();
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("PostgreSQL answers (LAZARUS_TEST_POSTGRES_URL)");
            let old: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'lazarus\\_test\\_%'",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            for name in old {
                let pid = name.split('_').nth(2).unwrap_or_default();
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            }
            let name = format!(
                "lazarus_test_{}_{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            );
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let _ = conn.close().await;
            let _ = BACKEND.try_with(|b| b.databases.lock().unwrap().push(name.clone()));
            let (base, _) = admin.rsplit_once('/').expect("a database URL");
            format!("{base}/{name}")
        }
    }
}

/// The default vhost of the test's broker ([`Broker::current`]: RabbitMQ 3.10 unless the
/// test is declared with `on_both_brokers!`).
pub fn amqp_url() -> String {
    Broker::current().url()
}

/// A name no other test (or earlier run) uses: `prefix.<pid>.<n>.<nanos>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t.{prefix}.{}.{}.{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn connect(url: &str) -> Connection {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ must run at {url} for the integration tests: {e}"))
}

pub fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

pub fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

/// Declares queues and exchanges on a channel and deletes them all in [`Topology::cleanup`].
pub struct Topology {
    pub channel: Channel,
    pub connection: Connection,
    queues: Vec<String>,
    exchanges: Vec<String>,
}

impl Topology {
    pub async fn new() -> Self {
        Self::on(&amqp_url()).await
    }

    pub async fn on(url: &str) -> Self {
        let connection = connect(url).await;
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Topology {
            channel,
            connection,
            queues: vec![],
            exchanges: vec![],
        }
    }

    pub async fn exchange(&mut self, name: &str, kind: ExchangeKind) {
        self.channel
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        self.exchanges.push(name.to_owned());
    }

    pub async fn queue(&mut self, name: &str, arguments: FieldTable) {
        self.channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await
            .unwrap();
        self.queues.push(name.to_owned());
    }

    pub async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Publishes and waits for the broker's confirm.
    pub async fn publish(
        &self,
        exchange: &str,
        key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) {
        self.channel
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Ready messages in a queue (unacked ones are not counted).
    pub async fn depth(&self, queue: &str) -> u32 {
        passive_declare(&self.channel, queue)
            .await
            .unwrap()
            .message_count()
    }

    /// Whether the queue exists (on a throwaway channel: a failed passive declare closes it).
    pub async fn exists(&self, queue: &str) -> bool {
        let channel = self.connection.create_channel().await.unwrap();
        passive_declare(&channel, queue).await.is_ok()
    }

    pub async fn wait_for_depth(&self, queue: &str, depth: u32, timeout: Duration) {
        self.wait_for_depth_where(queue, depth, timeout, |now| now == depth)
            .await
    }

    pub async fn wait_for_depth_at_least(&self, queue: &str, depth: u32, timeout: Duration) {
        self.wait_for_depth_where(queue, depth, timeout, |now| now >= depth)
            .await
    }

    async fn wait_for_depth_where(
        &self,
        queue: &str,
        depth: u32,
        timeout: Duration,
        done: impl Fn(u32) -> bool,
    ) {
        let start = Instant::now();
        loop {
            let now = self.depth(queue).await;
            if done(now) {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "{queue} holds {now} messages, expected {depth}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn cleanup(self) {
        for q in &self.queues {
            let _ = self
                .channel
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for e in &self.exchanges {
            let _ = self
                .channel
                .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "test done".into()).await;
    }
}

async fn passive_declare(channel: &Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
}

/// A test worker: consumes `queue` and answers each delivery with `handle`.
pub async fn spawn_worker<F, Fut>(url: &str, queue: &str, handle: F) -> JoinHandle<()>
where
    F: Fn(Channel, lapin::message::Delivery) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let connection = connect(url).await;
    let channel = connection.create_channel().await.unwrap();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    tokio::spawn(async move {
        let _connection = connection;
        while let Some(Ok(delivery)) = consumer.next().await {
            handle(channel.clone(), delivery).await;
        }
    })
}

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
        config.connection.amqp_url = amqp_url();
        config.connection.database_url = database_url.clone();
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

    pub async fn wait_for_archived(&self, n: i64, timeout: Duration) {
        let start = Instant::now();
        loop {
            let now = self.archived().await;
            if now >= n {
                assert_eq!(now, n, "more messages archived than expected");
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "archived {now} of {n} messages within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every archived message of a queue, oldest first, following the cursors.
    pub async fn all_messages(&self, queue: &str) -> Vec<Value> {
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

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A minimal HTTP/1.1 GET over a fresh connection (enough for our own server).
pub async fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_request(addr, "GET", path, None).await
}

/// A minimal HTTP/1.1 request with an optional JSON body (our server, chromedriver).
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> HttpResponse {
    http_send(addr, method, path, json.map(|b| ("application/json", b))).await
}

/// POSTs an HTML form (`a=1&b=2`), as a browser without script would.
pub async fn post_form(addr: SocketAddr, path: &str, form: &str) -> HttpResponse {
    http_send(
        addr,
        "POST",
        path,
        Some(("application/x-www-form-urlencoded", form)),
    )
    .await
}

async fn http_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    http_with(addr, method, path, &[], typed_body).await
}

/// Any request, with extra headers (`Cookie`, `Authorization`, `Origin`, ...).
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    http_from(None, addr, method, path, headers, typed_body).await
}

/// [`http_with`] from a source address of the test's choosing (any of 127.0.0.0/8 is this
/// machine): a client the server sees as another address.
pub async fn http_from(
    source: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    let mut stream = match source {
        None => TcpStream::connect(addr).await.unwrap(),
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(ip, 0)).unwrap();
            socket.connect(addr).await.unwrap()
        }
    };
    let body = typed_body.map_or("", |(_, b)| b);
    let mut content = match typed_body {
        Some((content_type, body)) => format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ),
        None => String::new(),
    };
    for (name, value) in headers {
        content.push_str(&format!("{name}: {value}\r\n"));
    }
    let host = match headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        true => String::new(),
        false => format!("Host: {addr}\r\n"),
    };
    let request =
        format!("{method} {path} HTTP/1.1\r\n{host}Connection: close\r\n{content}\r\n{body}");
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read until the response is complete by its own framing: some servers (chromedriver)
    // keep the connection open despite `Connection: close`.
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (split, headers, status) = loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            n > 0 || !raw.is_empty(),
            "connection closed before a response"
        );
        raw.extend_from_slice(&buf[..n]);
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).into_owned();
            let mut lines = head.split("\r\n");
            let status: u16 = lines
                .next()
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .collect();
            break (split, headers, status);
        }
        assert!(n > 0, "connection closed inside the response head");
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length: Option<usize> = header("content-length").and_then(|v| v.parse().ok());
    loop {
        let body = &raw[split + 4..];
        let complete = match length {
            Some(len) => body.len() >= len,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if complete {
            break;
        }
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

/// Runs `rabbitmqctl` against the test's broker and returns its output, failing the test
/// when it fails.
pub fn rabbitmqctl(args: &[&str]) -> String {
    Broker::current().ctl(args)
}

/// JSON body properties the seeds publish with.
pub fn json_props(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id(message_id.into())
}

/// The count of the x-death entry for `queue` in a delivery's headers (0 when none).
pub fn death_count(properties: &BasicProperties, queue: &str) -> i64 {
    let Some(headers) = properties.headers() else {
        return 0;
    };
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        return 0;
    };
    deaths
        .as_slice()
        .iter()
        .filter_map(|d| match d {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        })
        .find(|t| matches!(t.inner().get("queue"), Some(AMQPValue::LongString(q)) if q.as_bytes() == queue.as_bytes()))
        .and_then(|t| match t.inner().get("count") {
            Some(AMQPValue::LongLongInt(n)) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// Publishes `n` messages with pipelined confirms (message-ids `{prefix}-{i}`).
pub async fn publish_many(channel: &Channel, exchange: &str, key: &str, prefix: &str, n: usize) {
    let mut confirms = Vec::with_capacity(1000);
    for i in 0..n {
        let body = format!(r#"{{"n": {i}, "padding": "{}"}}"#, "x".repeat(200));
        confirms.push(
            channel
                .basic_publish(
                    exchange.into(),
                    key.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    json_props(&format!("{prefix}-{i}")),
                )
                .await
                .unwrap(),
        );
        if confirms.len() == 1000 {
            for c in confirms.drain(..) {
                c.await.unwrap();
            }
        }
    }
    for c in confirms {
        c.await.unwrap();
    }
}

/// 0 while the tables do not exist yet; any other failure is the test's own mistake.
fn counted(n: Result<i64, sqlx::Error>) -> i64 {
    match n {
        Ok(n) => n,
        Err(sqlx::Error::Database(_)) => 0,
        Err(e) => panic!("count: {e}"),
    }
}

/// A count from an archive, read from outside the process that writes it (0 before the
/// archive or its tables exist).
pub async fn count_rows(database_url: &str, sql: &str) -> i64 {
    use sqlx::{ConnectOptions, Connection};
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true);
        let Ok(mut conn) = options.connect().await else {
            return 0;
        };
        let n = sqlx::query_scalar(sql).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        counted(n)
    } else {
        let Ok(mut conn) = sqlx::PgConnection::connect(database_url).await else {
            return 0;
        };
        let n = sqlx::query_scalar(sql).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        counted(n)
    }
}

/// Deliveries of `queue` (in the default vhost) that a consumer holds unacknowledged.
pub fn unacked(queue: &str) -> u64 {
    rabbitmqctl(&[
        "list_queues",
        "-q",
        "--no-table-headers",
        "name",
        "messages_unacknowledged",
    ])
    .lines()
    .filter_map(|l| l.split_once('\t'))
    .find(|(name, _)| *name == queue)
    .map(|(_, n)| n.trim().parse().unwrap())
    .unwrap_or_else(|| panic!("{queue} not listed by rabbitmqctl"))
}

/// A work queue that dead-letters through a fanout DLX into a DLQ: (work, dlq).
pub async fn work_queue_with_dlq(t: &mut Topology, p: &str) -> (String, String) {
    let (work, dlx, dlq) = (format!("{p}.work"), format!("{p}.dlx"), format!("{p}.dlq"));
    t.exchange(&dlx, ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    t.queue(&work, args(&[("x-dead-letter-exchange", s(&dlx))]))
        .await;
    (work, dlq)
}

/// A consumer that still fails: it rejects everything, until aborted.
pub async fn rejecting_worker(queue: &str) -> tokio::task::JoinHandle<()> {
    spawn_worker(&amqp_url(), queue, |_, d| async move {
        d.reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
    })
    .await
}

/// A consumer that has been fixed: it acks everything, until aborted.
pub async fn acking_worker(queue: &str) -> tokio::task::JoinHandle<()> {
    spawn_worker(&amqp_url(), queue, |_, d| async move {
        d.ack(lapin::options::BasicAckOptions::default())
            .await
            .unwrap();
    })
    .await
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

/// Publishes in flight at most (the `--replay-window` default). One interruption can
/// publish at most two windows twice: the step being published and the one before it,
/// whose confirms are recorded while the next step goes out.
pub const REPLAY_WINDOW: usize = 500;

/// A replayed copy as it arrived: the archive id it copies (`x-lazarus-replay-of`) and its
/// message-id.
pub struct ReplayedCopy {
    pub replay_of: String,
    pub message_id: Option<String>,
}

/// Every copy in `queue`, consuming it empty.
pub async fn drain_copies(url: &str, queue: &str) -> Vec<ReplayedCopy> {
    let t = Topology::on(url).await;
    let depth = t.depth(queue).await as usize;
    let mut consumer = t
        .channel
        .basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    let mut copies = Vec::with_capacity(depth);
    while copies.len() < depth {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("the queue drains")
            .unwrap()
            .unwrap();
        let headers = delivery.properties.headers().clone().unwrap();
        let replay_of = match headers.inner().get("x-lazarus-replay-of") {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("a copy without its link: {other:?}"),
        };
        copies.push(ReplayedCopy {
            replay_of,
            message_id: delivery
                .properties
                .message_id()
                .as_ref()
                .map(|m| m.to_string()),
        });
    }
    let _ = t.connection.close(200, "drained".into()).await;
    copies
}

/// Every `x-lazarus-replay-of` in `queue`, consuming it empty.
pub async fn drain_links(url: &str, queue: &str) -> Vec<String> {
    drain_copies(url, queue)
        .await
        .into_iter()
        .map(|c| c.replay_of)
        .collect()
}

impl TestApp {
    /// Polls a replay job until `done` holds for it, and returns it.
    pub async fn wait_for_job(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let job = self.json(&format!("/api/replays/{id}"), 200).await;
            if done(&job) {
                return job;
            }
            assert!(
                start.elapsed() < timeout,
                "job {id} within {timeout:?}: {job}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

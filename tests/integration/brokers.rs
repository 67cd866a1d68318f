//! The RabbitMQ brokers the tests run against, and brokers a test starts for itself.
//!
//! - [`Broker`]: the machine's RabbitMQ 3.10 ([`Broker::Rabbitmq3`]: `LAZARUS_TEST_AMQP_URL`,
//!   default `amqp://guest:guest@127.0.0.1:5672/%2f`, managed with the system's
//!   `rabbitmqctl`) and a RabbitMQ 4.x ([`Broker::Rabbitmq4`]: `LAZARUS_TEST_AMQP4_URL`,
//!   default `amqp://guest:guest@127.0.0.1:5690/%2f`, a node `scripts/rabbitmq4.sh` installed and
//!   runs from `LAZARUS_TEST_RABBITMQ4_DIR`, default `/tmp/r43`). A test runs on the
//!   *current* broker — [`amqp_url`](crate::helpers::amqp_url), `TestApp`, `Topology::new`,
//!   [`Vhost::create`] and [`rabbitmqctl`](crate::helpers::rabbitmqctl) follow it — which is
//!   3.10 unless the test is declared with [`on_both_brokers!`]. Like the backend, the current
//!   broker is a task-local: read it in the test's own task, not in one it spawns.
//! - [`on_both_brokers!`]`(name)` declares `name::rabbitmq3` and `name::rabbitmq4`;
//!   `on_both_brokers!(name, on_both_backends)` declares `name::rabbitmq3::sqlite`,
//!   `name::rabbitmq3::postgres`, `name::rabbitmq4::sqlite` and `name::rabbitmq4::postgres`.
//! - [`Vhost`]: a fresh vhost on a broker, deleted when dropped;
//!   [`Broker::close_connections`] closes every connection in one, and
//!   [`Broker::queue_messages`] counts a queue's ready and unacked messages.
//! - [`PrivateBroker`]: a node of the test's own (3.10 or 4.x) on ports nobody else uses, for
//!   tests that must SIGKILL or stop the broker: [`PrivateBroker::kill9`], [`start`] again on
//!   the same data, [`stop`]; dropped, it is killed and its directory removed (a later run
//!   removes what a killed test process left behind).
//! - [`PrivateCluster`]: three (or more) private 4.x nodes clustered — one Erlang cookie, one
//!   epmd, each `join_cluster`ed to the first — to SIGKILL one node of at a time.
//!
//! [`start`]: PrivateBroker::start
//! [`stop`]: PrivateBroker::stop

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::helpers::{unique, wait_showing, wait_until, Patience};

/// The script that installs and runs a private RabbitMQ 4.x (see its header).
const RABBITMQ4_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rabbitmq4.sh");
/// The machine's RabbitMQ 3.10 scripts, run directly (the `/usr/sbin` wrappers switch to the
/// `rabbitmq` user and its home, which a private node must not share).
const RABBITMQ3_BIN: &str = "/usr/lib/rabbitmq/bin";
/// How long a node may take to boot (or recover its queues after a kill).
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A RabbitMQ the tests talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    /// The machine's RabbitMQ 3.10.
    Rabbitmq3,
    /// A RabbitMQ 4.x beside it (4.3 in CI).
    Rabbitmq4,
}

tokio::task_local! {
    static BROKER: Broker;
}

impl Broker {
    /// The broker of the running test: 3.10 unless declared with [`on_both_brokers!`].
    pub fn current() -> Broker {
        BROKER.try_with(|b| *b).unwrap_or(Broker::Rabbitmq3)
    }

    /// Runs `test` with this broker as the current one.
    pub async fn scope<F: Future>(self, test: F) -> F::Output {
        BROKER.scope(self, test).await
    }

    /// The URL of its default vhost.
    pub fn url(self) -> String {
        let (var, port) = match self {
            Broker::Rabbitmq3 => ("LAZARUS_TEST_AMQP_URL", 5672),
            Broker::Rabbitmq4 => ("LAZARUS_TEST_AMQP4_URL", 5690),
        };
        std::env::var(var).unwrap_or_else(|_| format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
    }

    /// Its management API (AMQP port + 10,000, as `scripts/rabbitmq4.sh` starts it); the
    /// machine's 3.10 runs without the management plugin.
    pub fn management_url(self) -> Option<String> {
        let url = self.url();
        let authority = &url[url.find('@').map_or(url.find("://")? + 3, |at| at + 1)..];
        let (host, port) = authority.split('/').next()?.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        (self == Broker::Rabbitmq4).then(|| format!("http://{host}:{}", port + 10_000))
    }

    /// Runs `rabbitmqctl` against it and returns its output, failing the test when it fails.
    /// It blocks: in the middle of a test that runs Lazarus in-process, use
    /// [`Broker::close_connections`] or `spawn_blocking`.
    pub fn ctl(self, args: &[&str]) -> String {
        run(self.ctl_command(args))
    }

    fn ctl_command(self, args: &[&str]) -> Command {
        match self {
            Broker::Rabbitmq3 => {
                let mut command = Command::new("rabbitmqctl");
                command.args(args);
                command
            }
            Broker::Rabbitmq4 => {
                let mut command = Command::new(RABBITMQ4_SH);
                command.arg("ctl").arg(rabbitmq4_dir()).args(args);
                command
            }
        }
    }

    /// Closes every client connection of `vhost` — Lazarus's among them, as a network cut or
    /// a broker restart would — without blocking the test's runtime.
    pub async fn close_connections(self, vhost: &str) {
        let vhost = vhost.to_owned();
        tokio::task::spawn_blocking(move || {
            self.ctl(&[
                "close_all_connections",
                "-p",
                &vhost,
                "closed by a Lazarus test",
            ])
        })
        .await
        .unwrap();
    }

    /// Ready plus unacknowledged messages of `queue` in `vhost` (`"/"`: the default one),
    /// once the broker lists the queue (a node that just started may not have recovered it).
    pub async fn queue_messages(self, vhost: &str, queue: &str) -> u64 {
        queue_messages(|| self.ctl_command(&list_queues(vhost)), queue).await
    }
}

/// The `messages` of `queue` in what `list` (a `rabbitmqctl list_queues`) prints, waiting
/// until it lists the queue with a count.
async fn queue_messages(list: impl Fn() -> Command, queue: &str) -> u64 {
    // Each look runs rabbitmqctl: every 200 ms.
    let patience = Patience::within(BOOT_TIMEOUT).every(Duration::from_millis(200));
    wait_showing(
        &format!("rabbitmqctl to list {queue}"),
        patience,
        async || {
            let listing = run_async(list()).await;
            let messages = listing
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .find(|(name, _)| *name == queue)
                .and_then(|(_, n)| n.trim().parse().ok());
            messages.ok_or(listing)
        },
    )
    .await
}

fn list_queues(vhost: &str) -> [&str; 7] {
    [
        "list_queues",
        "-p",
        vhost,
        "-q",
        "--no-table-headers",
        "name",
        "messages",
    ]
}

/// Where `scripts/rabbitmq4.sh` installed (and runs) the shared RabbitMQ 4.x.
fn rabbitmq4_dir() -> PathBuf {
    std::env::var_os("LAZARUS_TEST_RABBITMQ4_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/tmp/r43".into())
}

/// Runs a command to completion, failing the test with its output when it fails.
fn run(mut command: Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`run`] on a blocking thread, so that the test's runtime keeps going meanwhile.
async fn run_async(command: Command) -> String {
    tokio::task::spawn_blocking(move || run(command))
        .await
        .unwrap()
}

/// `url` with its vhost replaced by `vhost`.
fn with_vhost(url: &str, vhost: &str) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let base = match url[authority..].find('/') {
        Some(slash) => &url[..authority + slash],
        None => url,
    };
    format!("{base}/{}", vhost.replace('%', "%25").replace('/', "%2f"))
}

/// Declares the tests `<name>::rabbitmq3` and `<name>::rabbitmq4`, each running the async fn
/// `<name>` with that broker current (on SQLite); with `, on_both_backends` each of them on
/// both backends: `<name>::rabbitmq3::sqlite`, `<name>::rabbitmq3::postgres`, and so on.
macro_rules! on_both_brokers {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn rabbitmq3() {
                $crate::brokers::Broker::Rabbitmq3
                    .scope(super::$name())
                    .await
            }

            #[tokio::test]
            async fn rabbitmq4() {
                $crate::brokers::Broker::Rabbitmq4
                    .scope(super::$name())
                    .await
            }
        }
    };
    ($name:ident, on_both_backends) => {
        mod $name {
            $crate::brokers::on_both_brokers!(@backends $name, rabbitmq3, Rabbitmq3);
            $crate::brokers::on_both_brokers!(@backends $name, rabbitmq4, Rabbitmq4);
        }
    };
    (@backends $name:ident, $module:ident, $broker:ident) => {
        mod $module {
            #[tokio::test]
            async fn sqlite() {
                $crate::brokers::Broker::$broker
                    .scope($crate::helpers::Backend::Sqlite.scope(super::super::$name()))
                    .await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::brokers::Broker::$broker
                    .scope($crate::helpers::Backend::Postgres.scope(super::super::$name()))
                    .await
            }
        }
    };
}
pub(crate) use on_both_brokers;

/// A vhost of the test's own on a broker, with every permission for guest; deleted when
/// dropped (for tests that close every connection in it, or want a clean namespace).
pub struct Vhost {
    pub name: String,
    broker: Broker,
}

impl Vhost {
    /// A fresh vhost on the current broker.
    pub fn create(prefix: &str) -> Self {
        Self::on(Broker::current(), prefix)
    }

    /// A fresh vhost on `broker`.
    pub fn on(broker: Broker, prefix: &str) -> Self {
        let name = unique(prefix);
        broker.ctl(&["add_vhost", &name]);
        broker.ctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        Vhost { name, broker }
    }

    pub fn broker(&self) -> Broker {
        self.broker
    }

    pub fn url(&self) -> String {
        with_vhost(&self.broker.url(), &self.name)
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = self
            .broker
            .ctl_command(&["delete_vhost", &self.name])
            .output();
    }
}

/// Where private nodes live: `<tmp>/lazarus-test-brokers/<test pid>.<n>`.
fn private_base() -> PathBuf {
    std::env::temp_dir().join("lazarus-test-brokers")
}

/// A RabbitMQ node of the test's own, in a directory of its own, for a test that kills or
/// stops its broker. Its AMQP port is `port`; the Erlang distribution, epmd and CLI use
/// `port + 20000`, `port + 19000` and `port + 30000..+30009`, as `scripts/rabbitmq4.sh` lays
/// them out. Management is off. Only guest/guest on loopback, on the default vhost.
pub struct PrivateBroker {
    broker: Broker,
    port: u16,
    dir: PathBuf,
    /// The 3.10 node's `rabbitmq-server` script (a 4.x node is started detached by the script).
    server: Option<std::process::Child>,
}

impl PrivateBroker {
    /// Boots a new node of `broker`'s version (~5-15 s) and waits until it takes connections.
    pub async fn new(broker: Broker) -> PrivateBroker {
        Self::configured(broker, "[].", "").await
    }

    /// [`PrivateBroker::new`] with these plugins (`[rabbitmq_management].`) and lines added
    /// to its `rabbitmq.conf`.
    pub async fn configured(broker: Broker, plugins: &str, extra_conf: &str) -> PrivateBroker {
        let mut node = Self::create(broker, plugins, extra_conf);
        node.start().await;
        node
    }

    /// A node's directory and settings, not started yet.
    fn create(broker: Broker, plugins: &str, extra_conf: &str) -> PrivateBroker {
        static N: AtomicU32 = AtomicU32::new(0);
        sweep_stale_nodes();
        let port = free_port();
        let dir = private_base().join(format!(
            "{}.{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        for sub in ["etc", "data", "log", "home"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("port"), port.to_string()).unwrap();
        std::fs::write(dir.join("etc/enabled_plugins"), format!("{plugins}\n")).unwrap();
        std::fs::write(dir.join("etc/rabbitmq-env.conf"), "").unwrap();
        match broker {
            Broker::Rabbitmq3 => std::fs::write(
                dir.join("etc/rabbitmq.conf"),
                format!(
                    "listeners.tcp.default = 127.0.0.1:{port}\n\
                     loopback_users.guest = true\nlog.console = false\n{extra_conf}"
                ),
            )
            .unwrap(),
            // The unpacked 4.x (Erlang included) is shared: its paths are absolute.
            Broker::Rabbitmq4 => {
                let root = rabbitmq4_dir().join("root");
                assert!(
                    root.is_dir(),
                    "no RabbitMQ 4.x installed in {} (scripts/rabbitmq4.sh install DIR sid; \
                     LAZARUS_TEST_RABBITMQ4_DIR)",
                    root.display()
                );
                std::os::unix::fs::symlink(root, dir.join("root")).unwrap();
                std::fs::write(dir.join("etc/extra.conf"), extra_conf).unwrap();
            }
        }
        PrivateBroker {
            broker,
            port,
            dir,
            server: None,
        }
    }

    /// Its Erlang node name (a 4.x node's, as `scripts/rabbitmq4.sh` names it).
    pub fn node_name(&self) -> String {
        format!("r4p{}@localhost", self.port)
    }

    /// Its default vhost, as guest.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts the node (again, on the data it had) and waits until it takes AMQP connections:
    /// its queues are recovered by then.
    pub async fn start(&mut self) {
        assert!(self.pid().is_none(), "the node is running already");
        match self.broker {
            Broker::Rabbitmq3 => {
                let log = std::fs::File::create(self.dir.join("log/server.out")).unwrap();
                let mut command = self.rabbitmq3(&format!("{RABBITMQ3_BIN}/rabbitmq-server"));
                command
                    .stdin(std::process::Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log);
                self.server = Some(command.spawn().expect("RabbitMQ 3.10's rabbitmq-server"));
                let what = format!(
                    "the private RabbitMQ to start (see {})",
                    self.dir.join("log").display()
                );
                // Each look runs rabbitmqctl: every 500 ms.
                let patience = Patience::within(BOOT_TIMEOUT).every(Duration::from_millis(500));
                wait_until(&what, patience, async || {
                    self.try_ctl(&["-q", "await_startup"]).await
                })
                .await;
            }
            Broker::Rabbitmq4 => {
                let mut command = Command::new(RABBITMQ4_SH);
                command
                    .arg("start")
                    .arg(&self.dir)
                    .arg(self.port.to_string());
                run_async(command).await;
            }
        }
        let patience = Patience::within(BOOT_TIMEOUT).every(Duration::from_millis(200));
        let what = "the private RabbitMQ to take connections";
        let connection = wait_showing(what, patience, async || {
            lapin::Connection::connect(&self.url(), Default::default()).await
        })
        .await;
        let _ = connection.close(200, "the node is up".into()).await;
    }

    /// SIGKILLs the node, as a crash or the OOM killer would, and waits until it is gone.
    pub async fn kill9(&mut self) {
        let pid = self.pid().expect("the node runs");
        kill(pid);
        self.wait_until_gone(pid).await;
    }

    /// Stops the node cleanly (`rabbitmqctl stop`), keeping its data for [`Self::start`].
    pub async fn stop(&mut self) {
        let pid = self.pid().expect("the node runs");
        match self.broker {
            Broker::Rabbitmq3 => {
                self.ctl(&["stop"]).await;
            }
            Broker::Rabbitmq4 => {
                let mut command = Command::new(RABBITMQ4_SH);
                command.arg("stop").arg(&self.dir);
                run_async(command).await;
            }
        }
        self.wait_until_gone(pid).await;
    }

    /// Runs `rabbitmqctl` against this node and returns its output, failing the test when it
    /// fails.
    pub async fn ctl(&self, args: &[&str]) -> String {
        run_async(self.ctl_command(args)).await
    }

    /// Ready plus unacknowledged messages of `queue` (in the default vhost), once the node
    /// lists it.
    pub async fn queue_messages(&self, queue: &str) -> u64 {
        queue_messages(|| self.ctl_command(&list_queues("/")), queue).await
    }

    /// Runs `rabbitmq-queues` against this 4.x node: its output, or what it said failing.
    pub async fn queues(&self, args: &[&str]) -> Result<String, String> {
        assert_eq!(
            self.broker,
            Broker::Rabbitmq4,
            "rabbitmq-queues on a 4.x node"
        );
        let mut command = Command::new(RABBITMQ4_SH);
        command.arg("queues").arg(&self.dir).args(args);
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .map_err(|e| e.to_string())?;
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        match out.status.success() {
            true => Ok(said.into_owned()),
            false => Err(said.into_owned()),
        }
    }

    /// Whether the node's VM runs.
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    async fn try_ctl(&self, args: &[&str]) -> bool {
        let mut command = self.ctl_command(args);
        tokio::task::spawn_blocking(move || command.output().is_ok_and(|o| o.status.success()))
            .await
            .unwrap()
    }

    fn ctl_command(&self, args: &[&str]) -> Command {
        let mut command = match self.broker {
            Broker::Rabbitmq3 => self.rabbitmq3(&format!("{RABBITMQ3_BIN}/rabbitmqctl")),
            Broker::Rabbitmq4 => {
                let mut command = Command::new(RABBITMQ4_SH);
                command.arg("ctl").arg(&self.dir);
                command
            }
        };
        command.args(args);
        command
    }

    /// A RabbitMQ 3.10 script with this node's environment.
    fn rabbitmq3(&self, program: &str) -> Command {
        let (d, port) = (&self.dir, u32::from(self.port));
        let mut command = Command::new(program);
        command
            .env("HOME", d.join("home"))
            .env("ERL_EPMD_PORT", (port + 19000).to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODENAME", format!("lzt{port}@localhost"))
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", (port + 20000).to_string())
            .env("RABBITMQ_CTL_DIST_PORT_MIN", (port + 30000).to_string())
            .env("RABBITMQ_CTL_DIST_PORT_MAX", (port + 30009).to_string())
            .env("RABBITMQ_CONF_ENV_FILE", d.join("etc/rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", d.join("etc/rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                d.join("etc/enabled_plugins"),
            )
            .env("RABBITMQ_MNESIA_BASE", d.join("data"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_PID_FILE", d.join("node.pid"));
        command
    }

    /// The running node's Erlang VM.
    fn pid(&self) -> Option<u32> {
        node_pid(&self.dir)
    }

    async fn wait_until_gone(&mut self, pid: u32) {
        wait_until(
            &format!("RabbitMQ {pid} to stop"),
            Duration::from_secs(60),
            async || !alive(pid),
        )
        .await;
        // Its script ends with it.
        if let Some(mut server) = self.server.take() {
            let _ = server.wait();
        }
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        remove_node(&self.dir, self.port);
        // The 3.10 node's script ends with its VM.
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

/// Private RabbitMQ 4.x nodes in one cluster: the same Erlang cookie, one epmd (on the first
/// node's epmd port, which `scripts/rabbitmq4.sh` reads from each node's `epmd_port`), every
/// other node `join_cluster`ed to the first. Each node is a [`PrivateBroker`], to kill and
/// start again on its own; dropped, the nodes go last first (the shared epmd with the first).
pub struct PrivateCluster {
    pub nodes: Vec<PrivateBroker>,
}

impl PrivateCluster {
    /// Boots `size` nodes and clusters them; waits until the first lists them all running.
    pub async fn new(size: usize) -> PrivateCluster {
        assert!(size >= 2, "a cluster of {size}");
        let mut nodes: Vec<PrivateBroker> = (0..size)
            .map(|_| PrivateBroker::create(Broker::Rabbitmq4, "[].", ""))
            .collect();
        let epmd = (u32::from(nodes[0].port) + 19000).to_string();
        let cookie = format!("LAZARUSTESTCLUSTER{}", nodes[0].port);
        for node in &nodes {
            std::fs::write(node.dir.join("epmd_port"), &epmd).unwrap();
            let file = node.dir.join("home/.erlang.cookie");
            std::fs::write(&file, &cookie).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        // One at a time: the first starts the shared epmd, and the machine has few cores.
        for node in &mut nodes {
            node.start().await;
        }
        let first = nodes[0].node_name();
        for node in &nodes[1..] {
            node.ctl(&["stop_app"]).await;
            node.ctl(&["join_cluster", &first]).await;
            node.ctl(&["start_app"]).await;
        }
        let cluster = PrivateCluster { nodes };
        cluster.wait_until_all_running().await;
        cluster
    }

    /// `amqp://guest:guest@127.0.0.1:P1,127.0.0.1:P2,…/%2f`: every node, as one broker.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("amqp://guest:guest@{}/%2f", hosts.join(","))
    }

    /// The index of the node whose AMQP port or Erlang name `id` holds.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| id == n.node_name() || id.rsplit(':').next() == Some(&n.port.to_string()))
    }

    /// A running node, to ask the cluster things.
    pub fn any_running(&self) -> &PrivateBroker {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a node of the cluster runs")
    }

    /// Waits until a running node lists every node of the cluster as running.
    pub async fn wait_until_all_running(&self) {
        let start = Instant::now();
        loop {
            let status = self
                .any_running()
                .ctl(&["cluster_status", "--formatter", "json"])
                .await;
            let running = serde_json::from_str::<serde_json::Value>(&status)
                .ok()
                .and_then(|s| s["running_nodes"].as_array().map(Vec::len))
                .unwrap_or(0);
            if running == self.nodes.len() {
                return;
            }
            assert!(
                start.elapsed() < BOOT_TIMEOUT,
                "the cluster runs {running} of {} nodes: {status}",
                self.nodes.len()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        while let Some(node) = self.nodes.pop() {
            drop(node);
        }
    }
}

/// The Erlang VM of the node in `dir`, if it runs.
fn node_pid(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join("node.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let ours = String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy());
    (ours && alive(pid)).then_some(pid)
}

/// Running, not a zombie waiting for its parent.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// Kills what is left of a node (its VM, its own epmd) and removes its directory.
fn remove_node(dir: &Path, port: u16) {
    let start = Instant::now();
    if let Some(pid) = node_pid(dir) {
        kill(pid);
        while alive(pid) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // epmd refuses to stop while it still counts a node registered: a dying VM's
    // registration ends a moment after the VM.
    let epmd_port = (u32::from(port) + 19000).to_string();
    while start.elapsed() < Duration::from_secs(15) {
        let Ok(out) = Command::new("epmd")
            .args(["-port", &epmd_port, "-kill"])
            .output()
        else {
            break;
        };
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        if said.contains("Killed") || said.contains("Cannot connect") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Nodes that test processes which have ended left behind (killed before their drop ran).
fn sweep_stale_nodes() {
    let Ok(entries) = std::fs::read_dir(private_base()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name.split('.').next().unwrap_or_default();
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let dir = entry.path();
        let port = std::fs::read_to_string(dir.join("port"))
            .ok()
            .and_then(|p| p.trim().parse().ok());
        if let Some(port) = port {
            remove_node(&dir, port);
        }
    }
}

/// An AMQP port for a new node whose distribution, epmd and CLI ports are free too, and that
/// no other node of this process has taken.
fn free_port() -> u16 {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap();
    let free = |port: u16| {
        [0, 10000, 19000, 20000, 30000]
            .iter()
            .all(|offset| std::net::TcpListener::bind(("0.0.0.0", port + offset)).is_ok())
    };
    // Past the shared 4.x nodes' ports (5690, 5700), away from other test processes' picks,
    // 10 apart so that no two nodes share CLI ports (port + 30000 to port + 30009).
    let start = 5720 + (std::process::id() % 97) as u16 * 10;
    let port = (0..100)
        .map(|i| 5720 + (start - 5720 + i * 10) % 1000)
        .find(|p| !taken.contains(p) && free(*p))
        .expect("a free port for a private RabbitMQ");
    taken.push(port);
    port
}

#[test]
fn vhost_urls_keep_the_broker_and_escape_the_name() {
    assert_eq!(
        with_vhost("amqp://guest:guest@127.0.0.1:5690/%2f", "t.a/b"),
        "amqp://guest:guest@127.0.0.1:5690/t.a%2fb"
    );
    assert_eq!(
        with_vhost("amqp://127.0.0.1:5672", "v"),
        "amqp://127.0.0.1:5672/v"
    );
}

crate::brokers::on_both_brokers!(a_private_broker_keeps_its_messages_across_kill9_and_stop);
async fn a_private_broker_keeps_its_messages_across_kill9_and_stop() {
    let broker = Broker::current();
    let mut node = PrivateBroker::new(broker).await;
    let version = node.ctl(&["-q", "version"]).await;
    let major = match broker {
        Broker::Rabbitmq3 => "3.",
        Broker::Rabbitmq4 => "4.",
    };
    assert!(version.starts_with(major), "{broker:?} runs {version}");
    let t = crate::helpers::Topology::on(&node.url()).await;
    t.channel
        .queue_declare(
            "q".into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    crate::helpers::publish_many(&t.channel, "", "q", "kept", 10).await;
    let _ = t.connection.close(200, "published".into()).await;
    // A clean stop writes the queue's declaration down: 3.10 kept only in memory for 19 s on
    // a loaded machine (a SIGKILL then recovered 0 queues), so tests that kill their broker
    // stop and start it once after declaring.
    node.stop().await;
    node.start().await;
    assert_eq!(node.queue_messages("q").await, 10, "after stop");
    // Persistent, confirmed and declared on disk: nothing of it is lost to a SIGKILL.
    node.kill9().await;
    node.start().await;
    assert_eq!(node.queue_messages("q").await, 10, "after kill9");
    let dir = node.dir.clone();
    drop(node);
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

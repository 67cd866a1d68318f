//! Failures as each framework leaves them in its error queue, produced into the real broker
//! for the tests: Dramatiq and Symfony Messenger by the frameworks themselves (a worker whose
//! handler throws), Spring AMQP, MassTransit, NServiceBus and Watermill — which cannot run
//! here — published with exactly the headers, AMQP types, properties and topology their
//! sources write (`/work/research/framework-errors.md`), Spring's stack trace printed by a
//! real JVM. Each producer returns what a test checks: the DLQ, the convention's reading,
//! where a replay with no target given must land and which headers it must strip or keep.
//! Plain consumers (lapin, and Node's amqplib) take what a replay published.

mod archived;
mod checks;
mod go;
mod jvm;
mod masstransit;
mod nservicebus;
mod php;
mod python;

use std::time::Duration;

use lapin::options::BasicGetOptions;
use lazarus::message::conventions::{Convention, Delivery, FrameworkFailure};
use lazarus::message::death::ReplayTarget;
use lazarus::message::headers::{MessageProperties, Table};

use crate::helpers::*;

pub use go::watermill;
pub use jvm::spring;
pub use masstransit::{masstransit_fault, masstransit_skipped};
pub use nservicebus::nservicebus;
pub use php::{symfony, SymfonySerializer};
pub use python::dramatiq;

/// One failure in a framework's error queue, and what reading it must give.
#[derive(Debug, Clone)]
pub struct Produced {
    pub convention: Convention,
    /// The error queue that holds it (what Lazarus archives).
    pub dlq: String,
    /// Where a replay with no target given must land: the queue that failed, or the one the
    /// original exchange and routing key route to.
    pub lands_in: String,
    /// The target the convention gives (`None`: the broker's `x-death` gives it).
    pub target: Option<ReplayTarget>,
    pub failed_queue: Option<String>,
    pub message_type: Option<String>,
    /// The exception type the framework records apart from its trace, if it does.
    pub error_type: Option<String>,
    /// The error message the framework records (or the trace's last line names).
    pub message: String,
    /// The exception type that names the bug: the root of the trace's chain.
    pub root_type: String,
    /// Headers it carries that a replay must strip (the broker's death headers aside).
    pub failure_headers: Vec<String>,
    /// Headers it carries that a replay must keep.
    pub kept_headers: Vec<String>,
    /// What was declared for it, deleted by [`Produced::cleanup`].
    pub queues: Vec<String>,
    pub exchanges: Vec<String>,
}

impl Produced {
    /// Deletes every queue and exchange the failure's topology declared.
    pub async fn cleanup(&self, url: &str) {
        let t = Topology::on(url).await;
        for q in &self.queues {
            let _ = t
                .channel
                .queue_delete(q.as_str().into(), Default::default())
                .await;
        }
        for e in &self.exchanges {
            let _ = t
                .channel
                .exchange_delete(e.as_str().into(), Default::default())
                .await;
        }
        t.cleanup().await;
    }
}

/// A message taken from a queue by a plain consumer.
#[derive(Debug, Clone)]
pub struct Taken {
    pub exchange: String,
    pub routing_key: String,
    pub properties: MessageProperties,
    pub headers: Option<Table>,
    pub body: Vec<u8>,
}

impl Taken {
    /// The header names it carries.
    pub fn header_names(&self) -> Vec<String> {
        let names = self.headers.iter().flat_map(|h| h.keys());
        names.map(|k| k.to_text().into_owned()).collect()
    }

    /// What `lazarus::message::conventions::read` makes of it, delivered from `queue` in `vhost`.
    pub fn convention(&self, queue: &str, vhost: &str) -> Option<FrameworkFailure> {
        lazarus::message::conventions::read(&Delivery {
            queue,
            vhost,
            routing_key: &self.routing_key,
            headers: self.headers.as_ref(),
            body_text: std::str::from_utf8(&self.body).ok(),
        })
    }
}

/// Takes one message from `queue` (acknowledged), waiting up to 20 s for one to arrive.
pub async fn take(url: &str, queue: &str) -> Taken {
    let t = Topology::on(url).await;
    let what = format!("a message in {queue}");
    let message = wait_for(&what, Duration::from_secs(20), async || {
        t.channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap_or_else(|e| panic!("basic.get from {queue}: {e}"))
    })
    .await;
    let d = message.delivery;
    let (properties, headers) = MessageProperties::from_lapin(&d.properties);
    let taken = Taken {
        exchange: d.exchange.to_string(),
        routing_key: d.routing_key.to_string(),
        properties,
        headers,
        body: d.data,
    };
    t.cleanup().await;
    taken
}

/// Takes one message from `queue` with Node's amqplib (as a Node consumer would), waiting
/// up to 20 s: `{"fields", "properties", "headers": {name: value}, "body"}`.
pub async fn take_with_amqplib(url: &str, queue: &str) -> serde_json::Value {
    let modules = node_modules("amqplib@2.3.1").await;
    let script = script("amqplib_take.js");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .args([url, queue])
        .env("NODE_PATH", modules)
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "amqplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("amqplib_take.js prints JSON")
}

/// Where the tests' npm packages are (`scripts/test` installs them), installing `package` there
/// when it is missing.
async fn node_modules(package: &str) -> String {
    let prefix = std::env::var("LAZARUS_TEST_NODE_MODULES")
        .map(|m| m.trim_end_matches("/node_modules").to_owned())
        .unwrap_or_else(|_| {
            format!(
                "{}/.cache/lazarus-test-node",
                std::env::var("HOME").unwrap()
            )
        });
    let name = package.split('@').next().unwrap();
    if !std::path::Path::new(&format!("{prefix}/node_modules/{name}")).exists() {
        let out = tokio::process::Command::new("npm")
            .args([
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                &prefix,
                package,
            ])
            .output()
            .await
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm install {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    format!("{prefix}/node_modules")
}

/// A file of `tests/integration/frameworks/`.
fn script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/integration/frameworks")
        .join(name)
}

/// The vhost an AMQP URL names, as the broker names it.
fn vhost_of(url: &str) -> String {
    lazarus::message::dlq::home_vhost(url)
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Publishes with the typed headers exactly as given (their AMQP types kept), confirmed.
async fn publish(
    t: &Topology,
    exchange: &str,
    key: &str,
    body: &[u8],
    properties: &MessageProperties,
    headers: Table,
) {
    t.publish(exchange, key, body, properties.to_lapin(Some(&headers)))
        .await;
}

/// A receive endpoint's topology as MassTransit and NServiceBus (conventional routing)
/// declare it: a durable fanout exchange and a durable queue of one name, bound.
async fn endpoint(t: &mut Topology, name: &str) {
    t.exchange(name, lapin::ExchangeKind::Fanout).await;
    t.queue(name, Default::default()).await;
    t.bind(name, name, "").await;
}

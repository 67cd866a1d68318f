//! Live state of each DLQ consumer and of the database, for `/readyz` and the metrics. Each
//! DLQ is kept as its [`Dlq`]; it is written as its key only where it is shown.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::message::dlq::Dlq;

/// Where one DLQ consumer stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
pub enum ConsumerState {
    Connecting,
    Consuming,
    /// The queue does not exist (Lazarus never creates it); retried.
    QueueMissing,
    /// The broker is unreachable or closed the connection; retried.
    Disconnected(String),
    /// Storing a batch failed; deliveries are held, unacked, until it succeeds.
    DatabaseUnavailable(String),
    Stopped,
}

/// Shared, cheap to clone; no lock is held across an `.await`.
#[derive(Debug, Clone, Default)]
pub struct IngestStatus {
    /// Each DLQ consumed, and where its consumer stands.
    queues: Arc<Mutex<BTreeMap<Dlq, ConsumerState>>>,
    /// What puts a DLQ's messages at risk although it is consumed (a delivery limit).
    warnings: Arc<Mutex<BTreeMap<Dlq, String>>>,
    /// The broker node (`host:port`) each consuming DLQ's connection is open to.
    nodes: Arc<Mutex<BTreeMap<Dlq, String>>>,
}

impl IngestStatus {
    pub fn set(&self, dlq: &Dlq, state: ConsumerState) {
        self.queues
            .lock()
            .expect("status lock poisoned")
            .insert(dlq.clone(), state);
    }

    /// The DLQs consumed.
    pub fn dlqs(&self) -> Vec<Dlq> {
        let queues = self.queues.lock().expect("status lock poisoned");
        queues.keys().cloned().collect()
    }

    /// Each consumer's state, by the key of its DLQ (as `/readyz` and the overview show it).
    pub fn snapshot(&self) -> BTreeMap<String, ConsumerState> {
        let queues = self.queues.lock().expect("status lock poisoned");
        queues.iter().map(|(d, s)| (d.key(), s.clone())).collect()
    }

    /// The node a DLQ's consumer is connected to (`None`: none, while it reconnects).
    pub fn set_node(&self, dlq: &Dlq, node: Option<&str>) {
        let mut nodes = self.nodes.lock().expect("status lock poisoned");
        match node {
            Some(node) => nodes.insert(dlq.clone(), node.to_owned()),
            None => nodes.remove(dlq),
        };
    }

    /// The node each connected consumer is on, by the key of its DLQ.
    pub fn nodes(&self) -> BTreeMap<String, String> {
        let nodes = self.nodes.lock().expect("status lock poisoned");
        nodes.iter().map(|(d, n)| (d.key(), n.clone())).collect()
    }

    /// Reports a risk to a DLQ's messages (kept until the process restarts).
    pub fn warn(&self, dlq: &Dlq, warning: String) {
        self.warnings
            .lock()
            .expect("status lock poisoned")
            .insert(dlq.clone(), warning);
    }

    /// Whether a risk to the DLQ's messages was reported.
    pub fn warned(&self, dlq: &Dlq) -> bool {
        let warnings = self.warnings.lock().expect("status lock poisoned");
        warnings.contains_key(dlq)
    }

    /// The risks reported, by the key of their DLQ.
    pub fn warnings(&self) -> BTreeMap<String, String> {
        let warnings = self.warnings.lock().expect("status lock poisoned");
        warnings.iter().map(|(d, w)| (d.key(), w.clone())).collect()
    }

    /// Whether every consumer is consuming.
    pub fn all_consuming(&self) -> bool {
        let queues = self.queues.lock().expect("status lock poisoned");
        queues.values().all(|s| *s == ConsumerState::Consuming)
    }
}

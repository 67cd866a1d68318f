//! Live state of each DLQ consumer and of the database, for `/readyz` and the metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

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
    queues: Arc<Mutex<BTreeMap<String, ConsumerState>>>,
    /// The DLQ behind each key (a key reads `vhost/name` outside the AMQP URL's vhost).
    dlqs: Arc<Mutex<BTreeMap<String, crate::amqp::dlq::Dlq>>>,
    /// What puts a DLQ's messages at risk although it is consumed (a delivery limit).
    warnings: Arc<Mutex<BTreeMap<String, String>>>,
}

impl IngestStatus {
    pub fn set(&self, queue: &str, state: ConsumerState) {
        self.queues
            .lock()
            .expect("status lock poisoned")
            .insert(queue.to_owned(), state);
    }

    /// Notes a DLQ being consumed, under its key.
    pub fn consumes(&self, dlq: &crate::amqp::dlq::Dlq) {
        self.dlqs
            .lock()
            .expect("status lock poisoned")
            .insert(dlq.key(), dlq.clone());
    }

    /// The DLQs consumed, as they were named (not read back from their keys).
    pub fn dlqs(&self) -> Vec<crate::amqp::dlq::Dlq> {
        let dlqs = self.dlqs.lock().expect("status lock poisoned");
        dlqs.values().cloned().collect()
    }

    pub fn snapshot(&self) -> BTreeMap<String, ConsumerState> {
        self.queues.lock().expect("status lock poisoned").clone()
    }

    /// Reports a risk to a DLQ's messages (kept until the process restarts).
    pub fn warn(&self, queue: &str, warning: String) {
        self.warnings
            .lock()
            .expect("status lock poisoned")
            .insert(queue.to_owned(), warning);
    }

    pub fn warnings(&self) -> BTreeMap<String, String> {
        self.warnings.lock().expect("status lock poisoned").clone()
    }

    /// Whether every consumer is consuming.
    pub fn all_consuming(&self) -> bool {
        self.snapshot()
            .values()
            .all(|s| *s == ConsumerState::Consuming)
    }
}

//! What the overview says of notifications: where they go, and the last one told and the last
//! one lost (shared between the delivery tasks and the web).

use std::sync::{Arc, Mutex};

use time::OffsetDateTime;

/// The webhooks configured, and what became of their latest events.
#[derive(Debug, Clone, Default)]
pub struct NotifyStatus {
    /// Each webhook as scheme and host; empty: none configured.
    pub targets: Arc<[String]>,
    /// The thresholds, as given (`orders.dlq:1000`).
    pub thresholds: Arc<[String]>,
    latest: Arc<Mutex<Latest>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latest {
    /// When the last event was taken by a receiver, and its text.
    pub told: Option<(OffsetDateTime, String)>,
    /// When one was last lost (failed after its tries, refused, or dropped), and why.
    pub lost: Option<(OffsetDateTime, String)>,
}

impl NotifyStatus {
    pub fn new(targets: Vec<String>, thresholds: Vec<String>) -> Self {
        NotifyStatus {
            targets: targets.into(),
            thresholds: thresholds.into(),
            latest: Arc::default(),
        }
    }

    pub fn told(&self, text: &str) {
        self.latest.lock().expect("status lock").told =
            Some((OffsetDateTime::now_utc(), text.to_owned()));
    }

    pub fn lost(&self, why: String) {
        self.latest.lock().expect("status lock").lost = Some((OffsetDateTime::now_utc(), why));
    }

    pub fn latest(&self) -> Latest {
        self.latest.lock().expect("status lock").clone()
    }
}

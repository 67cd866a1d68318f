//! The dead-letter queues on the broker (`--management-url`), which are archived and which
//! are not, and what their settings put at risk: asked of the management API at
//! `GET /api/dlqs`, and in the background at most once a minute for the overview.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::amqp::discovery::{DeadEnd, Discovered, DiscoveredDlq};
use crate::amqp::management::Management;
use crate::message::dlq::Dlq;
use crate::web::error::AppError;
use crate::web::AppState;

/// How old an answer may be before the overview asks again.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// How old an answer the API still gives instead of asking again.
const SHARED_FOR: Duration = Duration::from_secs(2);

/// What discovery found last, and when.
#[derive(Clone)]
pub struct Found {
    pub at: Instant,
    pub found: Result<Discovered, String>,
}

/// The last answer, shared by the pages; one question to the broker at a time.
#[derive(Default)]
pub struct Discovery {
    last: Mutex<Option<Found>>,
    asking: tokio::sync::Mutex<()>,
}

impl Discovery {
    fn cached(&self) -> Option<Found> {
        self.last.lock().expect("not poisoned").clone()
    }

    fn is_fresh(found: &Option<Found>) -> bool {
        found.as_ref().is_some_and(|f| f.at.elapsed() < FRESH_FOR)
    }

    /// Asks the broker now (one question at a time) and keeps the answer for the pages. An
    /// answer younger than a few seconds is taken as it is: callers at once (or a script in a
    /// loop) share one question instead of each putting it to the management API.
    pub async fn ask(&self, management: &Management, archived: &[Dlq]) -> Found {
        let _asking = self.asking.lock().await;
        if let Some(found) = self.cached().filter(|f| f.at.elapsed() < SHARED_FOR) {
            return found;
        }
        let found = Found {
            at: Instant::now(),
            found: management
                .discover(archived)
                .await
                .map_err(|e| e.to_string()),
        };
        *self.last.lock().expect("not poisoned") = Some(found.clone());
        found
    }

    /// The last answer at once (`None` before the first), asking again in the background
    /// when it is stale: a page never waits for the broker.
    pub fn latest(
        self: &Arc<Self>,
        management: &Arc<Management>,
        archived: Vec<Dlq>,
    ) -> Option<Found> {
        let cached = self.cached();
        // Unless a question is under way already: its answer comes soon.
        if !Self::is_fresh(&cached) && self.asking.try_lock().is_ok() {
            let (me, management) = (self.clone(), management.clone());
            tokio::spawn(async move { me.ask(&management, &archived).await });
        }
        cached
    }
}

/// The queues this instance archives.
pub fn archived_queues(state: &AppState) -> Vec<Dlq> {
    state.status.dlqs()
}

/// What `GET /api/dlqs` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DlqList {
    /// Whether Lazarus was given `--management-url` to ask the broker.
    enabled: bool,
    dlqs: Vec<DiscoveredDlq>,
    /// Queues whose dead letters reach no queue: the broker drops them.
    dead_ends: Vec<DeadEnd>,
    /// Why the lists are empty, when discovery is not enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// The broker's dead-letter queues in every vhost the management user sees.
///
/// Which are archived, and what their settings put at risk; asked of RabbitMQ's management
/// API at the call (or at most 2 s before). 503 with the reason when it does not answer.
#[utoipa::path(get, path = "/api/dlqs", tag = "messages",
    responses((status = 200, description = "The DLQs found", body = DlqList)))]
pub async fn list_dlqs(State(state): State<AppState>) -> Result<Json<DlqList>, AppError> {
    let Some(management) = state.management.as_ref() else {
        return Ok(Json(DlqList {
            enabled: false,
            dlqs: Vec::new(),
            dead_ends: Vec::new(),
            detail: Some("start Lazarus with --management-url to find the broker's DLQs".into()),
        }));
    };
    // Asked anew: a script wants the broker as it is now (the overview uses the last answer).
    let found = state
        .discovery
        .ask(management, &archived_queues(&state))
        .await;
    match found.found {
        Ok(found) => Ok(Json(DlqList {
            enabled: true,
            dlqs: found.dlqs,
            dead_ends: found.dead_ends,
            detail: None,
        })),
        Err(e) => Err(AppError::Unavailable(format!(
            "RabbitMQ's management API: {e}"
        ))),
    }
}

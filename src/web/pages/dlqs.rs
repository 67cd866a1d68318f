//! The dead-letter queues on each broker with a management API (`--management-url
//! [NAME=]URL`), which are archived and which are not, and what their settings put at risk:
//! asked of the management APIs at `GET /api/dlqs`, and in the background at most once a
//! minute for the overview.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::amqp::discovery::{DeadEnd, Discovered, DiscoveredDlq};
use crate::amqp::managements::{management_flag, Managements};
use crate::message::brokers::Brokers;
use crate::message::dlq::Dlq;
use crate::web::error::AppError;
use crate::web::AppState;

/// How old an answer may be before the overview asks again.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// How old an answer the API still gives instead of asking again.
const SHARED_FOR: Duration = Duration::from_secs(2);

/// What discovery found last on every broker with a management API, and when.
#[derive(Clone)]
pub struct Found {
    pub at: Instant,
    /// Each broker's answer (or why there is none), the default broker's first.
    pub brokers: Vec<(String, Result<Discovered, String>)>,
}

/// The last answer, shared by the pages; one question to the brokers at a time.
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

    /// Asks every broker's management API now, side by side (one question at a time), and
    /// keeps the answers for the pages. An answer younger than a few seconds is taken as it
    /// is: callers at once (or a script in a loop) share one question instead of each putting
    /// it to the management APIs.
    pub async fn ask(
        &self,
        managements: &Managements,
        brokers: &Brokers,
        archived: &[Dlq],
    ) -> Found {
        let _asking = self.asking.lock().await;
        if let Some(found) = self.cached().filter(|f| f.at.elapsed() < SHARED_FOR) {
            return found;
        }
        let answers = managements.iter().map(|m| async move {
            let found = m.discover(archived, brokers).await;
            (m.broker().to_owned(), found.map_err(|e| e.to_string()))
        });
        let found = Found {
            at: Instant::now(),
            brokers: futures_util::future::join_all(answers).await,
        };
        *self.last.lock().expect("not poisoned") = Some(found.clone());
        found
    }

    /// The last answer at once (`None` before the first), asking again in the background
    /// when it is stale: a page never waits for a broker.
    pub fn latest(
        self: &Arc<Self>,
        managements: &Arc<Managements>,
        brokers: &Arc<Brokers>,
        archived: Vec<Dlq>,
    ) -> Option<Found> {
        let cached = self.cached();
        // Unless a question is under way already: its answer comes soon.
        if !Self::is_fresh(&cached) && self.asking.try_lock().is_ok() {
            let (me, managements, brokers) = (self.clone(), managements.clone(), brokers.clone());
            tokio::spawn(async move { me.ask(&managements, &brokers, &archived).await });
        }
        cached
    }
}

/// The queues this instance archives.
pub fn archived_queues(state: &AppState) -> Vec<Dlq> {
    state.status.dlqs()
}

/// A broker whose DLQs a `/api/dlqs` answer does not list, and why.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Unlisted {
    pub broker: String,
    /// Its management API did not answer (what it said), or none was given.
    pub reason: String,
}

/// What `GET /api/dlqs` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DlqList {
    /// Whether Lazarus was given `--management-url` to ask a broker.
    enabled: bool,
    /// Every broker's DLQs (each names its `broker`), the default broker's first.
    dlqs: Vec<DiscoveredDlq>,
    /// Queues whose dead letters reach no queue: the broker drops them.
    dead_ends: Vec<DeadEnd>,
    /// Brokers whose DLQs are not listed: no management API given, or it did not answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unlisted: Vec<Unlisted>,
    /// Why the lists are empty, when discovery is not enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// The dead-letter queues of every broker with a management API, in every vhost its
/// management user sees.
///
/// Which are archived, and what their settings put at risk; asked of RabbitMQ's management
/// APIs at the call (or at most 2 s before). A broker whose API does not answer is named in
/// `unlisted`; 503 with the reason when none answers.
#[utoipa::path(get, path = "/api/dlqs", tag = "messages",
    responses((status = 200, description = "The DLQs found", body = DlqList)))]
pub async fn list_dlqs(State(state): State<AppState>) -> Result<Json<DlqList>, AppError> {
    if state.managements.is_empty() {
        return Ok(Json(DlqList {
            enabled: false,
            dlqs: Vec::new(),
            dead_ends: Vec::new(),
            unlisted: Vec::new(),
            detail: Some("start Lazarus with --management-url to find the broker's DLQs".into()),
        }));
    }
    // Asked anew: a script wants the brokers as they are now (the overview uses the last answer).
    let found = state
        .discovery
        .ask(&state.managements, &state.brokers, &archived_queues(&state))
        .await;
    let mut list = DlqList {
        enabled: true,
        dlqs: Vec::new(),
        dead_ends: Vec::new(),
        unlisted: Vec::new(),
        detail: None,
    };
    let mut failures = Vec::new();
    for (broker, answer) in found.brokers {
        match answer {
            Ok(found) => {
                list.dlqs.extend(found.dlqs);
                list.dead_ends.extend(found.dead_ends);
            }
            Err(e) => failures.push(Unlisted { broker, reason: e }),
        }
    }
    // None answered: the lists would say nothing.
    if failures.len() == state.managements.iter().count() {
        let said: Vec<String> = failures
            .iter()
            .map(|f| match state.brokers.several() {
                true => format!("broker {}'s: {}", f.broker, f.reason),
                false => f.reason.clone(),
            })
            .collect();
        return Err(AppError::Unavailable(format!(
            "RabbitMQ's management API: {}",
            said.join("; ")
        )));
    }
    list.unlisted = failures;
    for broker in state.managements.missing(&state.brokers) {
        list.unlisted.push(Unlisted {
            broker: broker.to_owned(),
            reason: format!("no --management-url for it ({})", management_flag(broker)),
        });
    }
    Ok(Json(list))
}

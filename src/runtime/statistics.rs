//! Keeps the database's query planner informed while ingest writes: every few seconds, the
//! tables a burst of dead letters changed most are analyzed
//! ([`crate::archive::Upkeep::refresh_statistics`]), so that the pages people open during an
//! incident are planned for what the archive holds by then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::archive::Archive;

/// How often stale statistics are looked for (a look is one read of the server's table
/// counters).
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// After a failure (the database down), the next look.
const AFTER_FAILURE: Duration = Duration::from_secs(30);

/// Looks for stale statistics until shutdown.
pub async fn run(archive: Arc<dyn Archive>, shutdown: CancellationToken) {
    loop {
        let started = Instant::now();
        let pause = match archive.refresh_statistics().await {
            Ok(tables) => {
                if !tables.is_empty() {
                    tracing::info!(
                        tables = tables.join(", "),
                        seconds = started.elapsed().as_secs_f64(),
                        "planner statistics refreshed after ingest changed the tables"
                    );
                }
                LOOK_EVERY
            }
            Err(e) => {
                tracing::warn!(error = %e, "refreshing the planner's statistics failed; trying again in 30 s");
                AFTER_FAILURE
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

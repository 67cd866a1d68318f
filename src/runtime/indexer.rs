//! The indexer: writes the search entries of messages the DLQ consumers appended without them
//! ([`crate::archive::Ingest::append_numbered`], issue 37), after their ack, a batch at a time
//! — yielding most of the machine to ingest while a drain goes on, back to back once it is
//! over. What waits survives a restart (`index_pending`): it is indexed at the next start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::archive::{Archive, IngestRules};

/// Messages an index transaction takes at most.
const BATCH: u32 = 1_000;

/// Ingest counts as draining while it appended this recently.
const DRAINING: Duration = Duration::from_millis(250);

/// While ingest drains, the indexer rests this many times as long as its last batch took
/// (a fifth of the time its own): the drain comes first, the index still moves, and catches
/// up at full speed once the drain is over.
const REST_WHILE_DRAINING: u32 = 4;

/// How often the indexer looks for waiting messages without being told (another instance's
/// appends, or what a crash left).
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// What the consumers tell the indexer: that they appended, and when they last did.
pub struct IndexWake {
    notify: Notify,
    started: Instant,
    /// Milliseconds after `started` of the last append (0: none yet).
    last_append_ms: AtomicU64,
}

impl Default for IndexWake {
    fn default() -> Self {
        IndexWake {
            notify: Notify::new(),
            started: Instant::now(),
            last_append_ms: AtomicU64::new(0),
        }
    }
}

impl IndexWake {
    /// A batch was appended: its search entries wait for the indexer.
    pub fn appended(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_append_ms.store(now.max(1), Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Whether ingest appended within [`DRAINING`].
    fn draining(&self) -> bool {
        match self.last_append_ms.load(Ordering::Relaxed) {
            0 => false,
            at => {
                let now = self.started.elapsed().as_millis() as u64;
                now.saturating_sub(at) < DRAINING.as_millis() as u64
            }
        }
    }
}

/// Indexes what waits until shutdown; a failing database is waited out.
pub async fn run(
    archive: Arc<dyn Archive>,
    rules: IngestRules,
    wake: Arc<IndexWake>,
    shutdown: CancellationToken,
) {
    loop {
        let (mut indexed, since) = (0u64, Instant::now());
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let started = Instant::now();
            let rest = match archive.index_batch(&rules, BATCH).await {
                Ok(0) => break,
                Ok(n) => {
                    indexed += n;
                    match wake.draining() {
                        true => started.elapsed() * REST_WHILE_DRAINING,
                        false => Duration::ZERO,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "indexing appended messages failed; trying again in 5 s");
                    Duration::from_secs(5)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(rest) => {}
                _ = shutdown.cancelled() => return,
            }
        }
        if indexed >= u64::from(BATCH) {
            tracing::info!(
                indexed,
                seconds = since.elapsed().as_secs_f64(),
                "search index caught up with ingest"
            );
        }
        tokio::select! {
            _ = wake.notify.notified() => {}
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_drains_while_it_appended_lately() {
        let wake = IndexWake::default();
        assert!(!wake.draining(), "nothing appended yet");
        wake.appended();
        assert!(wake.draining());
        wake.last_append_ms.store(1, Ordering::Relaxed);
        std::thread::sleep(DRAINING + Duration::from_millis(10));
        assert!(!wake.draining(), "quiet for longer than DRAINING");
    }
}

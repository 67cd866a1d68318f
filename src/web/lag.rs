//! How far the search index is behind ingest, as the list, the overview and the API say it:
//! read from the archive at most once a second however many requests ask. Counting the ids
//! that wait costs milliseconds once tens of thousands wait — during a drain, just when the
//! most people refresh these pages (docs/lab-notebook.md, "pages under ingest").

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::archive::{ArchiveError, Console};

/// How long a count is said again before the archive is asked anew.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The last count of messages waiting for the indexer, and when it was read.
#[derive(Debug, Default)]
pub struct IndexLag {
    last: Mutex<Option<(Instant, u64)>>,
}

impl IndexLag {
    /// Messages archived but not yet searchable, as counted within the last [`FRESH_FOR`].
    pub async fn behind(&self, archive: &dyn Console) -> Result<u64, ArchiveError> {
        if let Some(behind) = self.fresh() {
            return Ok(behind);
        }
        let behind = archive.index_behind().await?;
        *self.lock() = Some((Instant::now(), behind));
        Ok(behind)
    }

    /// The last count, if it was read within [`FRESH_FOR`].
    fn fresh(&self) -> Option<u64> {
        let (at, behind) = (*self.lock())?;
        (at.elapsed() < FRESH_FOR).then_some(behind)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, u64)>> {
        self.last.lock().expect("the lag's lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_said_again_for_a_second_then_read_anew() {
        let lag = IndexLag::default();
        assert_eq!(lag.fresh(), None, "nothing read yet");
        *lag.lock() = Some((Instant::now(), 7));
        assert_eq!(lag.fresh(), Some(7));
        *lag.lock() = Some((Instant::now().checked_sub(FRESH_FOR).unwrap(), 7));
        assert_eq!(lag.fresh(), None, "a count a second old is read again");
    }
}

//! Counts read from the archive at most once a second however many requests ask: how far the
//! search index is behind ingest, and what became of a running job's copies. Both cost the
//! database milliseconds to tens of milliseconds (the ids waiting to be indexed; every item a
//! bulk job published joined with its message's status) and both are asked for most just
//! when the database is busiest — pages refreshed during a drain, a running job polled every
//! 20 ms by the replay bench, `lazarus replay`'s progress and any job page left open (the
//! job's copies, counted on every poll, took 1–11 % of its speed: docs/lab-notebook.md,
//! "pages under ingest" and "Issue 37 (2026-12-07, evening)").

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::archive::{ArchiveError, Console, CopyCounts, JobState, JobStore, ReplayJob};

/// How long a count is said again before the archive is asked anew.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The last value read for each key, and when: only values younger than [`FRESH_FOR`] are
/// kept, so the map holds no more than the keys asked about within the last second.
#[derive(Debug)]
pub struct Recent<K, V> {
    last: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Recent {
            last: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Copy> Recent<K, V> {
    /// The value of `key` if it was read within [`FRESH_FOR`].
    fn fresh(&self, key: &K) -> Option<V> {
        let (at, value) = *self.lock().get(key)?;
        (at.elapsed() < FRESH_FOR).then_some(value)
    }

    /// Keeps `value`, just read, as `key`'s, and forgets what is no longer fresh.
    fn keep(&self, key: K, value: V) {
        let mut last = self.lock();
        last.retain(|_, (at, _)| at.elapsed() < FRESH_FOR);
        last.insert(key, (Instant::now(), value));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.last
            .lock()
            .expect("a recent count's lock is never poisoned")
    }
}

/// Messages archived but not yet searchable, as the list, the overview and the API say it.
pub type IndexLag = Recent<(), u64>;

impl IndexLag {
    /// How far the index is behind, as counted within the last [`FRESH_FOR`].
    pub async fn behind(&self, archive: &dyn Console) -> Result<u64, ArchiveError> {
        if let Some(behind) = self.fresh(&()) {
            return Ok(behind);
        }
        let behind = archive.index_behind().await?;
        self.keep((), behind);
        Ok(behind)
    }
}

/// What became of each running job's copies (settling, settled, died again), as its page,
/// its progress partial and `GET /api/replays/{id}` say it.
pub type JobCopies = Recent<i64, CopyCounts>;

impl JobCopies {
    /// What became of `job`'s copies: as counted within the last [`FRESH_FOR`] while it
    /// runs; a job that is not running is counted on every ask, so a finished job's answer
    /// is never stale.
    pub async fn of(
        &self,
        archive: &dyn JobStore,
        job: &ReplayJob,
    ) -> Result<CopyCounts, ArchiveError> {
        let running = job.state == JobState::Running;
        if let Some(copies) = self.fresh(&job.id).filter(|_| running) {
            return Ok(copies);
        }
        let copies = archive.job_copies(job.id).await?;
        if running {
            self.keep(job.id, copies);
        }
        Ok(copies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_said_again_for_a_second_then_read_anew() {
        let recent: Recent<i64, u64> = Recent::default();
        assert_eq!(recent.fresh(&3), None, "nothing read yet");
        recent.keep(3, 7);
        assert_eq!(recent.fresh(&3), Some(7));
        assert_eq!(recent.fresh(&4), None, "another key's count is its own");
        let old = Instant::now().checked_sub(FRESH_FOR).unwrap();
        recent.lock().insert(3, (old, 7));
        assert_eq!(recent.fresh(&3), None, "a count a second old is read again");
    }

    #[test]
    fn what_is_no_longer_fresh_is_forgotten() {
        let recent: Recent<i64, u64> = Recent::default();
        let old = Instant::now().checked_sub(FRESH_FOR).unwrap();
        recent.lock().insert(1, (old, 1));
        recent.keep(2, 2);
        assert_eq!(recent.lock().len(), 1, "only the fresh count is kept");
    }
}

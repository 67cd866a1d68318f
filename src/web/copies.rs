//! What became of a running job's copies (settling, settled, died again), as its page, its
//! progress partial and `GET /api/replays/{id}` say it: counted at most once a second per job
//! however many ask. The count joins every item the job published with its message's status
//! (tens of thousands of rows in a bulk job) and a running job is polled the most: counted on
//! every poll, it took the database's time from the job itself (with the replay bench polling
//! every 20 ms, its 50,000-message jobs ran 1–11 % faster once the count was read at most once
//! a second: docs/lab-notebook.md, "Issue 37 (2026-12-07, evening)"). A job that is not
//! running is counted on every ask.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::archive::{ArchiveError, CopyCounts, JobState, JobStore, ReplayJob};

/// How long a running job's count is said again before the archive is asked anew.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The last count of each running job's copies, and when it was read.
#[derive(Debug, Default)]
pub struct JobCopies {
    last: Mutex<HashMap<i64, (Instant, CopyCounts)>>,
}

impl JobCopies {
    /// What became of `job`'s copies: as counted within the last [`FRESH_FOR`] while it
    /// runs, counted now otherwise.
    pub async fn of(
        &self,
        archive: &dyn JobStore,
        job: &ReplayJob,
    ) -> Result<CopyCounts, ArchiveError> {
        let running = job.state == JobState::Running;
        if let Some(copies) = self.fresh(job.id).filter(|_| running) {
            return Ok(copies);
        }
        let copies = archive.job_copies(job.id).await?;
        let mut last = self.lock();
        // Only counts still fresh are kept: the map holds the jobs asked about this second.
        last.retain(|_, (at, _)| at.elapsed() < FRESH_FOR);
        if running {
            last.insert(job.id, (Instant::now(), copies));
        }
        Ok(copies)
    }

    /// The last count of job `id`, if it was read within [`FRESH_FOR`].
    fn fresh(&self, id: i64) -> Option<CopyCounts> {
        let (at, copies) = *self.lock().get(&id)?;
        (at.elapsed() < FRESH_FOR).then_some(copies)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (Instant, CopyCounts)>> {
        self.last
            .lock()
            .expect("the copies' lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_said_again_for_a_second_then_read_anew() {
        let memo = JobCopies::default();
        assert_eq!(memo.fresh(3), None, "nothing read yet");
        let copies = CopyCounts {
            died_again: 2,
            ..Default::default()
        };
        memo.lock().insert(3, (Instant::now(), copies));
        assert_eq!(memo.fresh(3), Some(copies));
        assert_eq!(memo.fresh(4), None, "another job's count is its own");
        let old = Instant::now().checked_sub(FRESH_FOR).unwrap();
        memo.lock().insert(3, (old, copies));
        assert_eq!(memo.fresh(3), None, "a count a second old is read again");
    }
}

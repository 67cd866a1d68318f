//! Work a request may not do much of at once: reading pages of rows, decoding, masking and
//! rendering bodies, and hashing passwords. Each kind has a few permits and a short queue;
//! past the queue a request is answered 503 with `Retry-After` at once, instead of every
//! caller getting slower (and the process bigger: a page of 500 rows is megabytes while it
//! is built) with each one that arrives. Heavy CPU work runs on threads of its own, as many
//! as the machine has cores — not the runtime's blocking pool: that one grows a thread per
//! waiting task, and each new thread's allocator arena keeps what the work used (19 MiB per
//! argon2 hash), so a flood of sign-ins would grow the process by that much per thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::web::AppError;

/// Permits for one kind of work, and a bounded queue for them.
#[derive(Debug)]
pub struct Gate {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
    /// What the refusal says is busy ("sign-in", "message bodies").
    what: &'static str,
}

impl Gate {
    /// `permits` at work at once, and at most `max_waiting` requests queued for one.
    pub fn new(permits: usize, max_waiting: usize, what: &'static str) -> Self {
        Gate {
            permits: Arc::new(Semaphore::new(permits.max(1))),
            waiting: AtomicUsize::new(0),
            max_waiting,
            what,
        }
    }

    /// A permit, after waiting in the queue; `Busy` when the queue is full.
    pub async fn acquire(&self) -> Result<OwnedSemaphorePermit, AppError> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(AppError::Busy(format!(
                "{} is busy: too many requests at once; try again in a few seconds",
                self.what
            )));
        }
        let _waiting = Waiting(&self.waiting);
        self.permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| AppError::Busy(format!("{} is shutting down", self.what)))
    }

    /// Permits free now (for tests and metrics).
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A bounded pool for one kind of heavy work: a [`Gate`] and threads of its own.
#[derive(Debug)]
pub struct WorkLimit {
    gate: Gate,
    /// The workers' queue; they end when the limit is dropped.
    jobs: mpsc::Sender<Job>,
}

/// The cores this process may use (at least one).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Takes the waiting count back whichever way the wait ends (a request cancelled too).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WorkLimit {
    /// `threads` at work at once, and at most `max_waiting` requests queued for one.
    pub fn new(threads: usize, max_waiting: usize, what: &'static str) -> Self {
        let threads = threads.max(1);
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..threads {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("lazarus-work-{i}"))
                .spawn(move || loop {
                    let job = receiver.lock().map(|r| r.recv());
                    match job {
                        // A panic ends the job (its caller hears so), not the worker.
                        Ok(Ok(job)) => {
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                        _ => return,
                    }
                })
                .expect("a worker thread starts");
        }
        WorkLimit {
            gate: Gate::new(threads, max_waiting, what),
            jobs: sender,
        }
    }

    /// A permit, after waiting in the queue; `Busy` when the queue is full.
    pub async fn acquire(&self) -> Result<OwnedSemaphorePermit, AppError> {
        self.gate.acquire().await
    }

    /// Runs `work` on this limit's threads under a permit, after waiting for one.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, AppError> {
        let permit = self.acquire().await?;
        self.run_with(permit, work).await
    }

    /// Runs `work` on this limit's threads, holding `permit` until it is done (even when
    /// the request that asked has gone meanwhile), off the async threads that answer
    /// everyone else.
    pub async fn run_with<T: Send + 'static>(
        &self,
        permit: OwnedSemaphorePermit,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, AppError> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(work());
            drop(permit);
        });
        let what = self.gate.what;
        if self.jobs.send(job).is_err() {
            return Err(AppError::Busy(format!("{what} is shutting down")));
        }
        result.await.map_err(|_| {
            tracing::error!(what, "heavy work panicked");
            AppError::Busy(format!("{what} failed; try again"))
        })
    }

    /// Permits free now (for tests and metrics).
    pub fn available(&self) -> usize {
        self.gate.available()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_queue_requests_are_refused_at_once() {
        let limit = Arc::new(WorkLimit::new(1, 1, "the test"));
        let held = limit.acquire().await.unwrap();
        let queued = {
            let limit = limit.clone();
            tokio::spawn(async move { limit.acquire().await.map(|_| ()) })
        };
        while limit.gate.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = limit.acquire().await.unwrap_err();
        assert!(
            refused.to_string().contains("the test is busy"),
            "{refused}"
        );
        drop(held);
        queued.await.unwrap().unwrap();
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.run(|| 7).await.unwrap(), 7);
        let on = limit
            .run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert_eq!(on.as_deref(), Some("lazarus-work-0"), "its own thread");
    }
}

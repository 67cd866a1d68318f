//! Waiting for what a test expects to become true: checked every 50 ms (or as often as the
//! test says) until a deadline, which fails the test saying what it waited for.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How long a wait may last and how often it looks. A bare `Duration` (counted from when
/// the wait starts) or `Instant` (a deadline) converts into one that looks every 50 ms.
#[derive(Clone, Copy, Debug)]
pub struct Patience {
    limit: Limit,
    every: Duration,
}

#[derive(Clone, Copy, Debug)]
enum Limit {
    Within(Duration),
    Until(Instant),
}

impl Patience {
    /// Up to `timeout` from when the wait starts.
    pub const fn within(timeout: Duration) -> Self {
        Patience {
            limit: Limit::Within(timeout),
            every: Duration::from_millis(50),
        }
    }

    /// Up to `deadline`: one budget for several waits, or counted from before the wait.
    pub const fn until(deadline: Instant) -> Self {
        Patience {
            limit: Limit::Until(deadline),
            every: Duration::from_millis(50),
        }
    }

    /// Looks every `every` instead: sooner where the test acts the moment the condition
    /// holds (a kill mid-ingest), later where a look is costly (a process, a browser).
    pub const fn every(self, every: Duration) -> Self {
        Patience { every, ..self }
    }
}

impl From<Duration> for Patience {
    fn from(timeout: Duration) -> Self {
        Patience::within(timeout)
    }
}

impl From<Instant> for Patience {
    fn from(deadline: Instant) -> Self {
        Patience::until(deadline)
    }
}

/// Waits until `check` answers true; fails the test at the deadline, naming `what`.
pub async fn wait_until(
    what: &str,
    patience: impl Into<Patience>,
    mut check: impl AsyncFnMut() -> bool,
) {
    wait_for(what, patience, async || check().await.then_some(())).await
}

/// Waits until `check` answers a value, and returns it; fails the test at the deadline,
/// naming `what`.
pub async fn wait_for<T>(
    what: &str,
    patience: impl Into<Patience>,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    wait(what, patience, async || check().await.ok_or(None::<&str>)).await
}

/// Waits until `check` answers `Ok` with a value, and returns it; fails the test at the
/// deadline, naming `what` and showing the last `Err`: the state that was not yet right.
pub async fn wait_showing<T, S: Display>(
    what: &str,
    patience: impl Into<Patience>,
    mut check: impl AsyncFnMut() -> Result<T, S>,
) -> T {
    wait(what, patience, async || check().await.map_err(Some)).await
}

async fn wait<T, S: Display>(
    what: &str,
    patience: impl Into<Patience>,
    mut check: impl AsyncFnMut() -> Result<T, Option<S>>,
) -> T {
    let Patience { limit, every } = patience.into();
    let start = Instant::now();
    let deadline = match limit {
        Limit::Within(timeout) => start + timeout,
        Limit::Until(deadline) => deadline,
    };
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if Instant::now() >= deadline => {
                let waited = start.elapsed();
                match state {
                    Some(state) => {
                        panic!("timed out after {waited:.1?} waiting for {what}; last: {state}")
                    }
                    None => panic!("timed out after {waited:.1?} waiting for {what}"),
                }
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

#[tokio::test]
#[should_panic(expected = "waiting for the answer; last: 3 of 5")]
async fn a_wait_that_times_out_says_what_it_waited_for_and_what_it_last_saw() {
    let mut looks = 0;
    wait_showing::<(), _>("the answer", Duration::from_millis(200), async || {
        looks += 1;
        Err(format!("{} of 5", looks.min(3)))
    })
    .await;
}

#[tokio::test]
async fn a_wait_returns_what_it_waited_for() {
    let mut looks = 0;
    let patience =
        Patience::until(Instant::now() + Duration::from_secs(10)).every(Duration::from_millis(5));
    let found = wait_for("the fourth look", patience, async || {
        looks += 1;
        (looks == 4).then(|| format!("look {looks}"))
    })
    .await;
    assert_eq!(found, "look 4");
}

//! Waiting for what a test expects to become true: checked every 50 ms until a deadline,
//! which fails the test saying what it waited for.

use std::future::Future;
use std::time::{Duration, Instant};

/// Waits until `check` answers true; fails the test after `timeout`, naming `what`.
pub async fn wait_until<F: Future<Output = bool>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

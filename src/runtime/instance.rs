//! This process's identity among the instances that share its archive: a name that stays
//! the same across restarts (`--instance-name`; by default the host and the address it
//! serves on) and a lock that proves no other live process goes by it. While it holds its
//! name, a restarted instance takes back at once the replay job its earlier life was
//! running, instead of waiting for that life's lease to run out.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::archive::Archive;
use crate::support::backoff::Backoff;

/// An instance name, and whether this process holds it now.
#[derive(Debug)]
pub struct Identity {
    name: String,
    held: AtomicBool,
}

impl Identity {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name while this process holds it (the only one that does); `None` otherwise.
    pub fn held(&self) -> Option<&str> {
        self.held
            .load(Ordering::Acquire)
            .then_some(self.name.as_str())
    }
}

/// `host:address`: the same after a restart with the same flags; different for two
/// instances on one host, which cannot serve on one address. With port 0 it is the port
/// picked, so such an instance has no name that outlives it.
pub fn default_name(listening_on: SocketAddr) -> String {
    format!("{}:{listening_on}", hostname())
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// How often a held name is checked (a PostgreSQL session can be lost), and how long a
/// name another process holds is tried before that is worth a warning (a predecessor that
/// was just killed takes a moment to let go).
const CHECK_EVERY: Duration = Duration::from_secs(2);
const WARN_AFTER: Duration = Duration::from_secs(3);
/// How long the start waits for the first try, so that the runner's first claim knows.
const FIRST_TRY: Duration = Duration::from_secs(2);

/// Takes `name` through the archive and keeps it until `shutdown`: when another live
/// process holds it, tries again now and then (taking it once that process is gone); when
/// it is lost, takes it again. Wakes the job runner whenever the name is taken. Returns
/// once the first try is over (or after [`FIRST_TRY`]).
pub async fn hold(
    archive: Arc<dyn Archive>,
    name: String,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Arc<Identity> {
    let identity = Arc::new(Identity {
        name,
        held: AtomicBool::new(false),
    });
    let (tried, first_try) = tokio::sync::oneshot::channel();
    tracker.spawn(keep(archive, identity.clone(), wake, shutdown, tried));
    // Not longer than that: a database that does not answer must not hold up serving.
    let _ = tokio::time::timeout(FIRST_TRY, first_try).await;
    identity
}

async fn keep(
    archive: Arc<dyn Archive>,
    identity: Arc<Identity>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    tried: tokio::sync::oneshot::Sender<()>,
) {
    let name = identity.name.as_str();
    let mut tried = Some(tried);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let mut taken_since = Instant::now();
    let mut warned = false;
    loop {
        match archive.lock_instance_name(name).await {
            Ok(Some(mut lock)) => {
                identity.held.store(true, Ordering::Release);
                tracing::info!(instance = name, "holding the instance name");
                tried.take().map(|t| t.send(()));
                wake.notify_one();
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(CHECK_EVERY) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    if !lock.held().await {
                        break;
                    }
                }
                identity.held.store(false, Ordering::Release);
                tracing::warn!(
                    instance = name,
                    "lost the instance name (its database session ended); taking it again"
                );
                backoff.reset();
                taken_since = Instant::now();
                warned = false;
            }
            Ok(None) => {
                if !warned && taken_since.elapsed() >= WARN_AFTER {
                    tracing::warn!(
                        instance = name,
                        "another live process goes by this instance name: until it is gone, \
                         this one takes replay jobs over only when their lease runs out. Give \
                         each instance its own --instance-name."
                    );
                    warned = true;
                }
            }
            Err(e) => {
                tracing::warn!(instance = name, error = %e, "cannot take the instance name; retrying")
            }
        }
        tried.take().map(|t| t.send(()));
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_name_is_the_same_for_the_same_address_only() {
        let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(default_name(a), default_name(a));
        assert_ne!(default_name(a), default_name(b));
        assert!(default_name(a).ends_with(":127.0.0.1:8080"));
    }
}

//! What the process's memory allocator is told before anything runs: glibc's malloc keeps
//! large buffers (message bodies of up to 16 MiB and their copies) out of its heap, so a
//! burst of big dead letters is given back to the system instead of staying resident.
//!
//! glibc serves an allocation of at least `M_MMAP_THRESHOLD` bytes with a mapping of its own
//! and unmaps it on free; but its threshold is dynamic: freeing such a mapping raises the
//! threshold to its size (up to 32 MiB), so every later 16 MiB body comes from the heap, where
//! freed space mostly stays resident. Measured with three 16 MiB dead letters among 100,000
//! (`BENCH_BACKENDS=sqlite BENCH_BIG=3 cargo bench --bench ingest`): peak RSS 141–171 MiB with
//! the dynamic threshold, 122–123 MiB with it fixed at 1 MiB (docs/lab-notebook.md, issue 17).
//!
//! Setting the threshold takes `mallopt` (unsafe FFI, which this crate forbids) or the
//! environment variable glibc reads at start-up, so the binary re-executes itself once with
//! the variable set: same pid, arguments, standard streams and environment otherwise.
//!
//! And how many whole message bodies the process holds at once for its background work
//! ([`hold_bodies`]): deliveries from their content header until they are stored, the bodies
//! the reindex reads again. Everything else reads bodies a piece at a time.

/// Body bytes held whole at once, process-wide, by deliveries (from their content header until
/// their batch is stored) and the reindex: the broker is held back (TCP) while they are. A
/// body counts at most all of it, so one larger (RabbitMQ delivers up to 128 MiB) is held
/// alone: never two such bodies at once, whichever DLQs they come from.
pub const HELD_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Waits until `bytes` more of body may be held (at most [`HELD_BODY_BYTES`] counted); the
/// permit gives them back when dropped.
pub async fn hold_bodies(bytes: usize) -> tokio::sync::OwnedSemaphorePermit {
    use std::sync::{Arc, LazyLock};
    use tokio::sync::Semaphore;
    static HELD: LazyLock<Arc<Semaphore>> =
        LazyLock::new(|| Arc::new(Semaphore::new(HELD_BODY_BYTES)));
    let share = bytes.min(HELD_BODY_BYTES) as u32;
    HELD.clone()
        .acquire_many_owned(share)
        .await
        .expect("the semaphore is never closed")
}

/// The environment variable glibc reads for `M_MMAP_THRESHOLD` (a fixed value also turns the
/// dynamic adjustment off).
pub const MMAP_THRESHOLD_VAR: &str = "MALLOC_MMAP_THRESHOLD_";

/// Allocations from this size on get a mapping of their own, returned to the system on free.
pub const MMAP_THRESHOLD_BYTES: usize = 1024 * 1024;

/// Whether the environment already decides the threshold (set by us or by the operator, also
/// through `GLIBC_TUNABLES`), so the process runs as it is.
fn threshold_is_set(var: Option<&std::ffi::OsStr>, tunables: Option<&std::ffi::OsStr>) -> bool {
    var.is_some()
        || tunables.is_some_and(|t| t.to_string_lossy().contains("glibc.malloc.mmap_threshold"))
}

/// Re-executes the running binary with a fixed mmap threshold, unless the environment sets
/// one already. Returns only when it does not re-execute (or exec failed: the process then
/// goes on with glibc's defaults). Call it first in `main`, before threads are started.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn fix_mmap_threshold() {
    use std::os::unix::process::CommandExt;

    if threshold_is_set(
        std::env::var_os(MMAP_THRESHOLD_VAR).as_deref(),
        std::env::var_os("GLIBC_TUNABLES").as_deref(),
    ) {
        return;
    }
    // A binary replaced or deleted since it started cannot be re-executed: go on as we are.
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let error = command
        .args(args)
        .env(MMAP_THRESHOLD_VAR, MMAP_THRESHOLD_BYTES.to_string())
        .exec();
    eprintln!("lazarus: running with glibc's default malloc thresholds (re-exec failed: {error})");
}

/// Other platforms' allocators have no such threshold to set.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn fix_mmap_threshold() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn an_operators_setting_is_kept() {
        assert!(!threshold_is_set(None, None));
        assert!(threshold_is_set(Some(OsStr::new("4194304")), None));
        assert!(threshold_is_set(
            None,
            Some(OsStr::new(
                "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"
            ))
        ));
        assert!(!threshold_is_set(
            None,
            Some(OsStr::new("glibc.malloc.arena_max=2"))
        ));
    }
}

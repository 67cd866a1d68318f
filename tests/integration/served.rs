//! The real `lazarus serve` binary as a child of the test, for what only a process of its own
//! shows: its peak memory (from /proc), its behaviour under a small open-file limit.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::helpers::*;

pub struct Served {
    /// Held so that the process ends with the test (kill on drop).
    _child: Child,
    pub pid: u32,
    pub addr: SocketAddr,
}

/// `command` run by `program ARGS...`, which execs it: the pid stays the server's.
fn wrapped(
    command: &tokio::process::Command,
    program: &str,
    args: &[String],
) -> tokio::process::Command {
    let std = command.as_std();
    let mut wrapped = tokio::process::Command::new(program);
    wrapped
        .args(args)
        .arg(std.get_program())
        .args(std.get_args())
        .envs(std.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdout(Stdio::null())
        .kill_on_drop(true);
    wrapped
}

impl Served {
    /// Serves `dlq` into `db` with `flags`; `max_files` runs it under that open-file limit.
    pub async fn start(dlq: &str, db: &str, flags: &[&str], max_files: Option<u32>) -> Served {
        let mut command = lazarus_command(&amqp_url(), dlq, db, flags);
        if let Some(n) = max_files {
            command = wrapped(
                &command,
                "prlimit",
                &[format!("--nofile={n}:{n}"), "--".into()],
            );
        }
        Self::spawn(command).await
    }

    /// Serves `dlq` into `db` with `flags`, inside `cgroup` from its first instruction (a
    /// shell moves itself there, then execs the binary): everything it ever uses is charged.
    pub async fn start_in(dlq: &str, db: &str, flags: &[&str], cgroup: &MemoryCgroup) -> Served {
        let command = lazarus_command(&amqp_url(), dlq, db, flags);
        let procs = cgroup.path.join("cgroup.procs");
        let script = format!("echo $$ > {} && exec \"$@\"", procs.display());
        Self::spawn(wrapped(&command, "sh", &["-c".into(), script, "sh".into()])).await
    }

    async fn spawn(mut command: tokio::process::Command) -> Served {
        let mut child = command
            .env("RUST_LOG", "warn,lazarus::startup=info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the lazarus binary starts");
        let pid = child.id().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line
                    .contains("lazarus is serving")
                    .then(|| line.split("address=").nth(1))
                    .flatten()
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse::<SocketAddr>().ok())
                {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
                eprintln!("[lazarus {pid}] {line}");
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .expect("lazarus serves within a minute")
            .expect("lazarus exited before serving");
        Served {
            _child: child,
            pid,
            addr,
        }
    }

    /// A line of /proc/PID/status in KiB (`VmHWM`: the peak resident set so far).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{}/status", self.pid))
    }

    /// The peak resident memory so far, in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        self.status_kib("VmHWM") / 1024
    }
}

/// Runs `lazarus ARGS --database-url DB` to completion (user and token verbs) and returns
/// its standard output, failing the test when it fails.
pub fn lazarus_cli(db: &str, args: &[&str], password: Option<&str>) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
    command.args(args).args(["--database-url", db]);
    if let Some(p) = password {
        command.env("LAZARUS_PASSWORD", p);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "lazarus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A memory cgroup (v1) of its own for a served process, with a limit: what a container's
/// memory limit (the Kubernetes manifest's) does to it. Its pages, and the archive's file
/// pages it reads, are charged to it; past the limit the kernel reclaims, then OOM-kills.
pub struct MemoryCgroup {
    path: std::path::PathBuf,
}

/// The memory controller's mount (cgroup v1).
const MEMORY_CONTROLLER: &str = "/sys/fs/cgroup/memory";

impl MemoryCgroup {
    /// Moves `pid` into a new cgroup limited to `limit_mib`; why not, when this machine has
    /// no writable memory controller.
    pub fn confine(pid: u32, limit_mib: u64) -> Result<MemoryCgroup, String> {
        let cgroup = Self::create(&format!("lazarus-test-{pid}"), limit_mib)?;
        cgroup.write("cgroup.procs", &pid.to_string())?;
        Ok(cgroup)
    }

    /// A new, empty cgroup `name` limited to `limit_mib` (see [`Served::start_in`]); why
    /// not, when this machine has no writable memory controller.
    pub fn create(name: &str, limit_mib: u64) -> Result<MemoryCgroup, String> {
        let path = std::path::Path::new(MEMORY_CONTROLLER).join(name);
        std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let cgroup = MemoryCgroup { path };
        let limit = (limit_mib * 1024 * 1024).to_string();
        cgroup.write("memory.limit_in_bytes", &limit)?;
        // With swap, the limit covers it too (the file is absent without swap accounting).
        let _ = std::fs::write(cgroup.path.join("memory.memsw.limit_in_bytes"), &limit);
        Ok(cgroup)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        std::fs::write(self.path.join(file), value).map_err(|e| {
            format!(
                "cannot write {value} to {}/{file}: {e}",
                self.path.display()
            )
        })
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }

    /// How many processes of it the kernel's OOM killer ended.
    pub fn oom_kills(&self) -> u64 {
        self.read("memory.oom_control")
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The most memory it was charged (process and page cache), in MiB.
    pub fn max_usage_mib(&self) -> u64 {
        self.read("memory.max_usage_in_bytes")
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
            / (1024 * 1024)
    }

    /// How often it reached its limit (and the kernel reclaimed to stay under it).
    pub fn failcnt(&self) -> u64 {
        self.read("memory.failcnt").trim().parse().unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Back to the root cgroup, so that this one can be removed.
        for pid in self.read("cgroup.procs").split_whitespace() {
            let _ = std::fs::write(format!("{MEMORY_CONTROLLER}/cgroup.procs"), pid);
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

impl Served {
    /// Whether the process is still running (not ended, not a zombie).
    pub fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    }

    /// Forgets the peak resident memory so far (`VmHWM` starts again from what is resident
    /// now): what a phase of a test costs, after the one before it.
    pub fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").unwrap();
    }
}

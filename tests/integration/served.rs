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

impl Served {
    /// Serves `dlq` into `db` with `flags`; `max_files` runs it under that open-file limit.
    pub async fn start(dlq: &str, db: &str, flags: &[&str], max_files: Option<u32>) -> Served {
        let mut command = lazarus_command(&amqp_url(), dlq, db, flags);
        if let Some(n) = max_files {
            // prlimit sets the limit and execs the binary: the pid stays the server's.
            let std = command.as_std();
            let mut wrapped = tokio::process::Command::new("prlimit");
            wrapped
                .arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(std.get_program())
                .args(std.get_args())
                .envs(std.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .stdout(Stdio::null())
                .kill_on_drop(true);
            command = wrapped;
        }
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

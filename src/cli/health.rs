//! `lazarus health`: asks a `lazarus serve` on this machine whether it answers, for container
//! health checks (the image has no curl). Exit status 0 when it does, 1 when it does not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use clap::Args;

use crate::support::http::{HttpError, Target};

#[derive(Debug, Clone, Args)]
pub struct HealthConfig {
    /// The server's listen address (its LAZARUS_LISTEN); an unspecified address (0.0.0.0,
    /// [::]) is asked on loopback.
    #[arg(long, env = "LAZARUS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Ask `/readyz` instead: fails while the database or a consumer is down. Not for a
    /// liveness check, which would restart a healthy process during a broker outage.
    #[arg(long)]
    pub ready: bool,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5)]
    pub timeout_secs: u64,
}

/// Where to ask: the listen address, or loopback when it listens on every interface.
pub fn probe_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// `GET path` on `addr`; the status code, or why there is none.
async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<u16, String> {
    let target: Target = format!("http://{addr}")
        .parse()
        .map_err(|e: HttpError| e.to_string())?;
    match crate::support::http::get(&target, path, 64 * 1024, timeout).await {
        Ok((answer, _)) => Ok(answer.status.as_u16()),
        Err(HttpError::Unconnected { reason, .. }) => {
            Err(format!("cannot connect to {addr}: {reason}"))
        }
        Err(HttpError::Timeout { .. }) => {
            Err(format!("{addr}: no answer to {path} in {timeout:?}"))
        }
        Err(e) => Err(format!("{addr} did not answer with HTTP: {e}")),
    }
}

/// Runs the check and says what it found; whether it passed.
pub async fn health(config: HealthConfig) -> bool {
    let addr = probe_address(config.listen);
    let path = if config.ready { "/readyz" } else { "/healthz" };
    let timeout = Duration::from_secs(config.timeout_secs.max(1));
    match get(addr, path, timeout).await {
        Ok(200) => {
            println!("lazarus on {addr}: {path} 200");
            true
        }
        Ok(status) => {
            eprintln!("lazarus on {addr}: {path} {status}");
            false
        }
        Err(e) => {
            eprintln!("lazarus: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interface_is_asked_on_loopback() {
        let probe = |s: &str| probe_address(s.parse().unwrap()).to_string();
        assert_eq!(probe("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(probe("[::]:9000"), "[::1]:9000");
        assert_eq!(probe("10.1.2.3:8080"), "10.1.2.3:8080");
    }
}

//! `lazarus health`: asks a `lazarus serve` on this machine whether it answers, for container
//! health checks (the image has no curl). Exit status 0 when it does, 1 when it does not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::HealthConfig;

/// Where to ask: the listen address, or loopback when it listens on every interface.
pub fn probe_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// The status code of an HTTP/1.x response's first line.
fn status_code(response: &[u8]) -> Option<u16> {
    let line = response.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

/// `GET path` on `addr`; the status code, or why there is none.
async fn get(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    // The status line is all that is read; `/readyz`'s JSON is a few hundred bytes at most.
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while !response.contains(&b'\n') && response.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{addr}: {e}")),
        }
    }
    status_code(&response).ok_or_else(|| format!("{addr} did not answer with HTTP"))
}

/// Runs the check and says what it found; whether it passed.
pub async fn health(config: HealthConfig) -> bool {
    let addr = probe_address(config.listen);
    let path = if config.ready { "/readyz" } else { "/healthz" };
    let timeout = Duration::from_secs(config.timeout_secs.max(1));
    match tokio::time::timeout(timeout, get(addr, path)).await {
        Ok(Ok(200)) => {
            println!("lazarus on {addr}: {path} 200");
            true
        }
        Ok(Ok(status)) => {
            eprintln!("lazarus on {addr}: {path} {status}");
            false
        }
        Ok(Err(e)) => {
            eprintln!("lazarus: {e}");
            false
        }
        Err(_) => {
            eprintln!("lazarus on {addr}: no answer to {path} in {timeout:?}");
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

    #[test]
    fn the_status_comes_from_the_first_line() {
        assert_eq!(
            status_code(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"),
            Some(200)
        );
        assert_eq!(
            status_code(b"HTTP/1.1 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"SSH-2.0-OpenSSH_9.2\r\n"), None);
        assert_eq!(status_code(b""), None);
    }
}

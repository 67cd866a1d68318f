//! The HTTP server: hyper's HTTP/1 connections with a header-read timeout — a client that
//! has not sent a whole request head within it (a Slowloris connection, or an idle
//! keep-alive one) is closed — at most `max_connections` at once (more wait in the listen
//! backlog, holding no file descriptor of ours), and a graceful shutdown that lets the
//! requests in flight finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How the server treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeSettings {
    /// A connection must send a whole request head within this (the next one, too).
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// How long shutdown waits for the requests in flight.
const DRAIN: Duration = Duration::from_secs(30);

/// The connection limit when none is given: half the process's open-file limit (the
/// archive, the broker connections and the replays need the rest), between 16 and 1024.
pub fn default_max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let files = limit.current.unwrap_or(u64::MAX);
    (files / 2).clamp(16, 1024) as usize
}

/// Serves `app` on `listener` until `shutdown`, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: ServeSettings,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout);
    loop {
        // A slot first: past the limit, new connections wait unaccepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be freed.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: hyper::Request<Incoming>| {
                request
                    .extensions_mut()
                    .insert(ConnectInfo::<SocketAddr>(peer));
                request
            },
        );
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after {} s; stopping anyway",
            DRAIN.as_secs()
        );
    }
}

//! A TCP forwarder of the test's own between Lazarus and a server (PostgreSQL, a broker), for
//! network faults on cue: its port refusing connections, every connection cut, or what the
//! client sends held back (an ack lost in flight) until the cut.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct TcpProxy {
    port: u16,
    upstream: String,
    listening: Option<JoinHandle<()>>,
    forwarding: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// While true, nothing the clients send is passed on (the server's side still is).
    holding: watch::Sender<bool>,
}

impl TcpProxy {
    /// A forwarder to `upstream` (`host:port`), listening on a free local port.
    async fn start(upstream: &str) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut proxy = TcpProxy {
            port: listener.local_addr().unwrap().port(),
            upstream: upstream.to_owned(),
            listening: None,
            forwarding: Default::default(),
            holding: watch::channel(false).0,
        };
        proxy.listen(listener);
        proxy
    }

    /// A forwarder to the server of `url` (`scheme://[user@]host:port/...`).
    pub async fn before(url: &str) -> TcpProxy {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap();
        TcpProxy::start(authority.rsplit('@').next().unwrap()).await
    }

    /// `url` (any `scheme://[user@]host:port/path`) with its host and port this proxy's.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
        format!(
            "{scheme}://{}127.0.0.1:{}/{path}",
            user.unwrap_or_default(),
            self.port
        )
    }

    fn listen(&mut self, listener: TcpListener) {
        let (upstream, forwarding) = (self.upstream.clone(), self.forwarding.clone());
        let holding = self.holding.subscribe();
        self.listening = Some(tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, holding) = (upstream.clone(), holding.clone());
                let forward = tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        forward(client, server, holding).await;
                    }
                });
                forwarding.lock().unwrap().push(forward);
            }
        }));
    }

    /// Stops listening (connections are refused) and cuts every forwarded connection.
    pub async fn down(&mut self) {
        if let Some(listening) = self.listening.take() {
            listening.abort();
            let _ = listening.await;
        }
        self.cut().await;
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.listen(listener);
    }

    /// From now on, holds back whatever a client sends (what was already passed on stays
    /// passed on); the server's replies still come through. Ended by `cut`.
    pub fn hold_what_clients_send(&self) {
        self.holding.send_replace(true);
    }

    /// Cuts every forwarded connection, dropping what was held back (both ends see the
    /// connection closed), and stops holding; new connections are forwarded as before.
    pub async fn cut(&mut self) {
        let forwarding = std::mem::take(&mut *self.forwarding.lock().unwrap());
        for forward in forwarding {
            forward.abort();
            let _ = forward.await;
        }
        self.holding.send_replace(false);
    }
}

/// Passes bytes both ways until either side closes; the client's bytes wait while `holding`.
async fn forward(client: TcpStream, server: TcpStream, mut holding: watch::Receiver<bool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Read first, then looked at: bytes a client sent after the hold began are held.
            if holding.wait_for(|held| !held).await.is_err() {
                return;
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let replies = tokio::io::copy(&mut server_read, &mut client_write);
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

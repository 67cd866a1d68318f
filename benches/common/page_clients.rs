//! Page clients for a bench: tasks that each ask a running Lazarus for pages one after
//! another, with no pause between them (people refreshing an incident's pages, harder than
//! any), each request timed from its connect to the response's last byte.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The pages an incident's people open while a backlog drains: the overview, the list and
/// its match count, a common word's list and count, one invoice searched for, a filter, and
/// a message's page (ids among the first 50,000: one not archived yet answers 404).
/// Each as (what it is, its path).
pub fn incident_pages(i: usize) -> (&'static str, String) {
    match i % 8 {
        0 => ("overview", "/".into()),
        1 => ("list", "/messages".into()),
        2 => ("list's count", "/messages/count".into()),
        3 => ("common word", "/messages?q=expired".into()),
        4 => ("common word's count", "/messages/count?q=expired".into()),
        5 => {
            let invoice = format!("/messages?q=INV-2026-{:06}", (i * 7919) % 50_000);
            ("an invoice searched for", invoice)
        }
        6 => ("a filter", "/messages?reason=expired&status=open".into()),
        _ => {
            let id = (i * 104_729) % 50_000 + 1;
            ("a message's page", format!("/messages/{id}"))
        }
    }
}

/// The pages a client asks for in turn: `pages(i)` is the i-th, as (what it is, its path).
pub type Pages = fn(usize) -> (&'static str, String);

/// Page clients running against one address, until [`PageClients::finish`].
pub struct PageClients {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Vec<Answer>>>,
}

/// One page asked for: what it is, how long it took and its HTTP status (0: the connection
/// failed once connected).
#[derive(Clone, Copy)]
struct Answer {
    page: &'static str,
    took: Duration,
    status: u16,
}

/// What the page clients saw.
pub struct PageLoad {
    /// Every answered request's time, sorted.
    pub took: Vec<Duration>,
    /// The same, page by page (what it is, its times sorted).
    pub by_page: Vec<(&'static str, Vec<Duration>)>,
    /// Answers other than 200 (and 404 for a message's page), as (status, how many).
    pub failed: Vec<(u16, usize)>,
}

/// The `p`-th percentile (`p` in 0..=100) of sorted times.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((last as f64) * p / 100.0).round() as usize])
}

impl PageLoad {
    /// Nothing seen yet.
    pub fn empty() -> PageLoad {
        PageLoad {
            took: Vec::new(),
            by_page: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// Adds what `other` saw to this.
    pub fn add(&mut self, other: &PageLoad) {
        self.took.extend(&other.took);
        self.took.sort();
        for (page, took) in &other.by_page {
            match self.by_page.iter_mut().find(|(p, _)| p == page) {
                Some((_, mine)) => {
                    mine.extend(took);
                    mine.sort();
                }
                None => self.by_page.push((page, took.clone())),
            }
        }
        for &(status, count) in &other.failed {
            self.failed_with(status, count);
        }
    }

    /// Counts `count` more answers of `status` among the failed.
    fn failed_with(&mut self, status: u16, count: usize) {
        match self.failed.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += count,
            None => self.failed.push((status, count)),
        }
    }
}

impl PageClients {
    /// Starts `n` clients asking `addr` for `pages(i)`, i counting up in each client from a
    /// start of its own. Until the address takes connections, they wait for it.
    pub fn start(addr: SocketAddr, n: usize, pages: Pages) -> PageClients {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .map(|client| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    let mut i = client * 1_000;
                    while !stop.load(Ordering::Relaxed) {
                        let (page, path) = pages(i);
                        i += 1;
                        match get(addr, &path).await {
                            Some((took, status)) => {
                                // A message's page asked before the message is archived.
                                let expected = status == 200
                                    || (status == 404 && path.starts_with("/messages/"));
                                answers.push(Answer {
                                    page,
                                    took,
                                    status: if expected { 200 } else { status },
                                });
                            }
                            None => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                    answers
                })
            })
            .collect();
        PageClients { stop, tasks }
    }

    /// Stops the clients once their requests in flight are answered, and says what they saw.
    pub async fn finish(self) -> PageLoad {
        self.stop.store(true, Ordering::Relaxed);
        let mut answers = Vec::new();
        for task in self.tasks {
            answers.extend(task.await.unwrap());
        }
        let mut load = PageLoad::empty();
        for page in answers.iter().map(|a| a.page) {
            if !load.by_page.iter().any(|(p, _)| *p == page) {
                let mut took: Vec<Duration> = answers
                    .iter()
                    .filter(|a| a.page == page)
                    .map(|a| a.took)
                    .collect();
                took.sort();
                load.by_page.push((page, took));
            }
        }
        load.took = answers.iter().map(|a| a.took).collect();
        load.took.sort();
        for a in answers.iter().filter(|a| a.status != 200) {
            load.failed_with(a.status, 1);
        }
        load
    }
}

/// One HTTP/1.1 GET on a connection of its own, read to its end: how long it took and its
/// status, `None` when nothing listens at `addr` yet.
async fn get(addr: SocketAddr, path: &str) -> Option<(Duration, u16)> {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut response = Vec::new();
    let answered = async {
        stream.write_all(request.as_bytes()).await?;
        stream.read_to_end(&mut response).await
    };
    let status = match answered.await {
        Ok(_) => std::str::from_utf8(response.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    };
    Some((start.elapsed(), status))
}

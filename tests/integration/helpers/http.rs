//! A tiny HTTP/1.1 client that sends exactly the bytes a test writes (hostile paths and
//! headers included: a general client would normalise them), for our server and chromedriver.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A minimal HTTP/1.1 GET over a fresh connection (enough for our own server).
pub async fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_request(addr, "GET", path, None).await
}

/// A minimal HTTP/1.1 request with an optional JSON body (our server, chromedriver).
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> HttpResponse {
    http_send(addr, method, path, json.map(|b| ("application/json", b))).await
}

/// POSTs an HTML form (`a=1&b=2`), as a browser without script would.
pub async fn post_form(addr: SocketAddr, path: &str, form: &str) -> HttpResponse {
    http_send(
        addr,
        "POST",
        path,
        Some(("application/x-www-form-urlencoded", form)),
    )
    .await
}

async fn http_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    http_with(addr, method, path, &[], typed_body).await
}

/// Any request, with extra headers (`Cookie`, `Authorization`, `Origin`, ...).
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    http_from(None, addr, method, path, headers, typed_body).await
}

/// [`http_with`] from a source address of the test's choosing (any of 127.0.0.0/8 is this
/// machine): a client the server sees as another address.
pub async fn http_from(
    source: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    typed_body: Option<(&str, &str)>,
) -> HttpResponse {
    let mut stream = match source {
        None => TcpStream::connect(addr).await.unwrap(),
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(ip, 0)).unwrap();
            socket.connect(addr).await.unwrap()
        }
    };
    let body = typed_body.map_or("", |(_, b)| b);
    let mut content = match typed_body {
        Some((content_type, body)) => format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ),
        None => String::new(),
    };
    for (name, value) in headers {
        content.push_str(&format!("{name}: {value}\r\n"));
    }
    let host = match headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        true => String::new(),
        false => format!("Host: {addr}\r\n"),
    };
    let request =
        format!("{method} {path} HTTP/1.1\r\n{host}Connection: close\r\n{content}\r\n{body}");
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read until the response is complete by its own framing: some servers (chromedriver)
    // keep the connection open despite `Connection: close`.
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (split, headers, status) = loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            n > 0 || !raw.is_empty(),
            "connection closed before a response"
        );
        raw.extend_from_slice(&buf[..n]);
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).into_owned();
            let mut lines = head.split("\r\n");
            let status: u16 = lines
                .next()
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .collect();
            break (split, headers, status);
        }
        assert!(n > 0, "connection closed inside the response head");
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length: Option<usize> = header("content-length").and_then(|v| v.parse().ok());
    loop {
        let body = &raw[split + 4..];
        let complete = match length {
            Some(len) => body.len() >= len,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if complete {
            break;
        }
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now (for a process to listen on).
pub fn free_local_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

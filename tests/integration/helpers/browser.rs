//! A WebDriver client for headless Chromium (Debian's `chromium` and `chromium-driver`): a
//! chromedriver of its own per browser, and what the page tests ask of it — find, type,
//! click, press keys, resize, switch the colour scheme, measure what overflows, screenshot.
//!
//! Why not fantoccini: WebDriver is a few JSON calls over the tiny HTTP client the tests
//! already have (`http`), and fantoccini 0.22 adds 18 crates the tree does not hold (OpenSSL
//! through native-tls by default; with `rustls-tls`, 14, among them aws-lc-sys, a C build)
//! and a second copy of icu for `webdriver` — counted with `cargo tree` on 2026-12-06.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use super::http::http_request;
use super::poll::{wait_showing, wait_until, Patience};

/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long the page may take to show an element or a text, looked for every 100 ms.
const LOOKING: Patience =
    Patience::within(Duration::from_secs(10)).every(Duration::from_millis(100));

/// A WebDriver session on a chromedriver of its own.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let chromedriver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("chromedriver is missing: install Debian's chromium and chromium-driver (scripts/test does)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        wait_until(
            "chromedriver to listen",
            Duration::from_secs(20),
            async || tokio::net::TcpStream::connect(addr).await.is_ok(),
        )
        .await;
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display())],
            },
        }}});
        let response = webdriver(addr, "POST", "/session", Some(capabilities)).await;
        let session = response["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {response}"))
            .to_owned();
        Browser {
            driver,
            addr,
            session,
            _profile: profile,
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        webdriver(
            self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
        .await
    }

    pub async fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// The first element matching `css`, waiting for it up to 10 s.
    pub async fn find(&self, css: &str) -> String {
        wait_showing(&format!("an element {css}"), LOOKING, async || {
            let found = self
                .call(
                    "POST",
                    "/element",
                    Some(json!({"using": "css selector", "value": css})),
                )
                .await;
            found[ELEMENT].as_str().map(str::to_owned).ok_or(found)
        })
        .await
    }

    /// Empties the first element matching `css` and types `text` into it, as a user would.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call("POST", &format!("/element/{id}/clear"), None)
            .await;
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    pub async fn text(&self, css: &str) -> String {
        let id = self.find(css).await;
        self.call("GET", &format!("/element/{id}/text"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the text of `css` satisfies `check`.
    pub async fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        wait_showing(&format!("{css} to show {what}"), LOOKING, async || {
            let text = self.text(css).await;
            if check(&text) {
                Ok(text)
            } else {
                Err(text)
            }
        })
        .await
    }

    pub async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    pub async fn quit(mut self) {
        self.call("DELETE", "", None).await;
        let _ = self.driver.kill().await;
    }
}

/// One WebDriver command; returns its `value`.
pub async fn webdriver(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string());
    let response = http_request(
        addr,
        method,
        path,
        body.as_deref()
            .or(if method == "POST" { Some("{}") } else { None }),
    )
    .await;
    let json: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    json.get("value").cloned().unwrap_or(json)
}

/// WebDriver's codes of the keys the tests press.
pub mod keys {
    pub const ENTER: &str = "\u{E007}";
    pub const ESCAPE: &str = "\u{E00C}";
    pub const ARROW_UP: &str = "\u{E013}";
    pub const ARROW_DOWN: &str = "\u{E015}";
}

/// The two windows every page is checked in: a laptop's and a phone's.
pub const DESKTOP: (u32, u32) = (1366, 900);
pub const PHONE: (u32, u32) = (390, 844);
/// Every look a page is checked in: a laptop and a phone, light and dark.
pub const EVERY_LOOK: [((u32, u32), bool); 4] = [
    (DESKTOP, false),
    (PHONE, false),
    (DESKTOP, true),
    (PHONE, true),
];

impl Browser {
    /// Clicks the first element matching `css` (waiting for it).
    pub async fn click(&self, css: &str) {
        let id = self.find(css).await;
        let clicked = self
            .call("POST", &format!("/element/{id}/click"), None)
            .await;
        assert!(clicked.is_null(), "clicking {css}: {clicked}");
    }

    /// Presses keys, as a user would, in whatever has the focus.
    pub async fn press(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.call(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        )
        .await;
        self.call("DELETE", "/actions", None).await;
    }

    /// The window's size; the page's own width is `innerWidth` within it.
    pub async fn resize(&self, (width, height): (u32, u32)) {
        self.call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// Follows the system's dark (or light) colour scheme from now on.
    pub async fn dark(&self, dark: bool) {
        let value = if dark { "dark" } else { "light" };
        self.call(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Emulation.setEmulatedMedia",
                "params": {"features": [{"name": "prefers-color-scheme", "value": value}]}})),
        )
        .await;
    }

    /// `null` when the page is no wider than its window (measured, not judged by eye), else
    /// what is: the page's width and the elements reaching past the window's right edge.
    pub async fn overflow(&self) -> Value {
        self.script(
            "const inner = window.innerWidth, wide = document.documentElement.scrollWidth;\
             if (wide <= inner) return null;\
             const past = Array.from(document.querySelectorAll('body *'))\
               .map(e => [e, e.getBoundingClientRect()]).filter(([e, r]) => r.right > inner + 1)\
               .map(([e, r]) => e.tagName + '.' + e.className + ' ' + Math.round(r.left) + '-' + Math.round(r.right)).slice(-8);\
             return {page: wide, window: inner, past: past};",
        )
        .await
    }

    /// Cards (`section.card`) whose content is wider than they are, so that it scrolls
    /// sideways inside them: each card's label and widths.
    pub async fn scrolling_cards(&self) -> Value {
        self.script(
            "return Array.from(document.querySelectorAll('section.card'))\
               .filter(c => c.scrollWidth > c.clientWidth + 1)\
               .map(c => (c.getAttribute('aria-label') || c.id || c.className) + ': ' + c.scrollWidth + ' in ' + c.clientWidth);",
        )
        .await
    }

    /// Saves a screenshot of the window as `docs/NAME.png` when `LAZARUS_SCREENSHOTS` is set
    /// (how the README's pictures are refreshed: `LAZARUS_SCREENSHOTS=1 cargo test --test
    /// integration -- browser::pages_fit incident::`).
    pub async fn screenshot(&self, name: &str) {
        if std::env::var_os("LAZARUS_SCREENSHOTS").is_none() {
            return;
        }
        use base64::Engine;
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .unwrap();
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/{name}.png"));
        std::fs::write(&path, bytes).unwrap();
    }

    /// Saves a screenshot as `NAME.png` in the directory `LAZARUS_LOOK_DIR` names, for a
    /// person to look at (never into `docs/`); nothing without it.
    pub async fn look(&self, name: &str) {
        let Some(dir) = std::env::var_os("LAZARUS_LOOK_DIR") else {
            return;
        };
        use base64::Engine;
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .unwrap();
        std::fs::write(
            std::path::Path::new(&dir).join(format!("{name}.png")),
            bytes,
        )
        .unwrap();
    }

    /// Signs in through the login page, as a person would.
    pub async fn sign_in(&self, base: &str, name: &str, password: &str) {
        self.go(&format!("{base}/login")).await;
        self.type_into("input[name=name]", name).await;
        self.type_into("input[name=password]", password).await;
        self.click("form button[type=submit]").await;
        self.wait_text("header .who", "the signed-in name", |t| t.contains(name))
            .await;
    }
}

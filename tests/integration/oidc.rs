//! `--auth oidc` against a real OpenID provider: npm's certified `oidc-provider`, started by
//! the test (oidc_provider.mjs) with a client and users of its own, and headless Chromium
//! signing in on its login form. Groups give roles and grants (a tenant's group sees only its
//! tenant's DLQ through the session), taken again at every sign-in (a user out of every
//! mapped group loses their user row; one moved to another group gets its role); a forged,
//! an expired and an unsigned ID token, a wrong state, a replayed code and another issuer
//! are refused; a provider that is down is a 503 page that says so, never a 500.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use lazarus::archive::{Grant, Grants, Role};
use lazarus::auth::AuthMode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::helpers::*;

const CLIENT_ID: &str = "lazarus-test";
const CLIENT_SECRET: &str = "a client secret of the test";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// npm's `oidc-provider`, running oidc_provider.mjs.
struct Provider {
    child: Child,
    addr: SocketAddr,
}

impl Provider {
    /// Its issuer URL on `port` (Lazarus may be told it before the provider runs).
    fn issuer(port: u16) -> String {
        format!("http://127.0.0.1:{port}")
    }

    async fn start(port: u16, redirect: &str) -> Provider {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/integration/oidc_provider.mjs");
        let mut child = Command::new("node")
            .arg(script)
            .args([&port.to_string(), CLIENT_ID, CLIENT_SECRET, redirect])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("oidc-provider starts within a minute")
            .unwrap();
        assert_eq!(
            ready.as_deref(),
            Some("ready"),
            "oidc-provider did not start: is it installed (scripts/test --setup)?"
        );
        // It writes notices later on: read on, or it dies of a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Provider {
            child,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        }
    }

    /// One of the script's own test endpoints (`/test/groups?…`, `/test/mangle?…`).
    async fn control(&self, path: &str) -> Value {
        let answer = http_get(self.addr, path).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        serde_json::from_slice(&answer.body).unwrap()
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Lazarus with `--auth oidc` on `port`, signing in at the provider on `provider_port`.
async fn lazarus(port: u16, provider_port: u16, queues: &[&str], roles: &[String]) -> TestApp {
    let roles = roles.iter().map(|r| r.parse().unwrap()).collect();
    TestApp::spawn_with(queues, |c| {
        c.listen = format!("127.0.0.1:{port}").parse().unwrap();
        c.auth = AuthMode::Oidc;
        let o = &mut c.oidc;
        o.oidc_issuer = Some(Provider::issuer(provider_port));
        o.oidc_client_id = Some(CLIENT_ID.into());
        o.oidc_client_secret = Some(lazarus::config::Secret(CLIENT_SECRET.into()));
        o.oidc_redirect_url = Some(callback_url(port));
        o.oidc_scopes = ["profile", "email", "groups"].map(String::from).to_vec();
        o.oidc_roles = roles;
    })
    .await
}

fn callback_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/login/oidc/callback")
}

/// Fills in the provider's login form (any password goes) and, for a first sign-in,
/// consents.
async fn at_provider(browser: &Browser, login: &str, consent: bool) {
    browser.type_into("input[name=login]", login).await;
    browser
        .type_into("input[name=password]", "any password")
        .await;
    browser.click("button[type=submit]").await;
    if consent {
        browser.find("input[name=prompt][value=consent]").await;
        browser.click("form button[type=submit]").await;
    }
}

/// A cookie of 127.0.0.1 (Lazarus's and the provider's alike: cookies know no port).
async fn cookie(browser: &Browser, name: &str) -> Option<String> {
    let found = browser.call("GET", &format!("/cookie/{name}"), None).await;
    found["value"].as_str().map(str::to_owned)
}

/// The DLQs of what `GET /api/messages` lists to the session `session`, and how many.
async fn listed(app: &TestApp, session: &str) -> (BTreeSet<String>, usize) {
    let cookie = format!("lazarus_session={session}");
    let answer = http_with(
        app.addr,
        "GET",
        "/api/messages?limit=500",
        &[("Cookie", &cookie), ("Accept", "application/json")],
        None,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let page: Value = serde_json::from_slice(&answer.body).unwrap();
    let messages = page["messages"].as_array().unwrap();
    let queues = messages
        .iter()
        .map(|m| m["queue"].as_str().unwrap().to_owned())
        .collect();
    (queues, messages.len())
}

/// The audit log's summaries of `action`, newest first.
async fn audited(app: &TestApp, action: &str) -> Vec<String> {
    app.archive
        .audit_log(None, 200)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action == action)
        .map(|e| format!("{}: {}", e.actor, e.summary))
        .collect()
}

#[tokio::test]
async fn groups_give_roles_taken_again_at_every_sign_in_through_chromium() {
    let p = unique("oidc");
    let (a, b) = (format!("{p}.a.dlq"), format!("{p}.b.dlq"));
    let mut t = Topology::new().await;
    for (dlq, work) in [(&a, format!("{p}.a.work")), (&b, format!("{p}.b.work"))] {
        t.queue(dlq, Default::default()).await;
        dying_queue(&mut t, &work, dlq).await;
        for i in 0..2 {
            t.publish("", &work, b"{}", json_props(&format!("{dlq}-{i}")))
                .await;
        }
    }
    let (port, provider_port) = (free_port(), free_port());
    let app = lazarus(
        port,
        provider_port,
        &[&a, &b],
        &[
            "lazarus-admins=admin".into(),
            format!("tenant-a=viewer:{p}.a.*"),
            "ops=operator".into(),
        ],
    )
    .await;
    app.wait_for_archived(4, Duration::from_secs(30)).await;
    let base = format!("http://127.0.0.1:{port}");

    // The provider is not up yet: a page that says so, 503, not a 500.
    let down = app.get("/login/oidc?next=/").await;
    assert_eq!(down.status, 503, "{}", down.text());
    let issuer = Provider::issuer(provider_port);
    assert!(
        down.text()
            .contains(&format!("the identity provider {issuer}"))
            && down.text().contains("is unavailable"),
        "{}",
        down.text()
    );

    let provider = Provider::start(provider_port, &callback_url(port)).await;
    let browser = Browser::start().await;
    // A page asked for before signing in leads through the sign-in page to the provider…
    browser.go(&format!("{base}/messages")).await;
    browser.click("#sign-in-provider").await;
    at_provider(&browser, "tom", true).await;
    // …and back to that page, signed in.
    browser
        .wait_text("header .who", "tom, a viewer", |t| {
            t.contains("tom") && t.contains("viewer")
        })
        .await;
    let url = browser.call("GET", "/url", None).await;
    assert_eq!(url.as_str(), Some(format!("{base}/messages").as_str()));
    // Tom's group gives him tenant a's DLQ, and nothing of b, through his session.
    let session = cookie(&browser, "lazarus_session")
        .await
        .expect("a session");
    assert_eq!(listed(&app, &session).await, ([a.clone()].into(), 2));
    let tom = app.archive.user("tom").await.unwrap().expect("tom's row");
    assert_eq!(tom.password_hash, None);
    assert_eq!(
        tom.grants(),
        Grants::On(vec![Grant {
            role: Role::Viewer,
            on: format!("{p}.a.*")
        }])
    );
    let logins = audited(&app, "login").await;
    assert!(
        logins[0].starts_with("tom: signed in at http://127.0.0.1:")
            && logins[0].ends_with(&format!("as viewer of {p}.a.* (groups tenant-a)")),
        "{logins:?}"
    );

    // Out of the tenant's group at the provider: the next sign-in gives nothing, and his
    // row (with whatever it gave) is gone.
    provider.control("/test/groups?user=tom&groups=staff").await;
    browser.click("header .who button[type=submit]").await; // Sign out
    browser.click("#sign-in-provider").await;
    let refusal = browser
        .wait_text(".error-box", "the refusal", |t| t.contains("no group"))
        .await;
    assert!(
        refusal.contains("as tom, but your account is in no group that Lazarus maps"),
        "{refusal}"
    );
    assert_eq!(app.archive.user("tom").await.unwrap(), None);
    let cookie_header = format!("lazarus_session={session}");
    let ended = http_with(
        app.addr,
        "GET",
        "/api/messages",
        &[("Cookie", &cookie_header)],
        None,
    )
    .await;
    assert_eq!(ended.status, 401, "the session signed out is over");
    let refused = audited(&app, "login_refused").await;
    assert!(
        refused[0].contains("in no group Lazarus maps (groups: staff); their user removed"),
        "{refused:?}"
    );
    assert!(
        audited(&app, "user_remove").await[0].starts_with("openid-connect: user tom removed"),
        "{:?}",
        audited(&app, "user_remove").await
    );

    // Moved to the operators' group: the next sign-in makes him an operator everywhere.
    provider.control("/test/groups?user=tom&groups=ops").await;
    browser.click("#sign-in-provider").await;
    browser
        .wait_text("header .who", "tom, an operator", |t| {
            t.contains("operator")
        })
        .await;
    let session = cookie(&browser, "lazarus_session").await.unwrap();
    assert_eq!(
        listed(&app, &session).await,
        ([a.clone(), b.clone()].into(), 4)
    );
    let tom = app.archive.user("tom").await.unwrap().unwrap();
    assert_eq!(tom.grants(), Grants::Everywhere(Role::Operator));

    // A provider that gives the groups at its userinfo endpoint only: read there.
    browser.call("DELETE", "/cookie", None).await;
    browser.go(&format!("{base}/login/oidc?next=/")).await;
    at_provider(&browser, "ursula", true).await;
    browser
        .wait_text("header .who", "ursula, an operator", |t| {
            t.contains("ursula") && t.contains("operator")
        })
        .await;
    let ursula = app.archive.user("ursula").await.unwrap().unwrap();
    assert_eq!(ursula.grants(), Grants::Everywhere(Role::Operator));

    // The provider goes down: signing in again is a page that says so.
    provider.stop().await;
    browser.click("header .who button[type=submit]").await;
    browser.click("#sign-in-provider").await;
    let down = browser
        .wait_text(".error-box", "the provider down", |t| {
            t.contains("unavailable")
        })
        .await;
    assert!(
        down.contains("the identity provider http://127.0.0.1:"),
        "{down}"
    );
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn forged_expired_unsigned_tokens_wrong_states_and_replayed_codes_are_refused() {
    let (port, provider_port) = (free_port(), free_port());
    let app = lazarus(port, provider_port, &[], &["lazarus-admins=admin".into()]).await;
    let provider = Provider::start(provider_port, &callback_url(port)).await;
    let base = format!("http://127.0.0.1:{port}");
    let browser = Browser::start().await;

    // Nora is in no mapped group; each token below claims she is an admin.
    for (how, refusal) in [
        (
            "signature",
            "the ID token is refused: Signature verification failed",
        ),
        ("expired", "the ID token is refused: Expired"),
        ("unsigned", "the ID token is refused"),
    ] {
        provider.control(&format!("/test/mangle?how={how}")).await;
        browser.call("DELETE", "/cookie", None).await;
        browser.go(&format!("{base}/login/oidc?next=/")).await;
        at_provider(&browser, "nora", true).await;
        let shown = browser
            .wait_text(".error-box", "the refusal", |t| t.contains("refused"))
            .await;
        assert!(shown.contains(refusal), "{how}: {shown}");
        assert_eq!(cookie(&browser, "lazarus_session").await, None, "{how}");
        assert_eq!(app.archive.user("nora").await.unwrap(), None, "{how}");
    }
    provider.control("/test/mangle?how=off").await;

    // A sign-in as it should be, whose pending cookie and callback the test keeps.
    browser.call("DELETE", "/cookie", None).await;
    browser.go(&format!("{base}/login/oidc?next=/")).await;
    browser.find("input[name=login]").await;
    let pending = cookie(&browser, "lazarus_oidc")
        .await
        .expect("the pending sign-in's cookie");
    at_provider(&browser, "ada", true).await;
    browser
        .wait_text("header .who", "ada, an admin", |t| t.contains("admin"))
        .await;
    assert_eq!(cookie(&browser, "lazarus_oidc").await, None, "used once");
    let callback = provider.control("/test/last-callback").await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = callback.strip_prefix(&base).unwrap().to_owned();
    let with_cookie = format!("lazarus_oidc={pending}");
    let call = async |path: &str, cookie: Option<&str>| {
        let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
        let answer = http_with(app.addr, "GET", path, &headers, None).await;
        let sessions = answer
            .headers
            .iter()
            .filter(|(k, v)| {
                k.eq_ignore_ascii_case("set-cookie") && v.starts_with("lazarus_session=")
            })
            .count();
        assert_eq!(sessions, 0, "no session for {path}");
        answer
    };
    // The same code again: the provider refuses it.
    let replayed = call(&path, Some(&with_cookie)).await;
    assert_eq!(replayed.status, 401, "{}", replayed.text());
    assert!(
        replayed
            .text()
            .contains("the identity provider did not accept this sign-in (invalid_grant"),
        "{}",
        replayed.text()
    );
    // Another state than the cookie's.
    let state = path
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let wrong = call(&path.replace(state, "another-state"), Some(&with_cookie)).await;
    assert_eq!(wrong.status, 400);
    assert!(
        wrong.text().contains("its state differs"),
        "{}",
        wrong.text()
    );
    // No sign-in started in this browser.
    let stray = call(&path, None).await;
    assert_eq!(stray.status, 400);
    assert!(
        stray.text().contains("belongs to no sign-in"),
        "{}",
        stray.text()
    );
    // Another issuer's answer (RFC 9207), and the provider's own refusal.
    let mixed = call(
        &format!("/login/oidc/callback?code=x&state={state}&iss=https%3A%2F%2Fevil.example"),
        Some(&with_cookie),
    )
    .await;
    assert_eq!(mixed.status, 400);
    assert!(mixed.text().contains("evil.example"), "{}", mixed.text());
    let denied = call(
        &format!("/login/oidc/callback?state={state}&error=access_denied"),
        Some(&with_cookie),
    )
    .await;
    assert_eq!(denied.status, 401);
    assert!(
        denied.text().contains("(access_denied)"),
        "{}",
        denied.text()
    );

    let ada = app.archive.user("ada").await.unwrap().unwrap();
    assert_eq!(ada.grants(), Grants::Everywhere(Role::Admin));
    assert_eq!(audited(&app, "login").await.len(), 1);
    browser.quit().await;
    provider.stop().await;
}

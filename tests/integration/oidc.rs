//! `--auth oidc` against a real OpenID provider: npm's certified `oidc-provider`, started by
//! the test (oidc_provider.mjs) with a client and users of its own, and headless Chromium
//! signing in on its login form. Groups give roles and grants (a tenant's group sees only its
//! tenant's DLQ through the session), taken again at every sign-in (a user out of every
//! mapped group loses their user row; one moved to another group gets its role); a forged,
//! an expired and an unsigned ID token, a wrong state, a replayed code and another issuer
//! are refused; a provider that is down is a 503 page that says so, never a 500. Signing out
//! ends the session at the provider too (RP-Initiated Logout: its confirmation form, then
//! back to Lazarus's signed-out page), and where the provider offers no sign-out or is down,
//! the page says its session may still be open; a session lasts no longer than
//! `--oidc-session-max-secs`, and the next sign-in takes the groups again.

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

    /// The provider on `port`, sending people back to `redirect` and, after signing out, to
    /// Lazarus's signed-out page beside it.
    async fn start(port: u16, redirect: &str) -> Provider {
        Provider::launch(port, redirect, true).await
    }

    /// One whose discovery document names no `end_session_endpoint`.
    async fn without_end_session(port: u16, redirect: &str) -> Provider {
        Provider::launch(port, redirect, false).await
    }

    async fn launch(port: u16, redirect: &str, end_session: bool) -> Provider {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/integration/oidc_provider.mjs");
        let post_logout = redirect.replace("/login/oidc/callback", "/signed-out");
        let mut child = Command::new("node")
            .arg(script)
            .args([&port.to_string(), CLIENT_ID, CLIENT_SECRET, redirect])
            .arg(post_logout)
            .args((!end_session).then_some("no-end-session"))
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
    lazarus_with(port, provider_port, queues, roles, |_| {}).await
}

async fn lazarus_with(
    port: u16,
    provider_port: u16,
    queues: &[&str],
    roles: &[String],
    more: impl FnOnce(&mut lazarus::config::ServeConfig),
) -> TestApp {
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
        more(c);
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

/// Signs out with the header's button, and says yes on the provider's confirmation form
/// (oidc-provider's "Yes, sign me out"), which comes after a page of Lazarus's own.
async fn sign_out_at_provider(browser: &Browser) {
    browser.click("header .who button[type=submit]").await;
    browser.click("button[name=logout][value=yes]").await;
}

/// What `GET /api/messages` answers to the session `session`: 200, or 401 once it is over.
async fn session_status(app: &TestApp, session: &str) -> u16 {
    let cookie = format!("lazarus_session={session}");
    http_with(
        app.addr,
        "GET",
        "/api/messages",
        &[("Cookie", &cookie), ("Accept", "application/json")],
        None,
    )
    .await
    .status
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
    let (port, provider_port) = (free_local_port(), free_local_port());
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

    // Signing out ends the session here and, once he says yes on the provider's form, there:
    // the page he is sent back to says so, and the state it came back with serves once.
    sign_out_at_provider(&browser).await;
    let signed_out = browser
        .wait_text("#signed-out", "the sign-out's outcome", |t| {
            t.contains("signed out")
        })
        .await;
    assert_eq!(
        signed_out,
        format!(
            "You are signed out of Lazarus and of the identity provider {issuer}, unless you \
             chose there to stay signed in."
        )
    );
    assert_eq!(
        session_status(&app, &session).await,
        401,
        "the session signed out is over"
    );
    assert_eq!(cookie(&browser, "lazarus_signout").await, None, "used once");
    // The provider was asked to end the session of tom's sign-in here, by its ID token.
    let asked = provider.control("/test/last-end-session").await;
    assert_eq!(asked["id_token_hint"]["sub"], "tom", "{asked}");
    assert_eq!(asked["id_token_hint"]["aud"], CLIENT_ID, "{asked}");
    assert_eq!(asked["client_id"], CLIENT_ID, "{asked}");
    assert_eq!(
        asked["post_logout_redirect_uri"],
        format!("{base}/signed-out")
    );
    assert!(
        asked["state"].as_str().is_some_and(|s| s.len() > 20),
        "{asked}"
    );
    assert_eq!(
        audited(&app, "logout").await,
        [format!(
            "tom: signed out, and sent to {issuer} to sign out there"
        )]
    );
    // A return from a sign-out this browser did not start is not taken for one.
    let stray = http_get(app.addr, "/signed-out?state=forged").await;
    assert_eq!(stray.status, 400, "{}", stray.text());
    assert!(
        stray
            .text()
            .contains("belongs to no sign-out started in this browser"),
        "{}",
        stray.text()
    );

    // Out of the tenant's group at the provider: the next sign-in — at the provider's login
    // form again, its session having ended with his sign-out — gives nothing, and his row
    // (with whatever it gave) is gone.
    provider.control("/test/groups?user=tom&groups=staff").await;
    browser.click("#sign-in-provider").await;
    at_provider(&browser, "tom", true).await;
    let refusal = browser
        .wait_text(".error-box", "the refusal", |t| t.contains("no group"))
        .await;
    assert!(
        refusal.contains("as tom, but your account is in no group that Lazarus maps"),
        "{refusal}"
    );
    assert_eq!(app.archive.user("tom").await.unwrap(), None);
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
    let session = cookie(&browser, "lazarus_session").await.unwrap();

    // The provider goes down: signing out ends the Lazarus session all the same, on a page
    // that says the provider's may still be open…
    provider.stop().await;
    browser.click("header .who button[type=submit]").await;
    let signed_out = browser
        .wait_text("#signed-out", "the sign-out's outcome", |t| {
            t.contains("signed out")
        })
        .await;
    let unavailable = format!(
        "You are signed out of Lazarus, but not at the identity provider: the identity \
         provider {issuer} is unavailable"
    );
    assert!(
        signed_out.starts_with(&unavailable)
            && signed_out.contains("your session there may still be open"),
        "{signed_out}"
    );
    assert_eq!(session_status(&app, &session).await, 401);
    let logouts = audited(&app, "logout").await;
    assert!(
        logouts[0].starts_with(&format!(
            "ursula: signed out, but not at the identity provider: the identity provider \
             {issuer} is unavailable"
        )),
        "{logouts:?}"
    );
    // …and signing in again is a page that says the provider is down.
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
    let (port, provider_port) = (free_local_port(), free_local_port());
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

#[tokio::test]
async fn a_provider_without_end_session_leaves_a_page_that_says_its_session_may_be_open() {
    let (port, provider_port) = (free_local_port(), free_local_port());
    let app = lazarus(port, provider_port, &[], &["lazarus-admins=admin".into()]).await;
    let provider = Provider::without_end_session(provider_port, &callback_url(port)).await;
    let issuer = Provider::issuer(provider_port);
    let base = format!("http://127.0.0.1:{port}");
    let browser = Browser::start().await;
    browser.go(&format!("{base}/login/oidc?next=/")).await;
    at_provider(&browser, "ada", true).await;
    browser
        .wait_text("header .who", "ada, an admin", |t| t.contains("admin"))
        .await;
    let session = cookie(&browser, "lazarus_session").await.unwrap();

    // Signing out ends the Lazarus session; the page says the provider's is not ours to end.
    browser.click("header .who button[type=submit]").await;
    let signed_out = browser
        .wait_text("#signed-out", "the sign-out's outcome", |t| {
            t.contains("signed out")
        })
        .await;
    assert!(
        signed_out.starts_with(&format!(
            "You are signed out of Lazarus. The identity provider {issuer} offers no sign-out"
        )) && signed_out.contains("(its discovery document names no end_session_endpoint)")
            && signed_out.contains("your session there may still be open"),
        "{signed_out}"
    );
    assert_eq!(session_status(&app, &session).await, 401);
    assert_eq!(cookie(&browser, "lazarus_signout").await, None);
    assert_eq!(
        audited(&app, "logout").await,
        [format!(
            "ada: signed out; {issuer} offers no sign-out (no end_session_endpoint)"
        )]
    );
    // As it says: "Sign in" signs her straight back in, without the provider's login form.
    browser.click("#sign-in-provider").await;
    browser
        .wait_text("header .who", "ada, an admin", |t| t.contains("admin"))
        .await;
    assert_eq!(audited(&app, "login").await.len(), 2);
    browser.quit().await;
    provider.stop().await;
}

#[tokio::test]
async fn a_session_lasts_no_longer_than_oidc_session_max_and_the_next_sign_in_retakes_the_groups() {
    let (port, provider_port) = (free_local_port(), free_local_port());
    let roles = ["tenant-a=viewer:tenant-a/*".into(), "ops=operator".into()];
    let app = lazarus_with(port, provider_port, &[], &roles, |c| {
        c.oidc.oidc_session_max_secs = 4;
    })
    .await;
    let provider = Provider::start(provider_port, &callback_url(port)).await;
    let base = format!("http://127.0.0.1:{port}");
    let browser = Browser::start().await;
    let grants_of_tom = async || {
        app.archive
            .user("tom")
            .await
            .unwrap()
            .map(|tom| tom.grants())
    };
    browser.go(&format!("{base}/login/oidc?next=/")).await;
    at_provider(&browser, "tom", true).await;
    let session = wait_for("tom's session", Duration::from_secs(30), async || {
        cookie(&browser, "lazarus_session").await
    })
    .await;
    assert_eq!(
        grants_of_tom().await,
        Some(Grants::On(vec![Grant {
            role: Role::Viewer,
            on: "tenant-a/*".into()
        }]))
    );

    // Moved to the operators at the provider: his open session ends on its own, however much
    // it is used (--session-max-secs is 12 hours)…
    provider.control("/test/groups?user=tom&groups=ops").await;
    wait_until(
        "tom's session to end after --oidc-session-max-secs",
        Duration::from_secs(60),
        async || session_status(&app, &session).await == 401,
    )
    .await;
    // …and the next sign-in (the provider's session is still open: no form) takes his
    // groups again.
    browser.go(&format!("{base}/login/oidc?next=/")).await;
    wait_until(
        "tom's second sign-in",
        Duration::from_secs(30),
        async || audited(&app, "login").await.len() == 2,
    )
    .await;
    assert_eq!(
        grants_of_tom().await,
        Some(Grants::Everywhere(Role::Operator))
    );
    browser.quit().await;
    provider.stop().await;
}

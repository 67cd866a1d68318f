//! Who may look and who may replay, through the real HTTP server: each authentication mode,
//! each role on pages and API, sessions, tokens, the trusted proxy, sign-in throttling,
//! cross-site refusal, security headers, and malformed input answered with a 4xx.

use std::time::Duration;

use lazarus::archive::{Actor, Role};
use lazarus::auth::{hash_password, AuthMode};
use lazarus::config::ServeConfig;
use lazarus::startup::Application;
use serde_json::{json, Value};

use crate::helpers::*;

pub(crate) const PASSWORD: &str = "a long enough password";

/// A Lazarus in `--auth users` with a viewer, an operator and an admin, and one archived
/// message in its DLQ; returns the app, the DLQ and the message id.
pub(crate) async fn users_app(
    tweak: impl FnOnce(&mut ServeConfig),
) -> (TestApp, Topology, String, String) {
    let p = unique("auth");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.auth = AuthMode::Users;
        tweak(c);
    })
    .await;
    let hash = hash_password(PASSWORD).unwrap();
    for (name, role) in [
        ("vera", Role::Viewer),
        ("otto", Role::Operator),
        ("ada", Role::Admin),
    ] {
        app.archive
            .put_user(name, Some(&hash), role, &[], &Actor::system("test"))
            .await
            .unwrap();
    }
    publish_many(&t.channel, "", &dlq, "auth", 1).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let id = app
        .archive
        .list_messages(
            &Default::default(),
            lazarus::archive::PageRequest {
                limit: 1,
                before: None,
            },
        )
        .await
        .unwrap()
        .messages[0]
        .id
        .to_string();
    (app, t, dlq, id)
}

/// Signs in and returns the `Cookie` header value.
pub(crate) async fn sign_in(
    app: &TestApp,
    name: &str,
    password: &str,
) -> Result<String, HttpResponse> {
    let form = format!(
        "name={name}&password={}&next=/messages",
        password.replace(' ', "+")
    );
    let response = post_form(app.addr, "/login", &form).await;
    if response.status != 303 {
        return Err(response);
    }
    assert_eq!(response.header("location"), Some("/messages"));
    let cookie = response.header("set-cookie").unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    Ok(cookie.split(';').next().unwrap().to_owned())
}

pub(crate) async fn as_user(
    app: &TestApp,
    cookie: &str,
    method: &str,
    path: &str,
    json: Option<Value>,
) -> HttpResponse {
    let body = json.map(|j| j.to_string());
    http_with(
        app.addr,
        method,
        path,
        &[("Cookie", cookie), ("Accept", "application/json")],
        body.as_deref().map(|b| ("application/json", b)),
    )
    .await
}

on_both_backends!(no_authentication_is_refused_off_loopback_and_proxy_mode_needs_its_proxy);
async fn no_authentication_is_refused_off_loopback_and_proxy_mode_needs_its_proxy() {
    let mut config = ServeConfig::defaults();
    config.listen = "0.0.0.0:0".parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    config.connection.database_url = archive_url(dir.path()).await.into();
    let err = Application::build(config.clone()).await.err().unwrap();
    assert!(
        err.to_string()
            .contains("only allowed on a loopback address"),
        "{err}"
    );
    config.auth = AuthMode::Proxy;
    let err = Application::build(config).await.err().unwrap();
    assert!(err.to_string().contains("--trusted-proxy"), "{err}");
}

on_both_backends!(each_role_gets_what_it_may_on_pages_and_api);
async fn each_role_gets_what_it_may_on_pages_and_api() {
    let (app, t, dlq, id) = users_app(|_| {}).await;

    // Anonymous: pages send to the sign-in page, the API answers 401.
    let page = http_with(
        app.addr,
        "GET",
        "/messages",
        &[("Accept", "text/html")],
        None,
    )
    .await;
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), Some("/login?next=%2Fmessages"));
    assert_eq!(app.get("/api/messages").await.status, 401);
    assert_eq!(app.get("/healthz").await.status, 200, "health stays public");
    assert_eq!(app.get("/login").await.status, 200);

    let sneaky = app.get("/login?next=/%09/evil.example").await.text();
    assert!(
        sneaky.contains(r#"name="next" value="/""#),
        "no open redirect: {sneaky}"
    );
    let wrong = sign_in(&app, "vera", "not her password").await.unwrap_err();
    assert_eq!(wrong.status, 401);
    assert!(wrong.text().contains("wrong name or password"));
    let nobody = sign_in(&app, "nobody", PASSWORD).await.unwrap_err();
    assert_eq!(nobody.status, 401);

    // A viewer reads, and nothing else.
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    let list = as_user(
        &app,
        &vera,
        "GET",
        &format!("/api/messages?queue={dlq}"),
        None,
    )
    .await;
    assert_eq!(list.status, 200);
    let page = http_with(app.addr, "GET", "/messages", &[("Cookie", &vera)], None).await;
    assert!(
        page.text().contains("vera · viewer"),
        "the page says who is signed in"
    );
    // ... and is offered no link to what only admins may open.
    assert!(
        !page.text().contains(r#"href="/audit""#) && !page.text().contains(r#"href="/admin""#),
        "a viewer's page links to the audit log or admin page"
    );
    // ... nor a replay or dismiss form anywhere (hidden, with the reason on the message page);
    // an operator is offered them on the same pages.
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    for (path, action) in [
        ("/".to_owned(), "Replay group…"),
        ("/".to_owned(), "Dismiss group…"),
        (format!("/messages?queue={dlq}"), "Plan replay…"),
        (format!("/messages?queue={dlq}"), r#"class="select-row""#),
        (
            format!("/messages/{id}"),
            r#"action="/messages/{id}/replay""#,
        ),
        (
            format!("/messages/{id}"),
            r#"action="/messages/{id}/dismiss""#,
        ),
    ] {
        let action = action.replace("{id}", &id);
        let viewer = http_with(app.addr, "GET", &path, &[("Cookie", &vera)], None).await;
        assert_eq!(viewer.status, 200, "{path}");
        assert!(
            !viewer.text().contains(&action),
            "a viewer is offered {action} on {path}"
        );
        let operator = http_with(app.addr, "GET", &path, &[("Cookie", &otto)], None).await;
        assert!(
            operator.text().contains(&action),
            "an operator is not offered {action} on {path}"
        );
    }
    let page = http_with(
        app.addr,
        "GET",
        &format!("/messages/{id}"),
        &[("Cookie", &vera)],
        None,
    )
    .await;
    assert!(page
        .text()
        .contains("Replaying and dismissing take the operator role"));
    let replay = as_user(
        &app,
        &vera,
        "POST",
        &format!("/api/messages/{id}/replay"),
        Some(json!({})),
    )
    .await;
    assert_eq!(replay.status, 403, "{}", replay.text());
    assert!(replay
        .text()
        .contains("needs the operator role; vera is viewer"));
    let form = http_with(
        app.addr,
        "POST",
        &format!("/messages/{id}/replay"),
        &[("Cookie", &vera)],
        Some((
            "application/x-www-form-urlencoded",
            "exchange=&routing_key=x&request_key=k",
        )),
    )
    .await;
    assert_eq!(form.status, 403, "a hidden button is not access control");
    let plan = json!({"ids": [id], "dry_run": true});
    assert_eq!(
        as_user(&app, &vera, "POST", "/api/replays", Some(plan.clone()))
            .await
            .status,
        403
    );
    assert_eq!(
        as_user(
            &app,
            &vera,
            "POST",
            "/api/messages/dismiss",
            Some(json!({"ids": [id], "note": "x"}))
        )
        .await
        .status,
        403
    );
    assert_eq!(
        as_user(&app, &vera, "GET", "/audit", None).await.status,
        403
    );

    // An operator replays, but does not administer.
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    let planned = as_user(&app, &otto, "POST", "/api/replays", Some(plan.clone())).await;
    assert_eq!(planned.status, 200, "{}", planned.text());
    let replayed = as_user(
        &app,
        &otto,
        "POST",
        &format!("/api/messages/{id}/replay"),
        Some(json!({"target": {"exchange": "", "routing_key": dlq}})),
    )
    .await;
    assert_eq!(replayed.status, 200, "{}", replayed.text());
    let replayed: Value = serde_json::from_slice(&replayed.body).unwrap();
    assert_eq!(replayed["outcome"], "published");
    assert_eq!(replayed["actor"], "otto");
    assert_eq!(
        as_user(&app, &otto, "GET", "/api/audit", None).await.status,
        403
    );
    assert_eq!(
        as_user(
            &app,
            &otto,
            "POST",
            "/api/admin/purge",
            Some(json!({"ids": [id], "note": "x"}))
        )
        .await
        .status,
        403,
        "only admins purge"
    );
    assert_eq!(
        as_user(
            &app,
            &otto,
            "POST",
            "/api/admin/tokens",
            Some(json!({"name": "x", "role": "admin"}))
        )
        .await
        .status,
        403
    );

    // An admin sees the audit log, with who did what from where.
    let ada = sign_in(&app, "ada", PASSWORD).await.unwrap();
    let audit = as_user(&app, &ada, "GET", "/api/audit", None).await;
    assert_eq!(audit.status, 200);
    let entries: Value = serde_json::from_slice(&audit.body).unwrap();
    let entries = entries["entries"].as_array().unwrap();
    let plan_entry = entries.iter().find(|e| e["action"] == "job_plan").unwrap();
    assert_eq!(plan_entry["actor"], "otto");
    assert_eq!(plan_entry["source"], "127.0.0.1");
    assert!(entries
        .iter()
        .any(|e| e["action"] == "login_failed" && e["summary"].as_str().unwrap().contains("vera")));
    assert!(entries
        .iter()
        .any(|e| e["action"] == "login" && e["actor"] == "ada"));
    let admin_page = as_user(&app, &ada, "GET", "/admin", None).await;
    assert_eq!(admin_page.status, 200);
    assert!(
        admin_page.text().contains(r#"href="/audit""#),
        "an admin's pages link to the audit log"
    );
    let ndjson = as_user(&app, &ada, "GET", "/api/audit.ndjson", None).await;
    assert_eq!(ndjson.status, 200);
    assert!(ndjson
        .text()
        .lines()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));

    // Tokens: made by an admin, used as bearer, revoked.
    let made = as_user(
        &app,
        &ada,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "ci", "role": "operator"})),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.text());
    let made: Value = serde_json::from_slice(&made.body).unwrap();
    let token = made["token"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {token}");
    let with_token = |path: &'static str, body: Value| {
        let bearer = bearer.clone();
        let addr = app.addr;
        async move {
            let body = body.to_string();
            http_with(
                addr,
                "POST",
                path,
                &[("Authorization", &bearer)],
                Some(("application/json", &body)),
            )
            .await
        }
    };
    assert_eq!(with_token("/api/replays", plan.clone()).await.status, 200);
    let tokens = as_user(&app, &ada, "GET", "/api/admin/tokens", None)
        .await
        .text();
    assert!(!tokens.contains(&token), "a token is never shown again");
    let revoke = as_user(
        &app,
        &ada,
        "POST",
        &format!("/api/admin/tokens/{}/revoke", made["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(revoke.status, 200);
    assert_eq!(with_token("/api/replays", plan.clone()).await.status, 401);

    // From the admin page: post, redirect, get. The new token is shown once, on the page the
    // browser is sent to; reloading it makes no second token and shows none.
    let created = http_with(
        app.addr,
        "POST",
        "/admin/tokens",
        &[("Cookie", &ada)],
        Some((
            "application/x-www-form-urlencoded",
            "name=nightly-export&role=viewer&expires_in_days=30",
        )),
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.text());
    assert_eq!(created.header("location"), Some("/admin"));
    let carried = created.header("set-cookie").unwrap().to_owned();
    assert!(
        carried.starts_with("lazarus_new_token=lzr_")
            && carried.contains("Path=/admin")
            && carried.contains("HttpOnly"),
        "{carried}"
    );
    let new_token = carried.split(';').next().unwrap().to_owned();
    let shown = http_with(
        app.addr,
        "GET",
        "/admin",
        &[("Cookie", &format!("{ada}; {new_token}"))],
        None,
    )
    .await;
    let secret = new_token.trim_start_matches("lazarus_new_token=");
    assert!(shown.text().contains(secret), "the new token is shown");
    assert!(shown
        .header("set-cookie")
        .is_some_and(|c| c.starts_with("lazarus_new_token=;") && c.contains("Max-Age=0")));
    let again = http_with(app.addr, "GET", "/admin", &[("Cookie", &ada)], None).await;
    assert!(!again.text().contains(secret), "shown once");
    assert_eq!(
        again.text().matches(">nightly-export</td>").count(),
        1,
        "one token: {}",
        again.text()
    );
    assert!(again
        .text()
        .contains("<summary class=\"button secondary\">Revoke…</summary>"));
    let garbage = http_with(
        app.addr,
        "GET",
        "/api/messages",
        &[("Authorization", "Bearer lzr_nope")],
        None,
    )
    .await;
    assert_eq!(garbage.status, 401);
    let basic = http_with(
        app.addr,
        "GET",
        "/api/messages",
        &[("Authorization", "Basic YTpi")],
        None,
    )
    .await;
    assert_eq!(basic.status, 401);

    // Signing out ends the session.
    let out = http_with(
        app.addr,
        "POST",
        "/logout",
        &[("Cookie", &vera)],
        Some(("application/x-www-form-urlencoded", "")),
    )
    .await;
    assert_eq!(out.status, 303);
    assert_eq!(
        as_user(&app, &vera, "GET", "/api/messages", None)
            .await
            .status,
        401
    );

    // Guessing is throttled: after five failures even the right password waits.
    for _ in 0..5 {
        assert_eq!(
            sign_in(&app, "otto", "guess guess guess")
                .await
                .unwrap_err()
                .status,
            401
        );
    }
    let blocked = sign_in(&app, "otto", PASSWORD).await.unwrap_err();
    assert_eq!(blocked.status, 429);
    assert!(blocked.text().contains("too many failed sign-ins"));
    t.cleanup().await;
}

on_both_backends!(an_idle_session_ends);
async fn an_idle_session_ends() {
    let (app, t, _, _) = users_app(|c| c.session_idle_secs = 1).await;
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    assert_eq!(
        as_user(&app, &vera, "GET", "/api/messages", None)
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        as_user(&app, &vera, "GET", "/api/messages", None)
            .await
            .status,
        401
    );
    t.cleanup().await;
}

on_both_backends!(proxy_headers_count_only_from_the_trusted_proxy);
async fn proxy_headers_count_only_from_the_trusted_proxy() {
    let p = unique("proxy");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let trusted = TestApp::spawn_with(&[&dlq], |c| {
        c.auth = AuthMode::Proxy;
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    trusted
        .archive
        .put_user("otto", None, Role::Operator, &[], &Actor::system("test"))
        .await
        .unwrap();
    let as_proxy = |app: &TestApp, user: &'static str, method: &'static str, path: &'static str| {
        let addr = app.addr;
        async move {
            let body = json!({"filter": {}, "all": true, "dry_run": true}).to_string();
            http_with(
                addr,
                method,
                path,
                &[
                    ("X-Forwarded-User", user),
                    ("X-Forwarded-Email", "someone@example.com"),
                ],
                (method == "POST").then_some(("application/json", body.as_str())),
            )
            .await
        }
    };
    assert_eq!(
        as_proxy(&trusted, "vera", "GET", "/api/messages")
            .await
            .status,
        200
    );
    assert_eq!(
        as_proxy(&trusted, "vera", "POST", "/api/replays")
            .await
            .status,
        403,
        "proxy users default to viewer"
    );
    assert_eq!(
        as_proxy(&trusted, "otto", "POST", "/api/replays")
            .await
            .status,
        200,
        "their role comes from the users table"
    );
    assert_eq!(
        trusted.get("/api/messages").await.status,
        401,
        "no header, nobody"
    );

    let untrusted = TestApp::spawn_with(&[&dlq], |c| {
        c.auth = AuthMode::Proxy;
        c.trusted_proxies = vec!["127.0.0.2".parse().unwrap()];
    })
    .await;
    assert_eq!(
        as_proxy(&untrusted, "otto", "GET", "/api/messages")
            .await
            .status,
        401,
        "headers from an address that is not the proxy are ignored"
    );
    t.cleanup().await;
}

on_both_backends!(cross_site_posts_are_refused_and_pages_carry_security_headers);
async fn cross_site_posts_are_refused_and_pages_carry_security_headers() {
    let p = unique("csrf");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    publish_many(&t.channel, "", &dlq, "csrf", 1).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let id = app.ids(&dlq).await.remove(0);
    let body = json!({"ids": [id], "dry_run": true}).to_string();
    for headers in [
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Origin", "https://evil.example")],
    ] {
        let r = http_with(
            app.addr,
            "POST",
            "/api/replays",
            &headers,
            Some(("application/json", &body)),
        )
        .await;
        assert_eq!(r.status, 403, "{headers:?}: {}", r.text());
    }
    let form = http_with(
        app.addr,
        "POST",
        &format!("/messages/{id}/dismiss"),
        &[("Sec-Fetch-Site", "cross-site")],
        Some(("application/x-www-form-urlencoded", "note=pwned")),
    )
    .await;
    assert_eq!(form.status, 403);
    assert_eq!(
        app.json(&format!("/api/messages/{id}"), 200).await["status"],
        "archived"
    );
    let origin = format!("http://{}", app.addr);
    let same = http_with(
        app.addr,
        "POST",
        "/api/replays",
        &[("Sec-Fetch-Site", "same-origin"), ("Origin", &origin)],
        Some(("application/json", &body)),
    )
    .await;
    assert_eq!(same.status, 200, "{}", same.text());

    let page = app.get("/messages").await;
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("same-origin"));
    assert!(
        page.text().contains("No sign-in"),
        "--auth none says so on every page"
    );
    // Without sign-in, only loopback names are answered (no DNS rebinding).
    let rebound = http_with(
        app.addr,
        "GET",
        "/api/messages",
        &[("Host", "rebind.evil.example")],
        None,
    )
    .await;
    assert_eq!(rebound.status, 403, "{}", rebound.text());
    let download = app.get(&format!("/api/messages/{id}/body")).await;
    assert!(download
        .header("content-disposition")
        .unwrap()
        .starts_with("attachment"));
    t.cleanup().await;
}

/// A body with its content type.
type TypedBody<'a> = Option<(&'a str, &'a str)>;

on_both_backends!(malformed_requests_to_every_route_get_a_4xx_with_a_message);
async fn malformed_requests_to_every_route_get_a_4xx_with_a_message() {
    let p = unique("garbage");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let json = "application/json";
    let form = "application/x-www-form-urlencoded";
    let cases: Vec<(&str, &str, TypedBody)> = vec![
        ("GET", "/api/messages?limit=-1", None),
        ("GET", "/api/messages?since=%ff%fe", None),
        ("GET", "/api/messages?q=%22", None),
        ("GET", "/api/messages/abc", None),
        ("GET", "/api/messages/99999999999999999999999", None),
        ("GET", "/api/messages/1/body", None),
        ("GET", "/messages/%00", None),
        ("GET", "/messages?status=bogus", None),
        ("POST", "/api/messages/1/replay", Some((json, "{not json"))),
        ("POST", "/api/messages/1/replay", Some((json, "[]"))),
        ("POST", "/api/messages/abc/replay", Some((json, "{}"))),
        (
            "POST",
            "/api/messages/dismiss",
            Some((json, "{\"ids\": [1]}")),
        ),
        (
            "POST",
            "/api/messages/dismiss",
            Some((json, "{\"ids\": \"1\", \"note\": \"x\"}")),
        ),
        ("POST", "/api/replays", Some((json, "{\"ids\": [\"x\"]}"))),
        (
            "POST",
            "/api/replays",
            Some((json, "{\"filter\": {\"since\": \"soon\"}}")),
        ),
        ("POST", "/api/replays", Some((form, "ids=1"))),
        ("POST", "/api/replays/abc/start", None),
        ("POST", "/api/replays/1/start", None),
        ("GET", "/api/replays/1/items?limit=0", None),
        ("GET", "/api/audit?before=x", None),
        ("POST", "/messages/1/replay", Some((form, "exchange=x"))),
        ("POST", "/messages/abc/dismiss", Some((form, "note=x"))),
        (
            "POST",
            "/messages/select",
            Some((form, "action=plan&id=abc")),
        ),
        (
            "POST",
            "/messages/select",
            Some((form, "action=plan&id=1&rate_per_sec=-3")),
        ),
        ("POST", "/replays/1/explode", None),
        ("GET", "/replays/1?after=z", None),
        (
            "POST",
            "/api/admin/tokens",
            Some((json, "{\"name\": \"x\", \"role\": \"god\"}")),
        ),
        ("POST", "/api/admin/tokens/abc/revoke", None),
        ("GET", "/nowhere", None),
        ("DELETE", "/api/messages/1", None),
        ("PUT", "/api/replays", Some((json, "{}"))),
    ];
    for (method, path, body) in cases {
        let r = http_with(app.addr, method, path, &[], body).await;
        assert!(
            (400..500).contains(&r.status),
            "{method} {path} → {}: {}",
            r.status,
            r.text()
        );
        assert!(
            !r.text().trim().is_empty(),
            "{method} {path}: an answer with a message"
        );
    }
    t.cleanup().await;
}

on_both_backends!(users_and_tokens_are_managed_from_the_command_line);
async fn users_and_tokens_are_managed_from_the_command_line() {
    let (app, t, _, _) = users_app(|_| {}).await;
    let db = app.database_url.clone();
    let lazarus = |args: &[&str], password: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"));
        command.args(args).args(["--database-url", &db]);
        if let Some(p) = password {
            command.env("LAZARUS_PASSWORD", p);
        }
        command.output().unwrap()
    };
    let short = lazarus(
        &["user", "add", "carl", "--role", "operator"],
        Some("short"),
    );
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 10 characters"));
    let added = lazarus(
        &["user", "add", "carl", "--role", "operator"],
        Some(PASSWORD),
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let carl = sign_in(&app, "carl", PASSWORD).await.unwrap();
    assert_eq!(
        as_user(&app, &carl, "GET", "/api/messages", None)
            .await
            .status,
        200
    );

    let new_password = "another long password";
    assert!(lazarus(&["user", "passwd", "carl"], Some(new_password))
        .status
        .success());
    assert_eq!(
        as_user(&app, &carl, "GET", "/api/messages", None)
            .await
            .status,
        401,
        "a new password ends the old sessions"
    );
    assert!(sign_in(&app, "carl", new_password).await.is_ok());

    let created = lazarus(&["token", "create", "nightly", "--role", "viewer"], None);
    let token = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("lzr_"), "{token}");
    let bearer = format!("Bearer {token}");
    let get = |bearer: String| async move {
        http_with(
            app.addr,
            "GET",
            "/api/messages",
            &[("Authorization", &bearer)],
            None,
        )
        .await
    };
    assert_eq!(get(bearer.clone()).await.status, 200);
    let listed = String::from_utf8(lazarus(&["token", "list"], None).stdout).unwrap();
    assert!(listed.contains("nightly\tviewer\tactive") && !listed.contains(&token));
    let id = listed.split('\t').next().unwrap();
    assert!(lazarus(&["token", "revoke", id], None).status.success());
    assert_eq!(get(bearer).await.status, 401);
    assert!(lazarus(&["user", "remove", "carl"], None).status.success());
    assert_eq!(
        sign_in(&app, "carl", new_password)
            .await
            .unwrap_err()
            .status,
        401
    );
    t.cleanup().await;
}

on_both_backends!(viewers_see_masked_values_and_operators_the_message);
async fn viewers_see_masked_values_and_operators_the_message() {
    let (app, t, _, id) = users_app(|c| {
        c.masks = vec!["/padding".into()];
        c.fields = vec!["pad=/padding".parse().unwrap()];
    })
    .await;
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    let secret = "x".repeat(200); // the whole padding value
    for path in [
        format!("/api/messages/{id}"),
        format!("/api/messages/{id}/body"),
        format!("/messages/{id}"),
    ] {
        let seen = as_user(&app, &vera, "GET", &path, None).await.text();
        assert!(
            !seen.contains(&secret),
            "{path} shows a masked value to a viewer"
        );
        assert!(seen.contains("***"), "{path}: {seen}");
        let seen = as_user(&app, &otto, "GET", &path, None).await.text();
        assert!(
            seen.contains(&secret),
            "{path} hides the value from an operator"
        );
    }
    // Viewers cannot search by a masked field, and no word search finds a masked value.
    let by_field = format!("/api/messages?q=pad:{secret}");
    assert_eq!(
        as_user(&app, &vera, "GET", &by_field, None).await.status,
        403
    );
    let found = as_user(&app, &otto, "GET", &by_field, None).await.text();
    assert!(found.contains(&id), "operators search by it: {found}");
    let by_word = as_user(
        &app,
        &otto,
        "GET",
        &format!("/api/messages?q={secret}"),
        None,
    )
    .await
    .text();
    assert!(
        !by_word.contains(&id),
        "masked values are not in the word index: {by_word}"
    );
    t.cleanup().await;
}

on_both_backends!(a_token_has_at_most_its_owners_rights_now);
/// An admin makes a token, and with it another; she is demoted to viewer (as `lazarus user
/// add ada --role viewer` does), later to operator, then removed: both tokens follow her
/// rights on every request, and no token can be made above its maker's rights.
async fn a_token_has_at_most_its_owners_rights_now() {
    let (app, t, _, id) = users_app(|_| {}).await;
    let ada = sign_in(&app, "ada", PASSWORD).await.unwrap();
    let made = as_user(
        &app,
        &ada,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "ada-admin", "role": "admin"})),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.text());
    let first = serde_json::from_slice::<Value>(&made.body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let with = |token: &str, method: &'static str, path: &'static str, body: Option<Value>| {
        let bearer = format!("Bearer {token}");
        let addr = app.addr;
        async move {
            let body = body.map(|b| b.to_string());
            http_with(
                addr,
                method,
                path,
                &[("Authorization", &bearer)],
                body.as_deref().map(|b| ("application/json", b)),
            )
            .await
            .status
        }
    };
    let made = http_with(
        app.addr,
        "POST",
        "/api/admin/tokens",
        &[("Authorization", &format!("Bearer {first}"))],
        Some((
            "application/json",
            &json!({"name": "made-by-token", "role": "admin"}).to_string(),
        )),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.text());
    let second = serde_json::from_slice::<Value>(&made.body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let plan = || Some(json!({"ids": [id], "dry_run": true}));
    for token in [&first, &second] {
        assert_eq!(with(token, "GET", "/api/admin/users", None).await, 200);
    }

    let hash = hash_password(PASSWORD).unwrap();
    let demote = |role| {
        let archive = app.archive.clone();
        let hash = hash.clone();
        async move {
            archive
                .put_user("ada", Some(&hash), role, &[], &Actor::system("test"))
                .await
                .unwrap()
        }
    };
    demote(Role::Viewer).await;
    for token in [&first, &second] {
        assert_eq!(with(token, "GET", "/api/admin/users", None).await, 403);
        assert_eq!(with(token, "GET", "/api/admin/tokens", None).await, 403);
        assert_eq!(with(token, "POST", "/api/replays", plan()).await, 403);
        assert_eq!(with(token, "GET", "/api/messages", None).await, 200);
    }
    // Her session says the same (it reads her role on every request).
    let page = as_user(&app, &ada, "GET", "/api/admin/users", None).await;
    assert_eq!(page.status, 403);

    demote(Role::Operator).await;
    for token in [&first, &second] {
        assert_eq!(with(token, "POST", "/api/replays", plan()).await, 200);
        assert_eq!(with(token, "GET", "/api/admin/users", None).await, 403);
    }

    // An operator's token (made while ada was admin, for an operator's job) cannot make an
    // admin token even after ada is admin again.
    demote(Role::Admin).await;
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    assert_eq!(
        as_user(&app, &otto, "GET", "/api/admin/users", None)
            .await
            .status,
        403
    );
    let ops = as_user(
        &app,
        &ada,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "ops", "role": "operator"})),
    )
    .await;
    let ops = serde_json::from_slice::<Value>(&ops.body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(with(&ops, "GET", "/api/admin/users", None).await, 403);

    app.archive
        .remove_user("ada", &Actor::system("test"))
        .await
        .unwrap();
    for token in [&first, &second, &ops] {
        assert_eq!(with(token, "GET", "/api/messages", None).await, 401);
    }
    t.cleanup().await;
}

//! Sign-in under attack, through the real server: simultaneous guesses are counted before
//! any password is hashed, a flood of failed sign-ins costs bounded memory, hostile names
//! cannot flood the append-only audit log, and what a session, a cookie and a token may do
//! over time.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use lazarus::archive::{Actor, Role};
use lazarus::auth::AuthMode;
use serde_json::{json, Value};

use crate::auth::{as_user, sign_in, users_app, PASSWORD};
use crate::helpers::*;
use crate::served::{lazarus_cli, Served};

/// A sign-in form post from `source` (a loopback address of the test's choosing), with extra
/// headers; the status and the answer.
async fn sign_in_from(
    addr: SocketAddr,
    source: Option<IpAddr>,
    name: &str,
    password: &str,
    headers: &[(&str, &str)],
) -> HttpResponse {
    let form = format!(
        "name={}&password={}&next=/",
        form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>(),
        form_urlencoded::byte_serialize(password.as_bytes()).collect::<String>()
    );
    http_from(
        source,
        addr,
        "POST",
        "/login",
        headers,
        Some(("application/x-www-form-urlencoded", &form)),
    )
    .await
}

fn statuses(answers: &[HttpResponse]) -> std::collections::BTreeMap<u16, usize> {
    let mut out = std::collections::BTreeMap::new();
    for a in answers {
        *out.entry(a.status).or_default() += 1;
    }
    out
}

on_both_backends!(simultaneous_guesses_are_counted_before_any_password_is_hashed);
async fn simultaneous_guesses_are_counted_before_any_password_is_hashed() {
    let (app, t, _, _) = users_app(|_| {}).await;
    let addr = app.addr;
    let guesses: Vec<_> = (0..40)
        .map(|i| {
            tokio::spawn(async move {
                sign_in_from(addr, None, "otto", &format!("guess number {i}"), &[]).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for g in guesses {
        answers.push(g.await.unwrap());
    }
    let counts = statuses(&answers);
    eprintln!("40 simultaneous guesses: {counts:?}");
    assert!(
        counts.get(&401).copied().unwrap_or(0) <= lazarus::auth::MAX_FAILED_LOGINS as usize,
        "more guesses were tried than the limit allows: {counts:?}"
    );
    assert!(
        counts.keys().all(|s| [401, 429, 503].contains(s)),
        "{counts:?}"
    );
    let right = sign_in(&app, "otto", PASSWORD).await.unwrap_err();
    assert_eq!(
        right.status, 429,
        "the name is locked, even for its password"
    );
    t.cleanup().await;
}

#[tokio::test]
async fn a_flood_of_failed_sign_ins_costs_bounded_memory() {
    let p = unique("flood");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("archive.db").display());
    lazarus_cli(
        &db,
        &["user", "add", "ada", "--role", "admin"],
        Some(PASSWORD),
    );
    let served = Served::start(&dlq, &db, &["--auth", "users"], None).await;
    let addr = served.addr;
    let before = served.peak_rss_mib();

    // 200 at once from one address, each a different name.
    let flood: Vec<_> = (0..200)
        .map(|i| {
            tokio::spawn(async move {
                sign_in_from(addr, None, &format!("guess-{i}"), "wrong password!", &[]).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for f in flood {
        answers.push(f.await.unwrap());
    }
    let counts = statuses(&answers);
    eprintln!(
        "200 failed sign-ins from one address: {counts:?}, peak RSS {} MiB",
        served.peak_rss_mib()
    );
    assert!(
        counts.get(&401).copied().unwrap_or(0)
            <= lazarus::auth::MAX_FAILED_LOGINS_PER_ADDRESS as usize,
        "{counts:?}"
    );
    assert!(
        counts.keys().all(|s| [401, 429, 503].contains(s)),
        "{counts:?}"
    );

    // 200 at once from 200 addresses: no throttle applies, the hashing is bounded.
    let flood: Vec<_> = (0..200u8)
        .map(|i| {
            let source: IpAddr = format!("127.0.1.{}", i + 1).parse().unwrap();
            tokio::spawn(async move {
                sign_in_from(
                    addr,
                    Some(source),
                    &format!("nobody-{i}"),
                    "wrong password!",
                    &[],
                )
                .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for f in flood {
        answers.push(f.await.unwrap());
    }
    let counts = statuses(&answers);
    eprintln!("200 failed sign-ins from 200 addresses: {counts:?}");
    assert!(counts.keys().all(|s| [401, 503].contains(s)), "{counts:?}");
    assert!(answers
        .iter()
        .filter(|a| a.status == 503)
        .all(|a| a.header("retry-after").is_some()));
    let peak = served.peak_rss_mib();
    eprintln!("peak RSS before the floods: {before} MiB, after: {peak} MiB");
    assert!(
        peak < 200,
        "the sign-in floods took the server to {peak} MiB"
    );
    // It still signs people in.
    let ok = sign_in_from(
        addr,
        Some("127.0.2.1".parse().unwrap()),
        "ada",
        PASSWORD,
        &[],
    )
    .await;
    assert_eq!(ok.status, 303, "{}", ok.text());
    t.cleanup().await;
}

on_both_backends!(hostile_names_cannot_flood_the_audit_log);
async fn hostile_names_cannot_flood_the_audit_log() {
    let (app, t, _, _) = users_app(|_| {}).await;
    let huge = "n".repeat(3 * 1024 * 1024);
    for _ in 0..20 {
        let r = sign_in_from(app.addr, None, &huge, "whatever it is", &[]).await;
        assert!((400..500).contains(&r.status), "{}", r.status);
    }
    // Repeated failures for one name are recorded compactly.
    for i in 0..50 {
        let r = sign_in_from(app.addr, None, "otto", &format!("guess {i} !"), &[]).await;
        assert!([401, 429].contains(&r.status), "{}", r.status);
    }
    let bytes = count_rows(
        &app.database_url,
        "SELECT CAST(coalesce(sum(length(actor) + length(summary)), 0) AS BIGINT) FROM audit_log",
    )
    .await;
    let failures = count_rows(
        &app.database_url,
        "SELECT count(*) FROM audit_log WHERE action LIKE 'login%'",
    )
    .await;
    eprintln!("audit log after the flood: {failures} sign-in entries, {bytes} bytes");
    assert!(bytes < 64 * 1024, "the audit log grew by {bytes} bytes");
    assert!(
        failures <= 8,
        "{failures} entries for 50 failures of one name"
    );

    // An entry already huge (written before names were capped) does not break the pages.
    legacy_audit_entry(&app.database_url, &huge).await;
    let ada = sign_in(&app, "ada", PASSWORD).await.unwrap();
    let page = as_user(&app, &ada, "GET", "/audit", None).await;
    assert_eq!(
        page.status,
        200,
        "{}",
        &page.text()[..200.min(page.text().len())]
    );
    assert!(page.body.len() < 1024 * 1024, "{} bytes", page.body.len());
    let api = as_user(&app, &ada, "GET", "/api/audit?limit=500", None).await;
    assert_eq!(api.status, 200);
    assert!(api.body.len() < 1024 * 1024, "{} bytes", api.body.len());
    let export = as_user(&app, &ada, "GET", "/api/audit.ndjson", None).await;
    assert_eq!(export.status, 200);
    assert!(
        export.text().contains(&huge),
        "the export keeps every entry whole"
    );
    t.cleanup().await;
}

/// Appends an audit entry as an older Lazarus could: actor and summary of any size.
async fn legacy_audit_entry(database_url: &str, text: &str) {
    use sqlx::Connection;
    let insert =
        "INSERT INTO audit_log (at, actor, action, summary) VALUES (0, $1, 'login_failed', $1)";
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
            .await
            .unwrap();
        sqlx::query(&insert.replace("$1", "?1"))
            .bind(text)
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
        sqlx::query(insert)
            .bind(text)
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

on_both_backends!(one_load_balancer_does_not_lock_everybody_out);
async fn one_load_balancer_does_not_lock_everybody_out() {
    let (app, t, _, _) =
        users_app(|c| c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()]).await;
    // One client behind the balancer guesses until its address is locked...
    for i in 0..25 {
        let r = sign_in_from(
            app.addr,
            None,
            &format!("guess-{i}"),
            "wrong password!",
            &[("X-Forwarded-For", "203.0.113.7")],
        )
        .await;
        assert!([401, 429].contains(&r.status));
    }
    let locked = sign_in_from(
        app.addr,
        None,
        "vera",
        PASSWORD,
        &[("X-Forwarded-For", "203.0.113.7")],
    )
    .await;
    assert_eq!(locked.status, 429);
    // ...and everybody else behind it still signs in.
    let other = sign_in_from(
        app.addr,
        None,
        "vera",
        PASSWORD,
        &[("X-Forwarded-For", "198.51.100.2, 10.0.0.1")],
    )
    .await;
    assert_eq!(other.status, 303, "{}", other.text());
    // The audit log names the client, not the balancer.
    let ada = sign_in_from(
        app.addr,
        None,
        "ada",
        PASSWORD,
        &[("X-Forwarded-For", "198.51.100.3")],
    )
    .await;
    let cookie = ada
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let audit = as_user(&app, &cookie, "GET", "/api/audit", None).await;
    let audit: Value = serde_json::from_slice(&audit.body).unwrap();
    assert!(
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "login_failed" && e["source"] == "203.0.113.7"),
        "{audit}"
    );
    // An address that is not the balancer cannot pick its own address.
    for i in 0..25 {
        let r = sign_in_from(
            app.addr,
            Some("127.0.0.3".parse().unwrap()),
            &format!("spoof-{i}"),
            "wrong password!",
            &[("X-Forwarded-For", &format!("192.0.2.{i}"))],
        )
        .await;
        assert!([401, 429].contains(&r.status));
    }
    let spoofed = sign_in_from(
        app.addr,
        Some("127.0.0.3".parse().unwrap()),
        "vera",
        PASSWORD,
        &[("X-Forwarded-For", "192.0.2.200")],
    )
    .await;
    assert_eq!(
        spoofed.status, 429,
        "X-Forwarded-For counts only from the proxy"
    );
    t.cleanup().await;
}

on_both_backends!(proxy_mode_on_every_address_trusts_its_ipv4_proxy);
async fn proxy_mode_on_every_address_trusts_its_ipv4_proxy() {
    let app = TestApp::spawn_with(&[], |c| {
        c.auth = AuthMode::Proxy;
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
        c.listen = "[::]:0".parse().unwrap();
    })
    .await;
    // An IPv4 client of a dual-stack socket shows as ::ffff:127.0.0.1.
    let v4: SocketAddr = format!("127.0.0.1:{}", app.addr.port()).parse().unwrap();
    let r = http_with(
        v4,
        "GET",
        "/api/messages",
        &[("X-Forwarded-User", "vera")],
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

on_both_backends!(a_session_in_use_lasts_and_every_session_ends);
async fn a_session_in_use_lasts_and_every_session_ends() {
    let (app, t, _, _) = users_app(|c| {
        c.session_idle_secs = 2;
        c.session_max_secs = 6;
        c.secure_cookies = true;
    })
    .await;
    // Taken before the sign-in: the session is at most this old.
    let signed_in = Instant::now();
    let answer = sign_in_from(app.addr, None, "vera", PASSWORD, &[]).await;
    let cookie = answer.header("set-cookie").unwrap().to_owned();
    assert!(cookie.starts_with("__Host-lazarus_session="), "{cookie}");
    for part in [
        "Path=/",
        "HttpOnly",
        "SameSite=Strict",
        "Secure",
        "Max-Age=6",
    ] {
        assert!(cookie.split("; ").any(|p| p == part), "{part} in {cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_owned();
    // Used every 0.4 s (well within its 2 s idle limit), a session lasts until its absolute
    // lifetime, and not past it.
    let ended_at = loop {
        let r = as_user(&app, &cookie, "GET", "/api/messages", None).await;
        let age = signed_in.elapsed();
        if r.status == 401 {
            break age;
        }
        assert_eq!(r.status, 200);
        assert!(
            age < Duration::from_secs(6 + 5),
            "a session in use for {age:?} outlives --session-max-secs"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
    };
    assert!(
        ended_at > Duration::from_secs(6),
        "a session in use ended after {ended_at:?}: before its lifetime (idle limit 2 s)"
    );
    t.cleanup().await;
}

on_both_backends!(tokens_expire_and_end_with_the_admin_who_made_them);
async fn tokens_expire_and_end_with_the_admin_who_made_them() {
    let (app, t, _, _) = users_app(|_| {}).await;
    let ada = sign_in(&app, "ada", PASSWORD).await.unwrap();
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
    let expires = made["expires_at"].as_str().expect("a token expires");
    let expires =
        time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339)
            .unwrap();
    let days = (expires - time::OffsetDateTime::now_utc()).whole_days();
    assert!((89..=90).contains(&days), "90 days by default, not {days}");
    let short = as_user(
        &app,
        &ada,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "one-off", "role": "viewer", "expires_in_days": 1})),
    )
    .await;
    assert_eq!(short.status, 200, "{}", short.text());
    let too_long = as_user(
        &app,
        &ada,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "forever", "role": "viewer", "expires_in_days": 100000})),
    )
    .await;
    assert_eq!(too_long.status, 400, "{}", too_long.text());
    let bearer = format!("Bearer {}", made["token"].as_str().unwrap());
    let with_token = |bearer: String| async move {
        http_with(
            app.addr,
            "GET",
            "/api/messages",
            &[("Authorization", &bearer)],
            None,
        )
        .await
    };
    assert_eq!(with_token(bearer.clone()).await.status, 200);

    // An expired token is refused.
    let secret = "lzr_expired-token-secret";
    let hash = lazarus::auth::secret_hash(secret);
    let spec = lazarus::archive::TokenSpec {
        name: "old",
        grants: &[],
        token_hash: &hash,
        role: Role::Viewer,
        owner: None,
        expires_at: time::OffsetDateTime::now_utc() - time::Duration::seconds(1),
    };
    app.archive
        .create_token(&spec, &Actor::system("test"))
        .await
        .unwrap();
    let expired = with_token(format!("Bearer {secret}")).await;
    assert_eq!(expired.status, 401);
    assert!(expired.text().contains("expired"), "{}", expired.text());

    // Removing the admin who made a token revokes it.
    lazarus_cli(&app.database_url, &["user", "remove", "ada"], None);
    assert_eq!(with_token(bearer).await.status, 401);
    let tokens = app.archive.tokens().await.unwrap();
    let ci: Vec<_> = tokens.iter().filter(|t| t.name == "ci").collect();
    assert!(
        !ci.is_empty(),
        "a revoked token is kept, marked: {tokens:?}"
    );
    assert!(ci.iter().all(|t| t.revoked), "{ci:?}");
    t.cleanup().await;
}

on_both_backends!(weak_passwords_are_refused);
async fn weak_passwords_are_refused() {
    let (app, t, _, _) = users_app(|_| {}).await;
    for weak in [
        "          ",
        "aaaaaaaaaaaa",
        "password123",
        "1234567890",
        "qwertyuiop",
        "carl carl carl",
        "abababababab",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazarus"))
            .args(["user", "add", "carl", "--role", "viewer"])
            .args(["--database-url", &app.database_url])
            .env("LAZARUS_PASSWORD", weak)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{weak:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("password"), "{err}");
    }
    lazarus_cli(
        &app.database_url,
        &["user", "add", "carl", "--role", "viewer"],
        Some("correct horse battery staple"),
    );
    t.cleanup().await;
}

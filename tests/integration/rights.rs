//! Rights per vhost and queue, through the real HTTP server: three DLQs (a same-named one in
//! each of two tenants' vhosts, and one of the AMQP URL's vhost) hold real dead letters, and
//! callers whose roles are granted on patterns (`viewer of tenant-a/*`, `operator of
//! billing.*`) ask every route. What each sees and may do is checked route by route: a
//! viewer of one tenant finds nothing of the other by any route or search, counts included;
//! an operator's plan never holds a message they may not replay and says how many it left
//! out; routes of the whole archive refuse them.

use std::collections::BTreeSet;
use std::time::Duration;

use lapin::ExchangeKind;
use lazarus::archive::{Actor, Grant, Role, TokenSpec};
use lazarus::auth::{hash_password, secret_hash, AuthMode, TOKEN_PREFIX};
use serde_json::{json, Value};

use lazarus::archive::selection::query_value as encoded;
use lazarus::message::dlq::escape as escaped;

use crate::helpers::*;

/// Messages dead-lettered into each DLQ.
const EACH: usize = 3;

/// In the vhost at `url`: `work` dead-letters every message at once into `dlq`; `n` messages
/// whose bodies hold `word` and a word every DLQ's messages share.
async fn dying(url: &str, work: &str, dlq: &str, word: &str, n: usize) -> Topology {
    let mut t = Topology::on(url).await;
    t.exchange("orders", ExchangeKind::Direct).await;
    t.queue(dlq, Default::default()).await;
    dying_queue(&mut t, work, dlq).await;
    t.bind(work, "orders", "order").await;
    for i in 0..n {
        let body = format!(r#"{{"note": "sharedword {word} number {i}"}}"#);
        t.publish(
            "orders",
            "order",
            body.as_bytes(),
            json_props(&format!("{word}-{i}")),
        )
        .await;
    }
    t
}

struct World {
    app: TestApp,
    /// The DLQs' keys: tenant a's, tenant b's, the home vhost's billing DLQ.
    a: String,
    b: String,
    billing: String,
    _vhosts: [Vhost; 3],
    _topologies: [Topology; 3],
}

impl World {
    async fn new() -> World {
        let home = Vhost::create("home");
        let tenant_a = Vhost::create("tenant-a");
        let tenant_b = Vhost::create("tenant-b");
        let a = format!("{}/orders.dlq", escaped(&tenant_a.name));
        let b = format!("{}/orders.dlq", escaped(&tenant_b.name));
        let billing = "billing.dlq".to_owned();
        let topologies = [
            dying(
                &tenant_a.url(),
                "orders.work",
                "orders.dlq",
                "alphaword",
                EACH,
            )
            .await,
            dying(
                &tenant_b.url(),
                "orders.work",
                "orders.dlq",
                "betaword",
                EACH,
            )
            .await,
            dying(&home.url(), "billing.work", "billing.dlq", "billword", EACH).await,
        ];
        let app = TestApp::spawn_with(&[&a, &b, &billing], |c| {
            c.connection.amqp_url = home.url().into();
            c.auth = AuthMode::Users;
        })
        .await;
        app.wait_for_archived(3 * EACH as i64, Duration::from_secs(30))
            .await;
        World {
            app,
            a,
            b,
            billing,
            _vhosts: [home, tenant_a, tenant_b],
            _topologies: topologies,
        }
    }

    /// A token with these grants (none: `role` everywhere), made on the command line.
    async fn token(&self, name: &str, role: Role, grants: &[Grant]) -> String {
        let token = format!("{TOKEN_PREFIX}{name}-secret-of-the-test");
        let hash = secret_hash(&token);
        self.app
            .archive
            .create_token(
                &TokenSpec {
                    name,
                    token_hash: &hash,
                    role,
                    grants,
                    owner: None,
                    expires_at: time::OffsetDateTime::now_utc() + time::Duration::days(1),
                },
                &Actor::system("test"),
            )
            .await
            .unwrap();
        token
    }

    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> HttpResponse {
        let bearer = format!("Bearer {token}");
        let body = body.map(|b| b.to_string());
        http_with(
            self.app.addr,
            method,
            path,
            &[("Authorization", &bearer), ("Accept", "application/json")],
            body.as_deref().map(|b| ("application/json", b)),
        )
        .await
    }

    async fn json(&self, token: &str, path: &str) -> Value {
        let answer = self.call(token, "GET", path, None).await;
        assert_eq!(answer.status, 200, "GET {path}: {}", answer.text());
        serde_json::from_slice(&answer.body).unwrap()
    }

    /// The DLQs (keys) of the messages `GET /api/messages?QUERY` lists, and how many.
    async fn listed(&self, token: &str, query: &str) -> (BTreeSet<String>, usize) {
        let page = self
            .json(token, &format!("/api/messages?limit=500&{query}"))
            .await;
        let messages = page["messages"].as_array().unwrap();
        let queues = messages
            .iter()
            .map(|m| m["queue"].as_str().unwrap().to_owned())
            .collect();
        (queues, messages.len())
    }

    /// One message id of `queue`, as the admin sees it.
    async fn id_of(&self, admin: &str, queue: &str) -> String {
        let page = self
            .json(admin, &format!("/api/messages?queue={}", encoded(queue)))
            .await;
        page["messages"][0]["id"].as_str().unwrap().to_owned()
    }
}

fn grant(role: Role, on: &str) -> Grant {
    Grant {
        role,
        on: on.to_owned(),
    }
}

on_both_backends!(each_route_shows_and_changes_only_what_the_rights_reach);
async fn each_route_shows_and_changes_only_what_the_rights_reach() {
    let w = World::new().await;
    let tenant_a = w.a.split('/').next().unwrap().to_owned();
    let admin = w.token("admin", Role::Admin, &[]).await;
    let vera = w
        .token(
            "vera",
            Role::Viewer,
            &[grant(Role::Viewer, &format!("{tenant_a}/*"))],
        )
        .await;
    let olga = w
        .token(
            "olga",
            Role::Operator,
            &[grant(Role::Operator, &format!("{tenant_a}/*"))],
        )
        .await;
    let bill = w
        .token(
            "bill",
            Role::Operator,
            &[grant(Role::Operator, "billing.*")],
        )
        .await;
    let (id_a, id_b, id_billing) = (
        w.id_of(&admin, &w.a).await,
        w.id_of(&admin, &w.b).await,
        w.id_of(&admin, &w.billing).await,
    );

    // The admin sees all three DLQs.
    let (queues, n) = w.listed(&admin, "q=sharedword").await;
    assert_eq!(n, 3 * EACH);
    assert_eq!(
        queues,
        BTreeSet::from([w.a.clone(), w.b.clone(), w.billing.clone()])
    );

    // Lists and searches: only tenant a's, by any filter or word.
    for (who, token, theirs) in [
        ("vera", &vera, &w.a),
        ("olga", &olga, &w.a),
        ("bill", &bill, &w.billing),
    ] {
        let (queues, n) = w.listed(token, "").await;
        assert_eq!(
            (queues, n),
            (BTreeSet::from([theirs.clone()]), EACH),
            "{who}"
        );
        let (queues, n) = w.listed(token, "q=sharedword").await;
        assert_eq!(
            (queues, n),
            (BTreeSet::from([theirs.clone()]), EACH),
            "{who} searching"
        );
        for other in [&w.a, &w.b, &w.billing]
            .into_iter()
            .filter(|q| *q != theirs)
        {
            let (_, n) = w.listed(token, &format!("queue={}", encoded(other))).await;
            assert_eq!(n, 0, "{who} asking for {other} by filter");
            let (_, n) = w
                .listed(
                    token,
                    &format!("q={}", encoded(&format!("queue:\"{other}\""))),
                )
                .await;
            assert_eq!(n, 0, "{who} asking for {other} by search");
        }
        let (_, n) = w.listed(token, "q=betaword").await;
        let expected = if theirs == &w.b { EACH } else { 0 };
        assert_eq!(n, expected, "{who}: another tenant's word");
    }
    // Counts: the list's count says theirs only.
    let count = w
        .call(&vera, "GET", "/messages/count?q=sharedword", None)
        .await;
    assert_eq!(count.status, 200);
    assert_eq!(count.text(), format!("{EACH} match"));

    // One message, its body, its page: another tenant's is not found, as if not there.
    for path in [
        format!("/api/messages/{id_b}"),
        format!("/api/messages/{id_b}/body"),
        format!("/messages/{id_b}"),
        format!("/api/messages/{id_billing}"),
    ] {
        let answer = w.call(&vera, "GET", &path, None).await;
        assert_eq!(answer.status, 404, "vera GET {path}: {}", answer.text());
        assert!(!answer.text().contains("betaword"), "{path}");
    }
    for path in [
        format!("/api/messages/{id_a}"),
        format!("/api/messages/{id_a}/body"),
    ] {
        assert_eq!(
            w.call(&vera, "GET", &path, None).await.status,
            200,
            "{path}"
        );
    }

    // Groups and the overview: theirs only, with their counts.
    let groups = w.json(&vera, "/api/groups").await;
    let groups = groups["groups"].as_array().unwrap();
    assert!(!groups.is_empty(), "vera sees her groups");
    for g in groups {
        assert_eq!(g["queue"].as_str(), Some(w.a.as_str()), "{g}");
    }
    let by_reason = w.json(&vera, "/api/groups?group_by=reason").await;
    let total: i64 = by_reason["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["total"].as_i64().unwrap())
        .sum();
    assert_eq!(
        total, EACH as i64,
        "grouped by reason, her messages only: {by_reason}"
    );
    let overview = w.call(&vera, "GET", "/", None).await;
    assert_eq!(overview.status, 200);
    let page = overview.text();
    assert!(page.contains(&w.a), "the overview shows her DLQ");
    let tenant_b = w.b.split('/').next().unwrap();
    assert!(
        !page.contains(tenant_b) && !page.contains("billing.dlq"),
        "{page}"
    );

    // Metrics: her DLQ's series, nothing of the others, no instance-wide totals.
    let metrics = w.call(&vera, "GET", "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    let metrics = metrics.text();
    assert!(metrics.contains(&w.a), "her DLQ's series are there");
    assert!(
        !metrics.contains(tenant_b) && !metrics.contains("billing.dlq"),
        "{metrics}"
    );
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains("queue=\""), "a series of no DLQ: {line}");
    }

    // Readiness: whether ready, not which DLQ (that would name the others).
    let ready = w.call(&vera, "GET", "/readyz", None).await;
    let ready: Value = serde_json::from_slice(&ready.body).unwrap();
    assert!(
        ready.get("ready").is_some() && ready.get("queues").is_none(),
        "{ready}"
    );
    let ready = w.call(&admin, "GET", "/readyz", None).await;
    let ready: Value = serde_json::from_slice(&ready.body).unwrap();
    assert!(
        ready["queues"].get(&w.b).is_some(),
        "the admin sees every DLQ: {ready}"
    );

    // A viewer may not replay; an operator of another tenant's DLQ may not touch this one.
    let plan = |ids: Vec<&String>| json!({"ids": ids, "dry_run": true});
    assert_eq!(
        w.call(&vera, "POST", "/api/replays", Some(plan(vec![&id_a])))
            .await
            .status,
        403
    );
    let replay = w
        .call(
            &bill,
            "POST",
            &format!("/api/messages/{id_a}/replay"),
            Some(json!({})),
        )
        .await;
    assert_eq!(replay.status, 404, "{}", replay.text());
    let dismiss = w
        .call(
            &bill,
            "POST",
            &format!("/api/messages/{id_a}/dismiss"),
            Some(json!({"note": "no"})),
        )
        .await;
    assert_eq!(dismiss.status, 404, "{}", dismiss.text());
    let dismissed = w
        .call(
            &bill,
            "POST",
            "/api/messages/dismiss",
            Some(json!({"ids": [id_a], "note": "no"})),
        )
        .await;
    assert_eq!(dismissed.status, 200, "{}", dismissed.text());
    assert_eq!(
        serde_json::from_slice::<Value>(&dismissed.body).unwrap()["dismissed"],
        0
    );

    // Plans: an operator's holds only the messages they may replay.
    let mixed = w
        .call(
            &olga,
            "POST",
            "/api/replays",
            Some(plan(vec![&id_a, &id_b, &id_billing])),
        )
        .await;
    assert_eq!(mixed.status, 200, "{}", mixed.text());
    let mixed: Value = serde_json::from_slice(&mixed.body).unwrap();
    assert_eq!(mixed["total"], 1, "{mixed}");
    assert_eq!(
        mixed["left_out"], 0,
        "what she cannot see is not counted to her"
    );
    let everything = w
        .call(
            &olga,
            "POST",
            "/api/replays",
            Some(json!({"filter": {}, "all": true, "dry_run": true})),
        )
        .await;
    let everything: Value = serde_json::from_slice(&everything.body).unwrap();
    assert_eq!(everything["total"], EACH as i64, "{everything}");

    // Jobs: each sees their own; another's is not found, not to be controlled.
    let admins = w
        .call(
            &admin,
            "POST",
            "/api/replays",
            Some(json!({"filter": {}, "all": true, "dry_run": true})),
        )
        .await;
    let admins: Value = serde_json::from_slice(&admins.body).unwrap();
    assert_eq!(admins["total"], 3 * EACH as i64);
    let admin_job = admins["id"].as_str().unwrap();
    let listed = w.json(&olga, "/api/replays").await;
    let ids: Vec<&str> = listed["replays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&mixed["id"].as_str().unwrap()), "{listed}");
    assert!(!ids.contains(&admin_job), "{listed}");
    for (method, path) in [
        ("GET", format!("/api/replays/{admin_job}")),
        ("GET", format!("/api/replays/{admin_job}/items")),
        ("POST", format!("/api/replays/{admin_job}/cancel")),
    ] {
        assert_eq!(
            w.call(&olga, method, &path, None).await.status,
            404,
            "{method} {path}"
        );
    }

    // Routes of the whole archive refuse a caller whose rights are of some DLQs only.
    for (method, path) in [
        ("GET", "/api/dlqs"),
        ("GET", "/api/audit"),
        ("GET", "/api/export"),
        ("GET", "/api/admin/users"),
    ] {
        let answer = w.call(&olga, method, path, None).await;
        assert_eq!(answer.status, 403, "{method} {path}: {}", answer.text());
    }
}

on_both_backends!(a_plan_says_what_it_left_out_and_a_token_is_capped_by_its_owner);
/// A caller who may view every DLQ but replay tenant a's only: their plan of everything holds
/// tenant a's and says how many it left out. A signed-in user granted tenant a's DLQs sees
/// those; her token made for everything is kept to them too.
async fn a_plan_says_what_it_left_out_and_a_token_is_capped_by_its_owner() {
    let w = World::new().await;
    let tenant_a = w.a.split('/').next().unwrap().to_owned();
    let mixed = w
        .token(
            "mixed",
            Role::Operator,
            &[
                grant(Role::Viewer, "*/*"),
                grant(Role::Operator, &format!("{tenant_a}/*")),
            ],
        )
        .await;
    let (queues, n) = w.listed(&mixed, "").await;
    assert_eq!(n, 3 * EACH, "{queues:?}");
    let plan = w
        .call(
            &mixed,
            "POST",
            "/api/replays",
            Some(json!({"filter": {"q": "sharedword"}, "dry_run": true})),
        )
        .await;
    assert_eq!(plan.status, 200, "{}", plan.text());
    let plan: Value = serde_json::from_slice(&plan.body).unwrap();
    assert_eq!(plan["total"], EACH as i64, "{plan}");
    assert_eq!(plan["left_out"], 2 * EACH as i64, "{plan}");

    // A user with grants, signed in with a password.
    let hash = hash_password(crate::auth::PASSWORD).unwrap();
    w.app
        .archive
        .put_user(
            "ana",
            Some(&hash),
            Role::Viewer,
            &[grant(Role::Viewer, &format!("{tenant_a}/*"))],
            &Actor::system("test"),
        )
        .await
        .unwrap();
    let cookie = crate::auth::sign_in(&w.app, "ana", crate::auth::PASSWORD)
        .await
        .unwrap();
    let page = crate::auth::as_user(&w.app, &cookie, "GET", "/api/messages", None).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let page: Value = serde_json::from_slice(&page.body).unwrap();
    let queues: BTreeSet<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["queue"].as_str().unwrap())
        .collect();
    assert_eq!(queues, BTreeSet::from([w.a.as_str()]));
    // Her token asks for viewer of every DLQ: it has hers, no more.
    let made = crate::auth::as_user(
        &w.app,
        &cookie,
        "POST",
        "/api/admin/tokens",
        Some(json!({"name": "ana-all", "role": "viewer"})),
    )
    .await;
    assert_eq!(made.status, 403, "only admins make tokens: {}", made.text());
    let token = format!("{TOKEN_PREFIX}ana-token-of-the-test");
    let hash = secret_hash(&token);
    w.app
        .archive
        .create_token(
            &TokenSpec {
                name: "ana-all",
                token_hash: &hash,
                role: Role::Viewer,
                grants: &[],
                owner: Some("ana"),
                expires_at: time::OffsetDateTime::now_utc() + time::Duration::days(1),
            },
            &Actor::system("test"),
        )
        .await
        .unwrap();
    let (queues, n) = w.listed(&token, "q=sharedword").await;
    assert_eq!((queues, n), (BTreeSet::from([w.a.clone()]), EACH));
}

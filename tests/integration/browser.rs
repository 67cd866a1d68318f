//! In headless Chromium (through chromedriver's WebDriver protocol), with real messages
//! dead-lettered through RabbitMQ: search for an invoice, open it, see its death timeline
//! and pretty JSON, check that a `<script>` in a body never runs, and replay it.

use std::time::Duration;

use lapin::options::BasicRejectOptions;
use lapin::ExchangeKind;

use crate::helpers::*;

#[tokio::test]
async fn search_open_read_and_replay_a_dead_letter_in_chromium_without_running_its_script() {
    let p = unique("browser");
    let (billing, dlx, invoices, dlq) = (
        format!("{p}.billing"),
        format!("{p}.dlx"),
        format!("{p}.invoices"),
        format!("{p}.invoices.dlq"),
    );
    let mut t = Topology::new().await;
    t.exchange(&billing, ExchangeKind::Topic).await;
    t.exchange(&dlx, ExchangeKind::Fanout).await;
    t.queue(&dlq, Default::default()).await;
    t.bind(&dlq, &dlx, "").await;
    t.queue(&invoices, args(&[("x-dead-letter-exchange", s(&dlx))]))
        .await;
    t.bind(&invoices, &billing, "invoice.*").await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.fields = vec!["invoice=/invoice_id".parse().unwrap()]
    })
    .await;
    let worker = spawn_worker(&amqp_url(), &invoices, |_, d| async move {
        d.reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
    })
    .await;
    let hostile = r#"{"invoice_id": "INV-2026-00042", "customer": "Ada", "note": "<script>window.pwned = 1; alert('pwned')</script><img src=x onerror=\"window.pwned = 2\">"}"#;
    for (id, body) in [
        (
            "INV-2026-00041",
            r#"{"invoice_id": "INV-2026-00041", "customer": "Grace"}"#.to_owned(),
        ),
        ("INV-2026-00042", hostile.to_owned()),
        (
            "INV-2026-00043",
            r#"{"invoice_id": "INV-2026-00043", "customer": "Alan"}"#.to_owned(),
        ),
    ] {
        t.publish(&billing, "invoice.created", body.as_bytes(), json_props(id))
            .await;
    }
    app.wait_for_archived(3, Duration::from_secs(20)).await;
    worker.abort();

    let browser = Browser::start().await;
    browser.go(&format!("http://{}/messages", app.addr)).await;
    browser
        .type_into("input[name=q]", "invoice:INV-2026-00042")
        .await;
    // Live results: only the one invoice stays in the list, and the URL follows the search.
    browser
        .wait_text("#results", "only INV-2026-00042", |t| {
            t.contains("INV-2026-00042") && !t.contains("INV-2026-00041")
        })
        .await;
    let url = browser.call("GET", "/url", None).await;
    assert!(
        url.as_str().unwrap().contains("q=invoice%3AINV-2026-00042"),
        "the URL holds the search: {url}"
    );

    let link = browser.find("#results tbody a").await;
    browser
        .call("POST", &format!("/element/{link}/click"), None)
        .await;
    let timeline = browser
        .wait_text("ol.timeline", "the death", |t| t.contains("rejected"))
        .await;
    assert!(
        timeline.contains(&format!("rejected in {invoices} × 1")),
        "{timeline}"
    );
    let key = browser.text("pre.payload .j-key").await;
    assert_eq!(key, "\"invoice_id\"", "pretty JSON, highlighted");
    let payload = browser.text("pre.payload").await;
    assert!(
        payload.contains("<script>window.pwned = 1;"),
        "the script is shown as text: {payload}"
    );

    // Nothing from the body ran: no global, no dialog.
    assert_eq!(
        browser.script("return typeof window.pwned").await,
        "undefined"
    );
    let alert = browser.call("GET", "/alert/text", None).await;
    assert_eq!(alert["error"], "no such alert", "a dialog opened: {alert}");

    // Replay it from the page: confirmed by the broker, back in the invoices queue.
    let button = browser.find("form[hx-post$='/replay'] button").await;
    browser
        .call("POST", &format!("/element/{button}/click"), None)
        .await;
    let result = browser
        .wait_text("#replay-result", "the outcome", |t| !t.is_empty())
        .await;
    assert!(result.contains("published"), "{result}");
    t.wait_for_depth(&invoices, 1, Duration::from_secs(5)).await;

    // Bulk: every message of the DLQ, planned, started, followed live until done.
    browser
        .go(&format!("http://{}/messages?queue={dlq}", app.addr))
        .await;
    let all = browser.find("#select-all-matching").await;
    browser
        .call("POST", &format!("/element/{all}/click"), None)
        .await;
    let plan = browser.find("button[value=plan]").await;
    browser
        .call("POST", &format!("/element/{plan}/click"), None)
        .await;
    let summary = browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    assert!(summary.starts_with("Replay plan"), "{summary}");
    let skipped = browser.text("dl.props").await;
    assert!(skipped.contains("1 already replayed"), "{skipped}");
    let start = browser.find("#job-progress button").await;
    browser
        .call("POST", &format!("/element/{start}/click"), None)
        .await;
    // htmx polls the progress every second until the job is done.
    let progress = browser
        .wait_text("#job-progress", "the job to complete", |t| {
            t.contains("completed")
        })
        .await;
    assert!(progress.contains("3 of 3 messages done"), "{progress}");
    t.wait_for_depth(&invoices, 3, Duration::from_secs(5)).await;
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn an_htmx_error_shows_the_servers_message_as_plain_text() {
    let p = unique("toast");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    t.publish("", &dlq, b"{}", json_props("toast-1")).await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    let id = app.ids(&dlq).await.remove(0);

    let browser = Browser::start().await;
    browser
        .go(&format!("http://{}/messages/{id}", app.addr))
        .await;
    // An HTML error partial: the exchange does not exist, and its name has `&` and `'`.
    browser
        .type_into(
            "form[hx-post$='/replay'] input[name=exchange]",
            "no&such'exchange",
        )
        .await;
    browser
        .type_into(
            "form[hx-post$='/replay'] input[name=routing_key]",
            "anywhere",
        )
        .await;
    let button = browser.find("form[hx-post$='/replay'] button").await;
    browser
        .call("POST", &format!("/element/{button}/click"), None)
        .await;
    let toast = browser
        .wait_text("#toasts .error-box", "the error", |t| !t.is_empty())
        .await;
    assert!(
        toast.contains("exchange \"no&such'exchange\" does not exist"),
        "the toast reads as the server said it: {toast}"
    );
    assert!(
        !toast.contains("&quot;") && !toast.contains("&amp;"),
        "{toast}"
    );

    // A JSON error (an unknown route answers JSON).
    browser
        .script("document.getElementById('toasts').textContent = ''; htmx.ajax('GET', '/nowhere', '#replay-result');")
        .await;
    let toast = browser
        .wait_text("#toasts .error-box", "the error", |t| !t.is_empty())
        .await;
    assert_eq!(toast, "no route for /nowhere");
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn the_searched_url_holds_only_filters_in_use_and_back_restores_the_form() {
    let p = unique("history");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    for (id, word) in [("h-alpha", "alpha"), ("h-beta", "beta")] {
        let body = format!(r#"{{"word": "{word}"}}"#);
        t.publish("", &dlq, body.as_bytes(), json_props(id)).await;
    }
    app.wait_for_archived(2, Duration::from_secs(10)).await;

    let browser = Browser::start().await;
    browser.go(&format!("http://{}/messages", app.addr)).await;
    let url = || async {
        browser
            .call("GET", "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    };
    browser.type_into("input[name=q]", "alpha").await;
    browser
        .wait_text("#results", "only h-alpha", |t| {
            t.contains("h-alpha") && !t.contains("h-beta")
        })
        .await;
    let searched = url().await;
    assert!(
        searched.ends_with("/messages?q=alpha"),
        "no empty filters in the URL: {searched}"
    );
    browser.type_into("input[name=q]", "beta").await;
    browser
        .wait_text("#results", "only h-beta", |t| {
            t.contains("h-beta") && !t.contains("h-alpha")
        })
        .await;
    // Back (past the cleared box, itself a step) to the search for alpha: the rows and the
    // search box both as the URL says (the box held "beta").
    for _ in 0..3 {
        if url().await.ends_with("?q=alpha") {
            break;
        }
        browser.call("POST", "/back", None).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(url().await.ends_with("?q=alpha"), "{}", url().await);
    browser
        .wait_text("#results", "h-alpha again", |t| {
            t.contains("h-alpha") && !t.contains("h-beta")
        })
        .await;
    let typed = browser
        .script("return document.querySelector('input[name=q]').value")
        .await;
    assert_eq!(typed, "alpha", "the form follows the URL");
    assert!(browser.text(".chips").await.contains("search: alpha"));
    browser.quit().await;
    t.cleanup().await;
}

/// Waits up to `secs` until the text of `css` satisfies `check` — the page is never reloaded.
async fn wait_live(
    browser: &Browser,
    css: &str,
    what: &str,
    secs: u64,
    check: impl Fn(&str) -> bool,
) {
    // Each look asks the browser: every 250 ms.
    let patience = Patience::within(Duration::from_secs(secs)).every(Duration::from_millis(250));
    wait_showing(&format!("{css} to show {what}"), patience, async || {
        let text = browser.text(css).await;
        if check(&text) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await
}

#[tokio::test]
async fn a_group_replayed_after_a_hotfix_resolves_on_the_overview_without_a_reload() {
    let p = unique("hotfix");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn_with(&[&dlq], |c| c.settle_secs = 2).await;
    let worker = rejecting_worker(&work).await;
    for i in 0..4 {
        t.publish(
            "",
            &work,
            br#"{"order": 1}"#,
            json_props(&format!("{p}-{i}")),
        )
        .await;
    }
    app.wait_for_archived(4, Duration::from_secs(20)).await;
    worker.abort();

    let browser = Browser::start().await;
    browser.go(&format!("http://{}/", app.addr)).await;
    // The archive is this test's own: its one failure group.
    let group = "table.groups tbody tr";
    assert_eq!(
        browser.text(&format!("{group} [data-group-open]")).await,
        "4"
    );
    assert_eq!(browser.text(&format!("[data-open='{dlq}']")).await, "4");

    // The hotfix: the worker now takes what it is given. Replay the group from its row.
    let fixed = acking_worker(&work).await;
    let replay = browser
        .find(&format!("{group} summary[title^='Plan a replay']"))
        .await;
    browser
        .call("POST", &format!("/element/{replay}/click"), None)
        .await;
    let plan = browser
        .find(&format!("{group} details[open] button[type=submit]"))
        .await;
    browser
        .call("POST", &format!("/element/{plan}/click"), None)
        .await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    let plan = browser.text("dl.props").await;
    assert!(
        plan.contains("4"),
        "the plan holds the group's 4 messages: {plan}"
    );
    let start = browser.find("#job-progress button").await;
    browser
        .call("POST", &format!("/element/{start}/click"), None)
        .await;
    browser
        .wait_text("#job-progress", "the job to complete", |t| {
            t.contains("completed")
        })
        .await;
    // The heading follows, with no reload.
    browser
        .wait_text("h1", "the heading to follow", |t| {
            t.contains("Replay job (completed)")
        })
        .await;

    // Back on the overview, still open while the replays settle; then, with no reload, the
    // counts fall to nothing and the group says it is resolved.
    browser.go(&format!("http://{}/", app.addr)).await;
    browser
        .script("document.body.dataset.loadedOnce = 'yes'; return 1")
        .await;
    wait_live(
        &browser,
        &format!("[data-open='{dlq}']"),
        "no open message",
        20,
        |t| t == "0",
    )
    .await;
    wait_live(
        &browser,
        &format!("{group} [data-group-open]"),
        "the group resolved",
        10,
        |t| t == "0",
    )
    .await;
    assert!(browser.text(group).await.contains("resolved"));
    assert_eq!(
        browser
            .script("return document.body.dataset.loadedOnce")
            .await,
        "yes",
        "the page was not reloaded"
    );
    // Every message is settled, none lost: the four copies were taken by the fixed worker.
    let resolved = app
        .json(&format!("/api/messages?queue={dlq}&status=resolved"), 200)
        .await;
    assert_eq!(resolved["messages"].as_array().unwrap().len(), 4);
    assert!(resolved["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["status"] == "settled" && m["open"] == false));
    fixed.abort();
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn pages_fit_a_phone_and_follow_the_dark_theme() {
    let p = unique("phone");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.fields = vec!["invoice=/invoice_id".parse().unwrap()]
    })
    .await;
    let worker = rejecting_worker(&work).await;
    let trace = "java.lang.IllegalStateException: card processor timed out after 30000 ms\n\tat com.shop.billing.Charge.run(Charge.java:88)\n\tat com.shop.billing.Worker.handle(Worker.java:41)";
    for i in 0..6 {
        let mut headers = lapin::types::FieldTable::default();
        let error = if i % 3 == 0 {
            "KeyError: 'customer_id'"
        } else {
            trace
        };
        headers.insert("x-exception-message".into(), s(error));
        let body = format!(
            r#"{{"invoice_id": "INV-2026-{i:05}", "customer": "a-very-long-customer-name-without-any-space-{i}", "amount": {}}}"#,
            100 + i
        );
        t.publish(
            "",
            &work,
            body.as_bytes(),
            json_props(&format!("{p}-{i}")).with_headers(headers),
        )
        .await;
    }
    app.wait_for_archived(6, Duration::from_secs(20)).await;
    worker.abort();
    let id = app.ids(&dlq).await[1].clone();

    let browser = Browser::start().await;
    let base = format!("http://{}", app.addr);
    let pages = [
        ("overview", "/".to_owned()),
        ("messages", format!("/messages?queue={dlq}")),
        ("message", format!("/messages/{id}")),
        ("replays", "/replays".to_owned()),
        ("api", "/api".to_owned()),
    ];
    // Desktop, light: the message page names the invoice and shows its error first, the
    // stack trace wrapped.
    browser.resize(DESKTOP).await;
    browser.go(&format!("{base}/messages/{id}")).await;
    let title = browser.script("return document.title").await;
    assert!(title.as_str().unwrap().starts_with("INV-2026-"), "{title}");
    let error = browser.text(".error-first").await;
    assert!(
        error.contains("IllegalStateException") || error.contains("KeyError"),
        "{error}"
    );
    let favicon = browser
        .script("return document.querySelector('link[rel=icon]').href")
        .await;
    assert!(favicon.as_str().unwrap().ends_with(".svg"), "{favicon}");
    let icon = app.get("/static/favicon-1.svg").await;
    assert_eq!(icon.status, 200);

    // A laptop and a phone, light and dark: nothing wider than the window on any page, the
    // background following the system's scheme; the README's pictures of the overview, the
    // list and a message in each.
    for (size, dark) in EVERY_LOOK {
        browser.resize(size).await;
        browser.dark(dark).await;
        for (name, path) in &pages {
            browser.go(&format!("{base}{path}")).await;
            browser.find("main").await;
            let over = browser.overflow().await;
            assert!(
                over.is_null(),
                "{path} at {size:?} is wider than its window: {over}"
            );
            let background = browser
                .script("return getComputedStyle(document.body).backgroundColor")
                .await;
            let expected = if dark {
                "rgb(18, 21, 28)"
            } else {
                "rgb(246, 247, 249)"
            };
            assert_eq!(background, expected, "{path} at {size:?}, dark {dark}");
            if ["overview", "messages", "message"].contains(name) {
                let suffix = match (size == PHONE, dark) {
                    (false, false) => "",
                    (true, false) => "-phone",
                    (false, true) => "-dark",
                    (true, true) => "-phone-dark",
                };
                browser.screenshot(&format!("{name}{suffix}")).await;
            }
        }
    }
    // The skip link is the first thing a keyboard reaches, and leads to the content.
    let skip = browser
        .script("return document.querySelector('body > a.skip').getAttribute('href')")
        .await;
    assert_eq!(skip, "#main");
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn selection_mistakes_are_answered_beside_the_form() {
    let p = unique("mistake");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    for i in 0..2 {
        t.publish("", &dlq, b"{}", json_props(&format!("{p}-{i}")))
            .await;
    }
    app.wait_for_archived(2, Duration::from_secs(10)).await;
    let browser = Browser::start().await;
    let list = format!("http://{}/messages?queue={dlq}", app.addr);
    browser.go(&list).await;
    let click = |css: &'static str| {
        let browser = &browser;
        async move {
            let button = browser.find(css).await;
            browser
                .call("POST", &format!("/element/{button}/click"), None)
                .await;
        }
    };
    // Nothing ticked: said beside the form, the page stays.
    click("button[value=plan]").await;
    browser
        .wait_text("#selection-error", "the mistake", |t| {
            t.contains("tick the messages to act on")
        })
        .await;
    assert_eq!(browser.call("GET", "/url", None).await, list.as_str());
    // Ticked, but dismissed without a note.
    click("input.select-row").await;
    click("button[value=dismiss]").await;
    browser
        .wait_text("#selection-error", "the missing note", |t| {
            t.contains("say why in a note")
        })
        .await;
    assert_eq!(browser.call("GET", "/url", None).await, list.as_str());
    // How many match, and "all of them" once every match is selected.
    browser
        .wait_text("#match-count", "the count", |t| t == "2 match")
        .await;
    click("#select-all-matching").await;
    assert_eq!(browser.text("#selected-count").await, "all 2 selected");
    click("#select-all-matching").await;
    assert_eq!(
        browser.text("#selected-count").await,
        "1 selected on this page"
    );
    // Put right, it goes through: the plan page opens.
    click("button[value=plan]").await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_group_dismissed_from_the_overview_resolves_and_a_lost_server_is_said() {
    let p = unique("dismissgroup");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let mut app = TestApp::spawn(&[&dlq]).await;
    for i in 0..3 {
        t.publish("", &dlq, b"{}", json_props(&format!("{p}-{i}")))
            .await;
    }
    app.wait_for_archived(3, Duration::from_secs(10)).await;
    let browser = Browser::start().await;
    browser.go(&format!("http://{}/", app.addr)).await;
    let group = "table.groups tbody tr";
    assert_eq!(
        browser.text(&format!("{group} [data-group-open]")).await,
        "3"
    );
    // Relative times beside the UTC ones.
    let ago = browser.text(&format!("{group} .ago")).await;
    assert!(ago.contains("just now") || ago.contains("min ago"), "{ago}");

    // Dismiss group…: a note is asked for beside the row, then back on the overview.
    let summary = browser
        .find(&format!("{group} details.dismiss-group summary"))
        .await;
    browser
        .call("POST", &format!("/element/{summary}/click"), None)
        .await;
    browser
        .type_into(
            &format!("{group} details[open] input[name=note]"),
            "duplicates of refunded orders",
        )
        .await;
    let dismiss = browser
        .find(&format!("{group} details[open] button.danger"))
        .await;
    browser
        .call("POST", &format!("/element/{dismiss}/click"), None)
        .await;
    browser
        .wait_text(
            &format!("{group} [data-group-open]"),
            "the group resolved",
            |t| t == "0",
        )
        .await;
    assert!(browser.text(group).await.contains("resolved"));
    // What was done is said, until dismissed.
    let said = browser.text("#toasts [role=status]").await;
    assert_eq!(said, "Dismissed 3 messages.");
    let dismissed = app
        .json(&format!("/api/messages?queue={dlq}&status=dismissed"), 200)
        .await;
    assert_eq!(dismissed["messages"].as_array().unwrap().len(), 3);

    // The server goes away: the page says it is not up to date any more, in words.
    app.stop().await;
    browser
        .wait_text("#toasts", "the lost server", |t| {
            t.contains("Lazarus cannot be reached: this page is not up to date")
        })
        .await;
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_viewer_is_offered_no_action_and_an_operator_each() {
    let (app, t, dlq, id) = crate::auth::users_app(|_| {}).await;
    let base = format!("http://{}", app.addr);
    let forms = "return document.querySelectorAll(\"form[action$='/replay'], form[action$='/dismiss'], form[action='/messages/select'], input.select-row\").length";
    for (name, offered) in [("vera", false), ("otto", true)] {
        let browser = Browser::start().await;
        browser.sign_in(&base, name, crate::auth::PASSWORD).await;
        for path in [
            "/".to_owned(),
            format!("/messages?queue={dlq}"),
            format!("/messages/{id}"),
        ] {
            browser.go(&format!("{base}{path}")).await;
            browser.find("main").await;
            let n = browser.script(forms).await.as_i64().unwrap();
            assert_eq!(n > 0, offered, "{name} on {path}: {n} action forms");
        }
        let page = browser.text("main").await;
        assert_eq!(
            page.contains("Replaying and dismissing take the operator role"),
            !offered,
            "{name}"
        );
        browser.quit().await;
    }
    t.cleanup().await;
}

#[tokio::test]
async fn a_broker_outage_is_a_banner_on_the_overview() {
    let app = TestApp::spawn_with(&["some.dlq"], |c| {
        c.connection.amqp_url = "amqp://guest:guest@127.0.0.1:1/%2f".into()
    })
    .await;
    let browser = Browser::start().await;
    browser.go(&format!("http://{}/", app.addr)).await;
    // It appears by itself once the consumer has tried (the page refreshes every 5 s).
    // Each look asks the browser: every 250 ms.
    let patience = Patience::within(Duration::from_secs(20)).every(Duration::from_millis(250));
    wait_showing("the outage banner", patience, async || {
        let shown = browser
            .script("const b = document.querySelector('.outage'); return b ? b.textContent : ''")
            .await;
        let text = shown.as_str().unwrap_or_default();
        if text.contains("RabbitMQ is unreachable; nothing is being archived (some.dlq)") {
            Ok(())
        } else {
            Err(shown)
        }
    })
    .await;
    let role = browser
        .script("return document.querySelector('.outage').getAttribute('role')")
        .await;
    assert_eq!(role, "alert");
    browser.quit().await;
}

#[tokio::test]
async fn only_the_queue_it_died_in_gets_a_replay_from_the_page_and_an_audit_queue_nothing() {
    let p = unique("diedinpage");
    let mut t = Topology::new().await;
    let (shop, orders, dlq, audit) = shop_with_audit(&mut t, &p).await;
    let app = TestApp::spawn(&[&dlq]).await;
    let worker = rejecting_worker(&orders).await;
    t.publish(&shop, "order.created", b"{}", json_props(&format!("{p}-1")))
        .await;
    app.wait_for_archived(1, Duration::from_secs(10)).await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.wait_for_depth(&audit, 1, Duration::from_secs(5)).await;
    let id = app.ids(&dlq).await[0].clone();

    let browser = Browser::start().await;
    browser
        .go(&format!("http://{}/messages/{id}", app.addr))
        .await;
    let only = browser
        .find("button[title^='Through the default exchange']")
        .await;
    assert_eq!(
        browser
            .call("GET", &format!("/element/{only}/text"), None)
            .await,
        format!("Replay to {orders} only").as_str()
    );
    let clicked = browser
        .call("POST", &format!("/element/{only}/click"), None)
        .await;
    assert!(clicked.is_null(), "{clicked}");
    let result = browser
        .wait_text("#replay-result", "the outcome", |t| !t.is_empty())
        .await;
    assert!(result.contains("published"), "{result}");
    t.wait_for_depth(&orders, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.depth(&audit).await, 1, "the audit queue got a duplicate");
    browser.quit().await;
    t.cleanup().await;
}

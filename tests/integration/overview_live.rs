//! The overview mid-incident (issue 35), in headless Chromium at 1366×900 and 390×844: rows
//! hold still under the pointer while dead letters arrive (new groups join at the bottom and
//! are announced); a group replay has the list's rate and canary, and its row says it is
//! settling; on a phone the groups are cards that fit, and "Replay group…" opens with the
//! group's name.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::incident::{incident, job_until, Incident};

/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Rests the mouse pointer on the centre of the first element matching `css`.
async fn hover(browser: &Browser, css: &str) {
    let id = browser.find(css).await;
    let moved = browser
        .call(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "pointer", "id": "mouse",
                "parameters": {"pointerType": "mouse"},
                "actions": [{"type": "pointerMove", "duration": 0, "x": 0, "y": 0,
                             "origin": {ELEMENT: id}}]}]})),
        )
        .await;
    assert!(moved.is_null(), "moving the pointer: {moved}");
}

/// The groups' rows as the page shows them, top to bottom: each one's cause, open count, top
/// edge and centre, and whether it is marked new.
async fn group_rows(browser: &Browser) -> Vec<Value> {
    let rows = browser
        .script(
            "return Array.from(document.querySelectorAll('#groups tbody tr[data-group]')).map(tr => ({\
               cause: tr.querySelector('[data-cause]').textContent.trim(),\
               open: tr.querySelector('[data-group-open]').textContent.trim(),\
               top: tr.getBoundingClientRect().top,\
               x: tr.getBoundingClientRect().left + tr.getBoundingClientRect().width / 2,\
               y: tr.getBoundingClientRect().top + tr.getBoundingClientRect().height / 2,\
               fresh: tr.classList.contains('new-group')}))",
        )
        .await;
    rows.as_array().cloned().unwrap_or_default()
}

fn causes(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["cause"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Dead letters published straight into `dlq` with the error `error` (a Spring-style
/// `x-exception-message`), `n` of them.
async fn fail(t: &Topology, dlq: &str, error: &str, n: usize) {
    for i in 0..n {
        let mut headers = lapin::types::FieldTable::default();
        headers.insert("x-exception-message".into(), s(error));
        t.publish(
            "",
            dlq,
            br#"{"order": 1}"#,
            json_props(&format!("{}-{i}", unique("m"))).with_headers(headers),
        )
        .await;
    }
}

#[tokio::test]
async fn rows_hold_still_under_the_pointer_while_dead_letters_arrive() {
    let p = unique("still");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    // Three bugs, the oldest last: by last seen the page shows alpha, beta, gamma.
    for (n, error) in [
        "gamma: the ledger is locked",
        "beta: the tax service timed out",
        "alpha: no such customer",
    ]
    .into_iter()
    .enumerate()
    {
        fail(&t, &dlq, error, 1).await;
        app.wait_for_archived(n as i64 + 1, Duration::from_secs(10))
            .await;
    }
    let base = format!("http://{}", app.addr);
    let browser = Browser::start().await;
    for (size, new_bug) in [
        (DESKTOP, "delta: the warehouse is closed"),
        (PHONE, "epsilon: the printer is on fire"),
    ] {
        browser.resize(size).await;
        browser.go(&format!("{base}/")).await;
        let third = "#groups tbody tr[data-group]:nth-child(3)";
        browser.find(third).await;
        browser
            .script(&format!(
                "document.querySelector({third:?}).scrollIntoView({{block: 'center'}})"
            ))
            .await;
        // The pointer rests on the third row while its bug fails again (by last seen it
        // would now come first) and a new bug appears.
        hover(&browser, third).await;
        let before = group_rows(&browser).await;
        assert!(before.len() >= 3, "{before:?}");
        let pointed = before[2]["cause"].as_str().unwrap().to_owned();
        let open_before: i64 = before[2]["open"].as_str().unwrap().parse().unwrap();
        let archived = app.archived().await;
        fail(&t, &dlq, &pointed, 3).await;
        app.wait_for_archived(archived + 3, Duration::from_secs(10))
            .await;
        // The new bug last: by last seen it comes first after a reload.
        fail(&t, &dlq, new_bug, 1).await;
        app.wait_for_archived(archived + 4, Duration::from_secs(10))
            .await;
        // The page refreshes itself (every 5 s) and says what is new.
        // Each look asks the browser: every 200 ms.
        let patience = Patience::within(Duration::from_secs(20)).every(Duration::from_millis(200));
        let what = "the refresh to announce the new group";
        let news = wait_showing(what, patience, async || {
            let news = browser
                .script("return document.getElementById('group-news').textContent")
                .await;
            if news.as_str().is_some_and(|n| n.contains("1 new group")) {
                Ok(news)
            } else {
                Err(format!("{news} {:?}", group_rows(&browser).await))
            }
        })
        .await;
        let after = group_rows(&browser).await;
        let mut expected = causes(&before);
        expected.push(new_bug.to_owned());
        assert_eq!(
            causes(&after),
            expected,
            "known rows keep their order, the new one joins at the bottom ({news})"
        );
        assert_eq!(
            after[2]["open"],
            (open_before + 3).to_string(),
            "the refresh happened: {after:?}"
        );
        let moved = after[2]["top"].as_f64().unwrap() - before[2]["top"].as_f64().unwrap();
        assert!(
            moved.abs() < 1.0,
            "{size:?}: the row under the pointer moved by {moved} px: {before:?} → {after:?}"
        );
        let under = browser
            .script(&format!(
                "const e = document.elementFromPoint({}, {}); const tr = e && e.closest('tr[data-group]');\
                 return tr && tr.querySelector('[data-cause]').textContent.trim()",
                before[2]["x"], before[2]["y"]
            ))
            .await;
        assert_eq!(under, pointed.as_str(), "what is under the pointer");
        assert_eq!(
            after.last().unwrap()["fresh"],
            true,
            "the new group is marked: {after:?}"
        );

        // A reload shows the groups as sorted (the newest failure first); the user may sort
        // by open count instead.
        browser.go(&format!("{base}/")).await;
        browser.find("#groups tbody tr[data-group]").await;
        assert_eq!(causes(&group_rows(&browser).await)[0], new_bug);
        browser
            .click("nav[aria-label='Sort groups by'] a[href*='sort=open']")
            .await;
        browser
            .wait_text(
                "nav[aria-label='Sort groups by'] strong",
                "the chosen sort",
                |t| t == "open count",
            )
            .await;
        let open: Vec<i64> = group_rows(&browser)
            .await
            .iter()
            .map(|r| r["open"].as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(open.len(), expected.len(), "{open:?}");
        assert!(
            open.windows(2).all(|w| w[0] >= w[1]),
            "by open count: {open:?}"
        );
        let url = browser.call("GET", "/url", None).await;
        assert!(url.as_str().unwrap().ends_with("/?sort=open"), "{url}");
        browser.look(&format!("overview-still-{}", size.0)).await;
    }
    // However the groups are grouped, their trends hold every failure of the last hours.
    let archived = app.archived().await;
    for by in ["cause", "error_type", "message_type", "queue", "reason"] {
        browser.go(&format!("{base}/?group_by={by}")).await;
        browser.find("#groups tbody tr[data-group]").await;
        let totals = browser
            .script(
                "return Array.from(document.querySelectorAll('#groups svg.trend'))\
                   .map(s => parseInt(s.getAttribute('aria-label'), 10))",
            )
            .await;
        let totals: Vec<i64> = totals
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_i64().unwrap())
            .collect();
        assert!(!totals.is_empty(), "{by}");
        assert_eq!(totals.iter().sum::<i64>(), archived, "{by}: {totals:?}");
    }
    browser.quit().await;
    t.cleanup().await;
}

/// The group row of the first group, its open and settling counts as the page says them.
async fn settling_said(browser: &Browser) -> (String, Option<String>) {
    let said = browser
        .script(
            "const tr = document.querySelector('#groups tbody tr[data-group]');\
             const settling = tr.querySelector('[data-group-settling]');\
             return [tr.querySelector('[data-group-open]').textContent.trim(), settling && settling.textContent.trim()]",
        )
        .await;
    (
        said[0].as_str().unwrap_or_default().to_owned(),
        said[1].as_str().map(str::to_owned),
    )
}

#[tokio::test]
async fn a_group_replay_has_rate_and_canary_and_its_row_says_it_is_settling() {
    // Copies settle for ten minutes: long enough to be seen settling.
    let Incident {
        t,
        app,
        work,
        dlq,
        base,
    } = incident("settling", 4, |c| c.settle_secs = 600).await;
    let fixed = acking_worker(&work).await;
    let browser = Browser::start().await;
    browser.resize(DESKTOP).await;
    browser.go(&format!("{base}/")).await;
    let (open, settling) = settling_said(&browser).await;
    assert_eq!((open.as_str(), settling), ("2", None));

    // "Replay group…" offers the list's rate and canary, with the list's defaults.
    let row = "#groups tbody tr[data-group]:first-child";
    browser
        .click(&format!("{row} details.inline-form summary"))
        .await;
    let form = format!("{row} form.replay-group");
    let defaults = browser
        .script(&format!(
            "const f = document.querySelector({form:?});\
             return ['rate_per_sec', 'canary_count', 'canary_wait_secs', 'canary_max_deaths']\
               .map(n => {{ const i = f.querySelector('input[name=' + n + ']'); return i && i.placeholder; }})"
        ))
        .await;
    assert_eq!(
        defaults,
        json!(["no limit", "0", "30", "0"]),
        "the list's defaults"
    );
    let list_defaults = {
        browser.go(&format!("{base}/messages?queue={dlq}")).await;
        browser
            .script(
                "const f = document.querySelector('#selection');\
                 return ['rate_per_sec', 'canary_count', 'canary_wait_secs', 'canary_max_deaths']\
                   .map(n => f.querySelector('input[name=' + n + ']').placeholder)",
            )
            .await
    };
    assert_eq!(defaults, list_defaults, "one form, written once");
    browser.go(&format!("{base}/")).await;
    browser
        .click(&format!("{row} details.inline-form summary"))
        .await;
    browser
        .type_into(&format!("{form} input[name=rate_per_sec]"), "50")
        .await;
    browser
        .type_into(&format!("{form} input[name=canary_count]"), "1")
        .await;
    browser
        .type_into(&format!("{form} input[name=canary_wait_secs]"), "1")
        .await;
    browser.click(&format!("{form} button[type=submit]")).await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    let plan = browser.text("main").await;
    assert!(plan.contains("50 messages/s"), "{plan}");
    assert!(
        plan.contains("first 1 messages, then wait 1 s; pause if more than 0 die again"),
        "{plan}"
    );
    let url = browser.call("GET", "/url", None).await;
    let job = url.as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    browser.click("#job-progress button[type=submit]").await;
    job_until(&app, &job, "its copies published", |j| {
        j["state"] == "completed" && j["copies"]["settling"] == 2
    })
    .await;

    // The group and its DLQ say their messages are settling, and the group's form says what
    // a second replay would do, offering the box it needs.
    for size in [DESKTOP, PHONE] {
        browser.resize(size).await;
        browser.go(&format!("{base}/")).await;
        let (open, settling) = settling_said(&browser).await;
        assert_eq!(open, "2");
        assert_eq!(settling.as_deref(), Some("2 settling"));
        let dlq_settling = browser.text(&format!("[data-settling='{dlq}']")).await;
        assert_eq!(dlq_settling, "2 settling", "the DLQ's row too");
        let summary = browser
            .text(&format!("{row} details.inline-form summary"))
            .await;
        assert_eq!(summary, "Replay again…");
        browser
            .click(&format!("{row} details.inline-form summary"))
            .await;
        let said = browser.text(&format!("{form} [data-replay-said]")).await;
        assert!(
            said.contains("All 2 open messages were replayed and are settling")
                && said.contains("A second replay publishes each of them again"),
            "{said}"
        );
        browser
            .find(&format!("{form} input[name=include_replayed]"))
            .await;
        let over = browser.overflow().await;
        assert!(over.is_null(), "{size:?}: {over}");
        browser.look(&format!("overview-settling-{}", size.0)).await;
    }
    // Ticked, the second replay plans them again.
    browser.resize(DESKTOP).await;
    browser.go(&format!("{base}/")).await;
    browser
        .click(&format!("{row} details.inline-form summary"))
        .await;
    browser
        .click(&format!("{form} input[name=include_replayed]"))
        .await;
    browser.click(&format!("{form} button[type=submit]")).await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    let plan = browser.text("main").await;
    assert!(
        plan.contains("already replayed and dismissed ones included on request")
            && !plan.contains("This plan publishes nothing"),
        "{plan}"
    );
    fixed.abort();
    browser.quit().await;
    t.cleanup().await;
}

#[tokio::test]
async fn the_overview_is_cards_on_a_phone_and_replay_group_opens_with_its_name() {
    let i = incident("cards", 6, |_| {}).await;
    let browser = Browser::start().await;
    for (size, dark) in EVERY_LOOK {
        browser.resize(size).await;
        browser.dark(dark).await;
        browser.go(&format!("{}/", i.base)).await;
        browser.find("#groups tbody tr[data-group]").await;
        let over = browser.overflow().await;
        assert!(
            over.is_null(),
            "{size:?}: the page is wider than its window: {over}"
        );
        let cards = browser.scrolling_cards().await;
        assert_eq!(cards, json!([]), "{size:?}: cards scroll sideways");
        if size != PHONE {
            continue;
        }
        // Each group a card: its name, error, counts, trend and actions in the window.
        let parts = browser
            .script(
                "const inner = window.innerWidth;\
                 return Array.from(document.querySelectorAll('#groups tbody tr[data-group]')).map(tr => {\
                   const seen = css => { const e = tr.querySelector(css); if (!e || e.offsetParent === null) return null;\
                     const r = e.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= inner + 0.5; };\
                   return {card: tr.getBoundingClientRect().width <= inner, display: getComputedStyle(tr).display,\
                           name: seen('.row-link'), error: seen('[data-cause]'), open: seen('[data-group-open]'),\
                           trend: seen('.c-trend svg'), rate: seen('[data-group-rate]'), replay: seen('.c-actions summary')};\
                 })",
            )
            .await;
        let parts = parts.as_array().unwrap();
        assert_eq!(parts.len(), 2, "two bugs, two groups: {parts:?}");
        for card in parts {
            assert_eq!(card["display"], "grid", "a card, not a table row: {card}");
            for part in ["card", "name", "error", "open", "trend", "rate", "replay"] {
                assert_eq!(card[part], true, "{part} is not in the window: {card}");
            }
        }
        // "Replay group…" opens in the card, with the group's name, nothing off to the side.
        let row = "#groups tbody tr[data-group]:first-child";
        browser
            .click(&format!("{row} details.inline-form summary"))
            .await;
        let title = browser
            .text(&format!("{row} form.replay-group .form-title"))
            .await;
        assert!(title.starts_with(&format!("Replay {}", i.work)), "{title}");
        let form = browser
            .script(&format!(
                "const r = document.querySelector('{row} form.replay-group').getBoundingClientRect();\
                 return [r.left, r.right, window.innerWidth]"
            ))
            .await;
        assert!(
            form[0].as_f64().unwrap() >= 0.0
                && form[1].as_f64().unwrap() <= form[2].as_f64().unwrap(),
            "the form is in the window: {form}"
        );
        let over = browser.overflow().await;
        assert!(over.is_null(), "the open form widens the page: {over}");
        let cards = browser.scrolling_cards().await;
        assert_eq!(cards, json!([]), "the open form scrolls its card sideways");
        browser
            .look(&format!(
                "overview-cards{}",
                if dark { "-dark" } else { "" }
            ))
            .await;
    }
    browser.quit().await;
    i.t.cleanup().await;
}

/// The trend totals the overview's group rows say, in page order.
fn trend_totals(html: &str) -> Vec<i64> {
    html.split("class=\"spark trend\"")
        .skip(1)
        .map(|rest| {
            let label = rest.split("aria-label=\"").nth(1).unwrap_or_default();
            label
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1)
        })
        .collect()
}

on_both_backends!(each_group_has_its_own_trend);
async fn each_group_has_its_own_trend() {
    let p = unique("trend");
    let dlq = format!("{p}.dlq");
    let mut t = Topology::new().await;
    t.queue(&dlq, Default::default()).await;
    let app = TestApp::spawn(&[&dlq]).await;
    fail(&t, &dlq, "alpha: no such customer", 3).await;
    fail(&t, &dlq, "beta: the tax service timed out", 2).await;
    app.wait_for_archived(5, Duration::from_secs(10)).await;
    for (by, expected) in [
        ("", vec![2, 3]),
        // Spring's x-exception-message names no exception type: one group.
        ("?group_by=error_type", vec![5]),
        ("?group_by=message_type", vec![5]),
        ("?group_by=queue", vec![5]),
        ("?group_by=reason", vec![5]),
    ] {
        let html = app.get(&format!("/{by}")).await.text();
        let mut totals = trend_totals(&html);
        totals.sort_unstable();
        assert_eq!(totals, expected, "{by}");
    }
    // The rate now: five in the last ten minutes.
    let html = app.get("/?group_by=reason").await.text();
    assert!(html.contains("0.5/min now, 0/min an hour ago"), "{html}");
    t.cleanup().await;
}

//! Incident workflow II (issue 35), in headless Chromium at a laptop's 1366×900 and a
//! phone's 390×844, light and dark: a job page says whether the fix held; every page fits
//! its window (measured) and the list is cards on a phone; toasts are drawn above everything,
//! stay until dismissed and are announced; the keyboard reaches the results and Esc closes
//! dialogs; selections read as chips, counts as numbers, and the smaller words are right.

use std::time::Duration;

use lazarus::archive::{Actor, Role};
use lazarus::auth::{hash_password, AuthMode};
use lazarus::config::ServeConfig;
use serde_json::{json, Value};

use crate::helpers::*;

/// A work queue whose consumer fails, dead-lettering into a DLQ Lazarus archives with the
/// business fields `invoice` and `customer`: long ids, long names, long errors without a
/// space to break at — what production's dead letters look like.
pub(crate) struct Incident {
    pub t: Topology,
    pub app: TestApp,
    pub work: String,
    pub dlq: String,
    pub base: String,
}

const TRACE: &str = "java.lang.IllegalStateException: card processor timed out after 30000 ms\n\tat com.shop.billing.Charge.run(Charge.java:88)\n\tat com.shop.billing.Worker.handle(Worker.java:41)";
const LONG_ERROR: &str = "com.shop.billing.validation.InvoiceValidationException:VAT_id_missing_for_customer_in_region_EUROPE-WEST-1_see_https://wiki.example.com/billing/vat";

pub(crate) async fn incident(
    prefix: &str,
    n: usize,
    tweak: impl FnOnce(&mut ServeConfig),
) -> Incident {
    let p = unique(prefix);
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.fields = vec![
            "invoice=/invoice_id".parse().unwrap(),
            "customer=/customer".parse().unwrap(),
        ];
        tweak(c);
    })
    .await;
    let worker = rejecting_worker(&work).await;
    for i in 0..n {
        let mut headers = lapin::types::FieldTable::default();
        let error = if i % 2 == 0 { TRACE } else { LONG_ERROR };
        headers.insert("x-exception-message".into(), s(error));
        let body = json!({
            "invoice_id": format!("INV-2026-{i:06}-EUROPE-WEST-ACME-CORPORATION-SUBSIDIARY"),
            "customer": format!("Zoë Café GmbH – a-very-long-customer-name-without-any-space-{i}"),
            "amount": 100 + i,
        });
        t.publish(
            "",
            &work,
            body.to_string().as_bytes(),
            json_props(&format!(
                "{p}-order-created-event-with-a-long-message-id-{i:04}"
            ))
            .with_headers(headers),
        )
        .await;
    }
    app.wait_for_archived(n as i64, Duration::from_secs(30))
        .await;
    worker.abort();
    tokio::time::sleep(Duration::from_millis(200)).await; // its channel closes
    let base = format!("http://{}", app.addr);
    Incident {
        t,
        app,
        work,
        dlq,
        base,
    }
}

/// A viewer, an operator and an admin (`--auth users`), with [`crate::auth::PASSWORD`].
async fn with_users(app: &TestApp) {
    let hash = hash_password(crate::auth::PASSWORD).unwrap();
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
}

/// Waits (up to 30 s) until the job satisfies `done`; the job as the API says it.
pub(crate) async fn job_until(
    app: &TestApp,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let what = format!("job {id} to get {what}");
    wait_showing(&what, Duration::from_secs(30), async || {
        let job = app.json(&format!("/api/replays/{id}"), 200).await;
        if done(&job) {
            Ok(job)
        } else {
            Err(job)
        }
    })
    .await
}

/// A rectangle of the first element matching `css`: [top, bottom, left, right, visible].
pub(crate) async fn rect(browser: &Browser, css: &str) -> Value {
    browser.find(css).await;
    browser
        .script(&format!(
            "const e = document.querySelector({css:?}); const r = e.getBoundingClientRect();\
             return [r.top, r.bottom, r.left, r.right, e.offsetParent !== null || getComputedStyle(e).position === 'fixed'];"
        ))
        .await
}

#[tokio::test]
async fn a_job_page_says_whether_the_fix_held() {
    let Incident {
        t,
        app,
        work,
        dlq,
        base,
    } = incident("fixheld", 6, |c| c.settle_secs = 2).await;

    // The "fix" did not work: the consumer still rejects, and every replayed copy dies again.
    let worker = rejecting_worker(&work).await;
    let job = app
        .post_json("/api/replays", json!({"filter": {"queue": dlq}}), 200)
        .await;
    let failed = job["id"].as_str().unwrap().to_owned();
    let job = job_until(&app, &failed, "its copies counted", |j| {
        j["state"] == "completed" && j["copies"]["died_again"] == 6
    })
    .await;
    assert_eq!(job["fix_held"], false, "{job}");
    assert_eq!(job["copies"]["settling"], 0, "{job}");
    app.wait_for_archived(12, Duration::from_secs(10)).await;
    worker.abort();

    let browser = Browser::start().await;
    for (size, dark) in [(DESKTOP, false), (PHONE, true)] {
        browser.resize(size).await;
        browser.dark(dark).await;
        browser.go(&format!("{base}/replays/{failed}")).await;
        let verdict = browser.text("#job-progress .verdict").await;
        assert!(
            verdict.contains("6 of 6 copies died again — the fix did not hold for them"),
            "{verdict}"
        );
        let progress = browser.text("#job-progress").await;
        assert!(progress.contains("6 of 6 messages done"), "{progress}");
        assert!(
            !progress.contains("settled"),
            "one word, one meaning: {progress}"
        );
        if size == PHONE {
            browser.look("replay-died-again-phone-dark").await;
        }
    }
    // The link leads to the copies that died again: the open records to deal with now.
    browser.resize(DESKTOP).await;
    browser.dark(false).await;
    browser.screenshot("replay").await;
    browser
        .click(&format!(
            "#job-progress a[href='/messages?copies_of_job={failed}']"
        ))
        .await;
    browser
        .wait_text("#results", "the copies", |t| t.contains("open"))
        .await;
    let rows = browser
        .script("return document.querySelectorAll('#results tbody tr').length")
        .await;
    assert_eq!(rows, 6, "the six copies that died again");
    let chips = browser.text(".chips").await;
    assert!(
        chips.contains(&format!("died again after replay job: {failed}")),
        "{chips}"
    );

    // The real fix: the consumer takes them now. Replay the copies; they settle.
    let fixed = acking_worker(&work).await;
    let job = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq, "status": "open"}}),
            200,
        )
        .await;
    let held = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["plan"]["to_publish"], 6, "{job}");
    let job = job_until(&app, &held, "every copy settled", |j| {
        j["copies"]["settled"] == 6
    })
    .await;
    assert_eq!(job["fix_held"], true, "{job}");
    assert_eq!(job["copies"]["died_again"], 0, "{job}");
    browser.go(&format!("{base}/replays/{held}")).await;
    let verdict = browser
        .wait_text("#job-progress .verdict", "the verdict", |t| {
            t.contains("held")
        })
        .await;
    assert!(
        verdict.contains("All 6 settled: none died again — the fix held"),
        "{verdict}"
    );
    // The jobs list says "done" for outcomes recorded, as the job page does.
    browser.go(&format!("{base}/replays")).await;
    let head = browser.text("table thead").await;
    assert!(head.contains("Done") && !head.contains("Settled"), "{head}");

    // A slow job on a phone: its Pause and Cancel are on the first screen.
    let slow = app
        .post_json(
            "/api/replays",
            json!({"filter": {"queue": dlq}, "include_replayed": true, "rate_per_sec": 1}),
            200,
        )
        .await;
    let slow = slow["id"].as_str().unwrap().to_owned();
    browser.resize(PHONE).await;
    browser.go(&format!("{base}/replays/{slow}")).await;
    for button in ["Pause", "Cancel"] {
        let css = format!(
            "#job-progress form[action$='/{}'] button",
            button.to_lowercase()
        );
        let r = rect(&browser, &css).await;
        let inner = browser.script("return window.innerHeight").await;
        assert!(
            r[1].as_f64().unwrap() <= inner.as_f64().unwrap() && r[4] == true,
            "{button} is below the first screen of a phone: {r} in {inner}"
        );
    }
    browser.look("replay-running-phone").await;
    app.post_json(&format!("/api/replays/{slow}/cancel"), json!({}), 200)
        .await;
    fixed.abort();
    browser.quit().await;
    t.cleanup().await;
}

/// Every page a user can reach, signed in (as an admin) in `browser`: (name, path). A plan is
/// made through the list, as a person makes one.
async fn every_page(i: &Incident, browser: &Browser) -> Vec<(String, String)> {
    browser
        .go(&format!(
            "{}/messages?queue={}&q=IllegalStateException",
            i.base, i.dlq
        ))
        .await;
    let message = browser.find("#results tbody a.row-link").await;
    let message = browser
        .call("GET", &format!("/element/{message}/attribute/href"), None)
        .await;
    let message = message
        .as_str()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    browser.click("#select-all-matching").await;
    browser.click("button[value=plan]").await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    let plan = browser.call("GET", "/url", None).await;
    let plan = plan
        .as_str()
        .unwrap()
        .trim_start_matches(&i.base)
        .to_owned();
    vec![
        ("overview".into(), "/".into()),
        ("messages".into(), format!("/messages?queue={}", i.dlq)),
        ("message".into(), message),
        ("plan".into(), plan),
        ("replays".into(), "/replays".into()),
        ("audit".into(), "/audit".into()),
        ("admin".into(), "/admin".into()),
        ("api".into(), "/api".into()),
        ("not-found".into(), "/messages/424242".into()),
        ("bad-request".into(), "/messages?since=yesterday".into()),
    ]
}

#[tokio::test]
async fn every_page_fits_a_laptop_and_a_phone_and_the_list_is_cards_on_a_phone() {
    let i = incident("fits", 8, |c| c.auth = AuthMode::Users).await;
    with_users(&i.app).await;
    let browser = Browser::start().await;
    browser.resize(DESKTOP).await;
    browser.sign_in(&i.base, "ada", crate::auth::PASSWORD).await;
    let pages = every_page(&i, &browser).await;
    let mut wide = Vec::new();
    for (size, dark) in EVERY_LOOK {
        browser.resize(size).await;
        browser.dark(dark).await;
        for (name, path) in &pages {
            browser.go(&format!("{}{path}", i.base)).await;
            browser.find("main").await;
            let over = browser.overflow().await;
            if !over.is_null() {
                wide.push(format!("{path} at {size:?}: {over}"));
            }
            // No card scrolls sideways on a laptop; on a phone, none on the incident's path.
            let phone_path = ["overview", "messages", "message", "plan"].contains(&name.as_str());
            if size == DESKTOP || phone_path {
                let cards = browser.scrolling_cards().await;
                if cards.as_array().is_some_and(|c| !c.is_empty()) {
                    wide.push(format!(
                        "{path} at {size:?}: cards scroll sideways: {cards}"
                    ));
                }
            }
            let suffix = match (size == PHONE, dark) {
                (false, false) => "",
                (true, false) => "-phone",
                (false, true) => "-dark",
                (true, true) => "-phone-dark",
            };
            browser.look(&format!("fits-{name}{suffix}")).await;
        }
    }
    // The login page, signed out.
    let login = Browser::start().await;
    for size in [DESKTOP, PHONE] {
        login.resize(size).await;
        login.go(&format!("{}/login", i.base)).await;
        login.find("main").await;
        let over = login.overflow().await;
        if !over.is_null() {
            wide.push(format!("/login at {size:?}: {over}"));
        }
    }
    login.quit().await;
    assert!(
        wide.is_empty(),
        "pages wider than their window:\n{}",
        wide.join("\n")
    );

    // On a phone the list is cards: what names the message, its error, status and age, and
    // the search box and the results on the first screen, the filters folded away.
    browser.resize(PHONE).await;
    browser.dark(false).await;
    browser
        .go(&format!("{}/messages?queue={}", i.base, i.dlq))
        .await;
    let cards = browser
        .script(
            "return Array.from(document.querySelectorAll('#results tbody tr')).map(tr => {\
               const shown = css => { const e = tr.querySelector(css); return e && e.offsetParent !== null ? e.textContent.trim() : null; };\
               return {width: tr.getBoundingClientRect().width, title: shown('.c-title'), error: shown('.c-error'),\
                       status: shown('.c-status .badge'), age: shown('.ago'), dlq: shown('.c-queue')};\
             })",
        )
        .await;
    let cards = cards.as_array().unwrap();
    assert_eq!(cards.len(), 8, "{cards:?}");
    let inner = browser
        .script("return window.innerWidth")
        .await
        .as_f64()
        .unwrap();
    for card in cards {
        assert!(card["width"].as_f64().unwrap() <= inner, "{card}");
        assert!(
            card["title"]
                .as_str()
                .unwrap_or_default()
                .starts_with("INV-2026-"),
            "a card is named by its first business field: {card}"
        );
        assert!(
            card["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{card}"
        );
        assert_eq!(card["status"], "open", "{card}");
        let age = card["age"].as_str().unwrap_or_default();
        assert!(age.contains("ago") || age.contains("just now"), "{card}");
        assert!(
            card["dlq"].is_null(),
            "the DLQ column is the list's, not a card's: {card}"
        );
    }
    let screen = browser
        .script("return window.innerHeight")
        .await
        .as_f64()
        .unwrap();
    let search = rect(&browser, "input[name=q]").await;
    let first = rect(&browser, "#results tbody tr").await;
    assert!(search[1].as_f64().unwrap() < screen, "{search}");
    assert!(
        first[0].as_f64().unwrap() < screen,
        "the first result is on the first screen: {first}"
    );
    let folded = browser
        .script("return document.querySelector('details.more-filters').open")
        .await;
    assert_eq!(folded, false, "the filters are folded on a phone");
    browser.quit().await;
    i.t.cleanup().await;
}

/// Whether every corner and the centre of the first `css` are the element itself (or inside
/// it) for `document.elementFromPoint`: drawn above everything else.
async fn on_top(browser: &Browser, css: &str) -> Value {
    browser.find(css).await;
    browser
        .script(&format!(
            "const e = document.querySelector({css:?}); const r = e.getBoundingClientRect();\
             const points = [[r.left + 2, r.top + 2], [r.right - 2, r.top + 2], [r.left + 2, r.bottom - 2],\
                             [r.right - 2, r.bottom - 2], [(r.left + r.right) / 2, (r.top + r.bottom) / 2]];\
             const under = points.map(([x, y]) => document.elementFromPoint(x, y)).filter(p => !p || !e.contains(p));\
             return under.length === 0 ? true : under.map(p => p ? p.tagName + '.' + p.className : 'nothing');"
        ))
        .await
}

#[tokio::test]
async fn toasts_are_above_everything_stay_until_dismissed_and_are_announced() {
    let mut i = incident("toast", 40, |_| {}).await;
    let browser = Browser::start().await;
    for size in [DESKTOP, PHONE] {
        browser.resize(size).await;
        browser
            .go(&format!("{}/messages?queue={}&limit=40", i.base, i.dlq))
            .await;
        browser.find("#results tbody tr").await;
        // An error from the server: a toast over the rows (and their checkboxes).
        browser
            .script("htmx.ajax('GET', '/nowhere', {target: '#results', swap: 'none'}); return 1")
            .await;
        browser
            .wait_text("#toasts", "the error", |t| {
                t.contains("no route for /nowhere")
            })
            .await;
        assert_eq!(
            on_top(&browser, "#toasts > [role=alert]").await,
            true,
            "at {size:?}"
        );
        let role = browser
            .script("return [document.querySelector('#toasts').getAttribute('aria-live'), document.querySelector('#toasts > *').getAttribute('role')]")
            .await;
        assert_eq!(role, json!(["polite", "alert"]), "announced");
        // Still there long after the 8 s it used to last.
        tokio::time::sleep(Duration::from_secs(9)).await;
        let still = browser.text("#toasts").await;
        assert!(
            still.contains("no route for /nowhere"),
            "gone by itself: {still}"
        );
        browser.click("#toasts > [role=alert] button").await;
        let gone = browser
            .script("return document.querySelectorAll('#toasts > *').length")
            .await;
        assert_eq!(gone, 0, "dismissed");
    }
    // The server goes away: said above the rows too, on a phone.
    i.app.stop().await;
    browser.type_into("input[name=q]", "anything").await;
    browser
        .wait_text("#toasts", "the lost server", |t| {
            t.contains("Lazarus cannot be reached")
        })
        .await;
    assert_eq!(on_top(&browser, "#unreachable").await, true);
    browser.quit().await;
    i.t.cleanup().await;
}

/// The element that has the focus: its tag, id, class and text.
async fn focused(browser: &Browser) -> String {
    browser
        .script("const e = document.activeElement; return e.tagName + '#' + e.id + '.' + e.className + ' ' + (e.getAttribute('href') || '') + ' ' + (e.textContent || '').trim().slice(0, 60)")
        .await
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_keyboard_skips_to_the_results_walks_them_and_esc_closes_dialogs() {
    let i = incident("keys", 4, |_| {}).await;
    let browser = Browser::start().await;
    for size in [DESKTOP, PHONE] {
        browser.resize(size).await;
        browser
            .go(&format!("{}/messages?queue={}", i.base, i.dlq))
            .await;
        browser.find("#results tbody tr").await;
        // The second thing Tab reaches skips to the results.
        let tabbable = browser
            .script(
                "return Array.from(document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]'))\
                 .filter(e => e.tabIndex >= 0 && !e.disabled).slice(0, 2).map(e => e.textContent.trim())",
            )
            .await;
        assert_eq!(tabbable, json!(["Skip to content", "Skip to results"]));
        browser
            .script("document.querySelector('a.skip[href=\"#results\"]').focus(); return 1")
            .await;
        browser.press(keys::ENTER).await;
        let at = focused(&browser).await;
        assert!(at.starts_with("SECTION#results"), "{at}");
        // From the search box, arrows walk the results and come back.
        browser.click("input[name=q]").await;
        browser.press(keys::ARROW_DOWN).await;
        let first = focused(&browser).await;
        assert!(first.starts_with("A#.row-link"), "{first}");
        browser.press(keys::ARROW_DOWN).await;
        let second = focused(&browser).await;
        assert!(
            second.starts_with("A#.row-link") && second != first,
            "{second}"
        );
        browser.press(keys::ARROW_UP).await;
        assert_eq!(focused(&browser).await, first);
        browser.press(keys::ARROW_UP).await;
        assert!(
            focused(&browser).await.starts_with("INPUT"),
            "{}",
            focused(&browser).await
        );
        // Enter on a result opens it.
        browser.press(keys::ARROW_DOWN).await;
        browser.press(keys::ENTER).await;
        browser
            .wait_text("h1", "the message page", |t| t.starts_with("INV-2026-"))
            .await;
    }
    // Esc closes a dialog — "Replay group…" on the overview, by the pages' one script.
    browser.resize(DESKTOP).await;
    browser.go(&format!("{}/", i.base)).await;
    let summary = "table.groups tbody tr details.inline-form summary";
    browser.click(summary).await;
    let open = browser
        .script("return document.querySelectorAll('details.inline-form[open]').length")
        .await;
    assert_eq!(open, 1);
    browser.press(keys::ESCAPE).await;
    let open = browser
        .script("return document.querySelectorAll('details.inline-form[open]').length")
        .await;
    assert_eq!(open, 0, "Esc closes Replay group…");
    assert!(
        focused(&browser).await.contains("Replay group"),
        "focus goes back to what opened it"
    );
    browser.quit().await;
    i.t.cleanup().await;
}

#[tokio::test]
async fn selections_read_as_chips_counts_as_numbers_and_errors_keep_their_user() {
    let i = incident("chips", 3, |c| c.auth = AuthMode::Users).await;
    with_users(&i.app).await;
    // A plan of 1,200 messages: bare ones published into the DLQ itself.
    publish_many(&i.t.channel, "", &i.dlq, "bulk", 1_197).await;
    i.app
        .wait_for_archived(1_200, Duration::from_secs(60))
        .await;
    let browser = Browser::start().await;
    browser.resize(DESKTOP).await;
    browser
        .sign_in(&i.base, "otto", crate::auth::PASSWORD)
        .await;
    browser
        .go(&format!("{}/messages?queue={}&q=bulk*", i.base, i.dlq))
        .await;
    // Words that read as what they are.
    let placeholder = browser
        .script("return document.querySelector('input[name=exchange]').placeholder")
        .await;
    assert!(
        !placeholder.as_str().unwrap().contains("(AMQP default)"),
        "{placeholder}"
    );
    let none = browser
        .script(
            "return document.querySelector('select[name=reason] option[value=none]').textContent",
        )
        .await;
    assert!(
        none.as_str().unwrap().contains("no death history"),
        "{none}"
    );
    browser
        .go(&format!("{}/messages?queue={}", i.base, i.dlq))
        .await;
    browser.click("#select-all-matching").await;
    browser.click("button[value=plan]").await;
    browser
        .wait_text("h1", "the plan page", |t| t.contains("Replay plan"))
        .await;
    let plan = browser.text("section[aria-label=Plan]").await;
    assert!(plan.contains("1,200 selected"), "{plan}");
    let chips = browser.text("section[aria-label=Plan] .chips").await;
    assert!(chips.contains(&format!("queue: {}", i.dlq)), "{chips}");
    let page = browser.text("main").await;
    assert!(!page.contains("{\"filter\""), "no raw selection: {page}");
    assert!(!page.contains("1200"), "{page}");

    // Dismissing says it did.
    browser
        .go(&format!("{}/messages?queue={}&q=bulk-7", i.base, i.dlq))
        .await;
    browser.click("input.select-row").await;
    browser
        .type_into("#selection input[name=note]", "a test")
        .await;
    browser.click("button[value=dismiss]").await;
    browser
        .wait_text("#toasts", "the success", |t| {
            t.contains("Dismissed 1 message")
        })
        .await;
    let role = browser
        .script("return document.querySelector('#toasts > *').getAttribute('role')")
        .await;
    assert_eq!(role, "status");

    // The audit log (an admin's) shows selections as chips too.
    let admin = Browser::start().await;
    admin.resize(DESKTOP).await;
    admin.sign_in(&i.base, "ada", crate::auth::PASSWORD).await;
    admin.go(&format!("{}/audit", i.base)).await;
    let audit = admin.text("main").await;
    assert!(!audit.contains("{\"filter\""), "{audit}");
    let chips = admin
        .script("return Array.from(document.querySelectorAll('main .chips .chip')).map(c => c.textContent)")
        .await;
    assert!(
        chips
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == &json!(format!("queue: {}", i.dlq))),
        "{chips}"
    );
    assert!(audit.contains("3 of 1,200 selected"), "{audit}");
    admin.quit().await;

    // A page a role may not open keeps who is signed in in its header.
    browser.go(&format!("{}/audit", i.base)).await;
    let title = browser.text("h1").await;
    assert_eq!(title, "Not allowed");
    let who = browser.text("header .who").await;
    assert!(who.contains("otto"), "{who}");
    browser.quit().await;
    i.t.cleanup().await;
}

//! Group notes and statuses (issue 35), on both backends: an operator's note and status on a
//! failure group are kept, shown on the overview and in `GET /api/groups`, audited, refused
//! to viewers; a snoozed group is folded away on the overview until its time.

use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::auth::{as_user, sign_in, users_app, PASSWORD};
use crate::helpers::*;

/// The one failure group of the app's DLQ, as `/api/groups` answers it to `cookie`.
async fn the_group(app: &TestApp, cookie: &str, dlq: &str) -> Value {
    let answer = as_user(
        app,
        cookie,
        "GET",
        &format!("/api/groups?queue={dlq}"),
        None,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer: Value = serde_json::from_slice(&answer.body).unwrap();
    let groups = answer["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{answer}");
    groups[0].clone()
}

on_both_backends!(a_group_note_and_status_are_kept_shown_audited_and_for_operators_only);
async fn a_group_note_and_status_are_kept_shown_audited_and_for_operators_only() {
    let (app, t, dlq, _) = users_app(|_| {}).await;
    let vera = sign_in(&app, "vera", PASSWORD).await.unwrap();
    let otto = sign_in(&app, "otto", PASSWORD).await.unwrap();
    let ada = sign_in(&app, "ada", PASSWORD).await.unwrap();
    let group = the_group(&app, &vera, &dlq).await;
    assert_eq!(group["note"], Value::Null, "{group}");
    let id = group["id"].as_str().unwrap().to_owned();
    let path = format!("/api/groups/{id}/note");
    let note = json!({"status": "investigating", "note": "investigating — PAY-123"});

    // A viewer may not, by the API or the page's form.
    let refused = as_user(&app, &vera, "POST", &path, Some(note.clone())).await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    let form = http_with(
        app.addr,
        "POST",
        &format!("/groups/{id}/note"),
        &[("Cookie", &vera)],
        Some((
            "application/x-www-form-urlencoded",
            "status=investigating&note=mine",
        )),
    )
    .await;
    assert_eq!(form.status, 403, "a hidden form is not access control");
    assert_eq!(the_group(&app, &vera, &dlq).await["note"], Value::Null);

    // An operator may; the note is kept, with who and when.
    let set = as_user(&app, &otto, "POST", &path, Some(note)).await;
    assert_eq!(set.status, 200, "{}", set.text());
    let set: Value = serde_json::from_slice(&set.body).unwrap();
    assert_eq!(set["status"], "investigating", "{set}");
    assert_eq!(set["by"], "otto", "{set}");
    let kept = the_group(&app, &vera, &dlq).await;
    assert_eq!(kept["note"]["note"], "investigating — PAY-123", "{kept}");
    assert_eq!(kept["note"]["status"], "investigating", "{kept}");
    assert_eq!(kept["note"]["by"], "otto", "{kept}");
    assert!(kept["note"]["at"].as_str().is_some(), "{kept}");

    // Shown on the overview, to a viewer too.
    let page = http_with(app.addr, "GET", "/", &[("Cookie", &vera)], None).await;
    let html = page.text();
    assert!(html.contains("investigating — PAY-123"), "{html}");
    assert!(html.contains("badge status-investigating"), "{html}");
    assert!(html.contains("— otto,"), "{html}");
    assert!(
        !html.contains(&format!("action=\"/groups/{id}/note\"")),
        "a viewer is offered the note form"
    );
    let page = http_with(app.addr, "GET", "/", &[("Cookie", &otto)], None).await;
    assert!(
        page.text()
            .contains(&format!("action=\"/groups/{id}/note\"")),
        "an operator is offered the note form"
    );

    // Mistakes get clear answers.
    for (body, status, said) in [
        (json!({"status": "snoozed"}), 400, "snoozed_until"),
        (json!({"status": "asleep"}), 400, "status"),
        (
            json!({"status": "none", "note": "x".repeat(2001)}),
            400,
            "2000",
        ),
    ] {
        let answer = as_user(&app, &otto, "POST", &path, Some(body)).await;
        assert_eq!(answer.status, status, "{}", answer.text());
        assert!(answer.text().contains(said), "{}", answer.text());
    }
    let unknown = as_user(
        &app,
        &otto,
        "POST",
        "/api/groups/987654321/note",
        Some(json!({"status": "none"})),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());

    // Snoozed: folded away on the overview until its time, and said so in the API.
    let until = (OffsetDateTime::now_utc() + Duration::hours(2))
        .replace_nanosecond(0)
        .unwrap()
        .format(&Rfc3339)
        .unwrap();
    let snooze = json!({"status": "snoozed", "note": "known, PAY-123", "snoozed_until": until});
    let set = as_user(&app, &otto, "POST", &path, Some(snooze)).await;
    assert_eq!(set.status, 200, "{}", set.text());
    let kept = the_group(&app, &vera, &dlq).await;
    assert_eq!(kept["note"]["status"], "snoozed", "{kept}");
    assert_eq!(kept["note"]["snoozed_until"], until.as_str(), "{kept}");
    let html = http_with(app.addr, "GET", "/", &[("Cookie", &vera)], None)
        .await
        .text();
    let folded = html
        .split("<details class=\"snoozed-groups\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no snoozed groups on the overview: {html}"));
    assert!(folded.contains("1 snoozed group"), "{folded}");
    assert!(folded.contains("known, PAY-123"), "{folded}");
    let shown = html
        .split("<details class=\"snoozed-groups\">")
        .next()
        .unwrap();
    assert!(
        !shown.contains("known, PAY-123"),
        "a snoozed group is folded away"
    );

    // The page's form sets it too, and says so.
    let form = http_with(
        app.addr,
        "POST",
        &format!("/groups/{id}/note"),
        &[("Cookie", &otto)],
        Some((
            "application/x-www-form-urlencoded",
            "status=waiting_for_fix&note=fix+in+v2.3.1&snooze_hours=4",
        )),
    )
    .await;
    assert_eq!(form.status, 303, "{}", form.text());
    assert_eq!(form.header("location"), Some("/"));
    let kept = the_group(&app, &vera, &dlq).await;
    assert_eq!(kept["note"]["status"], "waiting_for_fix", "{kept}");
    assert_eq!(kept["note"]["snoozed_until"], Value::Null, "{kept}");

    // Every change is in the audit log: who, what, and the note.
    let audit = as_user(&app, &ada, "GET", "/api/audit", None).await;
    let entries: Value = serde_json::from_slice(&audit.body).unwrap();
    let notes: Vec<&Value> = entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "group_note")
        .collect();
    assert_eq!(notes.len(), 3, "{entries}");
    assert!(notes.iter().all(|e| e["actor"] == "otto"), "{entries}");
    let said: Vec<&str> = notes
        .iter()
        .map(|e| e["summary"].as_str().unwrap())
        .collect();
    assert!(
        said.iter().any(|s| s.contains("investigating — PAY-123")),
        "{said:?}"
    );
    assert!(said.iter().any(|s| s.contains("snoozed until")), "{said:?}");
    t.cleanup().await;
}

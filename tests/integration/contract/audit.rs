//! The audit log: newest first in pages, oldest first for the export.

use lazarus::archive::Actor;

use crate::helpers::*;

use super::*;

on_both_backends!(the_audit_log_pages_newest_first_and_exports_oldest_first);
async fn the_audit_log_pages_newest_first_and_exports_oldest_first() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let actor = Actor {
        name: "erin".into(),
        source: Some("10.0.0.1".into()),
    };
    for n in 0..5 {
        archive
            .record(&actor, "login", &format!("signed in {n}"))
            .await
            .unwrap();
    }
    let long = Actor::system(&"x".repeat(300));
    archive
        .record(&long, "login_failed", &"y".repeat(3000))
        .await
        .unwrap();

    let all = archive.audit_log(None, 100).await.unwrap();
    assert_eq!(all.len(), 6);
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    assert!(all.windows(2).all(|w| w[0].at >= w[1].at));
    // Too long for a page: cut there, and said so; whole in the export.
    assert_eq!(all[0].action, "login_failed");
    assert!(all[0].truncated);
    assert!(all[0].actor.chars().count() < 300 && all[0].summary.chars().count() < 3000);
    let summaries: Vec<&str> = all[1..].iter().map(|e| e.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "signed in 4",
            "signed in 3",
            "signed in 2",
            "signed in 1",
            "signed in 0"
        ]
    );
    assert!(all[1..].iter().all(|e| !e.truncated
        && e.actor == "erin"
        && e.source.as_deref() == Some("10.0.0.1")
        && e.job_id.is_none()
        && e.message_id.is_none()));

    // Pages of two, each from before the last one's oldest entry.
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = archive.audit_log(before, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        paged.extend(page);
    }
    assert_eq!(paged, all);

    // The export: oldest first, whole, after an entry.
    let export = archive.audit_export(None, 100).await.unwrap();
    assert_eq!(
        export.iter().map(|e| e.id).collect::<Vec<_>>(),
        all.iter().rev().map(|e| e.id).collect::<Vec<_>>()
    );
    let whole = export.last().unwrap();
    assert_eq!((whole.actor.len(), whole.summary.len()), (300, 3000));
    assert!(!whole.truncated);
    let after = archive.audit_export(Some(export[1].id), 2).await.unwrap();
    assert_eq!(
        after.iter().map(|e| e.summary.as_str()).collect::<Vec<_>>(),
        ["signed in 2", "signed in 3"]
    );
}

//! Replay jobs as users make and control them: plans, start, pause, resume, cancel, and what
//! a plan skips at step time.

use lazarus::archive::{
    Actor, ArchiveError, JobAction, JobSpec, JobState, JobStep, MessageStatus, Outcome,
    ReplayStart, TargetCount,
};
use lazarus::message::death::ReplayTarget;

use crate::helpers::*;

use super::*;

on_both_backends!(jobs_are_planned_started_paused_resumed_and_cancelled_as_documented);
async fn jobs_are_planned_started_paused_resumed_and_cancelled_as_documented() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let billing = Death {
        reason: "rejected",
        exchange: "billing",
        key: "invoice.due",
    };
    let orders = stored(archive, "jobs.dlq", &["o1", "o2", "o3"], REJECTED).await;
    let invoices = stored(archive, "jobs.dlq", &["i1", "i2"], billing).await;
    assert_eq!(
        store(archive, vec![delivery("jobs.dlq", "n1", None)]).await,
        (1, 0)
    );
    let alice = Actor {
        name: "alice".into(),
        source: Some("10.1.2.3".into()),
    };
    let selection = of_queue("jobs.dlq");

    // A plan: frozen and counted per target, not started.
    let plan = archive
        .create_job(&spec("plan-1", &alice, &selection, false))
        .await
        .unwrap();
    assert_eq!(plan.state, JobState::Planned);
    assert_eq!((plan.started_at, plan.finished_at), (None, None));
    assert_eq!(plan.actor, "alice");
    assert_eq!(plan.selection, serde_json::json!({"contract": true}));
    let target = |exchange: &str, routing_key: &str, messages| TargetCount {
        target_from: None,
        vhost: String::new(),
        broker: "default".into(),
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        messages,
    };
    assert_eq!(plan.plan.messages, 6);
    assert_eq!(plan.plan.to_publish, 5);
    assert_eq!(plan.plan.no_target, 1);
    assert_eq!(
        plan.plan.targets,
        vec![
            target("orders", "order.created", 3),
            target("billing", "invoice.due", 2)
        ]
    );
    assert_eq!(plan.total, 6);
    assert_eq!((plan.counts.skipped, plan.counts.pending), (1, 5));
    let skipped = items(archive, plan.id, Some("skipped")).await;
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].detail.as_deref(), Some("no known target"));
    assert_eq!(items(archive, plan.id, Some("pending")).await.len(), 5);
    let o1 = item(archive, plan.id, orders[0]).await;
    assert_eq!(
        (
            o1.target.as_ref().map(|t| t.exchange.as_str()),
            o1.outcome,
            o1.attempts
        ),
        (Some("orders"), None, 0)
    );

    // The same request key again is the same job, whatever it asks.
    let again = archive
        .create_job(&spec("plan-1", &alice, &ids(&orders[..1]), true))
        .await
        .unwrap();
    assert_eq!(again, plan);

    // A plan holds nothing: a job started meanwhile takes o1, and the plan, once started,
    // leaves it to that job.
    let other = job(archive, "job-2", &ids(&orders[..1])).await;
    assert_eq!(other.state, JobState::Queued);
    assert_eq!(other.plan.to_publish, 1);

    let id = plan.id;
    let control = |action| archive.control_job(id, action, &alice);
    for action in [JobAction::Pause, JobAction::Resume] {
        assert!(conflict(control(action).await).contains("is planned"));
    }
    let started = control(JobAction::Start).await.unwrap();
    assert_eq!(started.state, JobState::Queued);
    assert_eq!(started.plan.in_other_jobs, 1);
    assert_eq!(started.plan.to_publish, 4);
    assert_eq!(
        started.plan.targets,
        vec![
            target("billing", "invoice.due", 2),
            target("orders", "order.created", 2)
        ]
    );
    assert_eq!((started.counts.skipped, started.counts.pending), (2, 4));
    for action in [JobAction::Start, JobAction::Resume] {
        assert!(conflict(control(action).await).contains("is queued"));
    }
    assert_eq!(
        control(JobAction::Pause).await.unwrap().state,
        JobState::Paused
    );
    for action in [JobAction::Start, JobAction::Pause] {
        assert!(conflict(control(action).await).contains("is paused"));
    }
    assert_eq!(
        control(JobAction::Resume).await.unwrap().state,
        JobState::Queued
    );
    let cancelled = control(JobAction::Cancel).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(cancelled.finished_at.is_some());
    assert_eq!(
        (
            cancelled.counts.cancelled,
            cancelled.counts.skipped,
            cancelled.counts.pending
        ),
        (4, 2, 0)
    );
    let cancelled_items = items(archive, id, Some("cancelled")).await;
    let mut expected: Vec<i64> = orders[1..].iter().chain(&invoices).copied().collect();
    expected.sort();
    assert_eq!(
        cancelled_items
            .iter()
            .map(|i| i.message_id)
            .collect::<Vec<_>>(),
        expected
    );
    assert!(cancelled_items
        .iter()
        .all(|i| i.detail.as_deref() == Some("the job was cancelled")));
    for action in [
        JobAction::Start,
        JobAction::Pause,
        JobAction::Resume,
        JobAction::Cancel,
    ] {
        assert!(conflict(control(action).await).contains("is cancelled"));
    }
    assert!(matches!(
        archive
            .control_job(i64::MAX, JobAction::Cancel, &alice)
            .await,
        Err(ArchiveError::UnknownJob(i64::MAX))
    ));
    assert_eq!(archive.job(i64::MAX).await.unwrap(), None);
    let newest: Vec<i64> = archive
        .jobs(10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(newest, vec![other.id, id]);
    assert_eq!(archive.jobs(1).await.unwrap().len(), 1);

    // Each change is audited once, with who did it and from where; refusals are not.
    assert_eq!(
        job_actions(archive, id).await,
        [
            "job_cancel",
            "job_resume",
            "job_pause",
            "job_start",
            "job_plan"
        ]
    );
    let entries = archive.audit_log(None, 100).await.unwrap();
    let planned = entries.iter().find(|e| e.action == "job_plan").unwrap();
    assert_eq!(
        (planned.actor.as_str(), planned.source.as_deref()),
        ("alice", Some("10.1.2.3"))
    );
    assert_eq!(job_actions(archive, other.id).await, ["job_start"]);
}

on_both_backends!(a_message_replayed_or_dismissed_since_the_plan_is_skipped_at_step_time);
async fn a_message_replayed_or_dismissed_since_the_plan_is_skipped_at_step_time() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "since.dlq", &["s1", "s2", "s3", "s4"], REJECTED).await;
    let id = job(archive, "since", &of_queue("since.dlq")).await.id;
    assert_eq!(reread(archive, id).await.plan.to_publish, 4);
    let user = Actor::system("bob");
    let target = ReplayTarget {
        exchange: "orders".into(),
        routing_key: "order.created".into(),
    };

    // Since the plan: s2 replayed alone, s3 dismissed, s4's single replay failed.
    let replay = |message, key: &'static str, outcome| {
        let (user, target) = (user.clone(), target.clone());
        async move {
            let ReplayStart::New(replay) = archive
                .begin_replay(message, key, &user, &target, None)
                .await
                .unwrap()
            else {
                panic!("a new request key")
            };
            archive.finish_replay(replay, outcome, None).await.unwrap();
        }
    };
    replay(m[1], "single-s2", Outcome::Published).await;
    replay(m[3], "single-s4", Outcome::Failed).await;
    assert_eq!(
        archive
            .dismiss(&ids(&m[2..3]), "[s3]", "fixed by hand", &user)
            .await
            .unwrap(),
        1
    );

    archive
        .claim_job("runner-a", None, 60_000, None)
        .await
        .unwrap()
        .unwrap();
    let first = step(archive, id, "runner-a", 60_000, &[], 10).await;
    assert_eq!(handed_out(&first), [m[0], m[3]]);
    for skipped in [m[1], m[2]] {
        let item = item(archive, id, skipped).await;
        assert_eq!(item.outcome.as_deref(), Some("skipped"));
        assert_eq!(
            item.detail.as_deref(),
            Some("replayed or dismissed after the plan was made")
        );
    }
    assert_eq!(reread(archive, id).await.counts.skipped, 2);
    // Their status stays what it became.
    assert_eq!(status(archive, m[1]).await, MessageStatus::Replayed);
    assert_eq!(status(archive, m[2]).await, MessageStatus::Dismissed);
    assert_eq!(
        step(
            archive,
            id,
            "runner-a",
            60_000,
            &published(&[m[0], m[3]]),
            10
        )
        .await,
        JobStep::Stop(JobState::Completed)
    );
    let c = reread(archive, id).await.counts;
    assert_eq!((c.published, c.skipped, c.pending), (2, 2, 0));

    // A plan made now skips them all up front...
    let actor = Actor::system("test");
    let selection = of_queue("since.dlq");
    let plan = archive
        .create_job(&spec("since-plan", &actor, &selection, false))
        .await
        .unwrap();
    assert_eq!(
        (
            plan.plan.to_publish,
            plan.plan.already_replayed,
            plan.plan.dismissed
        ),
        (0, 3, 1)
    );
    // ...unless it includes them, and then its steps hand them out too.
    let including = archive
        .create_job(&JobSpec {
            include_replayed: true,
            ..spec("since-all", &actor, &selection, true)
        })
        .await
        .unwrap();
    assert_eq!(including.plan.to_publish, 4);
    archive
        .claim_job("runner-a", None, 60_000, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handed_out(&step(archive, including.id, "runner-a", 60_000, &[], 10).await),
        m
    );
}

//! The runner's side of a job: claims under a lease, steps, outcomes, give-ups, letting go,
//! take-overs, cancels and pauses mid-step, and the instance name.

use std::time::{Duration, Instant};

use lazarus::archive::{
    Actor, Canary, ChunkLimit, ItemOutcome, JobAction, JobSpec, JobState, JobStep, MessageStatus,
    Outcome, OutgoingBody, OutgoingMessage,
};
use lazarus::message::headers::AmqpValue;
use time::OffsetDateTime;

use crate::helpers::*;

use super::*;

on_both_backends!(a_claimed_job_hands_out_steps_records_outcomes_and_completes);
async fn a_claimed_job_hands_out_steps_records_outcomes_and_completes() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(
        archive,
        "steps.dlq",
        &["m1", "m2", "m3", "m4", "m5"],
        REJECTED,
    )
    .await;
    let id = job(archive, "steps", &of_queue("steps.dlq")).await.id;
    const LEASE: u64 = 60_000;

    let claimed = archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .expect("a queued job is claimed");
    assert_eq!((claimed.id, claimed.state), (id, JobState::Running));
    assert!(claimed.started_at.is_some());
    // Held: nobody else gets it, nor can note on it.
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    assert!(archive
        .note_job(id, "runner-a", LEASE, Some("waiting for the broker"), false)
        .await
        .unwrap());
    assert_eq!(
        reread(archive, id).await.detail.as_deref(),
        Some("waiting for the broker")
    );
    assert!(!archive
        .note_job(id, "runner-b", LEASE, None, false)
        .await
        .unwrap());

    // The first step: the two oldest, whole, recorded as sending.
    let first = step(archive, id, "runner-a", LEASE, &[], 2).await;
    assert_eq!(handed_out(&first), m[..2]);
    let JobStep::Publish(messages) = &first else {
        unreachable!()
    };
    let stored = archive.get_message(m[0]).await.unwrap().unwrap();
    let OutgoingMessage {
        target,
        properties,
        headers,
        body,
        unreadable,
        ..
    } = &messages[0];
    assert_eq!(Some(target), stored.summary.replay_target.as_ref());
    assert_eq!((properties, headers), (&stored.properties, &stored.headers));
    assert_eq!(
        body,
        &OutgoingBody::Held(archive.get_body(m[0]).await.unwrap().unwrap().bytes)
    );
    assert_eq!(unreadable, &None);
    let sending = items(archive, id, Some("sending")).await;
    assert_eq!(
        sending.iter().map(|i| i.message_id).collect::<Vec<_>>(),
        m[..2]
    );
    assert!(sending.iter().all(|i| i.attempts == 1));
    // Handed out is still to do.
    assert_eq!(reread(archive, id).await.counts.pending, 5);

    // Their outcomes, and the next two.
    let outcomes = [
        confirmed(m[0], Outcome::Published, None),
        confirmed(m[1], Outcome::Unroutable, Some("NO_ROUTE")),
    ];
    let second = step(archive, id, "runner-a", LEASE, &outcomes, 2).await;
    assert_eq!(handed_out(&second), m[2..4]);
    let counts = reread(archive, id).await.counts;
    assert_eq!(
        (counts.published, counts.unroutable, counts.pending),
        (1, 1, 3)
    );
    assert_eq!(status(archive, m[0]).await, MessageStatus::Replayed);
    assert_eq!(status(archive, m[1]).await, MessageStatus::ReplayFailed);
    assert_eq!(
        item(archive, id, m[1]).await.detail.as_deref(),
        Some("NO_ROUTE")
    );

    // A broken channel: m3 goes out again; m4 was nacked. Nothing more asked for.
    let outcomes = [
        ItemOutcome {
            retry: true,
            ..confirmed(m[2], Outcome::Failed, Some("channel closed"))
        },
        confirmed(m[3], Outcome::Nacked, None),
    ];
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &outcomes, 0).await,
        JobStep::Publish(vec![])
    );
    let m3 = item(archive, id, m[2]).await;
    assert_eq!((m3.outcome, m3.attempts), (None, 1));
    assert_eq!(status(archive, m[2]).await, MessageStatus::Archived);
    assert_eq!(
        item(archive, id, m[3]).await.outcome.as_deref(),
        Some("nacked")
    );
    // The byte limit cuts a step, one message at least: m3 again, alone.
    let one = archive
        .advance_job(
            id,
            "runner-a",
            LEASE,
            &[],
            ChunkLimit {
                messages: 10,
                bytes: 1,
            },
        )
        .await
        .unwrap();
    assert_eq!(handed_out(&one), [m[2]]);
    assert_eq!(item(archive, id, m[2]).await.attempts, 2);
    let last = step(archive, id, "runner-a", LEASE, &published(&m[2..3]), 10).await;
    assert_eq!(handed_out(&last), [m[4]]);
    // Nothing left to hand out while m5 is out: not complete yet.
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &[], 10).await,
        JobStep::Publish(vec![])
    );
    assert_eq!(reread(archive, id).await.state, JobState::Running);

    let outcomes = [confirmed(
        m[4],
        Outcome::Failed,
        Some("the record is unreadable"),
    )];
    let done = step(archive, id, "runner-a", LEASE, &outcomes, 10).await;
    assert_eq!(done, JobStep::Stop(JobState::Completed));
    assert_eq!(status(archive, m[4]).await, MessageStatus::ReplayFailed);
    let job = reread(archive, id).await;
    assert_eq!(job.state, JobState::Completed);
    assert!(job.finished_at.is_some());
    let c = job.counts;
    assert_eq!(
        (
            c.published,
            c.unroutable,
            c.nacked,
            c.failed,
            c.skipped,
            c.pending
        ),
        (2, 1, 1, 1, 0, 0)
    );
    assert_eq!(job.done(), 5);
    let trail = audit_trail(archive).await;
    let complete = trail.iter().find(|e| e.0 == "job_complete").unwrap();
    assert_eq!((complete.1.as_str(), complete.2), ("lazarus", Some(id)));
    assert!(
        complete
            .4
            .contains("2 published, 1 unroutable, 1 nacked, 1 failed, 0 skipped"),
        "{}",
        complete.4
    );
    // Finished: nothing to claim, and a late step is told so.
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &[], 10).await,
        JobStep::Stop(JobState::Completed)
    );

    // The canary's count: copies of what the job published that came back into a DLQ since;
    // a copy of what it did not publish (m2) is not one of them.
    let since = claimed.started_at.unwrap();
    assert_eq!(archive.canary_deaths(id, since).await.unwrap(), 0);
    let copy = |of: i64, name| {
        let mut copy = delivery("steps.dlq", name, Some(REJECTED));
        copy.headers
            .as_mut()
            .unwrap()
            .insert("x-lazarus-replay-of", AmqpValue::text(&of.to_string()));
        at(copy, OffsetDateTime::now_utc())
    };
    let copies = vec![copy(m[0], "m1-again"), copy(m[1], "m2-again")];
    assert_eq!(store(archive, copies).await, (2, 0));
    assert_eq!(archive.canary_deaths(id, since).await.unwrap(), 1);
    assert_eq!(
        archive
            .canary_deaths(id, OffsetDateTime::now_utc() + time::Duration::minutes(1))
            .await
            .unwrap(),
        0
    );
}

on_both_backends!(a_message_handed_out_three_times_without_a_confirm_is_given_up);
async fn a_message_handed_out_three_times_without_a_confirm_is_given_up() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "given-up.dlq", &["u1", "u2"], REJECTED).await;
    let id = job(archive, "given-up", &of_queue("given-up.dlq")).await.id;
    const LEASE: u64 = 60_000;
    archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    let retry = ItemOutcome {
        retry: true,
        ..confirmed(m[0], Outcome::Failed, Some("connection lost"))
    };
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 1).await),
        [m[0]]
    );
    for attempts in 2..=3 {
        let again = step(
            archive,
            id,
            "runner-a",
            LEASE,
            std::slice::from_ref(&retry),
            1,
        )
        .await;
        assert_eq!(handed_out(&again), [m[0]]);
        assert_eq!(item(archive, id, m[0]).await.attempts, attempts);
    }
    // Out three times, never confirmed: given up as failed; the rest goes out.
    let next = step(
        archive,
        id,
        "runner-a",
        LEASE,
        std::slice::from_ref(&retry),
        10,
    )
    .await;
    assert_eq!(handed_out(&next), [m[1]]);
    let u1 = item(archive, id, m[0]).await;
    assert_eq!(
        (u1.outcome.as_deref(), u1.detail.as_deref(), u1.attempts),
        (
            Some("failed"),
            Some("handed to the broker 3 times without a confirm"),
            3
        )
    );
    assert_eq!(status(archive, m[0]).await, MessageStatus::ReplayFailed);
    let c = reread(archive, id).await.counts;
    assert_eq!((c.failed, c.pending), (1, 1));
}

on_both_backends!(a_runner_lets_a_job_go_for_another_runner_or_paused_with_its_reason);
async fn a_runner_lets_a_job_go_for_another_runner_or_paused_with_its_reason() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "release.dlq", &["r1", "r2", "r3"], REJECTED).await;
    let older = job(archive, "older", &ids(&m[..1])).await.id;
    // With a canary, whose judgement the runner notes when it lets the job go.
    let actor = Actor::system("test");
    let selection = ids(&m[1..]);
    let newer = archive
        .create_job(&JobSpec {
            canary: Some(Canary {
                count: 1,
                wait_secs: 60,
                max_deaths: 0,
            }),
            ..spec("newer", &actor, &selection, true)
        })
        .await
        .unwrap();
    assert_eq!(
        newer.canary,
        Some(Canary {
            count: 1,
            wait_secs: 60,
            max_deaths: 0
        })
    );
    let newer = newer.id;
    const LEASE: u64 = 60_000;

    // `only` takes that job, not the oldest queued one.
    let only = archive
        .claim_job("runner-a", None, LEASE, Some(newer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(only.id, newer);
    assert_eq!(
        handed_out(&step(archive, newer, "runner-a", LEASE, &[], 1).await),
        [m[1]]
    );
    // Shutting down: queued again, for anyone, at once; what was out is done again.
    archive
        .release_job(newer, "runner-a", JobState::Queued, None, false)
        .await
        .unwrap();
    assert_eq!(reread(archive, newer).await.state, JobState::Queued);
    let taken = archive
        .claim_job("runner-b", None, LEASE, Some(newer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.id, newer);
    let again = item(archive, newer, m[1]).await;
    assert_eq!((again.outcome, again.attempts), (None, 1));
    // Only the holder lets go.
    archive
        .release_job(newer, "runner-a", JobState::Paused, Some("not mine"), false)
        .await
        .unwrap();
    assert_eq!(reread(archive, newer).await.state, JobState::Running);
    assert!(!archive.canary_done(newer).await.unwrap());
    archive
        .release_job(
            newer,
            "runner-b",
            JobState::Paused,
            Some("exchange orders is missing"),
            true,
        )
        .await
        .unwrap();
    let paused = reread(archive, newer).await;
    assert_eq!(
        (paused.state, paused.detail.as_deref()),
        (JobState::Paused, Some("exchange orders is missing"))
    );
    assert!(archive.canary_done(newer).await.unwrap());
    let trail = audit_trail(archive).await;
    let pause = trail.iter().find(|e| e.0 == "job_pause").unwrap();
    assert_eq!((pause.1.as_str(), pause.2), ("lazarus", Some(newer)));
    assert!(
        pause.4.contains("exchange orders is missing"),
        "{}",
        pause.4
    );
    // A paused job is nobody's to claim; the older queued one is next.
    let next = archive
        .claim_job("runner-b", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.id, older);
    assert_eq!(
        archive
            .claim_job("runner-c", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
}

on_both_backends!(a_lease_that_ran_out_lets_another_runner_take_the_job);
async fn a_lease_that_ran_out_lets_another_runner_take_the_job() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "lease.dlq", &["l1", "l2", "l3"], REJECTED).await;
    let id = job(archive, "lease", &of_queue("lease.dlq")).await.id;
    const LONG: u64 = 60_000;
    const SHORT: u64 = 200;

    archive
        .claim_job("runner-a", None, LONG, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        archive
            .claim_job("runner-b", None, LONG, None)
            .await
            .unwrap(),
        None
    );
    // The step renews the lease for a short while only; then runner-a goes silent.
    let renewed = Instant::now();
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", SHORT, &[], 1).await),
        [m[0]]
    );
    outwait(renewed, SHORT).await;

    let taken = archive
        .claim_job("runner-b", None, LONG, None)
        .await
        .unwrap()
        .expect("a job whose lease ran out is claimed");
    assert_eq!((taken.id, taken.state), (id, JobState::Running));
    // What runner-a had out is to do again: whether it reached the broker is unknown.
    let l1 = item(archive, id, m[0]).await;
    assert_eq!((l1.outcome, l1.attempts), (None, 1));
    assert_eq!(
        archive
            .claim_job("runner-c", None, LONG, None)
            .await
            .unwrap(),
        None
    );

    // runner-a comes back: the job is not its own any more, and it does not get it back.
    assert_eq!(
        step(archive, id, "runner-a", LONG, &published(&m[..1]), 1).await,
        JobStep::Stop(JobState::Running)
    );
    assert!(!archive
        .note_job(id, "runner-a", LONG, None, false)
        .await
        .unwrap());
    assert_eq!(
        archive
            .claim_job("runner-a", None, LONG, None)
            .await
            .unwrap(),
        None
    );

    let all = step(archive, id, "runner-b", LONG, &[], 10).await;
    assert_eq!(handed_out(&all), m);
    assert_eq!(item(archive, id, m[0]).await.attempts, 2);
    assert_eq!(
        step(archive, id, "runner-b", LONG, &published(&m), 10).await,
        JobStep::Stop(JobState::Completed)
    );
    let job = reread(archive, id).await;
    // Each message counted once, however many runners published it.
    assert_eq!(
        (job.counts.published, job.counts.pending, job.total),
        (3, 0, 3)
    );
}

on_both_backends!(a_runner_of_the_same_instance_name_takes_its_earlier_lifes_job_at_once);
async fn a_runner_of_the_same_instance_name_takes_its_earlier_lifes_job_at_once() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "names.dlq", &["n1", "n2"], REJECTED).await;
    let id = job(archive, "names", &of_queue("names.dlq")).await.id;
    const LEASE: u64 = 60_000;

    archive
        .claim_job("life-1", Some("blue"), LEASE, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handed_out(&step(archive, id, "life-1", LEASE, &[], 1).await),
        [m[0]]
    );
    // Another instance waits for the lease; no instance name, the same.
    assert_eq!(
        archive
            .claim_job("other", Some("green"), LEASE, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        archive
            .claim_job("anonymous", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    // The same name again is a later life of that instance: the earlier one is gone.
    let taken = archive
        .claim_job("life-2", Some("blue"), LEASE, None)
        .await
        .unwrap()
        .expect("the instance's own job is taken over at once");
    assert_eq!(taken.id, id);
    assert_eq!(item(archive, id, m[0]).await.outcome, None);
    // The holder itself does not take it from itself.
    assert_eq!(
        archive
            .claim_job("life-2", Some("blue"), LEASE, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        step(archive, id, "life-1", LEASE, &[], 1).await,
        JobStep::Stop(JobState::Running)
    );
    assert_eq!(
        handed_out(&step(archive, id, "life-2", LEASE, &[], 10).await),
        m
    );
}

on_both_backends!(a_cancel_mid_step_leaves_what_is_out_to_the_live_runner);
async fn a_cancel_mid_step_leaves_what_is_out_to_the_live_runner() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "cancel.dlq", &["c1", "c2", "c3", "c4"], REJECTED).await;
    let id = job(archive, "cancel", &of_queue("cancel.dlq")).await.id;
    const LEASE: u64 = 60_000;
    let user = Actor::system("bob");

    archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 2).await),
        m[..2]
    );
    let cancelled = archive
        .control_job(id, JobAction::Cancel, &user)
        .await
        .unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    // c1 and c2 are with the broker: the runner records how they ended. The rest is cancelled.
    assert_eq!(
        (cancelled.counts.cancelled, cancelled.counts.pending),
        (2, 2)
    );
    let outcomes: Vec<_> = items(archive, id, None)
        .await
        .into_iter()
        .map(|i| i.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            Some("sending"),
            Some("sending"),
            Some("cancelled"),
            Some("cancelled")
        ]
        .map(|o| o.map(str::to_owned))
    );

    // The runner's next step records c1 and learns of the cancel; c2, still out (the runner
    // asks for more: a step is in flight), is left to it.
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &published(&m[..1]), 2).await,
        JobStep::Stop(JobState::Cancelled)
    );
    assert_eq!(status(archive, m[0]).await, MessageStatus::Replayed);
    assert_eq!(
        item(archive, id, m[1]).await.outcome.as_deref(),
        Some("sending")
    );
    // Its last step settles c2, asking for nothing.
    let outcomes = [confirmed(m[1], Outcome::Unroutable, Some("NO_ROUTE"))];
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &outcomes, 0).await,
        JobStep::Stop(JobState::Cancelled)
    );
    let job = reread(archive, id).await;
    let c = job.counts;
    assert_eq!(
        (c.published, c.unroutable, c.cancelled, c.pending),
        (1, 1, 2, 0)
    );
    assert_eq!(status(archive, m[2]).await, MessageStatus::Archived);
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
}

on_both_backends!(a_cancel_settles_what_a_gone_runner_had_out);
async fn a_cancel_settles_what_a_gone_runner_had_out() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "gone.dlq", &["g1", "g2", "g3"], REJECTED).await;
    let id = job(archive, "gone", &of_queue("gone.dlq")).await.id;
    const SHORT: u64 = 200;

    archive
        .claim_job("runner-a", None, SHORT, None)
        .await
        .unwrap()
        .unwrap();
    let renewed = Instant::now();
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", SHORT, &[], 1).await),
        [m[0]]
    );
    outwait(renewed, SHORT).await;
    // Its lease ran out: nobody will confirm g1, which may have been published.
    let cancelled = archive
        .control_job(id, JobAction::Cancel, &Actor::system("bob"))
        .await
        .unwrap();
    assert_eq!(
        (cancelled.counts.cancelled, cancelled.counts.pending),
        (3, 0)
    );
    let g1 = item(archive, id, m[0]).await;
    assert_eq!(g1.outcome.as_deref(), Some("cancelled"));
    assert!(
        g1.detail.as_deref().unwrap().contains("never confirmed"),
        "{:?}",
        g1.detail
    );
    let g2 = item(archive, id, m[1]).await;
    assert_eq!(g2.detail.as_deref(), Some("the job was cancelled"));
}

on_both_backends!(a_cancelled_job_whose_runner_dies_is_settled_by_the_next_claim);
async fn a_cancelled_job_whose_runner_dies_is_settled_by_the_next_claim() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "orphan.dlq", &["o1", "o2", "o3"], REJECTED).await;
    let id = job(archive, "orphan", &of_queue("orphan.dlq")).await.id;
    // Long enough for the cancel below to find the runner alive.
    const LEASE: u64 = 1_000;

    archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    let renewed = Instant::now();
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 1).await),
        [m[0]]
    );
    archive
        .control_job(id, JobAction::Cancel, &Actor::system("bob"))
        .await
        .unwrap();
    assert_eq!(
        item(archive, id, m[0]).await.outcome.as_deref(),
        Some("sending"),
        "the runner was alive at the cancel"
    );
    // The runner dies without another step. Once its lease is out, the next claim (of any
    // runner) settles what it had out.
    outwait(renewed, LEASE).await;
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    let o1 = item(archive, id, m[0]).await;
    assert_eq!(o1.outcome.as_deref(), Some("cancelled"));
    assert!(o1.detail.as_deref().unwrap().contains("never confirmed"));
    assert_eq!(reread(archive, id).await.counts.pending, 0);
}

on_both_backends!(a_cancelled_job_whose_runner_dies_mid_window_is_settled_by_the_next_claim);
async fn a_cancelled_job_whose_runner_dies_mid_window_is_settled_by_the_next_claim() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "window.dlq", &["w1", "w2", "w3", "w4"], REJECTED).await;
    let id = job(archive, "window", &of_queue("window.dlq")).await.id;
    const LEASE: u64 = 1_000;

    archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    // Two steps out at once, as the runner publishes one while it takes the next.
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 1).await),
        [m[0]]
    );
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 1).await),
        [m[1]]
    );
    archive
        .control_job(id, JobAction::Cancel, &Actor::system("bob"))
        .await
        .unwrap();
    // The runner records the first step's confirm while it publishes the second, and asks
    // for more: it learns of the cancel (and keeps its lease while w2 is out)...
    let renewed = Instant::now();
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &published(&m[..1]), 1).await,
        JobStep::Stop(JobState::Cancelled)
    );
    assert_eq!(
        item(archive, id, m[1]).await.outcome.as_deref(),
        Some("sending")
    );
    // ...and dies before it records how w2 ended. Once its lease would have run out, the
    // next claim settles w2 as for any runner that died with a cancelled job's messages out.
    outwait(renewed, LEASE).await;
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    let w2 = item(archive, id, m[1]).await;
    assert_eq!(w2.outcome.as_deref(), Some("cancelled"), "{w2:?}");
    assert_eq!(reread(archive, id).await.counts.pending, 0);
}

on_both_backends!(a_pause_mid_step_lets_the_runner_record_its_step_and_resume_goes_on);
async fn a_pause_mid_step_lets_the_runner_record_its_step_and_resume_goes_on() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let m = stored(archive, "pause.dlq", &["p1", "p2", "p3"], REJECTED).await;
    let id = job(archive, "pause", &of_queue("pause.dlq")).await.id;
    const LEASE: u64 = 60_000;
    let user = Actor::system("bob");

    archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handed_out(&step(archive, id, "runner-a", LEASE, &[], 1).await),
        [m[0]]
    );
    let paused = archive
        .control_job(id, JobAction::Pause, &user)
        .await
        .unwrap();
    assert_eq!(paused.state, JobState::Paused);
    // Nothing is cancelled by a pause; the runner records p1 and stops.
    assert_eq!(
        step(archive, id, "runner-a", LEASE, &published(&m[..1]), 1).await,
        JobStep::Stop(JobState::Paused)
    );
    assert_eq!(
        archive
            .claim_job("runner-b", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    let job = reread(archive, id).await;
    assert_eq!((job.counts.published, job.counts.pending), (1, 2));
    assert_eq!(
        archive
            .control_job(id, JobAction::Resume, &user)
            .await
            .unwrap()
            .state,
        JobState::Queued
    );
    archive
        .claim_job("runner-b", None, LEASE, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handed_out(&step(archive, id, "runner-b", LEASE, &[], 10).await),
        m[1..]
    );
}

on_both_backends!(an_instance_name_is_held_by_one_lock_at_a_time);
async fn an_instance_name_is_held_by_one_lock_at_a_time() {
    let (_dir, archive) = archive().await;
    let mut lock = archive
        .lock_instance_name("blue")
        .await
        .unwrap()
        .expect("a free name is taken");
    assert!(lock.held().await);
    assert!(archive.lock_instance_name("blue").await.unwrap().is_none());
    drop(lock);
    // Freed with its holder (on PostgreSQL once the server sees the session end).
    wait_until(
        "the name to be free again once let go",
        Duration::from_secs(10),
        async || archive.lock_instance_name("blue").await.unwrap().is_some(),
    )
    .await;
}

/// A delivery of the broker `broker`, keyed `key` as the archive keys that broker's DLQs.
fn on_broker(broker: &str, key: &str, name: &str) -> lazarus::archive::IncomingMessage {
    lazarus::archive::IncomingMessage {
        broker: broker.into(),
        ..delivery(key, name, Some(REJECTED))
    }
}

on_both_backends!(a_job_is_claimed_only_by_a_runner_that_has_its_brokers);
/// Several instances on one archive, not all with every `--broker`: a job of `us`'s messages
/// is left to a runner that said it can publish there, and says while none that runs can.
async fn a_job_is_claimed_only_by_a_runner_that_has_its_brokers() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    const LEASE: u64 = 60_000;
    let batch = vec![
        on_broker("default", "fleet.dlq", "d1"),
        on_broker("us", "us:fleet.dlq", "u1"),
        on_broker("us", "us:fleet.dlq", "u2"),
    ];
    assert_eq!(store(archive, batch).await, (3, 0));
    // The older job is us's: a runner passes it over for the next one it can run.
    let of_us = job(archive, "of-us", &of_queue("us:fleet.dlq")).await;
    let of_default = job(archive, "of-default", &of_queue("fleet.dlq")).await;
    assert_eq!((of_us.total, of_default.total), (2, 1));
    assert_eq!(of_us.waiting_for_brokers, ["us"], "nobody runs with us yet");
    assert!(of_default.waiting_for_brokers.is_empty());

    // A runner of the default broker alone (nothing to say) and one of another broker.
    archive
        .announce_runner("runner-eu", &["eu"], LEASE)
        .await
        .unwrap();
    for runner in ["runner-a", "runner-eu"] {
        assert_eq!(
            archive
                .claim_job(runner, None, LEASE, Some(of_us.id))
                .await
                .unwrap(),
            None,
            "{runner} has no --broker us"
        );
    }
    let claimed = archive
        .claim_job("runner-a", None, LEASE, None)
        .await
        .unwrap()
        .expect("the default broker's job is anyone's");
    assert_eq!(claimed.id, of_default.id);
    assert_eq!(
        archive
            .claim_job("runner-eu", None, LEASE, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(reread(archive, of_us.id).await.state, JobState::Queued);
    assert_eq!(reread(archive, of_us.id).await.waiting_for_brokers, ["us"]);

    // A runner with us says so: the job waits for nothing more, and it is the one to run it.
    archive
        .announce_runner("runner-us", &["eu", "us"], LEASE)
        .await
        .unwrap();
    assert!(reread(archive, of_us.id)
        .await
        .waiting_for_brokers
        .is_empty());
    let claimed = archive
        .claim_job("runner-us", None, LEASE, None)
        .await
        .unwrap()
        .expect("a runner with us claims us's job");
    assert_eq!(claimed.id, of_us.id);
    assert!(claimed.waiting_for_brokers.is_empty());

    // It stops (handing the job back) and takes its word back: nobody that runs has us.
    archive
        .release_job(of_us.id, "runner-us", JobState::Queued, None, false)
        .await
        .unwrap();
    archive.retire_runner("runner-us").await.unwrap();
    assert_eq!(reread(archive, of_us.id).await.waiting_for_brokers, ["us"]);
    let listed = archive.jobs(10).await.unwrap();
    let listed_of_us = listed.iter().find(|j| j.id == of_us.id).unwrap();
    assert_eq!(listed_of_us.waiting_for_brokers, ["us"]);
    assert_eq!(
        archive
            .claim_job("runner-us", None, LEASE, None)
            .await
            .unwrap(),
        None,
        "a runner claims only with its word given"
    );

    // A word already run out still lets its runner claim (it has just said it); once it
    // holds the lease, the lease says it runs.
    archive
        .announce_runner("runner-us", &["us"], 0)
        .await
        .unwrap();
    assert_eq!(reread(archive, of_us.id).await.waiting_for_brokers, ["us"]);
    let claimed = archive
        .claim_job("runner-us", None, LEASE, None)
        .await
        .unwrap()
        .expect("claimed again");
    assert_eq!(claimed.id, of_us.id);
    assert!(reread(archive, of_us.id)
        .await
        .waiting_for_brokers
        .is_empty());
    assert_eq!(
        handed_out(&step(archive, of_us.id, "runner-us", LEASE, &[], 10).await).len(),
        2
    );
}

on_both_backends!(unfinished_jobs_of_an_archive_from_before_get_their_brokers);
/// An archive an earlier version wrote has jobs without their brokers recorded: the migration
/// reads them from each unfinished job's plan, and a resume records them again.
async fn unfinished_jobs_of_an_archive_from_before_get_their_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let actor = Actor::system("test");
    let (of_us, paused) = {
        let archive = lazarus::archive::open(&url).await.unwrap();
        let batch = vec![
            on_broker("us", "us:old.dlq", "u1"),
            on_broker("us", "us:other.dlq", "u2"),
        ];
        assert_eq!(store(&*archive, batch).await, (2, 0));
        let of_us = job(&*archive, "old-us", &of_queue("us:old.dlq")).await;
        let paused = job(&*archive, "old-paused", &of_queue("us:other.dlq")).await;
        archive
            .control_job(paused.id, JobAction::Pause, &actor)
            .await
            .unwrap();
        (of_us.id, paused.id)
    };
    let version: u32 = migration_version(&url, "job_brokers");
    execute_sql(
        &url,
        &format!(
            "DROP TABLE replay_job_brokers; DROP TABLE replay_runners; \
             DELETE FROM _sqlx_migrations WHERE version = {version}"
        ),
    )
    .await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    assert_eq!(reread(archive, of_us).await.waiting_for_brokers, ["us"]);
    assert_eq!(
        archive
            .claim_job("runner-a", None, 60_000, None)
            .await
            .unwrap(),
        None
    );
    // A resume records them again (a job carried by `lazarus migrate` comes without).
    execute_sql(
        &url,
        &format!("DELETE FROM replay_job_brokers WHERE job_id = {paused}"),
    )
    .await;
    archive
        .control_job(paused, JobAction::Resume, &actor)
        .await
        .unwrap();
    assert_eq!(reread(archive, paused).await.waiting_for_brokers, ["us"]);
    assert_eq!(
        archive
            .claim_job("runner-a", None, 60_000, None)
            .await
            .unwrap(),
        None
    );
    archive
        .announce_runner("runner-us", &["us"], 60_000)
        .await
        .unwrap();
    let first = archive
        .claim_job("runner-us", None, 60_000, None)
        .await
        .unwrap()
        .expect("a runner with us claims");
    assert_eq!(first.id, of_us);
}

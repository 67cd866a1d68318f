//! A runner's step rules (pure): how many messages a step takes, what each publish outcome
//! is recorded as, and the canary's verdict.

use crate::amqp::publisher::PublishOutcome;
use crate::archive::{Canary, ItemOutcome, Outcome};

/// How many messages a step hands out: a fifth of a second's worth at the job's rate (so
/// pacing is smooth and a cancel is seen quickly), at most the confirm window.
pub fn step_size(rate_per_sec: Option<u32>, window: usize) -> u32 {
    let window = window.max(1) as u32;
    match rate_per_sec {
        Some(rate) if rate > 0 => (rate / 5).clamp(1, window),
        _ => window,
    }
}

/// What a publish outcome is recorded as; a failure before any confirm is published again.
pub fn item_outcome(message_id: i64, outcome: PublishOutcome) -> ItemOutcome {
    let (outcome, detail, retry) = match outcome {
        PublishOutcome::Published => (Outcome::Published, None, false),
        PublishOutcome::Unroutable { reply } => (Outcome::Unroutable, Some(reply), false),
        PublishOutcome::Nacked => (
            Outcome::Nacked,
            Some("the broker nacked the publish".into()),
            false,
        ),
        PublishOutcome::Failed(e) => (Outcome::Failed, Some(e), true),
    };
    ItemOutcome {
        message_id,
        outcome,
        detail,
        retry,
    }
}

/// A handed-out message whose record could not be read: failed for good, not retried.
pub(super) fn unreadable(message_id: i64, why: String) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome: Outcome::Failed,
        detail: Some(why),
        retry: false,
    }
}

/// A handed-out message that was never sent: it goes back to be done.
pub(super) fn not_sent(message_id: i64) -> ItemOutcome {
    ItemOutcome {
        message_id,
        outcome: Outcome::Failed,
        detail: Some("not sent before the runner stopped".into()),
        retry: true,
    }
}

/// The canary's verdict: `Some(reason)` to pause the job.
pub fn canary_verdict(canary: &Canary, deaths: i64) -> Option<String> {
    (deaths > i64::from(canary.max_deaths)).then(|| {
        format!(
            "canary: {deaths} of the first {} replayed copies died again within {} s \
             (at most {} allowed), so the rest was not published. Fix the consumer, then \
             resume, or cancel the job.",
            canary.count, canary.wait_secs, canary.max_deaths
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_a_fifth_of_a_second_at_the_rate_within_the_window() {
        assert_eq!(step_size(None, 500), 500);
        assert_eq!(step_size(Some(0), 500), 500);
        assert_eq!(step_size(Some(100), 500), 20);
        assert_eq!(step_size(Some(3), 500), 1);
        assert_eq!(step_size(Some(100_000), 500), 500);
    }

    #[test]
    fn only_a_missing_confirm_is_published_again() {
        assert!(!item_outcome(1, PublishOutcome::Published).retry);
        assert!(!item_outcome(1, PublishOutcome::Nacked).retry);
        let unroutable = item_outcome(
            1,
            PublishOutcome::Unroutable {
                reply: "312 NO_ROUTE".into(),
            },
        );
        assert_eq!(unroutable.outcome, Outcome::Unroutable);
        assert_eq!(unroutable.detail.as_deref(), Some("312 NO_ROUTE"));
        assert!(item_outcome(1, PublishOutcome::Failed("closed".into())).retry);
    }

    #[test]
    fn canary_pauses_only_above_its_threshold() {
        let canary = Canary {
            count: 10,
            wait_secs: 30,
            max_deaths: 1,
        };
        assert_eq!(canary_verdict(&canary, 0), None);
        assert_eq!(canary_verdict(&canary, 1), None);
        let reason = canary_verdict(&canary, 2).unwrap();
        assert!(reason.contains("2 of the first 10"), "{reason}");
    }
}

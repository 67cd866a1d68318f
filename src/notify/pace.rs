//! How fast one webhook is told (pure): at most `posts` POSTs in any `per` — first tries and
//! retries alike — and what waits meanwhile: events in order, failure groups beyond what the
//! rate allows folded into one digest that counts them all.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::event::{Event, DIGEST_NAMES};

/// `--webhook-max-posts N` in `--webhook-max-posts-secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub posts: u32,
    pub per: Duration,
}

/// The POSTs of one webhook within the last `per`.
#[derive(Debug)]
pub struct Pace {
    rate: Rate,
    sent: VecDeque<Instant>,
}

impl Pace {
    pub fn new(rate: Rate) -> Self {
        Pace {
            rate: Rate {
                posts: rate.posts.max(1),
                ..rate
            },
            sent: VecDeque::new(),
        }
    }

    fn forget(&mut self, now: Instant) {
        while let Some(&at) = self.sent.front() {
            if now.saturating_duration_since(at) >= self.rate.per {
                self.sent.pop_front();
            } else {
                break;
            }
        }
    }

    /// The POSTs that may go now.
    pub fn free(&mut self, now: Instant) -> usize {
        self.forget(now);
        (self.rate.posts as usize).saturating_sub(self.sent.len())
    }

    /// How long until one may go (zero: now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        if self.free(now) > 0 {
            return Duration::ZERO;
        }
        let oldest = self.sent[self.sent.len() - self.rate.posts as usize];
        (oldest + self.rate.per).saturating_duration_since(now)
    }

    /// A POST went at `now`.
    pub fn sent(&mut self, now: Instant) {
        self.sent.push_back(now);
    }
}

/// What waits for one webhook, in the order it came. Failure groups are kept to `keep` (the
/// URL's queue length); beyond that they are only counted, for the digest.
#[derive(Debug, Default)]
pub struct Backlog {
    events: VecDeque<Event>,
    /// Failure groups come beyond `keep`, counted only.
    uncounted_groups: u64,
    keep: usize,
}

/// What [`Backlog::take`] hands out: the event to POST and the failure groups it tells.
#[derive(Debug, PartialEq)]
pub struct Next {
    pub event: Event,
    /// Failure groups in it beyond the first (folded into a digest).
    pub folded: u64,
}

impl Backlog {
    pub fn new(keep: usize) -> Self {
        Backlog {
            keep,
            ..Backlog::default()
        }
    }

    /// Adds `event`; false when it had to be dropped (more than `keep` waiting that are not
    /// failure groups: those are counted instead).
    pub fn push(&mut self, event: Event) -> bool {
        if self.events.len() < self.keep {
            self.events.push_back(event);
            true
        } else if matches!(event, Event::NewFailureGroup(_)) {
            self.uncounted_groups += 1;
            true
        } else {
            false
        }
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.uncounted_groups == 0
    }

    /// Events waiting (the groups only counted included).
    pub fn len(&self) -> u64 {
        self.events.len() as u64 + self.uncounted_groups
    }

    /// The next thing to POST when `free` POSTs may go now (at least one): the first event
    /// as it is while everything waiting fits in `free`; else, when it is a failure group and
    /// this is the last POST allowed for now, every failure group waiting as one digest.
    pub fn take(&mut self, free: usize) -> Option<Next> {
        let groups =
            self.events.iter().filter(|e| is_group(e)).count() as u64 + self.uncounted_groups;
        let first_is_group = self.events.front().is_some_and(is_group);
        if (groups > 1 || self.uncounted_groups > 0)
            && (first_is_group || self.events.is_empty())
            && free <= 1
            && self.len() > free as u64
        {
            let mut named = Vec::new();
            let events = std::mem::take(&mut self.events);
            for event in events {
                match event {
                    Event::NewFailureGroup(g) => {
                        if named.len() < DIGEST_NAMES {
                            named.push(g);
                        }
                    }
                    other => self.events.push_back(other),
                }
            }
            self.uncounted_groups = 0;
            return Some(Next {
                event: Event::Digest {
                    named,
                    count: groups,
                },
                folded: groups,
            });
        }
        self.events
            .pop_front()
            .map(|event| Next { event, folded: 0 })
    }
}

fn is_group(event: &Event) -> bool {
    matches!(event, Event::NewFailureGroup(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::FailureGroup;
    use time::OffsetDateTime;

    fn group(n: usize) -> Event {
        Event::NewFailureGroup(FailureGroup {
            id: Some(n as i64),
            queue: Some("q".into()),
            first_death_queue: Some("q".into()),
            reason: Some("rejected".into()),
            error_type: None,
            error: Some(format!("error {n}")),
            example: Some(format!("error {n}")),
            message_type: None,
            open: 1,
            total: 1,
            settling: 0,
            first_seen: OffsetDateTime::UNIX_EPOCH,
            last_seen: OffsetDateTime::UNIX_EPOCH,
        })
    }

    fn threshold() -> Event {
        Event::OverThreshold {
            queue: "q".into(),
            open: 5,
            threshold: 4,
        }
    }

    #[test]
    fn at_most_n_posts_in_any_window() {
        let start = Instant::now();
        let s = Duration::from_secs(1);
        let mut pace = Pace::new(Rate {
            posts: 3,
            per: 10 * s,
        });
        for i in 0..3 {
            assert_eq!(pace.free(start + i * s), 3 - i as usize);
            assert_eq!(pace.wait(start + i * s), Duration::ZERO);
            pace.sent(start + i * s);
        }
        assert_eq!(pace.free(start + 3 * s), 0);
        assert_eq!(
            pace.wait(start + 3 * s),
            7 * s,
            "until the first is 10 s old"
        );
        assert_eq!(pace.free(start + 10 * s), 1);
        pace.sent(start + 10 * s);
        assert_eq!(pace.wait(start + 10 * s), s, "until the second is");
        assert_eq!(pace.free(start + 30 * s), 3);
    }

    /// A flood against a rate of 5 a minute, in simulated time: the POSTs in any minute, and
    /// every group told once, alone or counted in a digest.
    #[test]
    fn a_flood_is_told_within_the_rate_and_nothing_goes_untold() {
        let start = Instant::now();
        let rate = Rate {
            posts: 5,
            per: Duration::from_secs(60),
        };
        let mut pace = Pace::new(rate);
        let mut backlog = Backlog::new(1_000);
        let mut posts = Vec::new();
        let mut told = 0;
        // 2,000 groups over 20 s (one every 10 ms), a threshold among them; then quiet.
        let mut n = 0;
        for ms in (0..300_000u64).step_by(10) {
            let now = start + Duration::from_millis(ms);
            if n < 2_000 {
                assert!(backlog.push(group(n)));
                n += 1;
                if n == 700 {
                    assert!(backlog.push(threshold()));
                }
            }
            while !backlog.is_empty() && pace.wait(now).is_zero() {
                let next = backlog.take(pace.free(now)).unwrap();
                pace.sent(now);
                posts.push(now);
                told += match &next.event {
                    Event::NewFailureGroup(_) => 1,
                    Event::Digest { count, named } => {
                        assert_eq!(named.len(), DIGEST_NAMES);
                        assert_eq!(next.folded, *count);
                        *count
                    }
                    _ => 0,
                };
            }
        }
        assert!(backlog.is_empty());
        assert_eq!(told, 2_000, "every group, alone or in a digest");
        for (i, at) in posts.iter().enumerate() {
            let within = posts[i..]
                .iter()
                .take_while(|t| t.duration_since(*at) < rate.per)
                .count();
            assert!(within <= 5, "{within} POSTs in a minute from post {i}");
        }
        // 4 groups alone and a digest at once; a digest each minute after, with the
        // threshold on its own.
        assert!(posts.len() <= 5 + 5 + 1, "{} POSTs", posts.len());
    }

    #[test]
    fn groups_go_one_by_one_while_the_rate_allows() {
        let mut backlog = Backlog::new(1_000);
        for n in 0..3 {
            backlog.push(group(n));
        }
        assert_eq!(
            backlog.take(5).unwrap(),
            Next {
                event: group(0),
                folded: 0
            }
        );
        assert_eq!(backlog.take(4).unwrap().event, group(1));
        // The last POST allowed, one group left: itself.
        assert_eq!(backlog.take(1).unwrap().event, group(2));
        assert!(backlog.take(1).is_none());
    }

    #[test]
    fn the_last_post_allowed_folds_the_groups_and_keeps_the_rest_in_order() {
        let mut backlog = Backlog::new(4);
        backlog.push(group(0));
        backlog.push(threshold());
        for n in 1..10 {
            assert!(backlog.push(group(n)));
        }
        assert!(!backlog.push(threshold()), "beyond the queue: dropped");
        assert_eq!(backlog.len(), 11);
        let next = backlog.take(1).unwrap();
        let Event::Digest { named, count } = next.event else {
            panic!("{next:?}");
        };
        assert_eq!(count, 10);
        assert_eq!(next.folded, 10);
        assert_eq!(named.len(), 3, "the groups kept: the others only counted");
        assert_eq!(backlog.take(1).unwrap().event, threshold());
        assert!(backlog.is_empty());
    }
}

//! Sign-in throttling: failures counted per user name and per client address (an IPv6
//! client by its /64, which one machine usually holds whole). A sign-in is admitted, and
//! counted as in flight, *before* its password is hashed, so simultaneous guesses cannot
//! slip past the limit while the first ones are still being checked; and each failure says
//! whether the audit log needs a line for it, so repeated guessing is recorded compactly.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failed sign-ins allowed per user name within the window…
pub const MAX_FAILED_LOGINS: u32 = 5;
/// …and per address (higher: an office shares one address).
pub const MAX_FAILED_LOGINS_PER_ADDRESS: u32 = 20;
pub const LOGIN_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Past this many names and addresses, expired ones are swept on the next sign-in.
const SWEEP_AT: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Address(String),
}

#[derive(Debug)]
struct Count {
    failures: u32,
    /// Admitted sign-ins whose password is still being checked.
    in_flight: u32,
    since: Instant,
}

impl Count {
    fn new(now: Instant) -> Self {
        Count {
            failures: 0,
            in_flight: 0,
            since: now,
        }
    }

    /// A window that ran out starts again.
    fn expire(&mut self, now: Instant) {
        if now.duration_since(self.since) >= LOGIN_WINDOW {
            self.failures = 0;
            self.since = now;
        }
    }
}

/// Counts failed sign-ins per user name and per address, to slow down guessing.
#[derive(Debug, Default)]
pub struct Throttle {
    counts: Mutex<HashMap<Key, Count>>,
}

/// Why a sign-in is not even tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too many failures: wait this long.
    Locked(Duration),
    /// The sign-ins already being checked could use up what is left: try again shortly.
    Busy,
}

/// What a failure means for the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Failures for this name within the window, this one included.
    pub for_name: u32,
    /// Failures from this address within the window, this one included.
    pub for_address: u32,
    /// This failure locked the name…
    pub locks_name: bool,
    /// …or the address.
    pub locks_address: bool,
}

impl Failure {
    /// Whether the audit log records it: the first failure for a name in a window and a
    /// failure that locks something; the ones between are counted in those lines.
    pub fn worth_a_line(&self) -> bool {
        self.for_name == 1 || self.locks_name || self.locks_address
    }
}

/// An admitted sign-in: say how it ended; dropped unsaid (the database failed, the
/// request was cut off), it counts for nothing.
#[derive(Debug)]
pub struct Attempt {
    throttle: Arc<Throttle>,
    keys: [Key; 2],
    settled: bool,
}

/// An IPv4 client by its address, an IPv6 client by its /64.
fn address_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

impl Throttle {
    /// Admits a sign-in as `user` from `address` (`None`: not over the network), or says
    /// why not. Nothing has been hashed yet.
    pub fn admit(
        self: &Arc<Self>,
        user: &str,
        address: Option<IpAddr>,
    ) -> Result<Attempt, Refusal> {
        let keys = [
            Key::User(user.to_owned()),
            Key::Address(address.map_or_else(|| "local".to_owned(), address_key)),
        ];
        let limits = [MAX_FAILED_LOGINS, MAX_FAILED_LOGINS_PER_ADDRESS];
        let now = Instant::now();
        let mut counts = self.counts.lock().expect("throttle lock");
        if counts.len() > SWEEP_AT {
            counts.retain(|_, c| c.in_flight > 0 || now.duration_since(c.since) < LOGIN_WINDOW);
        }
        let mut refusal = None;
        for (key, limit) in keys.iter().zip(limits) {
            let Some(count) = counts.get_mut(key) else {
                continue;
            };
            count.expire(now);
            if count.failures >= limit {
                let wait = LOGIN_WINDOW.saturating_sub(now.duration_since(count.since));
                refusal = match refusal {
                    Some(Refusal::Locked(w)) if w >= wait => Some(Refusal::Locked(w)),
                    _ => Some(Refusal::Locked(wait)),
                };
            } else if count.failures + count.in_flight >= limit && refusal.is_none() {
                refusal = Some(Refusal::Busy);
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        for key in &keys {
            counts
                .entry(key.clone())
                .or_insert_with(|| Count::new(now))
                .in_flight += 1;
        }
        Ok(Attempt {
            throttle: self.clone(),
            keys,
            settled: false,
        })
    }

    /// Entries kept (for tests).
    pub fn tracked(&self) -> usize {
        self.counts.lock().expect("throttle lock").len()
    }
}

impl Attempt {
    fn settle(&mut self, change: impl Fn(&Key, &mut Count)) {
        self.settled = true;
        let mut counts = self.throttle.counts.lock().expect("throttle lock");
        for key in &self.keys {
            if let Some(count) = counts.get_mut(key) {
                count.in_flight = count.in_flight.saturating_sub(1);
                change(key, count);
            }
        }
    }

    /// A wrong password, or no such user.
    pub fn failed(mut self) -> Failure {
        let now = Instant::now();
        let seen = std::cell::Cell::new(Failure {
            for_name: 0,
            for_address: 0,
            locks_name: false,
            locks_address: false,
        });
        self.settle(|key, count| {
            count.expire(now);
            count.failures += 1;
            let mut f = seen.get();
            match key {
                Key::User(_) => {
                    f.for_name = count.failures;
                    f.locks_name = count.failures == MAX_FAILED_LOGINS;
                }
                Key::Address(_) => {
                    f.for_address = count.failures;
                    f.locks_address = count.failures == MAX_FAILED_LOGINS_PER_ADDRESS;
                }
            }
            seen.set(f);
        });
        seen.get()
    }

    /// The right password: the name's failures are forgotten (the address's are not).
    /// Returns how many there were, for the audit line.
    pub fn succeeded(mut self) -> u32 {
        let before = std::cell::Cell::new(0);
        self.settle(|key, count| {
            if let Key::User(_) = key {
                before.set(count.failures);
                count.failures = 0;
            }
        });
        let mut counts = self.throttle.counts.lock().expect("throttle lock");
        if counts
            .get(&self.keys[0])
            .is_some_and(|c| c.in_flight == 0 && c.failures == 0)
        {
            counts.remove(&self.keys[0]);
        }
        before.get()
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(|_, _| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn sign_ins_in_flight_count_before_they_fail() {
        let t = Arc::new(Throttle::default());
        let attempts: Vec<Attempt> = (0..MAX_FAILED_LOGINS)
            .map(|_| t.admit("alice", ip("10.0.0.1")).unwrap())
            .collect();
        // Five guesses are being checked: a sixth waits, whatever its password.
        assert_eq!(t.admit("alice", ip("10.0.0.2")).unwrap_err(), Refusal::Busy);
        let failures: Vec<Failure> = attempts.into_iter().map(Attempt::failed).collect();
        assert!(failures[0].worth_a_line() && !failures[1].worth_a_line());
        assert!(failures[4].locks_name && failures[4].worth_a_line());
        assert!(matches!(
            t.admit("alice", ip("10.0.0.2")),
            Err(Refusal::Locked(w)) if w > Duration::from_secs(14 * 60)
        ));
        assert!(
            t.admit("bob", ip("10.0.0.1")).is_ok(),
            "an address allows more"
        );
    }

    #[test]
    fn an_address_is_locked_after_many_names_and_an_ipv6_one_by_its_prefix() {
        let t = Arc::new(Throttle::default());
        for i in 0..MAX_FAILED_LOGINS_PER_ADDRESS {
            let f = t
                .admit(&format!("guess-{i}"), ip("2001:db8:1:2::7"))
                .unwrap()
                .failed();
            assert_eq!(f.locks_address, i + 1 == MAX_FAILED_LOGINS_PER_ADDRESS);
        }
        assert!(
            t.admit("bob", ip("2001:db8:1:2::99")).is_err(),
            "the same /64"
        );
        assert!(t.admit("bob", ip("2001:db8:1:3::7")).is_ok());
        assert!(t.admit("bob", ip("::ffff:10.0.0.1")).is_ok());
    }

    #[test]
    fn success_forgets_the_names_failures_and_a_dropped_attempt_counts_nothing() {
        let t = Arc::new(Throttle::default());
        for _ in 0..3 {
            t.admit("alice", ip("10.0.0.1")).unwrap().failed();
        }
        assert_eq!(t.admit("alice", ip("10.0.0.1")).unwrap().succeeded(), 3);
        for _ in 0..MAX_FAILED_LOGINS * 3 {
            drop(t.admit("alice", ip("10.0.0.1")).unwrap());
        }
        assert!(t.admit("alice", ip("10.0.0.1")).is_ok());
        assert!(t.tracked() <= 2);
    }
}

//! Retention policies as `--retention` spells them, `[QUEUE:]RULE[,RULE...]`: a policy
//! without a queue is every DLQ's, a queue's own replaces the rules it names (pure). A queue
//! is named as `--queue` names it and kept as its [`Dlq`], so `%2F/orders.dlq` and
//! `orders.dlq` are one DLQ, and a home queue `/a/b` is not the queue `b` of vhost `a`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::message::dlq::Dlq;

/// What one DLQ keeps; `None`: no such limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// Messages archived more than this many days ago go.
    pub days: Option<u32>,
    /// Resolved messages (dismissed, settled, died again) go this many days after they were.
    pub resolved_days: Option<u32>,
    /// At most this many messages: the oldest beyond it go.
    pub messages: Option<u64>,
    /// At most this many body bytes: the oldest beyond it go.
    pub bytes: Option<u64>,
}

/// One limit of a policy, in the order a pass applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Days(u32),
    ResolvedDays(u32),
    Messages(u64),
    Size(u64),
}

impl Rules {
    /// The limits set, age first, then the caps (which count what the ages left).
    pub fn list(&self) -> Vec<Rule> {
        [
            self.days.map(Rule::Days),
            self.resolved_days.map(Rule::ResolvedDays),
            self.messages.map(Rule::Messages),
            self.bytes.map(Rule::Size),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// These rules, each replaced by `over`'s where it sets one.
    fn overridden_by(self, over: Rules) -> Rules {
        Rules {
            days: over.days.or(self.days),
            resolved_days: over.resolved_days.or(self.resolved_days),
            messages: over.messages.or(self.messages),
            bytes: over.bytes.or(self.bytes),
        }
    }
}

impl fmt::Display for Rule {
    /// As it is written on the command line: `days=90`, `size=10GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Days(n) => write!(f, "days={n}"),
            Rule::ResolvedDays(n) => write!(f, "resolved-days={n}"),
            Rule::Messages(n) => write!(f, "messages={n}"),
            Rule::Size(n) => write!(f, "size={}", size_text(*n)),
        }
    }
}

const UNITS: [(&str, u64); 8] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
];

/// `bytes` in the largest binary unit that divides it: `10GiB`, `1536KiB`, `1000B`.
fn size_text(bytes: u64) -> String {
    UNITS[..4]
        .iter()
        .find(|(_, unit)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map_or_else(
            || format!("{bytes}B"),
            |(name, unit)| format!("{}{name}", bytes / unit),
        )
}

/// `10GiB`, `500MB`, `4096` (bytes): KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = UNITS
        .iter()
        .chain([("B", 1)].iter())
        .find_map(|(name, unit)| {
            text.strip_suffix(name)
                .or_else(|| text.strip_suffix(&name.to_lowercase()))
                .map(|n| (n.trim(), *unit))
        })
        .unwrap_or((text, 1));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("size {text:?}: expected a number with KiB, MiB, GiB or TiB"))?;
    n.checked_mul(unit)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("size {text:?}: must be more than 0 and fit in 64 bits"))
}

fn positive<T: FromStr + PartialOrd + Default>(key: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse::<T>()
        .ok()
        .filter(|n| *n > T::default())
        .ok_or_else(|| format!("{key}={value}: expected a whole number of at least 1"))
}

/// One `--retention` value: a queue's rules, or every queue's (`queue: None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSpec {
    pub queue: Option<String>,
    pub rules: Rules,
}

impl FromStr for RetentionSpec {
    type Err = String;

    /// `days=90,resolved-days=7` or `orders.dlq:messages=100000,size=10GiB` (a queue name
    /// may hold `:` itself: the rules follow the last one).
    fn from_str(text: &str) -> Result<Self, String> {
        let (queue, list) = match text.rsplit_once(':') {
            Some((queue, list)) if !queue.is_empty() => (Some(queue.to_owned()), list),
            Some(_) => return Err(format!("{text:?}: the queue name before ':' is empty")),
            None => (None, text),
        };
        let mut rules = Rules::default();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected key=value"))?;
            let set = match key.trim() {
                "days" => rules.days.replace(positive(key, value)?).is_none(),
                "resolved-days" => rules.resolved_days.replace(positive(key, value)?).is_none(),
                "messages" => rules.messages.replace(positive(key, value)?).is_none(),
                "size" => rules.bytes.replace(parse_size(value)?).is_none(),
                other => {
                    return Err(format!(
                        "unknown retention rule {other:?}: expected days, resolved-days, messages or size"
                    ))
                }
            };
            if !set {
                return Err(format!("{text:?}: {key} is given twice"));
            }
        }
        if rules == Rules::default() {
            return Err(format!(
                "{text:?}: no rule (days=N, resolved-days=N, messages=N, size=N[KiB|MiB|GiB])"
            ));
        }
        Ok(RetentionSpec { queue, rules })
    }
}

/// The retention of every DLQ: the policy for all, and each queue's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    all: Rules,
    queues: BTreeMap<Dlq, Rules>,
}

impl Policy {
    /// The policy of these `--retention` values, their queues in the AMQP URL vhost `home`
    /// unless they name another; a queue (or "all") given twice is refused.
    pub fn new(specs: &[RetentionSpec], home: &str) -> Result<Policy, String> {
        let mut policy = Policy::default();
        let mut all_given = false;
        for spec in specs {
            match &spec.queue {
                None if all_given => {
                    return Err("--retention for every queue is given twice".into());
                }
                None => {
                    all_given = true;
                    policy.all = spec.rules;
                }
                Some(queue) => {
                    let dlq = Dlq::parse(queue, home)?;
                    if policy.queues.insert(dlq.clone(), spec.rules).is_some() {
                        return Err(format!(
                            "--retention for the {} is given twice",
                            dlq.describe()
                        ));
                    }
                }
            }
        }
        Ok(policy)
    }

    /// Nothing is ever deleted.
    pub fn is_empty(&self) -> bool {
        self.all == Rules::default() && self.queues.is_empty()
    }

    /// The rules that apply to the DLQ the archive keys as `key` ([`Dlq::key`]).
    pub fn for_queue(&self, key: &str) -> Rules {
        match self.queues.iter().find(|(dlq, _)| dlq.key() == key) {
            Some((_, own)) => self.all.overridden_by(*own),
            None => self.all,
        }
    }

    /// As the overview and the logs say it: `all: days=90; orders.dlq: days=30, messages=1000`.
    pub fn describe(&self) -> String {
        let text = |rules: &Rules| {
            rules
                .list()
                .iter()
                .map(Rule::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if self.all != Rules::default() {
            parts.push(format!("all: {}", text(&self.all)));
        }
        for (dlq, own) in &self.queues {
            let rules = self.all.overridden_by(*own);
            parts.push(format!("{}: {}", dlq.key(), text(&rules)));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> RetentionSpec {
        text.parse().unwrap()
    }

    #[test]
    fn rules_are_read_with_or_without_a_queue() {
        assert_eq!(
            spec("days=90, resolved-days=7"),
            RetentionSpec {
                queue: None,
                rules: Rules {
                    days: Some(90),
                    resolved_days: Some(7),
                    ..Rules::default()
                }
            }
        );
        let s = spec("amq:orders.dlq:messages=100000,size=10GiB");
        assert_eq!(s.queue.as_deref(), Some("amq:orders.dlq"));
        assert_eq!(s.rules.messages, Some(100_000));
        assert_eq!(s.rules.bytes, Some(10 << 30));
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("2KiB"), Ok(2048));
        assert_eq!(parse_size("3 mib"), Ok(3 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert!(parse_size("0GiB").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }

    #[test]
    fn mistakes_are_refused_with_what_was_expected() {
        for (text, says) in [
            ("days=0", "at least 1"),
            ("days=-3", "at least 1"),
            ("weeks=2", "expected days, resolved-days, messages or size"),
            ("days", "expected key=value"),
            ("days=1,days=2", "given twice"),
            (":days=1", "queue name before ':' is empty"),
            ("orders.dlq:", "no rule"),
        ] {
            let error = text.parse::<RetentionSpec>().unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_queue_policy_replaces_only_the_rules_it_names() {
        let policy = Policy::new(
            &[
                spec("days=90,size=1GiB"),
                spec("orders.dlq:days=30,messages=1000"),
            ],
            "/",
        )
        .unwrap();
        assert_eq!(
            policy.for_queue("orders.dlq").list(),
            [Rule::Days(30), Rule::Messages(1000), Rule::Size(1 << 30)]
        );
        assert_eq!(
            policy.for_queue("other.dlq").list(),
            [Rule::Days(90), Rule::Size(1 << 30)]
        );
        assert_eq!(
            policy.describe(),
            "all: days=90, size=1GiB; orders.dlq: days=30, messages=1000, size=1GiB"
        );
        assert!(!policy.is_empty());
        assert!(Policy::new(&[], "/").unwrap().is_empty());
    }

    #[test]
    fn a_queue_given_twice_is_refused() {
        assert!(Policy::new(&[spec("q:days=1"), spec("q:days=2")], "/").is_err());
        assert!(Policy::new(&[spec("q:days=1"), spec("%2F/q:days=2")], "/").is_err());
        assert!(Policy::new(&[spec("days=1"), spec("days=2")], "/").is_err());
    }

    #[test]
    fn each_dlq_has_its_own_rules_whatever_its_name_holds() {
        let policy = Policy::new(
            &[
                spec("/secdisc2/orders.dlq:messages=1"),
                spec("secdisc2/orders.dlq:messages=2"),
                spec("%2F/plain.dlq:days=3"),
            ],
            "/",
        )
        .unwrap();
        assert_eq!(policy.for_queue("/secdisc2/orders.dlq").messages, Some(1));
        assert_eq!(policy.for_queue("secdisc2/orders.dlq").messages, Some(2));
        assert_eq!(policy.for_queue("plain.dlq").days, Some(3));
        assert!(Policy::new(&[spec("%zz/q:days=1")], "/").is_err());
    }

    #[test]
    fn rules_are_written_as_they_are_given() {
        assert_eq!(Rule::Size(10 << 30).to_string(), "size=10GiB");
        assert_eq!(Rule::Size(1536 << 10).to_string(), "size=1536KiB");
        assert_eq!(Rule::Size(1000).to_string(), "size=1000B");
        assert_eq!(Rule::ResolvedDays(7).to_string(), "resolved-days=7");
    }
}

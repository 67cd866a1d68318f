//! Where replays may publish (`--replay-exchange`, pure): an allow-list of exchange name
//! patterns (`*` for any run of characters; `(AMQP default)` for the default exchange).
//! A message's own replay target comes from its `x-death`, which is only a header: a
//! producer can forge it, and without an allow-list a replay would publish, with Lazarus'
//! credentials, wherever it says. Every replay path asks [`ExchangePolicy::check`].

use std::fmt;

/// The default exchange, as RabbitMQ's management UI names it.
pub const DEFAULT_EXCHANGE: &str = "(AMQP default)";

/// The exchanges replays may publish to; empty: any the broker lets Lazarus use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExchangePolicy {
    patterns: Vec<String>,
}

impl ExchangePolicy {
    pub fn new(patterns: &[String]) -> Self {
        ExchangePolicy {
            patterns: patterns
                .iter()
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    /// Whether any exchange is allowed (no `--replay-exchange` given).
    pub fn is_open(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn allows(&self, exchange: &str) -> bool {
        let name = if exchange.is_empty() {
            DEFAULT_EXCHANGE
        } else {
            exchange
        };
        self.is_open() || self.patterns.iter().any(|p| glob(p, name))
    }

    /// `Err` with what to tell the user when `exchange` is not allowed.
    pub fn check(&self, exchange: &str) -> Result<(), String> {
        if self.allows(exchange) {
            return Ok(());
        }
        let name = if exchange.is_empty() {
            DEFAULT_EXCHANGE
        } else {
            exchange
        };
        Err(format!(
            "exchange {name:?} is not one replays may publish to (--replay-exchange {self}): \
             nothing was published"
        ))
    }
}

impl fmt::Display for ExchangePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.patterns.join(", "))
    }
}

/// `*` matches any run of characters (none too); everything else matches itself.
pub(crate) fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields one part at least");
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        assert!(glob("billing", "billing") && !glob("billing", "billing2"));
        assert!(glob("billing.*", "billing.retry") && glob("billing.*", "billing."));
        assert!(!glob("billing.*", "xbilling.retry"));
        assert!(glob("*.retry", "orders.retry") && !glob("*.retry", "orders.retry.x"));
        assert!(glob("a*b*c", "a--b--c") && glob("a*b*c", "abc") && !glob("a*b*c", "acb"));
        assert!(glob("*", "") && glob("**", "x"));
        assert!(glob("ab*ab", "abab") && !glob("ab*ab", "aba"));
    }

    #[test]
    fn an_empty_list_allows_all_and_the_default_exchange_has_its_name() {
        assert!(ExchangePolicy::default().allows("evil"));
        let p = ExchangePolicy::new(&["billing.*".into(), "(AMQP default)".into()]);
        assert!(p.allows("billing.invoices") && p.allows(""));
        assert!(!p.allows("evil.exchange"));
        let err = p.check("evil.exchange").unwrap_err();
        assert!(
            err.contains("evil.exchange") && err.contains("billing.*"),
            "{err}"
        );
        assert!(!ExchangePolicy::new(&["billing".into()]).allows(""));
    }
}

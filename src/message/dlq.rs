//! A dead-letter queue across vhosts: the pair (vhost, name), [`Dlq`], is what identifies
//! one — in maps, status, metrics, retention and discovery. Where one string must stand for
//! it (the archive's `queue` column, a page, a metrics label, `--queue`), it is [`Dlq::key`]:
//! the bare name at home (the AMQP URL's vhost), `/name` for a home name holding `/`, and
//! `vhost/name` elsewhere with `/` and `%` of the vhost percent-encoded. Every (vhost, name)
//! has its own key and [`Dlq::parse`] reads it back: a home queue `a/b` (`/a/b`) and the
//! queue `b` of vhost `a` (`a/b`) never share one.

/// A DLQ, in the home vhost (`vhost` empty) or in a named one, of the default broker
/// (`--amqp-url`) or of one `--broker NAME=URL` names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dlq {
    /// [`DEFAULT_BROKER`], or the name `--broker` gives a cluster.
    pub broker: String,
    /// Empty: the broker URL's own vhost.
    pub vhost: String,
    pub name: String,
}

/// The broker `--amqp-url` names, as the archive's `broker` column holds it.
pub const DEFAULT_BROKER: &str = "default";

impl Dlq {
    /// A DLQ of the default broker's home vhost.
    pub fn home(name: impl Into<String>) -> Self {
        Dlq {
            broker: DEFAULT_BROKER.to_owned(),
            vhost: String::new(),
            name: name.into(),
        }
    }

    /// The same DLQ on the broker `broker`.
    pub fn on(mut self, broker: &str) -> Self {
        self.broker = broker.to_owned();
        self
    }

    /// Whether it is on the broker `--amqp-url` names.
    pub fn is_default_broker(&self) -> bool {
        self.broker == DEFAULT_BROKER
    }

    /// Reads `name`, `vhost/name` (the vhost percent-encoded where it holds `/` or `%`:
    /// `%2F/name` is the vhost `/`) or `/name` (a home queue whose name holds `/`). A vhost
    /// equal to `home` (the AMQP URL's) is the home vhost.
    pub fn parse(spec: &str, home: &str) -> Result<Self, String> {
        let (vhost, name) = match spec.split_once('/') {
            None => (String::new(), spec),
            Some((vhost, name)) => (unescape(vhost)?, name),
        };
        if name.is_empty() {
            return Err(format!("{spec:?} names no queue: give name or vhost/name"));
        }
        if !vhost.is_empty() {
            check_name("vhost", &vhost).map_err(|e| format!("{spec:?}: {e}"))?;
        }
        check_name("queue", name).map_err(|e| format!("{spec:?}: {e}"))?;
        Ok(Dlq {
            broker: DEFAULT_BROKER.to_owned(),
            vhost: stored_vhost(&vhost, home),
            name: name.to_owned(),
        })
    }

    /// The DLQ as the archive keys it, every page shows it and `--queue` takes it: the bare
    /// name at home (`/name` when the name holds `/`), `vhost/name` elsewhere (`/` and `%`
    /// in the vhost percent-encoded, so the first `/` always ends the vhost, and an empty
    /// vhost before it is home's). One key per DLQ: `Dlq::parse(&d.key(), home) == d`.
    /// A DLQ of another broker than the default is keyed `broker:` and its key there.
    pub fn key(&self) -> String {
        on_broker(&self.broker, self.key_on_broker())
    }

    /// Its key on its own broker: [`Dlq::key`] without the `broker:` prefix (the same on the
    /// default broker). With the broker beside it, as the metrics' `broker` and `queue`
    /// labels carry it, it names the DLQ: `on_broker(broker, key_on_broker) == key`.
    pub fn key_on_broker(&self) -> String {
        qualify(&self.vhost, &self.name)
    }

    /// The DLQ in words: `queue "b" of vhost "a"`, `queue "a/b" of the AMQP URL's vhost`.
    pub fn describe(&self) -> String {
        let words = match self.vhost.as_str() {
            "" => format!("queue {:?} of the AMQP URL's vhost", self.name),
            vhost => format!("queue {:?} of vhost {vhost:?}", self.name),
        };
        match self.is_default_broker() {
            true => words,
            false => format!("{words} on broker {:?}", self.broker),
        }
    }

    /// The vhost's name, the home vhost's being `home`.
    pub fn vhost_name<'a>(&'a self, home: &'a str) -> &'a str {
        named_vhost(&self.vhost, home)
    }

    /// The DLQ of an archived message, from its `queue` column ([`Dlq::key`]) and the vhost
    /// stored beside it: the name is what follows the prefix that vhost's key has (none for
    /// a home name without `/`).
    pub fn from_key(key: &str, vhost: &str) -> Self {
        Self::from_stored(key, DEFAULT_BROKER, vhost)
    }

    /// [`Dlq::from_key`] with the broker stored beside the key, whose `broker:` prefix the
    /// key of another broker than the default carries.
    pub fn from_stored(key: &str, broker: &str, vhost: &str) -> Self {
        let key = off_broker(broker, key);
        let name = match (vhost.is_empty(), key.split_once('/')) {
            (true, None) => key,
            (_, Some((_, name))) => name,
            // No key of another vhost lacks its `vhost/` prefix: kept whole.
            (false, None) => key,
        };
        Dlq {
            broker: match broker {
                "" => DEFAULT_BROKER.to_owned(),
                broker => broker.to_owned(),
            },
            vhost: vhost.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl std::fmt::Display for Dlq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

/// Whether `pattern` names `dlq` (`*` matches any run of characters): a pattern without `/`
/// matches names in the AMQP URL's vhost, one with `/` is `VHOST/NAME` — what comes before
/// its first `/` matches the vhost (written as a key writes it: `%2F` for `/`; the home vhost
/// by its name, `home`), the rest the name. Vhost and name are matched apart: `*/orders.dlq`
/// is `orders.dlq` of any vhost, never a home queue named `x/orders.dlq`. Discovery
/// (`--discover-include`) and rights (`viewer of tenant-a/*`) read patterns so.
///
/// A DLQ of another broker than the default is named by a pattern `BROKER:…` only (the rest
/// read as above); a pattern without that prefix never names one.
pub fn pattern_matches(pattern: &str, dlq: &Dlq, home: &str) -> bool {
    use super::exchange_policy::glob;
    let pattern = match dlq.is_default_broker() {
        true => pattern,
        false => match pattern
            .strip_prefix(dlq.broker.as_str())
            .and_then(|p| p.strip_prefix(':'))
        {
            Some(rest) => rest,
            None => return false,
        },
    };
    match pattern.split_once('/') {
        Some((vhost, name)) => glob(vhost, &escape(dlq.vhost_name(home))) && glob(name, &dlq.name),
        None => dlq.vhost.is_empty() && glob(pattern, &dlq.name),
    }
}

/// Whether `pattern` can name DLQs: not empty, and no control characters.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let (vhost, name) = pattern.split_once('/').unwrap_or(("*", pattern));
    if vhost.is_empty() || name.is_empty() {
        return Err(format!(
            "{pattern:?} names no DLQs: give NAME or VHOST/NAME (`*` for any run of characters)"
        ));
    }
    match pattern.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!(
            "the pattern {pattern:?} holds the control character {c:?}"
        )),
        None => Ok(()),
    }
}

/// Every `--queue`, each once.
pub fn parse_all(specs: &[String], home: &str) -> Result<Vec<Dlq>, String> {
    let mut dlqs: Vec<Dlq> = Vec::new();
    for spec in specs {
        let dlq = Dlq::parse(spec, home)?;
        if dlqs.contains(&dlq) {
            return Err(format!("{spec:?} names the {} twice", dlq.describe()));
        }
        dlqs.push(dlq);
    }
    Ok(dlqs)
}

/// Whether `name` can be a vhost's or queue's (`what`) name, as RabbitMQ and the archive
/// hold one: 1 to 255 bytes (an AMQP short string) without control characters (NUL cannot
/// be stored as PostgreSQL text; RabbitMQ takes line breaks out of queue names). `?`,
/// markup and the like are RabbitMQ's to allow, and it does.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("the {what} name is empty"));
    }
    if name.len() > usize::from(u8::MAX) {
        return Err(format!(
            "the {what} name is {} bytes; RabbitMQ's hold at most 255",
            name.len()
        ));
    }
    match name.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!(
            "the {what} name {name:?} holds the control character {c:?}"
        )),
        None => Ok(()),
    }
}

/// The vhost `amqp_url` names (`/` when it names none): the instance's home. A broker given
/// as several addresses names it once for all of them.
pub fn home_vhost(amqp_url: &str) -> String {
    crate::message::broker_nodes::first_node_url(amqp_url)
        .parse::<lapin::uri::AMQPUri>()
        .map_or_else(|_| "/".to_owned(), |uri| uri.vhost)
}

/// A vhost as the archive stores it: empty for `home`, the AMQP URL's.
pub fn stored_vhost(vhost: &str, home: &str) -> String {
    match vhost == home {
        true => String::new(),
        false => vhost.to_owned(),
    }
}

/// A stored vhost named: the empty one is `home`, the AMQP URL's.
pub fn named_vhost<'a>(stored: &'a str, home: &'a str) -> &'a str {
    match stored {
        "" => home,
        vhost => vhost,
    }
}

/// `RabbitMQ refuses the vhost "v"` (or the AMQP URL's): a vhost it would not open, deleted
/// or not the user's.
pub fn refused(vhost: &str) -> String {
    match vhost {
        "" => "RabbitMQ refuses the AMQP URL's vhost".to_owned(),
        vhost => format!("RabbitMQ refuses the vhost {vhost:?}"),
    }
}

/// ` in vhost "v"` for a message of another vhost, nothing for the home one: where an
/// exchange or queue named in a message was looked for.
pub fn in_vhost(vhost: &str) -> String {
    match vhost {
        "" => String::new(),
        vhost => format!(" in vhost {vhost:?}"),
    }
}

/// A key of the default broker as `broker` keys it: unchanged on the default one,
/// `broker:key` on another.
pub fn on_broker(broker: &str, key: String) -> String {
    match broker {
        "" | DEFAULT_BROKER => key,
        broker => format!("{broker}:{key}"),
    }
}

/// A key of the broker `broker` ([`Dlq::key`]) as that broker keys it: without its
/// `broker:` prefix (a key of the default broker, or one without the prefix, unchanged). The
/// inverse of [`on_broker`].
pub fn off_broker<'k>(broker: &str, key: &'k str) -> &'k str {
    match broker {
        "" | DEFAULT_BROKER => key,
        broker => key
            .strip_prefix(broker)
            .and_then(|k| k.strip_prefix(':'))
            .unwrap_or(key),
    }
}

/// Whether `name` can name a broker (`--broker NAME=URL`): 1 to 32 of `a-z`, `0-9`, `-`
/// and `_`, so that `NAME:` never holds a key's `/` or `:` of its own.
pub fn check_broker_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    match fine {
        true => Ok(()),
        false => Err(format!(
            "{name:?} cannot name a broker: 1 to 32 of a-z, 0-9, - and _"
        )),
    }
}

/// A queue name of `vhost` (empty: home) as the archive keys it ([`Dlq::key`]).
pub fn qualify(vhost: &str, name: &str) -> String {
    match (vhost.is_empty(), name.contains('/')) {
        (true, false) => name.to_owned(),
        (true, true) => format!("/{name}"),
        (false, _) => format!("{}/{name}", escape(vhost)),
    }
}

/// A vhost's name as a key writes it: `/` and `%` percent-encoded.
pub fn escape(vhost: &str) -> String {
    vhost.replace('%', "%25").replace('/', "%2F")
}

fn unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{text:?}: % must start a hex escape such as %2F"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once unescaped"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_in_the_home_vhost() {
        assert_eq!(
            Dlq::parse("orders.dlq", "/").unwrap(),
            Dlq::home("orders.dlq")
        );
        assert_eq!(Dlq::home("orders.dlq").key(), "orders.dlq");
    }

    #[test]
    fn a_vhost_prefix_names_another_vhost() {
        let dlq = Dlq::parse("tenant-a/orders.dlq", "/").unwrap();
        assert_eq!(dlq.vhost, "tenant-a");
        assert_eq!(dlq.name, "orders.dlq");
        assert_eq!(dlq.key(), "tenant-a/orders.dlq");
        assert_eq!(dlq.vhost_name("/"), "tenant-a");
        assert_eq!(Dlq::home("x").vhost_name("/"), "/");
    }

    #[test]
    fn the_home_vhost_named_is_home() {
        assert_eq!(Dlq::parse("%2F/dlq", "/").unwrap(), Dlq::home("dlq"));
        assert_eq!(Dlq::parse("shop/dlq", "shop").unwrap(), Dlq::home("dlq"));
        // An empty vhost is home: the way to name a home queue with / in its name.
        assert_eq!(Dlq::parse("/a/b", "shop").unwrap(), Dlq::home("a/b"));
    }

    #[test]
    fn vhosts_with_slashes_round_trip_through_the_key() {
        let dlq = Dlq::parse("prod%2Feu/x/y", "/").unwrap();
        assert_eq!(dlq.vhost, "prod/eu");
        assert_eq!(dlq.name, "x/y");
        assert_eq!(dlq.key(), "prod%2Feu/x/y");
        assert_eq!(Dlq::parse(&dlq.key(), "/").unwrap(), dlq);
        assert_eq!(Dlq::from_key(&dlq.key(), "prod/eu"), dlq);
        assert_eq!(Dlq::home("a/b").key(), "/a/b");
        assert_eq!(Dlq::from_key("/a/b", ""), Dlq::home("a/b"));
        let percent = Dlq::parse("50%25/q", "/").unwrap();
        assert_eq!(percent.vhost, "50%");
        assert_eq!(percent.key(), "50%25/q");
    }

    #[test]
    fn the_home_vhost_is_the_urls() {
        assert_eq!(home_vhost("amqp://guest:guest@127.0.0.1:5672"), "/");
        assert_eq!(home_vhost("amqp://127.0.0.1:5672/%2f"), "/");
        assert_eq!(home_vhost("amqp://127.0.0.1:5672/shop?heartbeat=5"), "shop");
        assert_eq!(home_vhost("amqp://u:p@n1:5672,n2,n3:5673/shop"), "shop");
    }

    #[test]
    fn a_home_name_with_a_slash_and_a_vhosts_queue_have_keys_of_their_own() {
        let home = Dlq::home("secdisc2/orders.dlq");
        let other = Dlq::parse("secdisc2/orders.dlq", "/").unwrap();
        assert_eq!(other.vhost, "secdisc2");
        assert_eq!(home.key(), "/secdisc2/orders.dlq");
        assert_eq!(other.key(), "secdisc2/orders.dlq");
        for dlq in [&home, &other] {
            assert_eq!(Dlq::parse(&dlq.key(), "/").unwrap(), *dlq);
            assert_eq!(Dlq::from_key(&dlq.key(), &dlq.vhost), *dlq);
        }
        let specs = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_all(&specs(&["/a/b", "a/b"]), "/").unwrap().len(), 2);
        let twice = parse_all(&specs(&["dlq", "%2F/dlq"]), "/").unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
        let fine = parse_all(&specs(&["dlq", "a/dlq", "b/dlq"]), "/").unwrap();
        assert_eq!(fine.len(), 3);
    }

    #[test]
    fn bad_specs_say_why() {
        assert!(Dlq::parse("tenant/", "/")
            .unwrap_err()
            .contains("names no queue"));
        assert!(Dlq::parse("%zz/q", "/").unwrap_err().contains("hex escape"));
        assert!(Dlq::parse("%ff/q", "/").unwrap_err().contains("UTF-8"));
        assert!(Dlq::parse("a%00/q", "/").unwrap_err().contains("control"));
        assert!(Dlq::parse(&"q".repeat(256), "/")
            .unwrap_err()
            .contains("255"));
    }
}

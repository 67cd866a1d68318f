//! MassTransit's RabbitMQ endpoint addresses (pure): `rabbitmq://host[:port][/vhost]/name
//! [?query]` — the default vhost omitted, a named one escaped with `Uri.EscapeDataString` —
//! and the short forms `queue:name` and `exchange:name` its configuration (and Particular's
//! connector) use. A receive endpoint's exchange and queue share their name.

/// The queue an address names, and the vhost it is in (`None`: the address does not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub vhost: Option<String>,
    pub queue: String,
}

/// Reads an address; the error says why it is not one, in words that follow
/// "MT-Fault-InputAddress …".
pub fn parse(text: &str) -> Result<Address, String> {
    let text = text.trim();
    for short in ["queue:", "exchange:"] {
        if let Some(name) = strip_prefix_ignore_case(text, short) {
            if name.is_empty() || name.starts_with("//") {
                break;
            }
            return Ok(Address {
                vhost: None,
                queue: unescape(name)?,
            });
        }
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err("is not a rabbitmq:// address".into());
    };
    if !["rabbitmq", "rabbitmqs"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
    {
        return Err(format!(
            "is not a rabbitmq:// address (its scheme is {})",
            super::fields::quoted(scheme)
        ));
    }
    let rest = rest.split('#').next().unwrap_or_default();
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err("is a rabbitmq:// address without a host".into());
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (vhost, name) = match segments.as_slice() {
        [name] => ("/".to_owned(), *name),
        [vhost, name] => (unescape(vhost)?, *name),
        [] => return Err("is a rabbitmq:// address that names no queue".into()),
        more => {
            return Err(format!(
                "is a rabbitmq:// address of {} path segments, not [/vhost]/queue",
                more.len()
            ))
        }
    };
    // `bind=true&queue=x`: the exchange `name` is bound to the queue `x`.
    let bound = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("queue="))
        .filter(|q| !q.is_empty());
    Ok(Address {
        vhost: Some(vhost),
        queue: unescape(bound.unwrap_or(name))?,
    })
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Percent-escapes undone (`%2F` → `/`).
fn unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "is an address with a bad escape in {}",
                        super::fields::quoted(text)
                    )
                })?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "is an address that is not UTF-8 once unescaped".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (Option<String>, String) {
        let a = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (a.vhost, a.queue)
    }

    fn home(queue: &str) -> (Option<String>, String) {
        (Some("/".into()), queue.into())
    }

    #[test]
    fn the_forms_masstransit_writes() {
        assert_eq!(
            ok("rabbitmq://localhost/submit-order"),
            home("submit-order")
        );
        assert_eq!(
            ok("rabbitmq://broker/my-vhost/submit-order"),
            (Some("my-vhost".into()), "submit-order".into())
        );
        assert_eq!(
            ok("rabbitmqs://broker:5673/prod%2Feu/submit-order?durable=false"),
            (Some("prod/eu".into()), "submit-order".into())
        );
        assert_eq!(
            ok("rabbitmq://[::1]:5672/test/input_queue_error?bind=true&queue=input_queue_error"),
            (Some("test".into()), "input_queue_error".into())
        );
        assert_eq!(
            ok("rabbitmq://localhost/host_proc_bus_x1?temporary=true"),
            home("host_proc_bus_x1")
        );
        assert_eq!(ok("RabbitMQ://LOCALHOST/Orders/"), home("Orders"));
        assert_eq!(ok("queue:submit-order"), (None, "submit-order".into()));
        assert_eq!(ok("exchange:submit-order"), (None, "submit-order".into()));
    }

    #[test]
    fn what_is_no_address_says_why() {
        let cases = [
            ("", "is not a rabbitmq:// address"),
            ("submit-order", "is not a rabbitmq:// address"),
            ("queue:", "is not a rabbitmq:// address"),
            (
                "amqp://localhost/q",
                "is not a rabbitmq:// address (its scheme is \"amqp\")",
            ),
            ("sb://ns.servicebus.windows.net/q", "(its scheme is \"sb\")"),
            ("rabbitmq:///q", "without a host"),
            ("rabbitmq://localhost", "names no queue"),
            ("rabbitmq://localhost/?queue=x", "names no queue"),
            ("rabbitmq://localhost/a/b/c", "of 3 path segments"),
            ("rabbitmq://localhost/%zz/q", "bad escape"),
            ("rabbitmq://localhost/%ff/q", "not UTF-8"),
        ];
        for (text, said) in cases {
            let why = parse(text).expect_err(text);
            assert!(why.contains(said), "{text}: {why}");
        }
    }
}

//! A broker given as several addresses, `amqp://user:password@n1:5672,n2,n3:5673/vhost`: the
//! nodes of one cluster, sharing the user, the vhost and the query, each with its own port
//! (5672 by default, 5671 for `amqps://`). Pure: each node becomes a URL of its own.

use std::fmt;

/// The nodes of a broker, in the order the URL lists them.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerNodes {
    nodes: Vec<Node>,
}

/// One node: the URL that connects to it (password included) and its address as shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Node {
    url: String,
    address: String,
}

impl Node {
    /// The node's own `amqp://` URL, password included: for connecting, never for logs.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `host:port`, without user or password: for logs, `/readyz` and errors.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address)
    }
}

impl fmt::Debug for BrokerNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.nodes).finish()
    }
}

impl BrokerNodes {
    /// Reads `scheme://[userinfo@]host[:port][,host[:port]]…[/vhost][?query]`. A URL naming
    /// one node is kept exactly as it is.
    pub fn parse(url: &str) -> Result<Self, String> {
        let Some(scheme_end) = url.find("://") else {
            return Err("an AMQP URL starts with amqp:// or amqps://".into());
        };
        let scheme = &url[..scheme_end];
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "amqps" => 5671,
            _ => 5672,
        };
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let shown = |name: &str, port: u16| match name {
            "" => format!("localhost:{port}"),
            name => format!("{name}:{port}"),
        };
        if !hosts.contains(',') {
            // Kept whole: lapin reads it (and says what is wrong with it) as before.
            let address = match split_port(hosts) {
                Ok((name, port)) => shown(name, port.unwrap_or(default_port)),
                Err(_) => hosts.to_owned(),
            };
            let node = Node {
                url: url.to_owned(),
                address,
            };
            return Ok(BrokerNodes { nodes: vec![node] });
        }
        let mut nodes = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = split_port(host)?;
            if name.is_empty() {
                return Err(format!(
                    "the AMQP URL lists an empty address among {hosts:?}"
                ));
            }
            let port = port.unwrap_or(default_port);
            nodes.push(Node {
                url: format!("{scheme}://{userinfo}{name}:{port}{tail}"),
                address: shown(name, port),
            });
        }
        Ok(BrokerNodes { nodes })
    }

    /// Every node, in the URL's order (one at least).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The first node: what a setting read from the URL (its user, its vhost) reads.
    pub fn first(&self) -> &Node {
        &self.nodes[0]
    }

    /// `n1:5672, n2:5672`: every address, for logs and errors.
    pub fn addresses(&self) -> String {
        let addresses: Vec<&str> = self.nodes.iter().map(Node::address).collect();
        addresses.join(", ")
    }
}

/// The URL of the first node of `url` (the whole URL when it names one, or cannot be read):
/// for what only reads its user, password, vhost or query.
pub fn first_node_url(url: &str) -> String {
    BrokerNodes::parse(url).map_or_else(|_| url.to_owned(), |b| b.first().url.clone())
}

/// `host:port` → (`host`, port); `[::1]:5672` keeps its brackets.
fn split_port(host: &str) -> Result<(&str, Option<u16>), String> {
    let colon = match host.strip_prefix('[') {
        Some(v6) => v6.find(']').map(|end| end + 2).and_then(|after| {
            let after_bracket = &host[after..];
            after_bracket.starts_with(':').then_some(after)
        }),
        None => host.rfind(':'),
    };
    match colon {
        Some(colon) => {
            let port = &host[colon + 1..];
            let port = port
                .parse()
                .map_err(|_| format!("the AMQP URL's port {port:?} (of {host:?}) is no number"))?;
            Ok((&host[..colon], Some(port)))
        }
        None => Ok((host, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(b: &BrokerNodes) -> Vec<&str> {
        b.nodes().iter().map(Node::url).collect()
    }

    fn addresses(b: &BrokerNodes) -> Vec<&str> {
        b.nodes().iter().map(Node::address).collect()
    }

    #[test]
    fn one_node_is_kept_as_it_was_given() {
        for url in [
            "amqp://guest:guest@127.0.0.1:5672/%2f",
            "amqp://guest:guest@mq/prod?heartbeat=10",
            "amqps://mq",
            "amqp://",
        ] {
            let b = BrokerNodes::parse(url).unwrap();
            assert_eq!(urls(&b), [url]);
        }
        let b = BrokerNodes::parse("amqp://u:p@mq/v").unwrap();
        assert_eq!(addresses(&b), ["mq:5672"]);
        let b = BrokerNodes::parse("amqps://u:p@mq/v").unwrap();
        assert_eq!(addresses(&b), ["mq:5671"]);
        let b = BrokerNodes::parse("amqp://").unwrap();
        assert_eq!(addresses(&b), ["localhost:5672"]);
    }

    #[test]
    fn several_nodes_share_user_vhost_and_query_and_keep_their_ports() {
        let b = BrokerNodes::parse("amqp://app:s3cret@n1:5673,n2,10.0.0.3:5680/prod?heartbeat=5")
            .unwrap();
        assert_eq!(
            urls(&b),
            [
                "amqp://app:s3cret@n1:5673/prod?heartbeat=5",
                "amqp://app:s3cret@n2:5672/prod?heartbeat=5",
                "amqp://app:s3cret@10.0.0.3:5680/prod?heartbeat=5",
            ]
        );
        assert_eq!(addresses(&b), ["n1:5673", "n2:5672", "10.0.0.3:5680"]);
        assert_eq!(b.addresses(), "n1:5673, n2:5672, 10.0.0.3:5680");
        assert_eq!(
            b.first().url(),
            "amqp://app:s3cret@n1:5673/prod?heartbeat=5"
        );
        // TLS nodes default to 5671; no vhost, no user.
        let b = BrokerNodes::parse("amqps://n1,n2").unwrap();
        assert_eq!(urls(&b), ["amqps://n1:5671", "amqps://n2:5671"]);
        // IPv6 addresses keep their brackets.
        let b = BrokerNodes::parse("amqp://u:p@[::1]:5690,[fe80::1]/%2f").unwrap();
        assert_eq!(
            urls(&b),
            ["amqp://u:p@[::1]:5690/%2f", "amqp://u:p@[fe80::1]:5672/%2f"]
        );
        // A password may hold an @ or a comma (URL-encoded or not): the last @ ends it.
        let b = BrokerNodes::parse("amqp://u:a,b@c@n1,n2/v").unwrap();
        assert_eq!(
            urls(&b),
            ["amqp://u:a,b@c@n1:5672/v", "amqp://u:a,b@c@n2:5672/v"]
        );
    }

    #[test]
    fn addresses_and_debug_hold_no_password() {
        let b = BrokerNodes::parse("amqp://app:s3cret@n1,n2/v").unwrap();
        let shown = format!("{b:?} {}", b.addresses());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(format!("{b:?}"), "[n1:5672, n2:5672]");
    }

    #[test]
    fn broken_lists_are_refused_with_what_is_wrong() {
        let empty = BrokerNodes::parse("amqp://u:p@n1,,n3/v").unwrap_err();
        assert!(empty.contains("empty address"), "{empty}");
        let port = BrokerNodes::parse("amqp://u:p@n1:56x2,n2/v").unwrap_err();
        assert!(port.contains("\"56x2\""), "{port}");
        assert!(!port.contains("u:p"), "{port}");
        assert!(BrokerNodes::parse("n1,n2").is_err());
    }

    #[test]
    fn the_first_nodes_url_is_read_for_vhost_and_user() {
        assert_eq!(first_node_url("amqp://u:p@n1,n2/v"), "amqp://u:p@n1:5672/v");
        assert_eq!(first_node_url("amqp://u:p@mq/v"), "amqp://u:p@mq/v");
        assert_eq!(first_node_url("not a url"), "not a url");
    }
}

//! Who is on the other end of a request: the peer's address — an IPv4 client of a
//! dual-stack (`[::]`) socket taken as the IPv4 address it is, not `::ffff:a.b.c.d` — or,
//! when the peer is a `--trusted-proxy`, the client that proxy names in `X-Forwarded-For`:
//! the rightmost address that is not itself a trusted proxy (what a client writes there
//! itself is further left, and never believed).

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;

use crate::auth::AuthSettings;

/// The peer's address as the IPv4 or IPv6 address it is.
pub fn peer_ip(peer: Option<SocketAddr>) -> Option<IpAddr> {
    peer.map(|p| p.ip().to_canonical())
}

/// Whether the peer is one of the trusted proxies.
pub fn from_trusted_proxy(settings: &AuthSettings, peer: Option<SocketAddr>) -> bool {
    peer_ip(peer).is_some_and(|ip| settings.trusted_proxies.contains(&ip))
}

/// One `X-Forwarded-For` entry: an address, perhaps with a port (`[v6]:port`, `v4:port`).
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

/// The client's address: the peer's, or the one a trusted proxy forwarded for.
pub fn client_ip(
    settings: &AuthSettings,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<IpAddr> {
    let mut client = peer_ip(peer)?;
    if !settings.trusted_proxies.contains(&client) {
        return Some(client);
    }
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    // From the right: each hop a trusted proxy appended, until one that is not a proxy.
    for entry in forwarded.iter().rev() {
        match forwarded_ip(entry) {
            Some(ip) => {
                client = ip;
                if !settings.trusted_proxies.contains(&ip) {
                    break;
                }
            }
            None => break,
        }
    }
    Some(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn settings(proxies: &[&str]) -> AuthSettings {
        AuthSettings {
            trusted_proxies: proxies.iter().map(|p| p.parse().unwrap()).collect(),
            ..AuthSettings::none()
        }
    }

    fn forwarded(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_static(v));
        }
        h
    }

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn ipv4_clients_of_a_dual_stack_socket_are_ipv4() {
        let s = settings(&["127.0.0.1"]);
        assert!(from_trusted_proxy(&s, peer("[::ffff:127.0.0.1]:5000")));
        assert_eq!(
            peer_ip(peer("[::ffff:10.1.2.3]:1")),
            Some("10.1.2.3".parse().unwrap())
        );
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let s = settings(&["10.0.0.1", "10.0.0.2"]);
        let h = forwarded(&["6.6.6.6, 203.0.113.7", "10.0.0.2"]);
        // 6.6.6.6 is what the client wrote itself; 203.0.113.7 is who reached the first proxy.
        assert_eq!(
            client_ip(&s, &h, peer("10.0.0.1:80")),
            Some("203.0.113.7".parse().unwrap())
        );
        assert_eq!(
            client_ip(&s, &h, peer("192.0.2.9:80")),
            Some("192.0.2.9".parse().unwrap()),
            "anyone else's header is ignored"
        );
        assert_eq!(
            client_ip(&s, &forwarded(&["[2001:db8::1]:443"]), peer("10.0.0.1:80")),
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            client_ip(&s, &forwarded(&["garbage"]), peer("10.0.0.1:80")),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            client_ip(&s, &HeaderMap::new(), peer("10.0.0.1:80")),
            Some("10.0.0.1".parse().unwrap())
        );
    }
}

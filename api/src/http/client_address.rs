//! The client's address (decisions §11), the one answer that every per-address limit and the
//! audit log use.
//!
//! It is the TCP peer's address, unless the peer is one of `TRUSTED_PROXIES`. Then
//! `X-Forwarded-For` is read from the right, skipping addresses that are themselves trusted
//! proxies: the first one that is not is the client. Entries left of it were written by the
//! client and are never believed. With no trusted proxies configured the header is ignored.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;
use poem::Request;

use crate::AppState;

const FORWARDED_FOR: &str = "x-forwarded-for";

/// The client's address for `req`; `None` only when the connection has no IP peer.
pub fn client_address(req: &Request) -> Option<IpAddr> {
    let peer = req.remote_addr().as_socket_addr()?.ip();
    let trusted = req
        .data::<AppState>()
        .map(|state| state.config.trusted_proxies.as_slice())
        .unwrap_or_default();
    let forwarded = req
        .headers()
        .get_all(FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok());
    Some(resolve(peer, forwarded, trusted))
}

/// The client's address as text, as the audit log records it.
pub fn client_ip(req: &Request) -> Option<String> {
    client_address(req).map(|ip| ip.to_string())
}

/// The part of the client's address a per-address limit counts against: the whole IPv4
/// address, or the /64 of an IPv6 one (one machine usually holds a whole /64, so counting
/// single IPv6 addresses would give it billions of allowances). `unknown` without a peer.
pub fn limit_key(req: &Request) -> String {
    match client_address(req) {
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let [a, b, c, d, ..] = v6.segments();
            format!("{}/64", Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
        }
        None => "unknown".to_owned(),
    }
}

/// The client of a connection from `peer` that carried the `X-Forwarded-For` header lines
/// `forwarded` (in the order received), given the trusted proxy networks.
pub fn resolve<'h>(
    peer: IpAddr,
    forwarded: impl IntoIterator<Item = &'h str>,
    trusted: &[IpNet],
) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let entries: Vec<&str> = forwarded
        .into_iter()
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .collect();
    // Walking from the right, every step is vouched for by the trusted hop after it.
    let mut client = peer;
    for entry in entries.iter().rev() {
        let Some(ip) = parse_entry(entry) else {
            // Not an address: nothing left of it can be attributed; the last trusted hop is
            // the best we know.
            break;
        };
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, optionally with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| {
            entry
                .parse::<std::net::SocketAddr>()
                .ok()
                .map(|addr| addr.ip())
        })
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().expect("a network")).collect()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        assert_eq!(resolve(ip("192.0.2.1"), ["6.6.6.6"], &[]), ip("192.0.2.1"));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(ip("192.0.2.1"), ["10.0.0.1"], &trusted),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn the_rightmost_untrusted_entry_is_the_client() {
        let trusted = nets(&["10.0.0.0/8", "fd00::/8"]);
        let peer = ip("10.0.0.2");
        assert_eq!(
            resolve(peer, ["198.51.100.7"], &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            resolve(peer, ["6.6.6.6, 198.51.100.7, 10.1.1.1"], &trusted),
            ip("198.51.100.7")
        );
        // Several header lines are one list, in order.
        assert_eq!(
            resolve(peer, ["6.6.6.6", "198.51.100.7", "10.1.1.1"], &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            resolve(peer, ["[2001:db8::1]:4711, fd00::3"], &trusted),
            ip("2001:db8::1")
        );
        assert_eq!(
            resolve(peer, ["198.51.100.7:4711"], &trusted),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn garbage_or_only_proxies_stop_at_the_last_trusted_hop() {
        let trusted = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.2");
        assert_eq!(
            resolve(peer, ["6.6.6.6, nonsense, 10.0.0.9"], &trusted),
            ip("10.0.0.9")
        );
        assert_eq!(
            resolve(peer, ["10.0.0.5, 10.0.0.9"], &trusted),
            ip("10.0.0.5")
        );
        assert_eq!(resolve(peer, [], &trusted), peer);
        assert_eq!(resolve(peer, [""], &trusted), peer);
    }

    #[test]
    fn ipv4_mapped_peers_count_as_ipv4() {
        let trusted = nets(&["127.0.0.0/8"]);
        assert_eq!(
            resolve(ip("::ffff:127.0.0.1"), ["198.51.100.7"], &trusted),
            ip("198.51.100.7")
        );
    }
}

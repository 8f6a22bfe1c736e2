//! Which hosts the builtin agent's outbound calls may reach. A URL that a
//! signed client or a model chose (a custom provider's `baseUrl`, a page
//! the agent reads) must lead to a public address: never loopback, private,
//! link-local (cloud metadata), shared, multicast or reserved space, so no
//! account can make the sidecar call what only the machine can reach.
//!
//! IP-literal URLs are checked when they are built ([`check_url`]); names
//! are checked as they resolve ([`PublicOnly`], the HTTP client's resolver),
//! so a name that resolves differently later (DNS rebinding) is caught at
//! connect time, on every redirect hop too.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            // 6to4 (2002::/16) carries an IPv4 address: judge that one.
            if s[0] == 0x2002 {
                let [a, b] = s[1].to_be_bytes();
                let [c, d] = s[2].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                // Unique local fc00::/7 and link-local fe80::/10.
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                // Site-local fec0::/10 (deprecated, still routed by some).
                || (s[0] & 0xffc0) == 0xfec0
                // NAT64 (64:ff9b::/96, 64:ff9b:1::/48), Teredo (2001::/32)
                // and documentation (2001:db8::/32).
                || (s[0] == 0x64 && s[1] == 0xff9b)
                || (s[0] == 0x2001 && (s[1] == 0 || s[1] == 0x0db8))
                // Discard-only 100::/64.
                || (s[0] == 0x100 && s[1] == 0 && s[2] == 0 && s[3] == 0)
                // IPv4-compatible (::/96), deprecated, never public.
                || v6.octets()[..12].iter().all(|b| *b == 0))
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        // Shared address space 100.64.0.0/10.
        || (a == 100 && (b & 0xc0) == 64)
        // IETF protocol assignments 192.0.0.0/24, 6to4 relays
        // 192.88.99.0/24, benchmarking 198.18/15.
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (b & 0xfe) == 18)
        // Reserved 240.0.0.0/4.
        || a >= 240)
}

/// Refuses a URL whose host is an IP literal that is not public.
pub fn check_url(url: &reqwest::Url) -> Result<(), String> {
    let Some(host) = url.host_str() else {
        return Err("the URL names no host".into());
    };
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(ip) = literal.parse::<IpAddr>() else {
        return Ok(());
    };
    if is_public(ip) {
        Ok(())
    } else {
        Err(format!("{ip} is not a public address"))
    }
}

/// The HTTP client's resolver for client-chosen hosts: a name must
/// resolve to at least one public address, and only those are used.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|addr| is_public(addr.ip()))
                .collect();
            if found.is_empty() {
                let refused: Box<dyn std::error::Error + Send + Sync> =
                    format!("{host} resolves to no public address").into();
                return Err(refused);
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001::1",
            "fec0::1",
            "100::1",
            "192.88.99.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_public(ip), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(is_public(ip), "{ip}");
        }
    }

    #[test]
    fn literal_hosts_are_checked_and_names_left_to_the_resolver() {
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(check_url(&url("http://127.0.0.1:8080/v1")).is_err());
        assert!(check_url(&url("https://[::1]/")).is_err());
        assert!(check_url(&url("https://169.254.169.254/latest")).is_err());
        assert!(check_url(&url("https://1.1.1.1/")).is_ok());
        assert!(check_url(&url("https://example.com/")).is_ok());
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_of_loopback() {
        use reqwest::dns::Resolve;
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(PublicOnly.resolve(name).await.is_err());
    }
}

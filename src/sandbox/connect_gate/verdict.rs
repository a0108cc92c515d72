//! Which connects a Landlock server with a domain allowlist may make: to its egress proxy's
//! loopback endpoint, and nowhere else. Pure: judges the bytes of the `sockaddr` the caller
//! passed (read from its memory by `connect_gate`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What palisade does with one `connect()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect the caller's socket to this address (the endpoint, in the caller's family).
    Connect(SocketAddr),
    /// Refuse with EACCES, as Landlock refuses a port it does not allow.
    Refuse(Refused),
    /// The call is malformed: fail it with this errno, as the kernel would.
    Invalid(i32),
}

/// What a refused connect asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// An internet address other than the endpoint.
    Address(SocketAddr),
    /// Another family (AF_UNSPEC's disconnect, a unix path, ...), described.
    Other(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Address(a) => write!(f, "{a}"),
            Refused::Other(what) => f.write_str(what),
        }
    }
}

const AF_UNSPEC: u16 = 0;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// `sizeof(struct sockaddr_in)`; the kernel refuses a shorter one (EINVAL).
const SOCKADDR_IN_LEN: usize = 16;
/// `SIN6_LEN_RFC2133`: the shortest `sockaddr_in6` the kernel accepts.
const SOCKADDR_IN6_MIN_LEN: usize = 24;
/// `sizeof(struct sockaddr_storage)`: the kernel refuses a longer one (EINVAL).
pub const SOCKADDR_MAX_LEN: usize = 128;

/// The verdict on a connect to the `sockaddr` in `bytes` (as long as the caller said it
/// was), for a server whose only way out is `endpoint` (the proxy's IPv4 loopback endpoint).
/// An IPv6 socket may reach it by its IPv4-mapped address.
pub fn verdict(bytes: &[u8], endpoint: SocketAddrV4) -> Verdict {
    if bytes.len() < 2 || bytes.len() > SOCKADDR_MAX_LEN {
        return Verdict::Invalid(libc::EINVAL);
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    let asked = match family {
        AF_INET if bytes.len() < SOCKADDR_IN_LEN => return Verdict::Invalid(libc::EINVAL),
        AF_INET => SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]),
            port(bytes),
        )),
        AF_INET6 if bytes.len() < SOCKADDR_IN6_MIN_LEN => return Verdict::Invalid(libc::EINVAL),
        AF_INET6 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes[8..24]);
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(octets), port(bytes), 0, 0))
        }
        // AF_UNSPEC dissolves a connection; anything else (a unix path through a
        // socketpair's socket, ...) is not the proxy either.
        AF_UNSPEC => return Verdict::Refuse(Refused::Other("AF_UNSPEC (disconnect)".into())),
        other => return Verdict::Refuse(Refused::Other(format!("address family {other}"))),
    };
    let ip = match asked.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    if ip == IpAddr::V4(*endpoint.ip()) && asked.port() == endpoint.port() {
        Verdict::Connect(asked)
    } else {
        Verdict::Refuse(Refused::Address(asked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40123);

    fn v4(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[..2].copy_from_slice(&AF_INET.to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[4..8].copy_from_slice(&ip);
        b
    }

    fn v6(ip: Ipv6Addr, port: u16, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[8..24].copy_from_slice(&ip.octets());
        b
    }

    #[test]
    fn the_proxy_endpoint_is_connected_in_either_family() {
        assert_eq!(
            verdict(&v4([127, 0, 0, 1], 40123), PROXY),
            Verdict::Connect("127.0.0.1:40123".parse().unwrap())
        );
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
        for len in [24, 28] {
            assert_eq!(
                verdict(&v6(mapped, 40123, len), PROXY),
                Verdict::Connect(SocketAddr::V6(SocketAddrV6::new(mapped, 40123, 0, 0)))
            );
        }
    }

    #[test]
    fn the_proxy_port_on_any_other_address_is_refused() {
        // What Landlock's port rule alone lets through.
        for ip in [
            [127, 0, 0, 2],
            [10, 0, 0, 1],
            [0, 0, 0, 0],
            [93, 184, 216, 34],
        ] {
            assert!(
                matches!(verdict(&v4(ip, 40123), PROXY), Verdict::Refuse(_)),
                "{ip:?}"
            );
        }
        for ip in [
            Ipv6Addr::LOCALHOST,
            Ipv6Addr::UNSPECIFIED,
            "2001:db8::1".parse().unwrap(),
        ] {
            assert!(
                matches!(verdict(&v6(ip, 40123, 28), PROXY), Verdict::Refuse(_)),
                "{ip}"
            );
        }
        assert!(matches!(
            verdict(&v4([127, 0, 0, 1], 40124), PROXY),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn other_families_are_refused_and_malformed_addresses_invalid() {
        let mut unix = vec![0u8; 20];
        unix[..2].copy_from_slice(&1u16.to_ne_bytes());
        assert!(matches!(verdict(&unix, PROXY), Verdict::Refuse(_)));
        assert!(matches!(verdict(&[0, 0], PROXY), Verdict::Refuse(_)));
        assert_eq!(verdict(&[2], PROXY), Verdict::Invalid(libc::EINVAL));
        assert_eq!(
            verdict(&v4([127, 0, 0, 1], 40123)[..15], PROXY),
            Verdict::Invalid(libc::EINVAL)
        );
        assert_eq!(
            verdict(&v6(Ipv6Addr::LOCALHOST, 40123, 24)[..23], PROXY),
            Verdict::Invalid(libc::EINVAL)
        );
        assert_eq!(verdict(&[0u8; 129], PROXY), Verdict::Invalid(libc::EINVAL));
    }
}

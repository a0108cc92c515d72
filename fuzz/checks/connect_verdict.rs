//! The Landlock tier's connect checks (src/sandbox/connect_gate/verdict.rs): the judgement on
//! the `sockaddr` bytes a sandboxed server passed to `connect()`, read from its memory.
//!
//! Input: two bytes of the proxy's port, then the sockaddr bytes as the caller passed them
//! (any length, any content).
//!
//! Invariants:
//! 1. A connect is allowed only to the endpoint: 127.0.0.1 on the proxy's port, as an IPv4
//!    address or its IPv4-mapped IPv6 form, in the family the caller named (its socket's).
//! 2. An address the kernel would refuse as malformed (shorter than its family's struct,
//!    longer than `sockaddr_storage`) is never connected.
//! 3. Only the family, port and address decide: the padding of `sockaddr_in`, and the flow
//!    label and scope id of `sockaddr_in6`, change nothing.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use palisade::sandbox::connect_gate::{verdict, Verdict, SOCKADDR_MAX_LEN};

pub fn run(data: &[u8]) {
    let mut input = super::Input::new(data);
    let port = u16::from_be_bytes([input.byte(), input.byte()]);
    let endpoint = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let bytes = input.rest();
    let v = verdict(bytes, endpoint);
    let family = (bytes.len() >= 2).then(|| u16::from_ne_bytes([bytes[0], bytes[1]]));
    if let Verdict::Connect(to) = v {
        assert_eq!(to.port(), port, "{bytes:?}");
        let ip = match to.ip() {
            IpAddr::V6(v6) => {
                assert_eq!(
                    family,
                    Some(10),
                    "a v6 address from a v6 sockaddr: {bytes:?}"
                );
                IpAddr::V4(v6.to_ipv4_mapped().expect("mapped form only"))
            }
            v4 => {
                assert_eq!(
                    family,
                    Some(2),
                    "a v4 address from a v4 sockaddr: {bytes:?}"
                );
                v4
            }
        };
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::LOCALHOST), "{bytes:?}");
        let shortest = if family == Some(2) { 16 } else { 24 };
        assert!(
            bytes.len() >= shortest && bytes.len() <= SOCKADDR_MAX_LEN,
            "connected a malformed sockaddr of {} bytes",
            bytes.len()
        );
    }
    // Invariant 3: rewrite what must not matter and ask again.
    let mut other = bytes.to_vec();
    match family {
        Some(2) => {
            for b in other.iter_mut().skip(8) {
                *b = !*b;
            }
        }
        Some(10) => {
            for b in other.iter_mut().skip(4).take(4) {
                *b = !*b;
            }
            for b in other.iter_mut().skip(24) {
                *b = !*b;
            }
        }
        _ => return,
    }
    assert_eq!(
        verdict(&other, endpoint),
        v,
        "padding, flow label or scope id changed the verdict: {bytes:?}"
    );
}

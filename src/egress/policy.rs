//! One server's egress policy: its compiled allow and deny lists, the port rule and the
//! address-class rule. Pure: the proxy hands it a requested host and port, later the
//! addresses a name resolved to, and gets a decision with the reason and a config hint.
//!
//! Order of checks (docs/network.md): deny list first (an entry without a port denies every
//! port), then the allow list (an entry without a port allows 80 and 443 only), then, for
//! names, every resolved address must be publicly routable unless that exact IP literal is
//! in the allow list. This module must never do I/O or resolve anything.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use crate::config::DomainLists;

use super::domains::{canonical_ip, Entry, Host, HostError};

/// Ports an allow entry without an explicit port grants.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Why a connection was refused. Serialised into events and audit records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum RefusalReason {
    /// A `deniedDomains` entry matched.
    Denied { entry: String },
    /// No `allowedDomains` entry matches the host.
    NotAllowed,
    /// The host is allowed, but not on this port.
    PortNotAllowed { entry: String },
    /// An IP literal was requested and no allow entry names it.
    IpLiteralNotAllowed,
    /// The name resolved only to addresses of a refused class.
    AddressClass {
        address: IpAddr,
        class: AddressClass,
    },
    /// The requested host was not a valid name or address.
    InvalidHost { detail: String },
    /// A Landlock server connected to something other than its egress proxy.
    NotThroughProxy,
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Denied { entry } => write!(f, "matches deniedDomains entry {entry:?}"),
            RefusalReason::NotAllowed => f.write_str("not in allowedDomains"),
            RefusalReason::PortNotAllowed { entry } => write!(
                f,
                "allowedDomains entry {entry:?} allows ports 80 and 443 only"
            ),
            RefusalReason::IpLiteralNotAllowed => {
                f.write_str("raw IP address not in allowedDomains")
            }
            RefusalReason::AddressClass { address, class } => {
                write!(f, "resolves to {class} address {address}")
            }
            RefusalReason::InvalidHost { detail } => write!(f, "invalid host: {detail}"),
            RefusalReason::NotThroughProxy => f.write_str(
                "not through the egress proxy (under Landlock the server may connect only to \
                 the proxy its HTTP_PROXY and ALL_PROXY variables name)",
            ),
        }
    }
}

/// Address classes a name may not resolve to unless the address is explicitly allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddressClass {
    Public,
    Loopback,
    /// RFC 1918 and IPv6 unique-local (fc00::/7).
    Private,
    LinkLocal,
    /// 100.64.0.0/10 (RFC 6598).
    Cgnat,
    /// Cloud instance metadata: 169.254.169.254, fd00:ec2::254.
    Metadata,
    Unspecified,
    Multicast,
    /// Broadcast, "this network" 0/8, 240/4, benchmarking, documentation and similar
    /// special-purpose ranges: never a legitimate remote origin.
    Reserved,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Cgnat => "CGNAT",
            AddressClass::Metadata => "cloud-metadata",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Multicast => "multicast",
            AddressClass::Reserved => "reserved",
        })
    }
}

/// Classifies an address. IPv4-mapped and IPv4-compatible IPv6 forms are classified as the
/// IPv4 address they carry, so `::ffff:127.0.0.1` is loopback.
pub fn classify(ip: IpAddr) -> AddressClass {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        AddressClass::Metadata
    } else if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if a == 100 && (64..128).contains(&b) {
        AddressClass::Cgnat
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if ip.is_broadcast()
        || a == 0
        || a >= 240
        || ip.is_documentation()
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && c == 0)
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let seg = ip.segments();
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::Metadata
    } else if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if seg[0] & 0xfe00 == 0xfc00 {
        AddressClass::Private
    } else if seg[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if let Some(v4) = embedded_v4(ip) {
        // IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4
        // address that a gateway may deliver to: classify what they carry.
        classify_v4(v4)
    } else if seg[0] == 0x2001 && seg[1] == 0xdb8 {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let o = ip.octets();
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if seg[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

/// A host that passed the name checks: what to resolve (or connect to) next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub host: Host,
    pub port: u16,
    /// The allow entry that admitted it.
    pub entry: String,
}

/// A refusal with everything the event, the log line and the client's error need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub reason: RefusalReason,
    /// What to add to (or remove from) the config to allow it, when anything would.
    pub hint: Option<String>,
}

/// One server's compiled lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressPolicy {
    allow: Vec<Entry>,
    deny: Vec<Entry>,
}

impl EgressPolicy {
    /// Compiles the config lists; the first bad entry is an error naming it.
    pub fn from_lists(lists: &DomainLists) -> Result<EgressPolicy, HostError> {
        let parse_all = |v: &[String]| -> Result<Vec<Entry>, HostError> {
            v.iter().map(|s| Entry::parse(s)).collect()
        };
        Ok(EgressPolicy {
            allow: parse_all(&lists.allowed_domains)?,
            deny: parse_all(&lists.denied_domains)?,
        })
    }

    /// Checks a requested host (as the client sent it) and port before any resolution.
    pub fn admit(&self, raw_host: &str, port: u16) -> Result<Admitted, Decision> {
        let host = Host::parse(raw_host).map_err(|e| Decision {
            reason: RefusalReason::InvalidHost {
                detail: e.to_string(),
            },
            hint: None,
        })?;
        if let Some(d) = self
            .deny
            .iter()
            .find(|e| e.matches_host(&host) && e.port.is_none_or(|p| p == port))
        {
            return Err(Decision {
                reason: RefusalReason::Denied {
                    entry: d.raw.clone(),
                },
                hint: Some(format!(
                    "remove {:?} from sandbox.network.deniedDomains",
                    d.raw
                )),
            });
        }
        let matching: Vec<&Entry> = self
            .allow
            .iter()
            .filter(|e| e.matches_host(&host))
            .collect();
        let suggested = entry_text(&host, port);
        if matching.is_empty() {
            let reason = match host {
                Host::Ip(_) => RefusalReason::IpLiteralNotAllowed,
                Host::Name(_) => RefusalReason::NotAllowed,
            };
            return Err(Decision {
                reason,
                hint: Some(format!(
                    "add {suggested:?} to sandbox.network.allowedDomains"
                )),
            });
        }
        match matching.iter().find(|e| port_ok(e, port)) {
            Some(e) => Ok(Admitted {
                host,
                port,
                entry: e.raw.clone(),
            }),
            None => Err(Decision {
                reason: RefusalReason::PortNotAllowed {
                    entry: matching[0].raw.clone(),
                },
                hint: Some(format!(
                    "add {:?} to sandbox.network.allowedDomains",
                    entry_text(&host, port)
                )),
            }),
        }
    }

    /// Checks one address a name resolved to. Addresses from the operator's resolver
    /// overrides are trusted (`pinned`): the operator chose them, as in /etc/hosts.
    pub fn check_address(&self, ip: IpAddr, port: u16, pinned: bool) -> Result<(), Decision> {
        if let Some(d) = self
            .deny
            .iter()
            .find(|e| e.names_ip(ip) && e.port.is_none_or(|p| p == port))
        {
            return Err(Decision {
                reason: RefusalReason::Denied {
                    entry: d.raw.clone(),
                },
                hint: None,
            });
        }
        let class = classify(ip);
        if class == AddressClass::Public || pinned {
            return Ok(());
        }
        if self
            .allow
            .iter()
            .any(|e| e.names_ip(ip) && port_ok(e, port))
        {
            return Ok(());
        }
        Err(Decision {
            reason: RefusalReason::AddressClass { address: ip, class },
            hint: Some(format!(
                "only if this server must reach a {class} address: add {:?} to \
                 sandbox.network.allowedDomains",
                entry_text(&Host::Ip(ip), port)
            )),
        })
    }
}

fn port_ok(e: &Entry, port: u16) -> bool {
    match e.port {
        Some(p) => p == port,
        None => DEFAULT_PORTS.contains(&port),
    }
}

/// The allow entry that would admit `host:port`.
fn entry_text(host: &Host, port: u16) -> String {
    let h = host.display_for_entry();
    if DEFAULT_PORTS.contains(&port) {
        h
    } else {
        format!("{h}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        EgressPolicy::from_lists(&DomainLists {
            allowed_domains: allow.iter().map(|s| s.to_string()).collect(),
            denied_domains: deny.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn deny_list_wins_over_allow_list() {
        let p = policy(&["*.example.com"], &["secret.example.com"]);
        assert!(p.admit("api.example.com", 443).is_ok());
        let d = p.admit("secret.example.com", 443).unwrap_err();
        assert_eq!(
            d.reason,
            RefusalReason::Denied {
                entry: "secret.example.com".into()
            }
        );
        // A deny entry without a port denies every port.
        assert!(policy(&["x.test:22"], &["x.test"])
            .admit("x.test", 22)
            .is_err());
        // A deny entry with a port denies only that port.
        let p = policy(&["x.test", "x.test:8080"], &["x.test:8080"]);
        assert!(p.admit("x.test", 443).is_ok());
        assert!(p.admit("x.test", 8080).is_err());
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let d = policy(&[], &[]).admit("example.com", 443).unwrap_err();
        assert_eq!(d.reason, RefusalReason::NotAllowed);
        assert_eq!(
            d.hint.as_deref(),
            Some("add \"example.com\" to sandbox.network.allowedDomains")
        );
    }

    #[test]
    fn ports_default_to_80_and_443() {
        let p = policy(&["example.com", "ssh.example.com:22"], &[]);
        assert!(p.admit("example.com", 80).is_ok());
        assert!(p.admit("example.com", 443).is_ok());
        let d = p.admit("example.com", 22).unwrap_err();
        assert!(matches!(d.reason, RefusalReason::PortNotAllowed { .. }));
        assert_eq!(
            d.hint.as_deref(),
            Some("add \"example.com:22\" to sandbox.network.allowedDomains")
        );
        assert!(p.admit("ssh.example.com", 22).is_ok());
        // Naming a port grants that port only.
        assert!(p.admit("ssh.example.com", 443).is_err());
    }

    #[test]
    fn ip_literals_need_an_ip_entry() {
        let p = policy(&["*"], &[]);
        let d = p.admit("93.184.216.34", 443).unwrap_err();
        assert_eq!(d.reason, RefusalReason::IpLiteralNotAllowed);
        let d = p.admit("[::1]", 443).unwrap_err();
        assert_eq!(
            d.hint.as_deref(),
            Some("add \"[::1]\" to sandbox.network.allowedDomains")
        );
        let p = policy(&["10.1.2.3:8080"], &[]);
        assert!(p.admit("10.1.2.3", 8080).is_ok());
        assert!(p.admit("10.1.2.3", 443).is_err());
        assert!(p.admit("127.1", 80).is_err());
    }

    #[test]
    fn resolved_addresses_of_internal_classes_are_refused() {
        let p = policy(&["*"], &[]);
        for (ip, class) in [
            ("127.0.0.1", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("fd12::1", AddressClass::Private),
            ("169.254.1.1", AddressClass::LinkLocal),
            ("fe80::1", AddressClass::LinkLocal),
            ("100.64.0.1", AddressClass::Cgnat),
            ("169.254.169.254", AddressClass::Metadata),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("0.0.0.0", AddressClass::Unspecified),
            ("::", AddressClass::Unspecified),
            ("224.0.0.1", AddressClass::Multicast),
            ("ff02::1", AddressClass::Multicast),
            ("255.255.255.255", AddressClass::Reserved),
            ("::127.0.0.1", AddressClass::Loopback),
            ("64:ff9b::a00:1", AddressClass::Private),
            ("2002:7f00:1::", AddressClass::Loopback),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip), class, "{ip}");
            let d = p.check_address(ip, 443, false).unwrap_err();
            assert_eq!(d.reason, RefusalReason::AddressClass { address: ip, class });
        }
        for public in ["93.184.216.34", "2606:2800:220:1::1", "1.1.1.1"] {
            let ip: IpAddr = public.parse().unwrap();
            assert_eq!(classify(ip), AddressClass::Public, "{ip}");
            assert!(p.check_address(ip, 443, false).is_ok());
        }
    }

    #[test]
    fn an_explicit_ip_entry_or_a_pinned_override_admits_an_internal_address() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let p = policy(&["internal.test", "127.0.0.1"], &[]);
        assert!(p.check_address(lo, 443, false).is_ok());
        assert!(p.check_address(lo, 8080, false).is_err());
        let p = policy(&["internal.test"], &[]);
        assert!(p.check_address(lo, 443, false).is_err());
        assert!(p.check_address(lo, 443, true).is_ok());
        // The deny list applies to resolved addresses too, pinned or not.
        let p = policy(&["*"], &["127.0.0.1"]);
        assert!(p.check_address(lo, 443, true).is_err());
    }

    #[test]
    fn bad_entries_fail_compilation() {
        let err = EgressPolicy::from_lists(&DomainLists {
            allowed_domains: vec!["https://x.test".into()],
            denied_domains: vec![],
        })
        .unwrap_err();
        assert!(err.to_string().contains("https://x.test"));
    }
}

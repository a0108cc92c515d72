//! Domain-list entries and the host names they match. Pure: no DNS, no I/O.
//!
//! Sits at the bottom of the egress flow: `policy` compiles a server's `allowedDomains` and
//! `deniedDomains` into [`Entry`] values with [`Entry::parse`], and asks each entry whether a
//! requested [`Host`] matches. This module must never resolve a name or treat an IP literal as
//! a name: an address is only ever matched by an IP-literal entry.
//!
//! Matching rules (documented in docs/network.md):
//! - names compare case-insensitively, a trailing dot ignored;
//! - `*.example.com` matches subdomains of example.com at any depth, NOT example.com itself
//!   (the choice srt made; list both entries to get both);
//! - `*` alone matches any name, never an IP literal;
//! - an IP literal (`10.0.0.5`, `::1`, `[::1]`) matches that address only;
//! - an entry may name one port (`example.com:8443`, `[::1]:8080`, `*:8443`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// The longest DNS name accepted (RFC 1035, without the trailing dot).
const MAX_NAME_LEN: usize = 253;
/// The longest label accepted (RFC 1035).
const MAX_LABEL_LEN: usize = 63;

/// A requested destination host: a normalised DNS name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// Lower-case, no trailing dot, validated characters.
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as a client sent it (HTTP authority, SOCKS5 domain). IPv6 literals may
    /// come with or without brackets. IPv4 literals in the forms `inet_aton` accepts but that
    /// are not dotted-quad (`127.1`, `0x7f.1`, `2130706433`) are refused rather than read as
    /// names: a resolver would turn them into addresses behind the policy's back.
    pub fn parse(raw: &str) -> Result<Host, HostError> {
        let unbracketed = raw
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(raw);
        if let Ok(v6) = unbracketed.parse::<Ipv6Addr>() {
            return Ok(Host::Ip(IpAddr::V6(v6)));
        }
        if unbracketed != raw {
            return Err(HostError::Invalid(raw.to_string()));
        }
        if let Ok(v4) = raw.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(v4)));
        }
        let name = normalise_name(raw)?;
        if looks_numeric(&name) {
            return Err(HostError::NumericName(raw.to_string()));
        }
        Ok(Host::Name(name))
    }

    /// The form used in logs, events and config hints (`[::1]` bracketed).
    pub fn display_for_entry(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(IpAddr::V4(a)) => a.to_string(),
            Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(a) => write!(f, "{a}"),
        }
    }
}

/// Why a requested host or a configured entry is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostError {
    #[error("{0:?} is not a valid host name or IP address")]
    Invalid(String),
    #[error(
        "{0:?} looks like a numeric IPv4 address in a non-standard form; write it as a dotted quad"
    )]
    NumericName(String),
    #[error("entry {0:?}: {1}")]
    Entry(String, String),
}

/// Lower-cases, strips one trailing dot and validates a DNS name (letters, digits, `-`, `_`;
/// labels 1..=63 bytes; 253 bytes in all).
fn normalise_name(raw: &str) -> Result<String, HostError> {
    let invalid = || HostError::Invalid(raw.to_string());
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if trimmed.is_empty() || trimmed.len() > MAX_NAME_LEN {
        return Err(invalid());
    }
    for label in trimmed.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL_LEN {
            return Err(invalid());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid());
        }
    }
    Ok(trimmed.to_ascii_lowercase())
}

/// True for names that the C resolver would read as an IPv4 address (all labels numeric, or
/// hex `0x..` labels), e.g. `127.1` or `2130706433`. Such a name is never a real domain.
fn looks_numeric(name: &str) -> bool {
    name.split('.').all(|label| {
        let hex = label.strip_prefix("0x");
        match hex {
            Some(h) => h.bytes().all(|b| b.is_ascii_hexdigit()),
            None => label.bytes().all(|b| b.is_ascii_digit()),
        }
    })
}

/// What an entry matches, before the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `*`: any name, never an IP literal.
    AnyName,
    /// `*.suffix`: names strictly below `suffix` (stored without the `*.`).
    Subdomains(String),
    /// An exact name.
    Exact(String),
    /// An IP literal.
    Ip(IpAddr),
}

/// One entry of `allowedDomains` or `deniedDomains`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The text the user wrote, for hints and logs.
    pub raw: String,
    pub pattern: Pattern,
    /// `Some` when the entry names a port; `None` means "the default ports" (allow list) or
    /// "every port" (deny list), see `policy`.
    pub port: Option<u16>,
}

impl Entry {
    /// Parses `name`, `*.name`, `*`, an IP literal, each optionally followed by `:PORT`
    /// (IPv6 with a port must be bracketed: `[::1]:8080`). Schemes, paths and other
    /// wildcard positions are refused with the reason, so a typo fails loudly.
    pub fn parse(raw: &str) -> Result<Entry, HostError> {
        let bad = |why: &str| HostError::Entry(raw.to_string(), why.to_string());
        let text = raw.trim();
        if text.is_empty() {
            return Err(bad("empty entry"));
        }
        if text.contains("://") || text.contains('/') {
            return Err(bad("write a host name, not a URL (no scheme, no path)"));
        }
        let (host_part, port) = split_port(text).map_err(|why| bad(&why))?;
        let pattern = if host_part == "*" {
            Pattern::AnyName
        } else if let Some(suffix) = host_part.strip_prefix("*.") {
            match Host::parse(suffix) {
                Ok(Host::Name(n)) => Pattern::Subdomains(n),
                Ok(Host::Ip(_)) => return Err(bad("a wildcard cannot precede an IP address")),
                Err(e) => return Err(bad(&e.to_string())),
            }
        } else if host_part.contains('*') {
            return Err(bad("`*` is only allowed alone or as a leading `*.`"));
        } else {
            match Host::parse(host_part) {
                Ok(Host::Name(n)) => Pattern::Exact(n),
                Ok(Host::Ip(ip)) => Pattern::Ip(ip),
                Err(e) => return Err(bad(&e.to_string())),
            }
        };
        Ok(Entry {
            raw: raw.to_string(),
            pattern,
            port,
        })
    }

    /// Does this entry's host pattern match `host`? (The port is the caller's business.)
    pub fn matches_host(&self, host: &Host) -> bool {
        match (&self.pattern, host) {
            (Pattern::AnyName, Host::Name(_)) => true,
            (Pattern::Subdomains(suffix), Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            (Pattern::Exact(e), Host::Name(name)) => e == name,
            (Pattern::Ip(e), Host::Ip(ip)) => same_ip(*e, *ip),
            _ => false,
        }
    }

    /// Does this entry name exactly this address (used for the "explicitly allowed IP" rule
    /// on resolved addresses)?
    pub fn names_ip(&self, ip: IpAddr) -> bool {
        matches!(self.pattern, Pattern::Ip(e) if same_ip(e, ip))
    }
}

/// Compares addresses with IPv4-mapped IPv6 (`::ffff:a.b.c.d`) equal to its IPv4 form.
pub(crate) fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical_ip(a) == canonical_ip(b)
}

/// IPv4-mapped IPv6 addresses reduced to IPv4; everything else unchanged.
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Splits `host[:port]` / `[v6][:port]`. A bare IPv6 literal (several colons, no brackets)
/// has no port.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let parse_port = |p: &str| -> Result<u16, String> {
        match p.parse::<u16>() {
            Ok(0) | Err(_) => Err(format!("{p:?} is not a port number (1-65535)")),
            Ok(n) => Ok(n),
        }
    };
    if text.starts_with('[') {
        let close = text.find(']').ok_or("unclosed `[`")?;
        let host = &text[..=close];
        let rest = &text[close + 1..];
        if rest.is_empty() {
            return Ok((host, None));
        }
        let port = rest.strip_prefix(':').ok_or("expected `:PORT` after `]`")?;
        return Ok((host, Some(parse_port(port)?)));
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (h, p) = text.split_once(':').ok_or("unreachable")?;
            Ok((h, Some(parse_port(p)?)))
        }
        _ => Ok((text, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    fn entry(s: &str) -> Entry {
        Entry::parse(s).unwrap()
    }

    #[test]
    fn exact_names_match_case_insensitively_and_ignore_trailing_dot() {
        let e = entry("Example.COM");
        assert!(e.matches_host(&name("example.com")));
        assert!(e.matches_host(&name("EXAMPLE.com.")));
        assert!(!e.matches_host(&name("www.example.com")));
        assert!(!e.matches_host(&name("example.com.evil.net")));
        assert!(!e.matches_host(&name("notexample.com")));
        assert!(entry("example.com.").matches_host(&name("example.com")));
    }

    #[test]
    fn wildcard_matches_subdomains_but_not_the_apex() {
        let e = entry("*.example.com");
        assert!(e.matches_host(&name("api.example.com")));
        assert!(e.matches_host(&name("a.b.example.com")));
        assert!(e.matches_host(&name("API.Example.Com.")));
        // srt's choice: the apex is not a subdomain of itself.
        assert!(!e.matches_host(&name("example.com")));
        assert!(!e.matches_host(&name("badexample.com")));
        assert!(!e.matches_host(&name("example.com.evil.net")));
    }

    #[test]
    fn star_matches_every_name_and_no_ip_literal() {
        let e = entry("*");
        assert!(e.matches_host(&name("anything.test")));
        assert!(e.matches_host(&name("localhost")));
        assert!(!e.matches_host(&name("127.0.0.1")));
        assert!(!e.matches_host(&name("::1")));
    }

    #[test]
    fn ip_entries_match_only_that_address() {
        let e = entry("10.0.0.5");
        assert!(e.matches_host(&name("10.0.0.5")));
        assert!(e.matches_host(&name("::ffff:10.0.0.5")));
        assert!(!e.matches_host(&name("10.0.0.6")));
        let v6 = entry("[::1]:8080");
        assert_eq!(v6.port, Some(8080));
        assert!(v6.matches_host(&name("[::1]")));
        assert!(v6.matches_host(&name("::1")));
        assert_eq!(
            entry("fd00::1").pattern,
            Pattern::Ip("fd00::1".parse().unwrap())
        );
    }

    #[test]
    fn ports_are_parsed() {
        assert_eq!(entry("example.com:8443").port, Some(8443));
        assert_eq!(entry("*.example.com:22").port, Some(22));
        assert_eq!(entry("*:8443").port, Some(8443));
        assert_eq!(entry("example.com").port, None);
    }

    #[test]
    fn malformed_entries_are_refused_with_a_reason() {
        for bad in [
            "",
            "https://example.com",
            "example.com/path",
            "exa*mple.com",
            "*example.com",
            "**.example.com",
            "example.com:0",
            "example.com:99999",
            "example.com:",
            "*.10.0.0.1",
            "ex ample.com",
            "[::1",
            "-bad.com",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn hosts_are_validated_and_numeric_names_refused() {
        assert_eq!(name("Allowed.TEST."), Host::Name("allowed.test".into()));
        assert!(matches!(name("[2001:db8::1]"), Host::Ip(_)));
        for bad in ["", ".", "a..b", "a b", "x/y", "[example.com]", "a\0b"] {
            assert!(Host::parse(bad).is_err(), "{bad:?}");
        }
        for numeric in ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1"] {
            assert!(
                matches!(Host::parse(numeric), Err(HostError::NumericName(_))),
                "{numeric:?}"
            );
        }
        // Names with numeric labels that are not all-numeric stay names.
        assert!(matches!(name("1.example.com"), Host::Name(_)));
        let long = format!("{}.com", "a".repeat(64));
        assert!(Host::parse(&long).is_err());
    }
}

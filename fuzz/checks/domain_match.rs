//! Domain matching: the egress proxy's lists (src/egress/domains.rs, src/egress/policy.rs)
//! and the policy engine's URL-role matching (src/policy/domains.rs).
//!
//! Input: UTF-8 text, one directive per line: `+ENTRY` (allowedDomains), `-ENTRY`
//! (deniedDomains), `?HOST PORT` (a CONNECT/SOCKS request), `uVALUE` (a fetch-url argument),
//! `gVALUE` (a git-remote-url argument).
//!
//! Invariants:
//! 1. A parsed host name is normal (lower case, no trailing dot, letters/digits/`-`/`_`,
//!    not numeric) and parses to itself again.
//! 2. An admitted request is matched by the allow entry it names, on that entry's port, and
//!    by no deny entry on its port; an IP literal is only admitted by an entry naming that
//!    address; a refusal as denied names a deny entry that matches.
//! 3. Names compare case-insensitively: upper-casing a requested name changes nothing.
//! 4. A `*.suffix` entry only ever matches names strictly below `suffix`.
//! 5. The policy's `*` never matches an address: not a URL whose host the WHATWG parser
//!    reads as an IP, and not a git remote whose host is an IP literal in any form the C
//!    resolver accepts (`127.1`, `0x7f.1`, `2130706433`) or the egress proxy refuses as one.

use palisade::config::DomainLists;
use palisade::egress::domains::{Entry, Host, HostError, Pattern};
use palisade::egress::policy::{EgressPolicy, RefusalReason};
use palisade::policy::domains::{domain_for, matches_pattern};
use palisade::policy::Role;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lists = DomainLists::default();
    let mut requests = Vec::new();
    for line in text.lines() {
        let mut chars = line.chars();
        match chars.next() {
            Some('+') => lists.allowed_domains.push(chars.as_str().to_string()),
            Some('-') => lists.denied_domains.push(chars.as_str().to_string()),
            Some('?') => {
                let rest = chars.as_str();
                let (host, port) = rest.rsplit_once(' ').unwrap_or((rest, "443"));
                requests.push((host.to_string(), port.parse::<u16>().unwrap_or(443)));
            }
            Some('u') => url_value(chars.as_str(), Role::FetchUrl),
            Some('g') => url_value(chars.as_str(), Role::GitRemoteUrl),
            _ => {}
        }
    }
    let entries: Vec<Entry> = lists
        .allowed_domains
        .iter()
        .chain(&lists.denied_domains)
        .filter_map(|e| Entry::parse(e).ok())
        .collect();
    for e in &entries {
        match &e.pattern {
            Pattern::Subdomains(n) | Pattern::Exact(n) => assert_normal_name(n),
            Pattern::AnyName | Pattern::Ip(_) => {}
        }
    }
    for (host, _) in &requests {
        if let Ok(h) = Host::parse(host) {
            if let Host::Name(n) = &h {
                assert_normal_name(n);
            }
            for e in &entries {
                if let (Pattern::Subdomains(s), Host::Name(n), true) =
                    (&e.pattern, &h, e.matches_host(&h))
                {
                    assert!(n.ends_with(&format!(".{s}")) && n != s, "*.{s} matched {n}");
                }
            }
        }
    }
    let Ok(policy) = EgressPolicy::from_lists(&lists) else {
        return;
    };
    let allow: Vec<Entry> = lists
        .allowed_domains
        .iter()
        .map(|e| Entry::parse(e).expect("compiled"))
        .collect();
    let deny: Vec<Entry> = lists
        .denied_domains
        .iter()
        .map(|e| Entry::parse(e).expect("compiled"))
        .collect();
    for (raw, port) in &requests {
        let got = policy.admit(raw, *port);
        match &got {
            Ok(a) => {
                let e = allow
                    .iter()
                    .find(|e| e.raw == a.entry && e.matches_host(&a.host))
                    .unwrap_or_else(|| panic!("{raw}:{port} admitted by no entry: {a:?}"));
                assert!(e.port.is_none_or(|p| p == *port), "{raw}:{port} via {e:?}");
                if let Host::Ip(ip) = a.host {
                    assert!(e.names_ip(ip), "address {ip} admitted by {:?}", e.raw);
                }
                assert_eq!(Host::parse(raw).as_ref(), Ok(&a.host));
                if let Some(d) = deny
                    .iter()
                    .find(|d| d.matches_host(&a.host) && d.port.is_none_or(|p| p == *port))
                {
                    panic!("{raw}:{port} admitted though denied by {:?}", d.raw);
                }
            }
            Err(d) => {
                if let RefusalReason::Denied { entry } = &d.reason {
                    let h = Host::parse(raw).expect("a denied host parsed");
                    assert!(
                        deny.iter().any(|e| &e.raw == entry && e.matches_host(&h)),
                        "{raw}: refused by {entry:?}, which does not match"
                    );
                }
            }
        }
        if raw.is_ascii() {
            let upper = policy.admit(&raw.to_ascii_uppercase(), *port);
            assert_eq!(
                upper.is_ok(),
                got.is_ok(),
                "{raw}: upper case changes the decision"
            );
        }
    }
}

fn assert_normal_name(n: &str) {
    assert!(!n.is_empty() && !n.ends_with('.'), "{n:?}");
    assert!(
        n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
        "{n:?} is not normalised"
    );
    assert_eq!(Host::parse(n), Ok(Host::Name(n.to_string())), "{n:?}");
}

fn url_value(value: &str, role: Role) {
    let domain = domain_for(value, role);
    if !matches_pattern(&domain, "*") {
        return;
    }
    if role == Role::FetchUrl {
        if let Ok(u) = url::Url::parse(value) {
            assert!(
                !matches!(u.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))),
                "{value:?}: `*` matches the address {domain:?}"
            );
        }
    }
    let host = domain.split_once('/').map_or(domain.as_str(), |(h, _)| h);
    // Only a host made of host-name characters can be one (`\\` or NUL would be read by
    // the URL parser as a path separator or dropped, inventing a host git never sees).
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
    {
        return;
    }
    let as_address = matches!(
        url::Url::parse(&format!("http://{host}/"))
            .ok()
            .and_then(|u| u.host().map(|h| h.to_owned())),
        Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))
    );
    let egress_says_address = matches!(
        Host::parse(host),
        Ok(Host::Ip(_)) | Err(HostError::NumericName(_))
    );
    assert!(
        !as_address && !egress_says_address,
        "{value:?} ({role:?}): `*` matches {domain:?}, whose host {host:?} is an IP address"
    );
}

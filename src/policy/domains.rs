//! Domain extraction and allowlist matching for URL-role arguments and `domains` lists.
//!
//! Pure string work (the `url` crate parses with WHATWG rules, so `http://2130706433/`
//! becomes `127.0.0.1` before any pattern sees it). Never resolves names or touches the
//! network: a name is matched as written, and the egress proxy re-checks what it resolves to.

use super::model::Role;

/// True for IPv4 addresses in every form the C resolver accepts (dotted quads, but also
/// `127.1`, `0x7f.1`, `2130706433`, `017700000001`: all labels numeric, decimal, octal or
/// `0x` hex) and anything with a `:` (IPv6, bracketed or not). `*` never matches these: an
/// allowlist of "any domain" must not open raw addresses such as the cloud metadata
/// endpoint. (The short forms reach this unnormalised in git remotes such as
/// `ssh://2130706433/x`, whose scheme the URL parser leaves opaque; found by the
/// domain_match fuzz target.)
pub fn is_ip_literal(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    host.contains(':')
        || (!name.is_empty()
            && name.split('.').all(|label| {
                let digits = label
                    .strip_prefix("0x")
                    .or_else(|| label.strip_prefix("0X"))
                    .map_or((label, false), |h| (h, true));
                match digits {
                    (h, true) => h.bytes().all(|b| b.is_ascii_hexdigit()),
                    (d, false) => !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()),
                }
            }))
}

/// Does `domain` (a host, or `host/owner/repo` for git remotes) match one pattern?
/// Patterns: `*` (any name, never an IP literal), `*.x` (x itself and its subdomains),
/// `host/path` (exact, for git remotes), or an exact host.
pub fn matches_pattern(domain: &str, pattern: &str) -> bool {
    let host = domain.split_once('/').map_or(domain, |(h, _)| h);
    if pattern == "*" {
        return !is_ip_literal(host);
    }
    if let Some(base) = pattern.strip_prefix("*.") {
        return host == base
            || (host.len() > base.len() + 1
                && host.ends_with(base)
                && host.as_bytes()[host.len() - base.len() - 1] == b'.');
    }
    if pattern.contains('/') {
        return domain == pattern;
    }
    host == pattern
}

pub fn matches_any<S: AsRef<str>>(domain: &str, allowed: &[S]) -> bool {
    allowed.iter().any(|p| matches_pattern(domain, p.as_ref()))
}

/// The string a URL-role value is matched as: the host for `fetch-url`, `host/owner/repo`
/// for `git-remote-url` (scp-style `git@host:owner/repo.git` included). A value that does
/// not parse is matched as written, which only exact patterns can match.
pub fn domain_for(value: &str, role: Role) -> String {
    if role == Role::GitRemoteUrl {
        git_domain(value)
    } else {
        match url::Url::parse(value) {
            Ok(u) => u
                .host_str()
                .map_or_else(|| value.to_string(), str::to_string),
            Err(_) => value.to_string(),
        }
    }
}

fn git_domain(value: &str) -> String {
    if !value.contains("://") {
        if let Some((before, path)) = value.split_once(':') {
            // scp-like syntax: optional `user@`, then the host.
            let host = before.rsplit_once('@').map_or(before, |(_, h)| h);
            if !host.is_empty() {
                let repo = repo_path(path);
                return if repo.is_empty() {
                    host.to_string()
                } else {
                    format!("{host}/{repo}")
                };
            }
        }
    }
    match url::Url::parse(value) {
        Ok(u) => {
            let host = u.host_str().unwrap_or_default().to_string();
            let repo = repo_path(u.path());
            if repo.is_empty() {
                host
            } else {
                format!("{host}/{repo}")
            }
        }
        Err(_) => value.to_string(),
    }
}

/// `/owner/repo.git/` -> `owner/repo`.
fn repo_path(path: &str) -> &str {
    let s = path.strip_prefix('/').unwrap_or(path);
    let s = s.strip_suffix('/').unwrap_or(s);
    let s = s.strip_suffix(".git").unwrap_or(s);
    s.strip_suffix('/').unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_matches_names_but_never_ip_literals() {
        assert!(matches_pattern("example.com", "*"));
        assert!(!matches_pattern("169.254.169.254", "*"));
        assert!(!matches_pattern("[::1]", "*"));
        assert!(!matches_pattern("::1", "*"));
        // WHATWG parsing turns integer hosts into dotted quads first.
        assert_eq!(
            domain_for("http://2130706433/x", Role::FetchUrl),
            "127.0.0.1"
        );
        assert!(!matches_pattern(
            &domain_for("http://0x7f.1/", Role::FetchUrl),
            "*"
        ));
        // Short and integer IPv4 forms are addresses too where no URL parser normalised them
        // (git remotes over ssh, scp-like syntax): the resolver would connect to 127.0.0.1.
        for remote in [
            "ssh://2130706433/owner/repo",
            "git@0x7f.1:owner/repo.git",
            "127.1:owner/repo",
            "git://017700000001/x",
        ] {
            let d = domain_for(remote, Role::GitRemoteUrl);
            assert!(!matches_pattern(&d, "*"), "{remote} -> {d}");
        }
        assert!(matches_pattern("1password.com", "*"));
        assert!(matches_pattern("0xdeadbeef.example", "*"));
    }

    #[test]
    fn star_dot_matches_base_and_subdomains_only() {
        assert!(matches_pattern("github.com", "*.github.com"));
        assert!(matches_pattern("api.github.com", "*.github.com"));
        assert!(!matches_pattern("evilgithub.com", "*.github.com"));
        assert!(!matches_pattern("github.com.evil.io", "*.github.com"));
    }

    #[test]
    fn host_owner_repo_patterns_are_exact() {
        let d = domain_for("git@github.com:provos/ironcurtain.git", Role::GitRemoteUrl);
        assert_eq!(d, "github.com/provos/ironcurtain");
        assert!(matches_pattern(&d, "github.com/provos/ironcurtain"));
        assert!(!matches_pattern(&d, "github.com/provos/other"));
        // A host pattern matches any repo on that host.
        assert!(matches_pattern(&d, "github.com"));
        let h = domain_for("https://GitHub.com/a/b/", Role::GitRemoteUrl);
        assert_eq!(h, "github.com/a/b");
    }

    #[test]
    fn hosts_are_lowercased_and_userinfo_ignored() {
        assert_eq!(
            domain_for("https://user:pw@WWW.Example.COM:8443/p", Role::FetchUrl),
            "www.example.com"
        );
        assert_eq!(domain_for("not a url", Role::FetchUrl), "not a url");
    }
}

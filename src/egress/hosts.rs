//! The operator's resolver override file (`palisade.egressHostsFile`, `palisade run
//! --egress-hosts-file`): `/etc/hosts` syntax, `ADDRESS NAME [NAME...]`, `#` comments. It
//! exists so the test suite can point fake names (`allowed.test`) at loopback origins
//! through a real `palisade serve`; it is read once when the gateway (or `run`) starts.
//!
//! Pinned names skip the address-class rule (see `resolve`), which an operator could equally
//! get by listing the IP literal in `allowedDomains`: the file grants nothing the config's
//! author cannot already grant, and it is only ever read from the config or a flag, never
//! from the environment. Pure parsing plus one file read.

use std::net::IpAddr;
use std::path::Path;

use super::resolve::Resolver;

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("cannot read egress hosts file {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("egress hosts file {path}, line {line}: {problem}")]
    Syntax {
        path: String,
        line: usize,
        problem: String,
    },
}

/// Parses hosts-file text into (name, addresses) pairs; a name listed on several lines gets
/// every address.
pub fn parse(text: &str, path: &str) -> Result<Vec<(String, Vec<IpAddr>)>, HostsError> {
    let mut out: Vec<(String, Vec<IpAddr>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let addr = words.next().unwrap_or("");
        let ip: IpAddr = addr.parse().map_err(|_| HostsError::Syntax {
            path: path.to_string(),
            line: i + 1,
            problem: format!("`{addr}` is not an IP address"),
        })?;
        let names: Vec<&str> = words.collect();
        if names.is_empty() {
            return Err(HostsError::Syntax {
                path: path.to_string(),
                line: i + 1,
                problem: "an address without a name".into(),
            });
        }
        for n in names {
            let n = n.to_ascii_lowercase();
            match out.iter_mut().find(|(k, _)| *k == n) {
                Some((_, ips)) if !ips.contains(&ip) => ips.push(ip),
                Some(_) => {}
                None => out.push((n, vec![ip])),
            }
        }
    }
    Ok(out)
}

/// Reads the file and builds a resolver that answers its names and asks the system for the
/// rest. Returns the resolver and the number of names pinned (for the log line).
pub fn resolver_from_file(path: &Path) -> Result<(Resolver, usize), HostsError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| HostsError::Read {
        path: shown.clone(),
        cause: source,
    })?;
    let map = parse(&text, &shown)?;
    let n = map.len();
    Ok((Resolver::with_overrides(map), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_syntax_with_comments_and_repeats() {
        let got = parse(
            "# test names\n127.0.0.1 allowed.test Denied.Test # trailing\n\n::1 allowed.test\n",
            "h",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "allowed.test".to_string(),
                    vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]
                ),
                (
                    "denied.test".to_string(),
                    vec!["127.0.0.1".parse().unwrap()]
                ),
            ]
        );
    }

    #[test]
    fn bad_lines_name_the_line() {
        let e = parse("127.0.0.1 a.test\nnot-an-ip b.test\n", "h").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = parse("10.0.0.1\n", "h").unwrap_err();
        assert!(e.to_string().contains("without a name"), "{e}");
    }
}

//! Name resolution for the egress proxy: the system resolver (getaddrinfo on tokio's blocking
//! pool, never on a runtime thread) under a timeout, or a fixed override map that the
//! proxy's constructor receives explicitly (tests map `allowed.test` to a loopback origin).
//!
//! The proxy connects to exactly the addresses returned here after checking them, so there is
//! one resolution per connection and no rebinding window. This module must never consult
//! environment variables or `cfg!(test)` to pick overrides.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use thiserror::Error;

/// One resolved address, and whether it came from the operator's override map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub ip: IpAddr,
    /// True when the address came from [`Resolver::with_overrides`]: the operator pinned it,
    /// so the address-class rule does not apply (the deny list still does).
    pub pinned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResolveError {
    #[error("cannot resolve {name}: {detail}")]
    Failed { name: String, detail: String },
    #[error("resolving {name} took longer than {timeout:?}")]
    Timeout { name: String, timeout: Duration },
    #[error("{name} has no addresses")]
    Empty { name: String },
}

/// Resolves names. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Resolver {
    overrides: HashMap<String, Vec<IpAddr>>,
    /// When true, names missing from the override map fail instead of reaching the system
    /// resolver (hermetic tests, benchmarks).
    overrides_only: bool,
    timeout: Duration,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver::system()
    }
}

impl Resolver {
    /// The system resolver, with a 5 s timeout.
    pub fn system() -> Resolver {
        Resolver {
            overrides: HashMap::new(),
            overrides_only: false,
            timeout: Duration::from_secs(5),
        }
    }

    /// Names in `map` resolve to the given addresses (keys compared lower-case, without a
    /// trailing dot); other names go to the system resolver.
    pub fn with_overrides<I, S>(map: I) -> Resolver
    where
        I: IntoIterator<Item = (S, Vec<IpAddr>)>,
        S: AsRef<str>,
    {
        let overrides = map
            .into_iter()
            .map(|(k, v)| (normalise(k.as_ref()), v))
            .collect();
        Resolver {
            overrides,
            ..Resolver::system()
        }
    }

    /// Names missing from the override map fail instead of reaching the system resolver.
    pub fn overrides_only(mut self) -> Resolver {
        self.overrides_only = true;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Resolver {
        self.timeout = timeout;
        self
    }

    /// Resolves a normalised name (see `domains::Host`).
    pub async fn resolve(&self, name: &str) -> Result<Vec<Resolved>, ResolveError> {
        if let Some(ips) = self.overrides.get(&normalise(name)) {
            if ips.is_empty() {
                return Err(ResolveError::Empty { name: name.into() });
            }
            return Ok(ips
                .iter()
                .map(|&ip| Resolved { ip, pinned: true })
                .collect());
        }
        if self.overrides_only {
            return Err(ResolveError::Failed {
                name: name.into(),
                detail: "not in the resolver override map".into(),
            });
        }
        // Port 0: only the addresses matter; the proxy pairs them with the requested port.
        let lookup = tokio::net::lookup_host((name, 0));
        let addrs = match tokio::time::timeout(self.timeout, lookup).await {
            Err(_) => {
                return Err(ResolveError::Timeout {
                    name: name.into(),
                    timeout: self.timeout,
                })
            }
            Ok(Err(e)) => {
                return Err(ResolveError::Failed {
                    name: name.into(),
                    detail: e.to_string(),
                })
            }
            Ok(Ok(addrs)) => addrs,
        };
        let mut out: Vec<Resolved> = Vec::new();
        for a in addrs {
            let r = Resolved {
                ip: a.ip(),
                pinned: false,
            };
            if !out.contains(&r) {
                out.push(r);
            }
        }
        if out.is_empty() {
            return Err(ResolveError::Empty { name: name.into() });
        }
        Ok(out)
    }
}

fn normalise(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn overrides_are_pinned_and_case_insensitive() {
        let r = Resolver::with_overrides([("Allowed.Test.", vec!["127.0.0.1".parse().unwrap()])]);
        let got = r.resolve("allowed.test").await.unwrap();
        assert_eq!(
            got,
            vec![Resolved {
                ip: "127.0.0.1".parse().unwrap(),
                pinned: true
            }]
        );
    }

    #[tokio::test]
    async fn system_answers_are_not_pinned() {
        // `localhost` resolves locally (/etc/hosts), no network needed.
        let got = Resolver::system().resolve("localhost").await.unwrap();
        assert!(!got.is_empty());
        assert!(got.iter().all(|r| !r.pinned && r.ip.is_loopback()));
    }

    #[tokio::test]
    async fn overrides_only_refuses_other_names() {
        let r = Resolver::with_overrides(Vec::<(String, Vec<IpAddr>)>::new()).overrides_only();
        assert!(matches!(
            r.resolve("localhost").await,
            Err(ResolveError::Failed { .. })
        ));
    }
}

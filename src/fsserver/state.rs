//! The fs-server's current root set: who supplied it, its version, and the guard built
//! from it. Replaced whole (never edited in place) so a call sees one consistent set.
//!
//! No I/O except the canonicalisation done when a set is built. Never widens on a partial
//! or stale update: a fetch that started earlier than the applied one is discarded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{json, Value};

use crate::roots::guard::{GuardOptions, RootGuard};
use crate::roots::uri;
use crate::sandbox::Access;

/// Where the current roots came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSource {
    /// Nobody gave any: every access is refused.
    None,
    /// `--root` / `--ro-root` arguments.
    CommandLine,
    /// The client's `roots/list` answer.
    Client,
}

impl RootSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RootSource::None => "none",
            RootSource::CommandLine => "command-line",
            RootSource::Client => "client",
        }
    }
}

/// One immutable generation of roots.
#[derive(Debug)]
pub struct RootSet {
    pub guard: RootGuard,
    pub source: RootSource,
    pub version: u64,
}

impl RootSet {
    /// `{"version", "source", "roots": [{"path", "uri", "access"}]}`.
    pub fn describe(&self) -> Value {
        let roots: Vec<Value> = self
            .guard
            .roots()
            .iter()
            .map(|r| {
                json!({
                    "path": r.path.to_string_lossy(),
                    "uri": uri::path_to_uri(&r.path).unwrap_or_default(),
                    "access": match r.access { Access::Ro => "ro", Access::Rw => "rw" },
                })
            })
            .collect();
        json!({
            "version": self.version,
            "source": self.source.as_str(),
            "roots": roots,
        })
    }
}

/// The shared, swappable current set plus the ordering of client fetches.
#[derive(Debug)]
pub struct RootState {
    current: RwLock<Arc<RootSet>>,
    /// Sequence number of the newest fetch whose result was applied.
    applied_fetch: Mutex<u64>,
    next_fetch: std::sync::atomic::AtomicU64,
    home: Option<PathBuf>,
}

impl RootState {
    /// The initial set from the command line (canonicalised; missing directories refused).
    pub fn new(cli_roots: Vec<(PathBuf, Access)>, home: Option<PathBuf>) -> anyhow::Result<Self> {
        let source = if cli_roots.is_empty() {
            RootSource::None
        } else {
            RootSource::CommandLine
        };
        for (p, _) in &cli_roots {
            if !p.is_dir() {
                anyhow::bail!("--root {}: not an existing directory", p.display());
            }
        }
        let guard = RootGuard::new(cli_roots, options(home.clone()))
            .map_err(|e| anyhow::anyhow!("invalid --root: {e}"))?;
        Ok(RootState {
            current: RwLock::new(Arc::new(RootSet {
                guard,
                source,
                version: 1,
            })),
            applied_fetch: Mutex::new(0),
            next_fetch: std::sync::atomic::AtomicU64::new(1),
            home,
        })
    }

    /// The set to use for one call.
    pub fn snapshot(&self) -> Arc<RootSet> {
        // A poisoned lock only means a panic elsewhere while swapping an Arc; the Arc
        // inside is still whole, so reading it is safe.
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Reserves the sequence number of a client fetch about to start.
    pub fn begin_fetch(&self) -> u64 {
        self.next_fetch
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// Applies a client's roots (file:// URIs). Invalid entries (not file URIs, not existing
    /// directories) are dropped and returned; when none is valid the current set stays (as
    /// server-filesystem does: the client's empty answer never widens, and the operator's
    /// `--root` grant is kept). Returns the rejected URIs with reasons and whether the set
    /// was replaced.
    /// Each root comes with the access its `_meta` declares (`roots::access_from_meta`).
    pub fn apply_client_roots(
        &self,
        fetch: u64,
        roots: &[(String, Access)],
    ) -> (Vec<String>, bool) {
        let mut valid = Vec::new();
        let mut rejected = Vec::new();
        for (u, access) in roots {
            match uri::uri_to_path(u) {
                Ok(p) if p.is_dir() => valid.push((p, *access)),
                Ok(_) => rejected.push(format!("{u}: not an existing directory")),
                Err(e) => rejected.push(format!("{u}: {e}")),
            }
        }
        if valid.is_empty() {
            return (rejected, false);
        }
        let guard = match RootGuard::new(valid, options(self.home.clone())) {
            Ok(g) => g,
            Err(e) => {
                rejected.push(format!("root set refused: {e}"));
                return (rejected, false);
            }
        };
        let mut applied = match self.applied_fetch.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if fetch <= *applied {
            // A newer fetch already landed; this answer is stale.
            return (rejected, false);
        }
        *applied = fetch;
        let mut cur = match self.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let version = cur.version + 1;
        *cur = Arc::new(RootSet {
            guard,
            source: RootSource::Client,
            version,
        });
        (rejected, true)
    }
}

fn options(home: Option<PathBuf>) -> GuardOptions {
    // Relative paths are refused: the server's cwd means nothing to the agent.
    GuardOptions {
        cwd: None,
        home,
        deny_write: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_roots_replace_and_stale_fetches_are_dropped() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let st = RootState::new(vec![(a.path().to_path_buf(), Access::Ro)], None).unwrap();
        assert_eq!(st.snapshot().source, RootSource::CommandLine);
        let f1 = st.begin_fetch();
        let f2 = st.begin_fetch();
        let ub = uri::path_to_uri(b.path()).unwrap();
        let (rej, ok) = st.apply_client_roots(
            f2,
            &[(ub.clone(), Access::Rw), ("file://h/x".into(), Access::Rw)],
        );
        assert!(ok);
        assert_eq!(rej.len(), 1);
        let snap = st.snapshot();
        assert_eq!(snap.source, RootSource::Client);
        assert_eq!(snap.version, 2);
        assert_eq!(snap.guard.roots()[0].path, b.path().canonicalize().unwrap());
        // The older fetch answers late: ignored.
        let ua = uri::path_to_uri(a.path()).unwrap();
        assert!(!st.apply_client_roots(f1, &[(ua, Access::Rw)]).1);
        assert_eq!(st.snapshot().version, 2);
        // Nothing valid: the set stays.
        let f3 = st.begin_fetch();
        assert!(!st.apply_client_roots(f3, &[]).1);
        assert_eq!(st.snapshot().version, 2);
    }
}

//! `CallPaths`: one call's path arguments, each resolved on the disk once and shared by the
//! stages that judge it (the agent's roots, the policy, the roots check). Before, each stage
//! walked every path argument itself (a realpath and a few readlinks each time).
//!
//! Sharing never changes a decision: an entry is exactly what `canon::canonicalize_traced`
//! (the policy's resolution) and `guard::canonicalize_input` (the roots check's) return
//! for the same argument and base, failures included, so an unresolvable path is refused by
//! every stage with the same reason as before.
//!
//! Never: answer from the memo for another base (another cwd or home resolves anew), for a
//! `file://` URI (the policy and the guard decode those through different doors, so each
//! resolves its own), or after the call waited (the pipeline drops it then: an approval or a
//! widening may have let the disk change; see `call::forward::widen_and_forward`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::canon::{self, Base, PathError, Resolved};
use super::uri;

/// Resolves an expanded absolute path (the seam: `canon::resolve_checked` outside tests).
pub type Resolver = dyn Fn(&Path) -> Result<Resolved, PathError> + Send + Sync;

/// The resolutions of one call, keyed by the raw argument.
pub struct CallPaths {
    cwd: Option<PathBuf>,
    home: Option<PathBuf>,
    resolver: Box<Resolver>,
    memo: Mutex<Vec<(String, Result<Resolved, PathError>)>>,
}

impl std::fmt::Debug for CallPaths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallPaths")
            .field("cwd", &self.cwd)
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

impl CallPaths {
    /// A call whose relative and `~` arguments resolve against `base`.
    pub fn new(base: &Base<'_>) -> Self {
        CallPaths::with_resolver(base, Box::new(canon::resolve_checked))
    }

    /// `new` with another resolver (tests count the walks through it).
    pub fn with_resolver(base: &Base<'_>, resolver: Box<Resolver>) -> Self {
        CallPaths {
            cwd: base.cwd.map(Path::to_path_buf),
            home: base.home.map(Path::to_path_buf),
            resolver,
            memo: Mutex::new(Vec::new()),
        }
    }

    fn same_base(&self, base: &Base<'_>) -> bool {
        self.cwd.as_deref() == base.cwd && self.home.as_deref() == base.home
    }

    /// What `canon::canonicalize_traced(raw, base)` answers (the policy's view).
    pub fn traced(&self, raw: &str, base: &Base<'_>) -> Result<Resolved, PathError> {
        if uri::is_file_uri(raw) || !self.same_base(base) {
            return (self.resolver)(&canon::expand(raw, base)?);
        }
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = memo.iter().find(|(k, _)| k == raw) {
            return r.clone();
        }
        let r = canon::expand(raw, base).and_then(|p| (self.resolver)(&p));
        memo.push((raw.to_string(), r.clone()));
        r
    }

    /// What `guard::canonicalize_input(raw, base)` answers (the roots check's view).
    pub fn input(&self, raw: &str, base: &Base<'_>) -> Result<PathBuf, PathError> {
        if uri::is_file_uri(raw) {
            return Ok((self.resolver)(&uri::uri_to_path(raw)?)?.path);
        }
        Ok(self.traced(raw, base)?.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn counting(base: &Base<'_>) -> (CallPaths, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&n);
        let paths = CallPaths::with_resolver(
            base,
            Box::new(move |p| {
                seen.fetch_add(1, Ordering::SeqCst);
                canon::resolve_checked(p)
            }),
        );
        (paths, n)
    }

    #[test]
    fn one_walk_per_argument_and_the_same_answers_as_each_stage_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        let base = Base {
            cwd: Some(&d),
            home: None,
        };
        let (paths, walks) = counting(&base);
        for raw in ["link/f", "/etc/../etc/hosts", "", "~/x", "/proc/self/cwd"] {
            for _ in 0..3 {
                assert_eq!(
                    paths.traced(raw, &base),
                    canon::canonicalize_traced(raw, &base),
                    "{raw:?}"
                );
                assert_eq!(
                    paths.input(raw, &base),
                    crate::roots::guard::canonicalize_input(raw, &base),
                    "{raw:?}"
                );
            }
        }
        // Three arguments reach the walk ("" and "~/x" without a home fail to expand).
        assert_eq!(walks.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn another_base_or_a_uri_is_resolved_anew() {
        let base = Base {
            cwd: Some(Path::new("/")),
            home: None,
        };
        let (paths, walks) = counting(&base);
        let other = Base {
            cwd: Some(Path::new("/etc")),
            home: None,
        };
        assert_eq!(
            paths.traced("hosts", &other).unwrap().path,
            PathBuf::from("/etc/hosts")
        );
        assert_eq!(
            paths.traced("hosts", &other).unwrap().path,
            PathBuf::from("/etc/hosts")
        );
        assert_eq!(
            paths.traced("hosts", &base).unwrap().path,
            PathBuf::from("/hosts")
        );
        assert_eq!(walks.load(Ordering::SeqCst), 3);
        for _ in 0..2 {
            assert_eq!(
                paths.input("file:///etc/hosts", &base),
                crate::roots::guard::canonicalize_input("file:///etc/hosts", &base)
            );
        }
        assert_eq!(walks.load(Ordering::SeqCst), 5);
    }
}

//! One server's current root set, shared by everything that must agree on it: the launcher's
//! grants (bind mounts), the downstream client's `roots/list` answer, the policy's
//! `CallContext.roots` and the pipeline's `RootGuard` check. It starts as the set derived at
//! startup (`crate::roots::derive::derive_for_server`) and only grows, when a person approves
//! an escalated call that needs a directory the server does not have.
//!
//! Every set carries a version; the downstream handler records the version it last served so
//! a widening can wait until the server has re-fetched. Pure data and std locks, never held
//! across an await. Never: shrink a set (a server's mounts cannot shrink while it runs), or
//! add a root that is not a canonical, existing directory.
#![allow(deprecated)] // roots are deprecated in rmcp (SEP-2577) but still used.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::Root;
use tokio::sync::watch;

use crate::roots::derive::{DerivedRoot, RootSource};
use crate::roots::guard::{GuardOptions, RootGuard};
use crate::roots::uri;
use crate::sandbox::launch::Grant;
use crate::sandbox::Access;

/// One immutable version of a server's roots.
#[derive(Debug)]
pub struct RootSet {
    /// 1 at launch, +1 per widening.
    pub version: u64,
    /// In order: session sandbox dir, policy roots, config grants, then approved roots.
    pub roots: Vec<DerivedRoot>,
    /// The paths alone (the policy's `CallContext.roots`).
    pub paths: Vec<PathBuf>,
    pub guard: RootGuard,
}

impl RootSet {
    fn new(version: u64, roots: Vec<DerivedRoot>, options: GuardOptions) -> RootSet {
        let paths = roots.iter().map(|r| r.path.clone()).collect();
        let guard = RootGuard::new(
            roots.iter().map(|r| (r.path.clone(), r.access)).collect(),
            options,
        )
        // Every root was canonicalised when derived or added; a failure here means a root
        // cannot be checked, so the guard refuses everything (fail closed).
        .unwrap_or_else(|e| {
            tracing::error!("root set v{version} cannot be guarded ({e}); refusing every path");
            RootGuard::empty()
        });
        RootSet {
            version,
            roots,
            paths,
            guard,
        }
    }

    /// The launcher's grants: one bind mount per root, at the same path.
    pub fn grants(&self) -> Vec<Grant> {
        self.roots
            .iter()
            .map(|r| Grant {
                path: r.path.clone(),
                access: r.access,
            })
            .collect()
    }

    /// The `roots/list` answer: RFC 8089 URIs, named after where each root came from.
    pub fn mcp_roots(&self) -> Vec<Root> {
        self.roots
            .iter()
            .filter_map(|r| match uri::path_to_uri(&r.path) {
                Ok(u) => {
                    let mut root = Root::new(u).with_name(root_name(r));
                    root.meta = Some(access_meta(r.access));
                    Some(root)
                }
                Err(e) => {
                    // Cannot happen for a canonical absolute path; never announce what we
                    // could not encode faithfully.
                    tracing::error!("root {} has no file:// URI: {e}", r.path.display());
                    None
                }
            })
            .collect()
    }
}

/// The root's access in its `_meta` (`crate::roots::ACCESS_META_KEY`).
fn access_meta(access: Access) -> rmcp::model::MetaObject {
    let mut m = serde_json::Map::new();
    m.insert(
        crate::roots::ACCESS_META_KEY.into(),
        serde_json::Value::String(crate::roots::access_str(access).into()),
    );
    rmcp::model::MetaObject(m)
}

fn root_name(r: &DerivedRoot) -> String {
    let access = crate::roots::access_str(r.access);
    let from = match &r.source {
        RootSource::SandboxDir => "session sandbox".to_string(),
        RootSource::Rule(name) => format!("policy rule {name}"),
        RootSource::AllowWrite => "sandbox.filesystem.allowWrite".to_string(),
        RootSource::AllowRead => "sandbox.filesystem.allowRead".to_string(),
        RootSource::Approved => "approved escalation".to_string(),
    };
    format!("{} ({access}, {from})", r.path.display())
}

/// A directory an approved call needs: the path itself when it is a directory, else its
/// parent; read-write when the argument writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    pub path: PathBuf,
    pub access: Access,
}

/// The directory to grant for a canonical path argument (`None` for `/`, never a root): the
/// path itself when it is a directory, else its parent, whether or not that exists yet.
/// Never an existing ancestor instead (issue 23, finding 4: approving a write to
/// `~/.config/notes-app/today.md` mounted all of `~/.config`): a missing directory is what
/// the widening creates (see `widen::for_approved`).
pub fn directory_for(canonical: &Path) -> Option<PathBuf> {
    let dir = if canonical.is_dir() {
        canonical.to_path_buf()
    } else {
        canonical.parent()?.to_path_buf()
    };
    (dir.is_absolute() && dir != Path::new("/")).then_some(dir)
}

/// The shared, growing root set of one server.
pub struct RootsCell {
    current: RwLock<Arc<RootSet>>,
    options: GuardOptions,
    /// The highest version the server has fetched through `roots/list`.
    fetched: watch::Sender<u64>,
}

impl RootsCell {
    pub fn new(roots: Vec<DerivedRoot>, options: GuardOptions) -> RootsCell {
        let (fetched, _) = watch::channel(0);
        RootsCell {
            current: RwLock::new(Arc::new(RootSet::new(1, roots, options.clone()))),
            options,
            fetched,
        }
    }

    /// How relative and `~` paths are resolved for this server (its cwd and home).
    pub fn options(&self) -> &GuardOptions {
        &self.options
    }

    pub fn current(&self) -> Arc<RootSet> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What of `needed` the current set does not grant yet (already covered, with enough
    /// access, by a root or an ancestor root: nothing to do).
    pub fn missing(&self, needed: &[Needed]) -> Vec<Needed> {
        let set = self.current();
        let mut out: Vec<Needed> = Vec::new();
        for n in needed {
            let covered = set
                .guard
                .deepest_root(&n.path)
                .is_some_and(|r| r.access == Access::Rw || n.access == Access::Ro);
            if !covered && !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Adds `needed` (a read-only root asked for read-write is upgraded); returns the new
    /// set, or `None` when nothing changed.
    pub fn widen(&self, needed: &[Needed]) -> Option<Arc<RootSet>> {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let mut roots = guard.roots.clone();
        let mut changed = false;
        for n in needed {
            match roots.iter_mut().find(|r| r.path == n.path) {
                Some(r) => {
                    if n.access == Access::Rw && r.access == Access::Ro {
                        r.access = Access::Rw;
                        changed = true;
                    }
                }
                None => {
                    roots.push(DerivedRoot {
                        path: n.path.clone(),
                        access: n.access,
                        source: RootSource::Approved,
                    });
                    changed = true;
                }
            }
        }
        if !changed {
            return None;
        }
        let next = Arc::new(RootSet::new(guard.version + 1, roots, self.options.clone()));
        *guard = next.clone();
        Some(next)
    }

    /// Called by the downstream handler when it answered `roots/list` with `version`.
    pub fn mark_fetched(&self, version: u64) {
        self.fetched.send_if_modified(|v| {
            let newer = version > *v;
            if newer {
                *v = version;
            }
            newer
        });
    }

    /// Forgets what the previous server process fetched (a relaunch starts from scratch).
    pub fn reset_fetched(&self) {
        self.fetched.send_replace(0);
    }

    /// Whether the server has already fetched `version` or later.
    pub fn has_fetched(&self, version: u64) -> bool {
        *self.fetched.borrow() >= version
    }

    /// Waits until the server has fetched `version` or later; false after `timeout`.
    pub async fn wait_fetched(&self, version: u64, timeout: Duration) -> bool {
        let mut rx = self.fetched.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|v| *v >= version))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(dirs: &[(&Path, Access)]) -> RootsCell {
        RootsCell::new(
            dirs.iter()
                .map(|(p, a)| DerivedRoot {
                    path: p.to_path_buf(),
                    access: *a,
                    source: RootSource::SandboxDir,
                })
                .collect(),
            GuardOptions::default(),
        )
    }

    #[test]
    fn widening_adds_upgrades_and_versions() {
        let t = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(t.path()).unwrap();
        let (a, b) = (t.join("a"), t.join("b"));
        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let c = cell(&[(&a, Access::Ro)]);
        assert_eq!(c.current().version, 1);
        let inside = Needed {
            path: a.join("sub"),
            access: Access::Ro,
        };
        assert!(
            c.missing(std::slice::from_ref(&inside)).is_empty(),
            "covered by /a"
        );
        let write_inside = Needed {
            access: Access::Rw,
            ..inside
        };
        let missing = c.missing(std::slice::from_ref(&write_inside));
        assert_eq!(missing, std::slice::from_ref(&write_inside));
        let nb = Needed {
            path: b.clone(),
            access: Access::Ro,
        };
        let v2 = c.widen(std::slice::from_ref(&nb)).unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(v2.paths, [a.clone(), b.clone()]);
        assert!(c.widen(&[nb]).is_none(), "no change, no new version");
        let v3 = c
            .widen(&[Needed {
                path: a.clone(),
                access: Access::Rw,
            }])
            .unwrap();
        assert_eq!(v3.roots[0].access, Access::Rw);
        assert!(v3
            .guard
            .check_path(&a.join("x"), crate::roots::guard::Need::Write)
            .is_ok());
        let uris: Vec<String> = v3.mcp_roots().into_iter().map(|r| r.uri).collect();
        assert_eq!(uris[1], format!("file://{}", b.display()));
    }

    #[test]
    fn directory_for_uses_the_dir_itself_or_the_parent_and_never_slash() {
        let t = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(t.path()).unwrap();
        std::fs::write(t.join("f"), "x").unwrap();
        assert_eq!(directory_for(&t), Some(t.clone()));
        assert_eq!(directory_for(&t.join("f")), Some(t.clone()));
        // A file in a new subtree: its own directory, never the deepest existing ancestor.
        assert_eq!(
            directory_for(&t.join("new/deeper/f")),
            Some(t.join("new/deeper"))
        );
        assert_eq!(directory_for(Path::new("/etcx-nonexistent")), None);
        assert_eq!(directory_for(Path::new("/")), None);
    }

    #[tokio::test]
    async fn fetch_waits_resolve_on_the_version_served() {
        let c = Arc::new(cell(&[]));
        assert!(!c.wait_fetched(1, Duration::from_millis(10)).await);
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { c2.wait_fetched(1, Duration::from_secs(30)).await });
        c.mark_fetched(1);
        assert!(waiter.await.unwrap());
        c.reset_fetched();
        assert!(!c.wait_fetched(1, Duration::from_millis(10)).await);
    }
}

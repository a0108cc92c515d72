//! What the server can write among the sandbox's grants: the closure's test of whether an
//! input (a symlink, a `pyvenv.cfg`, a `#!` line) is the server's to rewrite, and of whether
//! the sandbox already shows a path. Reads the filesystem only to resolve a path's directory.

use std::path::{Path, PathBuf};

/// The sandbox's grants, each with whether the server can write it: a path is writable when
/// the deepest entry holding it is read-write (a read-only grant or a `denyWrite` path
/// inside a read-write one carves it out).
#[derive(Debug, Clone, Default)]
pub struct Writable {
    /// Grants and carve-outs, each with whether it is writable.
    entries: Vec<(PathBuf, bool)>,
    /// How many of `entries`, first, are grants (what the sandbox shows); the rest are
    /// `denyWrite` carve-outs, which show nothing of their own.
    grants: usize,
}

impl Writable {
    /// From the grants' `(path, writable)` pairs and the paths kept read-only inside them;
    /// a read-only and a read-write grant of the same path make it read-only.
    pub fn new(
        grants: impl IntoIterator<Item = (PathBuf, bool)>,
        read_only: impl IntoIterator<Item = PathBuf>,
    ) -> Writable {
        let mut entries: Vec<(PathBuf, bool)> = grants.into_iter().collect();
        let grants = entries.len();
        entries.extend(read_only.into_iter().map(|p| (p, false)));
        Writable { entries, grants }
    }

    /// Whether the server can write at `p` (its directory resolved, so that a path through
    /// a symlinked directory is judged where it lies).
    pub fn writable(&self, p: &Path) -> bool {
        // No read-write grant (`run -- true`): nothing to resolve on the launch path.
        if !self.any_writable() {
            return false;
        }
        if self.deepest_writable(p) {
            return true;
        }
        let real = p
            .parent()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .zip(p.file_name())
            .map(|(d, n)| d.join(n));
        real.is_some_and(|p| self.deepest_writable(&p))
    }

    /// Whether any grant is read-write.
    pub(super) fn any_writable(&self) -> bool {
        self.entries.iter().any(|(_, w)| *w)
    }

    fn deepest_writable(&self, p: &Path) -> bool {
        let holding = self.entries.iter().filter(|(g, _)| p.starts_with(g));
        let Some(depth) = holding.clone().map(|(g, _)| g.components().count()).max() else {
            return false;
        };
        holding
            .filter(|(g, _)| g.components().count() == depth)
            .all(|(_, w)| *w)
    }

    /// Whether `p` lies inside a grant (read-only or read-write): the sandbox shows it.
    pub fn shown(&self, p: &Path) -> bool {
        self.entries[..self.grants]
            .iter()
            .any(|(g, _)| p.starts_with(g))
    }
}

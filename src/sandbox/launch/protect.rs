//! Facts for write protection: the `WRITE_PROTECTED` paths (git hooks, shell rc files, ...)
//! that exist inside a spec's read-write mounts. Both native tiers keep them read-only, each
//! its own way (bwrap re-binds them, Landlock carves the grant around them).
//!
//! Reads the grants' directory trees within `write_protect`'s budget; changes nothing.
//! Never: stay silent when the budget cut a search short (the grant is named in a warning).

use std::path::PathBuf;

use crate::sandbox::write_protect;
use crate::sandbox::{Access, SandboxSpec};

/// The `WRITE_PROTECTED` paths that exist as real files or directories inside the
/// read-write mounts of `spec`, down to `write_protect::SEARCH_DEPTH` levels below each.
/// Paths that do not exist stay creatable: bwrap would have to create a mount point on the
/// host to protect them (see docs/security.md, gaps).
pub(super) fn write_protected(name: &str, spec: &SandboxSpec) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for m in spec.mounts.iter().filter(|m| m.access == Access::Rw) {
        let found = write_protect::find(&m.path);
        if found.truncated {
            tracing::warn!(
                server = %name,
                grant = %m.path.display(),
                "write protection searched only the first {} directories of this grant; \
                 git hooks and rc files deeper in it are not protected",
                write_protect::DIR_BUDGET
            );
        }
        out.extend(found.paths);
    }
    out
}

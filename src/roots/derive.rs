//! Per-server root sets derived from the policy: where a server may operate, and whether
//! it may write there. The sandbox mounts and the `roots/list` answers both come from here.
//!
//! Order: the session sandbox dir first (read-write), then each distinct canonical
//! `paths.within` of the allow and escalate rules that can apply to the server (deny rules
//! and rules without a path condition are never roots; neither is `/`, which would undo the
//! sandbox), then the server's `sandbox.filesystem` grants (`allowWrite` read-write,
//! `allowRead` read-only). A policy root is read-write when an allow or escalate rule grants
//! a write, delete or history role inside it, read-only otherwise.
//!
//! Pure apart from canonicalisation (symlinks resolved). Never widens: only what the policy
//! or the user's config names becomes a root.

use std::path::{Path, PathBuf};

use crate::config::FilesystemConfig;
use crate::policy::{Policy, Status};
use crate::roots::canon::{self, Base, PathError};

/// Read-only or read-write: the same type the sandbox mounts with, so a root's access and
/// its mount's access cannot drift apart.
pub use crate::sandbox::Access;

/// Why a directory is a root (shown by `palisade policy roots` and used as the root name).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "name")]
pub enum RootSource {
    SandboxDir,
    /// The first rule that named the directory.
    Rule(String),
    AllowWrite,
    AllowRead,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DerivedRoot {
    pub path: PathBuf,
    pub access: Access,
    pub source: RootSource,
}

/// Derives one server's roots. `home` expands `~` in the filesystem grants.
pub fn derive_roots(
    policy: &Policy,
    server: &str,
    sandbox_dir: Option<&Path>,
    grants: Option<&FilesystemConfig>,
    home: Option<&Path>,
) -> Result<Vec<DerivedRoot>, PathError> {
    let base = Base { cwd: None, home };
    let canon_str = |s: &str| canon::canonicalize(s, &base);
    let mut out: Vec<DerivedRoot> = Vec::new();
    let mut add = |path: PathBuf, access: Access, source: RootSource| match out
        .iter_mut()
        .find(|r| r.path == path)
    {
        Some(existing) => {
            if access == Access::Rw {
                existing.access = Access::Rw;
            }
        }
        None => out.push(DerivedRoot {
            path,
            access,
            source,
        }),
    };
    if let Some(sb) = sandbox_dir {
        let s = sb.to_str().ok_or(PathError::Encoding)?;
        add(canon_str(s)?, Access::Rw, RootSource::SandboxDir);
    }
    for rule in policy.rules() {
        if rule.then == Status::Deny {
            continue;
        }
        let Some(p) = &rule.paths else { continue };
        if rule
            .server
            .as_ref()
            .is_some_and(|s| !s.iter().any(|x| x == server))
        {
            continue;
        }
        if p.within == Path::new("/") {
            continue;
        }
        if !server_has_role(policy, server, &p.roles) {
            continue;
        }
        let access = if p.roles.iter().any(|r| r.writes()) {
            Access::Rw
        } else {
            Access::Ro
        };
        add(
            p.within.clone(),
            access,
            RootSource::Rule(rule.name.clone()),
        );
    }
    if let Some(g) = grants {
        for w in &g.allow_write {
            add(canon_str(w)?, Access::Rw, RootSource::AllowWrite);
        }
        for r in &g.allow_read {
            add(canon_str(r)?, Access::Ro, RootSource::AllowRead);
        }
    }
    Ok(out)
}

/// A rule can only discharge a path for a server whose tools carry one of its path roles.
/// When the server's tools are not known yet, assume they might.
fn server_has_role(policy: &Policy, server: &str, roles: &[crate::policy::Role]) -> bool {
    let Some(tools) = policy.annotations.get(server) else {
        return true;
    };
    tools.values().any(|a| {
        a.args.iter().any(|(_, spec)| match spec {
            crate::policy::load::ArgRoles::Static(r) => r.iter().any(|x| roles.contains(x)),
            crate::policy::load::ArgRoles::Conditional(c) => {
                c.default.iter().any(|x| roles.contains(x))
                    || c.when
                        .iter()
                        .any(|w| w.roles.iter().any(|x| roles.contains(x)))
            }
        })
    })
}

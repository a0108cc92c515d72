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

use crate::config::{FilesystemConfig, SandboxSetting, ServerConfig};
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
    /// Added during the session when a person approved an escalated call that needed it.
    Approved,
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
    derive_with_base(
        policy,
        server,
        sandbox_dir,
        grants,
        Base { cwd: None, home },
    )
}

/// The root set `palisade serve` gives one configured server, and `palisade policy roots`
/// prints: [`derive_roots`] with grant paths resolved against the server's `cwd`, minus the
/// roots that do not exist on this machine (a root that cannot be mounted must not be
/// announced either; those are returned in `skipped` with the reason).
pub fn derive_for_server(
    policy: &Policy,
    name: &str,
    server: Option<&ServerConfig>,
    sandbox_dir: Option<&Path>,
    home: Option<&Path>,
) -> Result<ServerRoots, PathError> {
    let grants = server.and_then(|s| match &s.sandbox {
        SandboxSetting::Enabled(sb) => Some(&sb.filesystem),
        SandboxSetting::Disabled => None,
    });
    let base = Base {
        cwd: server.and_then(|s| s.cwd.as_deref()),
        home,
    };
    let all = derive_with_base(policy, name, sandbox_dir, grants, base)?;
    let (roots, missing): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r.path.exists());
    let skipped = missing
        .into_iter()
        .map(|r| SkippedRoot {
            reason: "does not exist on this machine: neither mounted nor announced",
            root: r,
        })
        .collect();
    Ok(ServerRoots { roots, skipped })
}

/// One server's usable roots, and the derived ones that were left out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerRoots {
    pub roots: Vec<DerivedRoot>,
    pub skipped: Vec<SkippedRoot>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedRoot {
    #[serde(flatten)]
    pub root: DerivedRoot,
    pub reason: &'static str,
}

fn derive_with_base(
    policy: &Policy,
    server: &str,
    sandbox_dir: Option<&Path>,
    grants: Option<&FilesystemConfig>,
    base: Base<'_>,
) -> Result<Vec<DerivedRoot>, PathError> {
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

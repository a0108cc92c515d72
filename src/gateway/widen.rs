//! Stage 4 of the pipeline: an approved escalation widens its server. The directory of each
//! path argument (the path itself when it is a directory) becomes a root, read-write when
//! the argument writes; the server is relaunched with the wider mounts (bwrap's mounts are
//! fixed at launch) after the calls in flight have finished, re-initialized, told its roots
//! and waited for until it has applied them (`applied.rs`); only then is the call forwarded.
//!
//! Ordering: the whole widening holds the server's gate for writing, so no call is forwarded
//! to the old process after the roots grew and none reaches the new one before it applied
//! them. Nothing here decides whether a call may go: the policy and the approver did; a path
//! the widening cannot place is left to the roots check that follows, which refuses it.

use std::path::{Path, PathBuf};

use tokio::sync::RwLockReadGuard;

use super::roots::{directory_for, Needed};
use super::state::{Slot, Status};
use crate::policy::PathArg;
use crate::roots::canon::Base;
use crate::roots::guard::canonicalize_input;
use crate::sandbox::Access;

/// The directories an approved call needs, canonical (pure apart from canonicalisation).
pub fn needed(args: &[PathArg<'_>], cwd: Option<&Path>, home: Option<&Path>) -> Vec<Needed> {
    let base = Base { cwd, home };
    let mut out: Vec<Needed> = Vec::new();
    for a in args {
        let Ok(canonical) = canonicalize_input(a.value, &base) else {
            continue;
        };
        let Some(path) = directory_for(&canonical) else {
            continue;
        };
        let access = if a.writes() { Access::Rw } else { Access::Ro };
        let n = Needed { path, access };
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Widens `slot` for an approved call and returns the read permit the forward holds, with the
/// roots that were added (for the audit record). Err: the server could not be relaunched.
pub async fn for_approved<'s>(
    slot: &'s Slot,
    args: &[PathArg<'_>],
    cwd: Option<&Path>,
) -> Result<(RwLockReadGuard<'s, ()>, Vec<(PathBuf, Access)>), String> {
    let home = slot.roots.options().home.clone();
    let wanted = needed(args, cwd, home.as_deref());
    if slot.roots.missing(&wanted).is_empty() {
        return Ok((slot.gate.read().await, Vec::new()));
    }
    let write = slot.gate.write().await;
    // Another approval may have widened the set while this one waited for the gate.
    let missing = slot.roots.missing(&wanted);
    let Some(set) = slot.roots.widen(&missing) else {
        return Ok((write.downgrade(), Vec::new()));
    };
    let added: Vec<(PathBuf, Access)> = missing.into_iter().map(|n| (n.path, n.access)).collect();
    tracing::info!(
        server = %slot.name,
        "roots v{} after approval: added {:?}",
        set.version,
        added
    );
    if slot.snapshot().status == Status::Running {
        match slot.request_relaunch().await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(format!(
                    "server `{}` could not be relaunched with the approved roots: {e}",
                    slot.name
                ))
            }
            Err(_) => {
                return Err(format!(
                    "server `{}` is shutting down; the approved roots were not applied",
                    slot.name
                ))
            }
        }
    }
    // Not running: its next start launches with the wider set.
    Ok((write.downgrade(), added))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Role;

    #[test]
    fn directories_of_path_arguments_with_access_by_role() {
        let t = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir(t.join("d")).unwrap();
        let f = t.join("d/file.txt");
        let fs = f.display().to_string();
        let ds = t.join("d").display().to_string();
        let args = [
            PathArg {
                value: &fs,
                roles: vec![Role::ReadPath],
            },
            PathArg {
                value: &ds,
                roles: vec![Role::WritePath],
            },
            PathArg {
                value: "relative/x",
                roles: vec![Role::ReadPath],
            },
        ];
        let got = needed(&args, None, None);
        assert_eq!(
            got,
            [
                Needed {
                    path: t.join("d"),
                    access: Access::Ro
                },
                Needed {
                    path: t.join("d"),
                    access: Access::Rw
                },
            ],
            "a relative path without a cwd is left to the roots check"
        );
    }
}

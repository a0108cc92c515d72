//! Stage 4 of the pipeline: an approved escalation widens its server. The directory of each
//! path argument (the path itself when it is a directory) becomes a root, read-write when
//! the argument writes: exactly that directory, created (0700) when it does not exist yet,
//! never an existing ancestor in its place. A directory that is the user's home or above it,
//! or lies on the way to or inside a place code is started from (`~/.ssh`,
//! `~/.config/systemd`, `~/.config/autostart`, a `.git` directory, …), is never granted by an
//! approval: the call is refused without asking (`refusal`), and the person is shown the
//! grants an approval adds before answering. The server is relaunched with the wider mounts
//! (bwrap's mounts are fixed at launch) after the calls in flight have finished, re-initialized,
//! told its roots and waited for until it has applied them (`applied.rs`); only then is the call
//! forwarded.
//!
//! Ordering: the whole widening holds the server's gate for writing, so no call is forwarded
//! to the old process after the roots grew and none reaches the new one before it applied
//! them. Nothing here decides whether a call may go: the policy and the approver did; a path
//! the widening cannot place is left to the roots check that follows, which refuses it.

use std::path::{Component, Path, PathBuf};

use tokio::sync::RwLockReadGuard;

use crate::gateway::server::roots::{directory_for, Needed};
use crate::gateway::state::{RelaunchFailed, Slot, Status};
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

/// Places below the user's home that start code or hold keys: no approval grants them, a
/// directory inside them, or a directory above them.
const PERSISTENCE_IN_HOME: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".config/systemd",
    ".config/autostart",
    ".config/environment.d",
    ".config/fish",
    ".config/git",
    ".local/share/systemd",
    ".local/share/applications",
    ".local/bin",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".xprofile",
    ".xsessionrc",
    ".pam_environment",
];

/// Directory names whose contents run code wherever they are (a repository's hooks and
/// config, ssh keys of any user).
const PERSISTENCE_ANYWHERE: &[&str] = &[".git", ".ssh", ".gnupg"];

/// Why an approval may not grant `dir`, if it may not (pure: paths only).
pub fn persistence_conflict(dir: &Path, home: Option<&Path>) -> Option<String> {
    if dir == Path::new("/") {
        return Some("it is the whole filesystem".into());
    }
    if let Some(home) = home {
        if home.starts_with(dir) {
            return Some(format!(
                "it holds the home directory {} and its start-up files",
                home.display()
            ));
        }
        for rel in PERSISTENCE_IN_HOME {
            let p = home.join(rel);
            if p.starts_with(dir) || dir.starts_with(&p) {
                return Some(format!(
                    "{} starts code or holds keys (persistence)",
                    p.display()
                ));
            }
        }
    }
    dir.components()
        .find(|c| matches!(c, Component::Normal(n) if PERSISTENCE_ANYWHERE.iter().any(|x| n == x)))
        .map(|c| {
            format!(
                "it is inside a `{}` directory (persistence)",
                c.as_os_str().to_string_lossy()
            )
        })
}

/// Why the approval of a call needing `needed` may not be granted, if it may not: the first
/// directory that conflicts with a persistence location.
pub fn refusal(needed: &[Needed], home: Option<&Path>) -> Option<String> {
    needed.iter().find_map(|n| {
        persistence_conflict(&n.path, home).map(|why| {
            format!(
                "an approval would grant {} to the server, and {why}; grant a narrower \
                 directory, or add it to the server's sandbox.filesystem settings",
                n.path.display()
            )
        })
    })
}

/// Why an approved call's widening was not carried out (the call fails; the text is the
/// agent's error).
#[derive(Debug, thiserror::Error)]
pub enum WidenError {
    /// A directory it needs is a persistence location (`refusal`).
    #[error("{0}")]
    Refused(String),
    #[error(
        "the approved directory {} is not where it was judged to be (a symlink on the way)",
        .0.display()
    )]
    LinkOnTheWay(PathBuf),
    #[error("cannot create the approved directory {}: {cause}", dir.display())]
    Create { dir: PathBuf, cause: std::io::Error },
    #[error(
        "the approved directory {} is not where it was judged to be (a symlink on the way?)",
        .0.display()
    )]
    MovedAfterCreate(PathBuf),
    #[error("server `{server}` could not be relaunched with the approved roots: {reason}")]
    Relaunch {
        server: String,
        reason: RelaunchFailed,
    },
    #[error("server `{server}` is shutting down; the approved roots were not applied")]
    ShuttingDown { server: String },
    /// The call's paths now need a directory the approval did not grant: something on their
    /// way (a symlink the server can write) changed while the approval was being decided.
    #[error(
        "the call now needs {} ({}), which was not what was approved (its paths resolve \
         elsewhere than when they were shown: a symlink changed on the way?); nothing was granted",
        dir.display(),
        if *.access == Access::Rw { "read-write" } else { "read-only" }
    )]
    NotApproved { dir: PathBuf, access: Access },
}

/// Creates an approved directory that does not exist yet (0700, with its missing parents),
/// then checks it is where it was judged to be (no symlink planted on the way).
fn create_approved(dir: &Path) -> Result<(), WidenError> {
    if dir.is_dir() {
        return Ok(());
    }
    // What exists of it must be real: creating through a planted link would make the
    // directory somewhere else.
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    if std::fs::canonicalize(existing).ok().as_deref() != Some(existing) {
        return Err(WidenError::LinkOnTheWay(dir.to_path_buf()));
    }
    crate::private_dir::create(dir).map_err(|source| WidenError::Create {
        dir: dir.to_path_buf(),
        cause: source,
    })?;
    match std::fs::canonicalize(dir) {
        Ok(real) if real == dir => Ok(()),
        _ => Err(WidenError::MovedAfterCreate(dir.to_path_buf())),
    }
}

/// Widens `slot` for an approved call and returns the read permit the forward holds, with the
/// roots that were added (for the audit record). `approved` is what the approval granted
/// (what the person was shown, or what the remembered scope's match resolved to): the
/// paths are resolved again here, after the wait, and a directory they now need that is
/// not in it is refused, never granted. Err: refused, or the server could not be relaunched.
pub async fn for_approved<'s>(
    slot: &'s Slot,
    args: &[PathArg<'_>],
    cwd: Option<&Path>,
    approved: &[crate::approval::RememberedDir],
) -> Result<(RwLockReadGuard<'s, ()>, Vec<(PathBuf, Access)>), WidenError> {
    let home = slot.roots.options().home.clone();
    let wanted = needed(args, cwd, home.as_deref());
    if slot.roots.missing(&wanted).is_empty() {
        return Ok((slot.gate.read().await, Vec::new()));
    }
    let write = slot.gate.write().await;
    // Another approval may have widened the set while this one waited for the gate.
    let missing = slot.roots.missing(&wanted);
    // Checked again here (the pipeline refuses before asking): an approval remembered earlier
    // also widens through this path. Fails closed.
    if let Some(why) = refusal(&missing, home.as_deref()) {
        return Err(WidenError::Refused(why));
    }
    if let Some(n) = missing.iter().find(|n| !approves(approved, n)) {
        return Err(WidenError::NotApproved {
            dir: n.path.clone(),
            access: n.access,
        });
    }
    for n in &missing {
        create_approved(&n.path)?;
    }
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
            Ok(Err(reason)) => {
                return Err(WidenError::Relaunch {
                    server: slot.name.clone(),
                    reason,
                })
            }
            Err(_) => {
                return Err(WidenError::ShuttingDown {
                    server: slot.name.clone(),
                })
            }
        }
    }
    // Not running: its next start launches with the wider set.
    Ok((write.downgrade(), added))
}

/// Whether the approval granted `n`: the same directory or one inside it (a path that did
/// not exist when shown may be a directory now), with at least its access.
fn approves(approved: &[crate::approval::RememberedDir], n: &Needed) -> bool {
    approved
        .iter()
        .any(|a| n.path.starts_with(&a.path) && (a.access == Access::Rw || n.access == Access::Ro))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Role;

    #[test]
    fn only_a_directory_approved_with_enough_access_is_granted() {
        let dir = |p: &str, access| crate::approval::RememberedDir {
            path: PathBuf::from(p),
            access,
        };
        let need = |p: &str, access| Needed {
            path: PathBuf::from(p),
            access,
        };
        let approved = [dir("/proj/sub", Access::Rw), dir("/data", Access::Ro)];
        assert!(approves(&approved, &need("/proj/sub", Access::Rw)));
        assert!(approves(&approved, &need("/proj/sub", Access::Ro)));
        assert!(approves(&approved, &need("/data", Access::Ro)));
        assert!(!approves(&approved, &need("/data", Access::Rw)));
        assert!(!approves(&approved, &need("/victim", Access::Rw)));
        assert!(!approves(&approved, &need("/proj", Access::Ro)));
        assert!(approves(&approved, &need("/proj/sub/new", Access::Rw)));
        assert!(!approves(&approved, &need("/proj/subway", Access::Ro)));
        assert!(!approves(&[], &need("/proj/sub", Access::Ro)));
    }

    /// Issue 23, finding 4: persistence locations and their ancestors are never granted.
    #[test]
    fn persistence_locations_and_what_holds_them_are_never_granted() {
        let home = Path::new("/home/u");
        for dir in [
            "/",
            "/home",
            "/home/u",
            "/home/u/.config",
            "/home/u/.config/systemd",
            "/home/u/.config/systemd/user",
            "/home/u/.config/autostart",
            "/home/u/.ssh",
            "/home/u/.local",
            "/home/u/.local/share",
            "/srv/repo/.git",
            "/srv/repo/.git/hooks",
            "/root/.ssh",
        ] {
            assert!(
                persistence_conflict(Path::new(dir), Some(home)).is_some(),
                "{dir}"
            );
        }
        for dir in [
            "/home/u/.config/notes-app",
            "/home/u/notes",
            "/home/u/src/app",
            "/srv/repo",
            "/home/u/.local/share/notes",
            "/home/u/.sshx",
        ] {
            assert_eq!(
                persistence_conflict(Path::new(dir), Some(home)),
                None,
                "{dir}"
            );
        }
    }

    #[test]
    fn a_file_in_a_missing_directory_needs_that_directory_not_an_ancestor() {
        let t = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir(t.join("config")).unwrap();
        let f = t.join("config/notes-app/today.md").display().to_string();
        let args = [PathArg {
            value: &f,
            roles: vec![Role::WritePath],
        }];
        let got = needed(&args, None, None);
        assert_eq!(
            got,
            [Needed {
                path: t.join("config/notes-app"),
                access: Access::Rw
            }]
        );
        create_approved(&got[0].path).unwrap();
        assert!(t.join("config/notes-app").is_dir());
        // A planted symlink on the way is refused, not followed.
        std::fs::create_dir(t.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(t.join("elsewhere"), t.join("config/link")).unwrap();
        assert!(create_approved(&t.join("config/link/new")).is_err());
        assert!(!t.join("elsewhere/new").exists());
    }

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

//! `sandbox.filesystem.denyWrite` for the native (bwrap) backend: which paths are re-bound
//! read-only inside the read-write grants, and the placeholders that let a path that does
//! not exist yet be protected too.
//!
//! Sits between `launch::spec::build_spec` (the mounts) and `bwrap::render` (which emits the
//! re-binds after every grant, exactly like the write-protected dangerous files). A denied
//! path outside every read-write grant needs nothing: it is read-only or invisible already.
//!
//! bwrap can only bind onto something that exists. For a denied path that is missing, the
//! first missing component of it is created on the host as an empty, read-only placeholder
//! file and that file is re-bound read-only, so inside the sandbox the name exists, cannot
//! be written, replaced, removed (it is a mount point) or used as a directory: the denied
//! path cannot be created. The placeholder stays on the host afterwards (`palisade run`
//! execs bwrap and is gone, and removing it while another sandbox of the same server runs
//! would silently detach that sandbox's protection). Must never: follow a symlink when
//! creating a placeholder, or protect a path through a symlink it did not resolve.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::spec::{Access, Mount};

/// Why a denied path cannot be protected (the launch is refused: fail closed).
#[derive(Debug, thiserror::Error)]
pub enum DenyWriteError {
    #[error("denyWrite path {0} is a symlink that cannot be resolved (a loop); remove it, or list the path it should point to")]
    DanglingSymlink(PathBuf),
    #[error("denyWrite path {path}: {parent} is not a plain directory (a symlink on the way?); list the real path")]
    NotReal { path: PathBuf, parent: PathBuf },
    #[error("denyWrite path {path}: cannot create the placeholder {placeholder} that keeps it from being created ({cause})")]
    Placeholder {
        path: PathBuf,
        placeholder: PathBuf,
        cause: std::io::Error,
    },
}

/// True when the deepest mount showing `path` is read-write (pure).
pub fn writable_in(mounts: &[Mount], path: &Path) -> bool {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.path))
        .max_by_key(|m| m.path.components().count())
        .is_some_and(|m| m.access == Access::Rw)
}

/// What is on the host at one component of a denied path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Missing,
    Dir,
    /// A file (or anything that is not a directory nor a symlink).
    Other,
    Symlink,
}

/// What has to be re-bound read-only so that the denied `path` can be neither written nor
/// created (pure given `found`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Re-bind this existing path: the denied path itself, or a file in the way of it (a
    /// file cannot become a directory while it is a read-only mount point).
    Existing(PathBuf),
    /// Create a placeholder here (the first missing component) and re-bind it.
    Create(PathBuf),
    /// A symlink on the way that could not be walked (a loop): refused, never guessed.
    Dangling(PathBuf),
}

/// Walks `path` from `/` down to the first component that settles it (pure given `found`).
pub fn plan(path: &Path, found: impl Fn(&Path) -> Found) -> Plan {
    let mut chain: Vec<&Path> = path.ancestors().collect();
    chain.reverse();
    for p in chain {
        match found(p) {
            Found::Missing => return Plan::Create(p.to_path_buf()),
            Found::Symlink => return Plan::Dangling(p.to_path_buf()),
            Found::Other => return Plan::Existing(p.to_path_buf()),
            Found::Dir => {}
        }
    }
    Plan::Existing(path.to_path_buf())
}

fn found_on_host(p: &Path) -> Found {
    match std::fs::symlink_metadata(p) {
        Err(_) => Found::Missing,
        Ok(m) if m.file_type().is_symlink() => Found::Symlink,
        Ok(m) if m.is_dir() => Found::Dir,
        Ok(_) => Found::Other,
    }
}

/// The paths to re-bind read-only so that every `deny` path inside a read-write mount of
/// `mounts` can be neither written nor created. `deny` paths must be absolute and normal;
/// symlinks in their existing part are resolved here again (the host may have changed since
/// the config was read). Creates placeholders for missing paths (see the module header).
pub fn protect(mounts: &[Mount], deny: &[PathBuf]) -> Result<Vec<PathBuf>, DenyWriteError> {
    let mut out = Vec::new();
    for raw in deny {
        let path = crate::roots::canon::resolve_existing_prefix(raw);
        if !writable_in(mounts, &path) {
            // Not writable itself, but a read-write grant below it is: listed, so that the
            // renderer holds that grant read-only (as Landlock's plan does).
            let grant_below = mounts
                .iter()
                .any(|m| m.access == Access::Rw && m.path.starts_with(&path) && m.path != path);
            if grant_below {
                out.push(path);
            }
            continue;
        }
        // `resolve_existing_prefix` walks the path as the kernel does (dangling links
        // followed to where they point), so a symlink met here could not be walked (a loop).
        match plan(&path, found_on_host) {
            Plan::Existing(p) => out.push(p),
            Plan::Create(at) => out.push(placeholder(&path, &at)?),
            Plan::Dangling(p) => return Err(DenyWriteError::DanglingSymlink(p)),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Creates `at` (the first missing component of the denied `path`) as an empty read-only
/// file, never through a symlink, and returns it. An existing plain file there (a race with
/// another launch of the same server) is used as it is.
fn placeholder(path: &Path, at: &Path) -> Result<PathBuf, DenyWriteError> {
    let parent = at.parent().unwrap_or(Path::new("/"));
    // The parent must be a real directory: every component of it resolved to itself.
    if std::fs::canonicalize(parent).ok().as_deref() != Some(parent) {
        return Err(DenyWriteError::NotReal {
            path: path.to_path_buf(),
            parent: parent.to_path_buf(),
        });
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(at);
    match created {
        Ok(_) => {
            tracing::info!(
                denied = %path.display(),
                placeholder = %at.display(),
                "denyWrite: created an empty read-only placeholder so the path cannot be created in the sandbox (it stays on the host)"
            );
            Ok(at.to_path_buf())
        }
        Err(e)
            if e.kind() == ErrorKind::AlreadyExists
                && std::fs::symlink_metadata(at).is_ok_and(|m| m.file_type().is_file()) =>
        {
            Ok(at.to_path_buf())
        }
        Err(source) => Err(DenyWriteError::Placeholder {
            path: path.to_path_buf(),
            placeholder: at.to_path_buf(),
            cause: source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::MountOrigin;

    fn m(path: &Path, access: Access) -> Mount {
        Mount {
            path: path.to_path_buf(),
            access,
            origin: MountOrigin::Root,
        }
    }

    #[test]
    fn writable_in_follows_the_deepest_mount() {
        let ms = [
            m(Path::new("/w"), Access::Rw),
            m(Path::new("/w/ro"), Access::Ro),
        ];
        assert!(writable_in(&ms, Path::new("/w/a")));
        assert!(!writable_in(&ms, Path::new("/w/ro/a")));
        assert!(!writable_in(&ms, Path::new("/elsewhere")));
        assert!(!writable_in(&ms, Path::new("/wx")));
    }

    #[test]
    fn plan_stops_at_the_first_component_that_settles_the_path() {
        let dirs = ["/", "/w", "/w/a"];
        let found = |p: &Path| {
            if dirs.iter().any(|q| Path::new(q) == p) {
                Found::Dir
            } else if p == Path::new("/w/file") {
                Found::Other
            } else if p == Path::new("/w/link") {
                Found::Symlink
            } else {
                Found::Missing
            }
        };
        let pb = PathBuf::from;
        assert_eq!(
            plan(Path::new("/w/a/b/c"), found),
            Plan::Create(pb("/w/a/b"))
        );
        assert_eq!(plan(Path::new("/w/a"), found), Plan::Existing(pb("/w/a")));
        assert_eq!(
            plan(Path::new("/w/file"), found),
            Plan::Existing(pb("/w/file"))
        );
        // A file in the way (a placeholder from an earlier launch) is what gets re-bound.
        assert_eq!(
            plan(Path::new("/w/file/x/y"), found),
            Plan::Existing(pb("/w/file"))
        );
        assert_eq!(
            plan(Path::new("/w/link/x"), found),
            Plan::Dangling(pb("/w/link"))
        );
    }

    #[test]
    fn existing_paths_are_protected_and_missing_ones_get_a_placeholder() {
        let dir = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(w.join("present"), "x").unwrap();
        std::fs::create_dir(w.join("ro")).unwrap();
        let ms = [m(&w, Access::Rw), m(&w.join("ro"), Access::Ro)];
        let deny = vec![
            w.join("present"),
            w.join("absent/deeper/file"),
            w.join("ro/absent"),
            PathBuf::from("/not/granted/at/all"),
        ];
        let got = protect(&ms, &deny).unwrap();
        assert_eq!(got, vec![w.join("absent"), w.join("present")]);
        let md = std::fs::symlink_metadata(w.join("absent")).unwrap();
        assert!(md.is_file() && md.len() == 0);
        // Not inside a read-write grant: nothing created.
        assert!(!w.join("ro/absent").exists());
        // A second launch reuses the placeholder.
        assert_eq!(protect(&ms, &deny).unwrap(), got);
    }

    #[test]
    fn a_dangling_symlink_is_protected_where_it_points() {
        // Creating through the link would create its target, so the target is what gets the
        // placeholder (paths resolve as the kernel walks them, dangling links followed).
        let dir = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(w.join("nowhere"), w.join("link")).unwrap();
        let ms = [m(&w, Access::Rw)];
        let got = protect(&ms, &[w.join("link")]).unwrap();
        assert_eq!(got, vec![w.join("nowhere")]);
        let md = std::fs::symlink_metadata(w.join("nowhere")).unwrap();
        assert!(md.is_file() && md.len() == 0);
    }
}

//! `sandbox.filesystem.denyWrite` for the native (bwrap) backend: which paths are re-bound
//! read-only inside the read-write grants, and the placeholders that let a path that does
//! not exist yet be protected too.
//!
//! Sits between `launch::build_spec` (the mounts) and `bwrap::render` (which emits the
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
    #[error("denyWrite path {0} is a symlink that points nowhere; remove it, or list the path it should point to")]
    DanglingSymlink(PathBuf),
    #[error("denyWrite path {path}: {parent} is not a plain directory (a symlink on the way?); list the real path")]
    NotReal { path: PathBuf, parent: PathBuf },
    #[error("denyWrite path {path}: cannot create the placeholder {placeholder} that keeps it from being created ({source})")]
    Placeholder {
        path: PathBuf,
        placeholder: PathBuf,
        #[source]
        source: std::io::Error,
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

/// The shallowest component of `path` for which `exists` is false, or `None` when the
/// whole path exists (pure given `exists`).
pub fn first_missing(path: &Path, exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let mut chain: Vec<&Path> = path.ancestors().collect();
    chain.reverse();
    chain.into_iter().find(|p| !exists(p)).map(Path::to_path_buf)
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
            continue;
        }
        let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
        let Some(missing) = first_missing(&path, exists) else {
            // Exists and, after resolution, is not a symlink (`canonicalize` went through it).
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(DenyWriteError::DanglingSymlink(path));
            }
            out.push(path);
            continue;
        };
        // `resolve_existing_prefix` stops at a dangling symlink and treats it as missing.
        if std::fs::symlink_metadata(&missing).is_ok() {
            return Err(DenyWriteError::DanglingSymlink(missing));
        }
        out.push(placeholder(&path, &missing)?);
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
            source,
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
    fn first_missing_is_the_shallowest_absent_component() {
        let present = ["/", "/w", "/w/a"];
        let exists = |p: &Path| present.iter().any(|q| Path::new(q) == p);
        assert_eq!(
            first_missing(Path::new("/w/a/b/c"), exists),
            Some(PathBuf::from("/w/a/b"))
        );
        assert_eq!(first_missing(Path::new("/w/a"), exists), None);
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
    fn dangling_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(w.join("nowhere"), w.join("link")).unwrap();
        let ms = [m(&w, Access::Rw)];
        let err = protect(&ms, &[w.join("link")]).unwrap_err();
        assert!(matches!(err, DenyWriteError::DanglingSymlink(_)), "{err}");
        assert!(!w.join("nowhere").exists());
    }
}

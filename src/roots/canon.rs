//! Safe path canonicalisation, shared by the policy engine, the RootGuard and the fs-server.
//!
//! Pure except for symlink resolution, which reads the filesystem (through the deepest
//! existing ancestor, so paths that do not exist yet still canonicalise).

use std::path::{Component, Path, PathBuf};

/// Longest path accepted, in bytes (Linux PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;

/// Why a path was refused. Callers deny with a BAD_PATH-style reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("BAD_PATH: empty path")]
    Empty,
    #[error("BAD_PATH: path contains a NUL byte")]
    Nul,
    #[error("BAD_PATH: path is longer than {MAX_PATH_LEN} bytes")]
    TooLong,
    #[error("BAD_PATH: invalid percent-encoding or non-UTF-8 path")]
    Encoding,
    #[error("BAD_PATH: relative path with no working directory to resolve it against")]
    Relative,
    #[error("BAD_PATH: unsupported URI (only file:// URIs naming a local path)")]
    Uri,
}

/// Where relative and `~` paths are resolved: the server's view, not palisade's.
#[derive(Debug, Clone, Default)]
pub struct Base<'a> {
    pub cwd: Option<&'a Path>,
    pub home: Option<&'a Path>,
}

/// Checks a raw path string and makes it absolute and lexically normal (`~` expanded,
/// `.`/`..` collapsed) without touching the filesystem.
pub fn normalize(raw: &str, base: &Base<'_>) -> Result<PathBuf, PathError> {
    if raw.is_empty() {
        return Err(PathError::Empty);
    }
    if raw.contains('\0') {
        return Err(PathError::Nul);
    }
    if raw.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong);
    }
    let expanded: PathBuf = if raw == "~" {
        base.home.ok_or(PathError::Relative)?.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        base.home.ok_or(PathError::Relative)?.join(rest)
    } else if raw.starts_with('/') {
        PathBuf::from(raw)
    } else {
        base.cwd.ok_or(PathError::Relative)?.join(raw)
    };
    if !expanded.is_absolute() {
        return Err(PathError::Relative);
    }
    Ok(lexical_normalize(&expanded))
}

/// Collapses `.` and `..` lexically; `..` at the root stays at the root.
pub fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// `normalize`, then resolve symlinks through the deepest existing ancestor and re-append
/// the rest. A symlink planted anywhere on the path is followed to where it really points.
pub fn canonicalize(raw: &str, base: &Base<'_>) -> Result<PathBuf, PathError> {
    Ok(resolve_existing_prefix(&normalize(raw, base)?))
}

/// Resolves symlinks in the longest existing prefix of an absolute, normal path.
pub fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            // The remainder has no `..` (normalised), so appending is safe; a missing
            // component cannot be a symlink.
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// True when `path` equals `root` or lies below it (component-wise, so `/a/bc` is not in `/a/b`).
pub fn is_within(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotdot_cannot_climb_above_root() {
        let b = Base::default();
        assert_eq!(
            normalize("/a/../../etc", &b).unwrap(),
            PathBuf::from("/etc")
        );
        assert_eq!(normalize("/a/./b/../c", &b).unwrap(), PathBuf::from("/a/c"));
    }

    #[test]
    fn tilde_and_relative_use_the_servers_view() {
        let b = Base {
            cwd: Some(Path::new("/srv/work")),
            home: Some(Path::new("/home/u")),
        };
        assert_eq!(normalize("~/x", &b).unwrap(), PathBuf::from("/home/u/x"));
        assert_eq!(
            normalize("x/../y", &b).unwrap(),
            PathBuf::from("/srv/work/y")
        );
        assert_eq!(
            normalize("x", &Base::default()).unwrap_err(),
            PathError::Relative
        );
    }

    #[test]
    fn bad_inputs_are_refused() {
        let b = Base::default();
        assert_eq!(normalize("", &b).unwrap_err(), PathError::Empty);
        assert_eq!(normalize("/a\0b", &b).unwrap_err(), PathError::Nul);
        let long = format!("/{}", "a".repeat(MAX_PATH_LEN));
        assert_eq!(normalize(&long, &b).unwrap_err(), PathError::TooLong);
    }

    #[test]
    fn symlinks_are_followed_through_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink("/etc", real.join("link")).unwrap();
        let p = real.join("link/not-there/x");
        let got = canonicalize(p.to_str().unwrap(), &Base::default()).unwrap();
        assert_eq!(got, PathBuf::from("/etc/not-there/x"));
    }

    #[test]
    fn within_is_component_wise() {
        assert!(is_within(Path::new("/a/b/c"), Path::new("/a/b")));
        assert!(is_within(Path::new("/a/b"), Path::new("/a/b")));
        assert!(!is_within(Path::new("/a/bc"), Path::new("/a/b")));
    }
}

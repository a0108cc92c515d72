//! Safe path canonicalisation, shared by the policy engine, the RootGuard and the fs-server.
//!
//! Pure except for symlink resolution, which reads the filesystem (through the deepest
//! existing ancestor, so paths that do not exist yet still canonicalise).
//!
//! It judges the path the server will reach, so it refuses what it cannot resolve as the
//! server would: a process's own view (`/proc/self`, `/proc/thread-self`, `/proc/<pid>`,
//! `/dev/fd`: resolved here they would name palisade's process, not the server's) and a
//! name with a Unicode-equivalent spelling on disk that a normalising server would open
//! instead. Never: resolve a path through palisade's own process.
//!
//! Split by job: this module is the lexical part (checks, `~` and relative expansion,
//! decoding, normalisation; pure); `walk` resolves on the disk.

mod walk;

use std::path::{Component, Path, PathBuf};

pub use walk::{resolve_checked, resolve_physical};

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
    #[error(
        "BAD_PATH: {0} names a process's own files (/proc/self, /proc/thread-self, /proc/<pid>, \
         /dev/fd): palisade would resolve it in its own process, not the server's, so it is refused"
    )]
    OwnProcess(String),
    #[error(
        "BAD_PATH: the name {name:?} in {dir} has a Unicode-equivalent spelling {other:?} on disk; \
         a server that normalises names would reach that one instead, so it is refused"
    )]
    UnicodeAmbiguous {
        dir: String,
        name: String,
        other: String,
    },
}

/// The checks every path gets before anything else: not empty, no NUL, not over-long.
pub fn check_bytes(bytes: &[u8]) -> Result<(), PathError> {
    if bytes.is_empty() {
        return Err(PathError::Empty);
    }
    if bytes.contains(&0) {
        return Err(PathError::Nul);
    }
    if bytes.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong);
    }
    Ok(())
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
    Ok(lexical_normalize(&expand(raw, base)?))
}

/// `normalize` without the lexical step: the checked, decoded, absolute path as the server
/// would read it, `.` and `..` still in place (for `resolve_physical`).
pub fn expand(raw: &str, base: &Base<'_>) -> Result<PathBuf, PathError> {
    let decoded = decode_input(raw)?;
    let raw: &str = &decoded;
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
    Ok(expanded)
}

/// Turns what a tool argument holds into a plain path string, decoding exactly once:
/// a `file://` URI (RFC 8089: `file:///p` or `file://localhost/p`) is percent-decoded;
/// a plain path is taken literally, as the server will take it, except that percent escapes
/// of `/`, `.`, `%`, `\` or NUL are refused, so an encoded `..` or separator can never mean
/// one thing to the policy and another to a server that decodes.
pub fn decode_input(raw: &str) -> Result<std::borrow::Cow<'_, str>, PathError> {
    if crate::roots::uri::is_file_uri(raw) {
        // One decoder for file URIs in the whole program: the RFC 8089 one in `uri`.
        let path = crate::roots::uri::uri_to_path(raw)?;
        let s = path
            .into_os_string()
            .into_string()
            .map_err(|_| PathError::Encoding)?;
        return Ok(std::borrow::Cow::Owned(s));
    }
    let hex = |c: u8| (c as char).to_digit(16);
    for w in raw.as_bytes().windows(3) {
        if let (b'%', Some(h), Some(l)) = (w[0], hex(w[1]), hex(w[2])) {
            if matches!(h * 16 + l, 0x2f | 0x2e | 0x25 | 0x5c | 0) {
                return Err(PathError::Encoding);
            }
        }
    }
    Ok(std::borrow::Cow::Borrowed(raw))
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

/// Checks and expands `raw`, then resolves it as the kernel would (`resolve_physical`). A
/// symlink planted anywhere on the path is followed to where it really points.
pub fn canonicalize(raw: &str, base: &Base<'_>) -> Result<PathBuf, PathError> {
    Ok(resolve_checked(&expand(raw, base)?)?.path)
}

/// `canonicalize`, also naming every symlink the walk went through (where the link itself
/// is, not its target), for callers that refuse links in some places (the sandbox dir).
pub fn canonicalize_traced(raw: &str, base: &Base<'_>) -> Result<Resolved, PathError> {
    resolve_checked(&expand(raw, base)?)
}

/// Where a path leads, and the symlinks met on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: PathBuf,
    /// The location of each symlink followed, in walk order.
    pub links: Vec<PathBuf>,
}

/// True for `/proc/self`, `/proc/thread-self`, `/proc/<pid>` and `/dev/fd` and below: names
/// whose meaning depends on the process that resolves them.
pub fn is_own_process(path: &Path) -> bool {
    let mut c = path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n),
        _ => None,
    });
    match (
        c.next().and_then(|n| n.to_str()),
        c.next().and_then(|n| n.to_str()),
    ) {
        (Some("proc"), Some(x)) => {
            x == "self" || x == "thread-self" || x.bytes().all(|b| b.is_ascii_digit())
        }
        (Some("dev"), Some("fd")) => true,
        _ => false,
    }
}

/// Resolves symlinks in an absolute, normal path. Kept for callers of the old name: it is
/// `resolve_physical`, which also follows a dangling symlink (the prefix-only version
/// judged a dangling link pointing outside a root as inside it).
pub fn resolve_existing_prefix(path: &Path) -> PathBuf {
    resolve_physical(path)
}

/// True when `path` equals `root` or lies below it (component-wise, so `/a/bc` is not in `/a/b`).
pub fn is_within(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod decode_tests;

#[cfg(test)]
mod prop_tests;

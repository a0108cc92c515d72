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

/// `resolve_physical` with the refusals a policy decision needs: a walk through a
/// process's own view (`is_own_process`, checked at every step, so `/proc/self/cwd` and a
/// symlink to it are caught before they resolve to palisade's cwd), or through a name with
/// a Unicode-equivalent spelling on disk (see `unicode_alias`).
pub fn resolve_checked(path: &Path) -> Result<Resolved, PathError> {
    if is_own_process(path) || is_own_process(&lexical_normalize(path)) {
        return Err(PathError::OwnProcess(path.display().to_string()));
    }
    let simple = path.as_os_str().is_ascii()
        && !path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
    if simple {
        // Fast path, the common case: an existing ASCII path that realpath(3) leaves as it
        // is went through no symlink, so there is nothing more to check.
        if let Ok(real) = std::fs::canonicalize(path) {
            if real == path {
                return Ok(Resolved {
                    path: real,
                    links: Vec::new(),
                });
            }
        }
    }
    walk(path, true)
}

/// An entry of `dir` that a server normalising names (NFC, NFKC; server-filesystem matches
/// entries by NFC when the exact name is missing) could reach for `name`, other than `name`
/// itself. `exists`: whether `name` itself is there (then only other spellings of a
/// non-ASCII name are looked up; an ASCII name is its own normal form). When it is missing
/// the directory is read, since any entry may normalise to it (KELVIN SIGN `\u{212A}` to `K`).
fn unicode_alias(dir: &Path, name: &std::ffi::OsStr, exists: bool) -> Option<String> {
    use icu_normalizer::{ComposingNormalizerBorrowed, DecomposingNormalizerBorrowed};
    let name = name.to_str()?;
    let nfc = ComposingNormalizerBorrowed::new_nfc();
    let nfkc = ComposingNormalizerBorrowed::new_nfkc();
    if exists {
        if name.is_ascii() {
            return None;
        }
        let forms = [
            nfc.normalize(name).into_owned(),
            nfkc.normalize(name).into_owned(),
            DecomposingNormalizerBorrowed::new_nfd()
                .normalize(name)
                .into_owned(),
            DecomposingNormalizerBorrowed::new_nfkd()
                .normalize(name)
                .into_owned(),
        ];
        return forms
            .into_iter()
            .find(|f| f != name && std::fs::symlink_metadata(dir.join(f)).is_ok());
    }
    let (want_c, want_k) = (nfc.normalize(name), nfkc.normalize(name));
    let entries = std::fs::read_dir(dir).ok()?;
    entries.filter_map(Result::ok).find_map(|e| {
        let other = e.file_name().into_string().ok()?;
        (other != name && (nfc.normalize(&other) == want_c || nfkc.normalize(&other) == want_k))
            .then_some(other)
    })
}

/// Most symlinks followed in one resolution (the kernel's limit is 40).
const MAX_LINKS: usize = 40;

/// Resolves an absolute path the way the kernel walks it: component by component, each
/// symlink replaced by its target (a dangling one too: creating through it creates its
/// target), and a `..` applied to where the walk really is, so `root/link/../x` is the
/// parent of the link's target joined with `x`, not `root/x`. Components below the first
/// missing one cannot be symlinks and are taken lexically. The bypass this closes was found
/// by the root_guard fuzz target: a lexical `..` judged `root/link/../secret` inside the
/// root, while a server opening the raw argument read a file outside it.
pub fn resolve_physical(path: &Path) -> PathBuf {
    let lexical_only = !path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
    if lexical_only {
        // Fast path, the common case: an existing path without `..` is realpath(3)'s.
        if let Ok(real) = std::fs::canonicalize(path) {
            return real;
        }
    }
    match walk(path, false) {
        Ok(r) => r.path,
        // Unreachable: an unchecked walk refuses nothing.
        Err(_) => lexical_normalize(path),
    }
}

/// The kernel's walk (see `resolve_physical`); with `checked`, the refusals of
/// `resolve_checked` at every step.
fn walk(path: &Path, checked: bool) -> Result<Resolved, PathError> {
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut cur = PathBuf::from("/");
    let mut missing = false;
    let mut links = Vec::new();
    while let Some(part) = pending.pop() {
        if part == ".." {
            // `cur` never holds a symlink, so its parent is the real parent; climbing back
            // out of a missing part resumes the walk where the disk is (what a server that
            // creates the missing directories would reach).
            cur.pop();
            if missing {
                missing = std::fs::symlink_metadata(&cur).is_err();
            }
            continue;
        }
        let parent_missing = missing;
        cur.push(&part);
        if checked && is_own_process(&cur) {
            return Err(PathError::OwnProcess(path.display().to_string()));
        }
        if missing {
            continue;
        }
        let md = std::fs::symlink_metadata(&cur);
        if checked && !parent_missing {
            if let Some(parent) = cur.parent() {
                if let Some(other) = unicode_alias(parent, &part, md.is_ok()) {
                    return Err(PathError::UnicodeAmbiguous {
                        dir: parent.display().to_string(),
                        name: part.to_string_lossy().into_owned(),
                        other,
                    });
                }
            }
        }
        match md {
            Ok(md) if md.file_type().is_symlink() => {
                links.push(cur.clone());
                match std::fs::read_link(&cur) {
                    Ok(target) if links.len() <= MAX_LINKS => {
                        cur.pop();
                        if target.is_absolute() {
                            cur = PathBuf::from("/");
                        }
                        pending.extend(target.components().rev().filter_map(|c| match c {
                            Component::Normal(n) => Some(n.to_os_string()),
                            Component::ParentDir => Some("..".into()),
                            _ => None,
                        }));
                    }
                    // A loop or an unreadable link: the kernel fails here too.
                    _ => missing = true,
                }
            }
            Ok(_) => {}
            Err(_) => missing = true,
        }
    }
    Ok(Resolved { path: cur, links })
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
    fn a_processs_own_view_is_refused_however_it_is_reached() {
        let b = Base::default();
        for p in [
            "/proc/self/cwd/x",
            "/proc/self/environ",
            "/proc/thread-self/root/etc",
            "/proc/1/environ",
            "/dev/fd/3",
            "/dev/stdin",
            "/proc/../proc/self/cwd",
            "file:///proc/self/cwd/x",
        ] {
            assert!(
                matches!(canonicalize(p, &b), Err(PathError::OwnProcess(_))),
                "{p}: {:?}",
                canonicalize(p, &b)
            );
        }
        // Through a link planted in a root, too.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/proc/self/cwd", dir.path().join("here")).unwrap();
        let p = dir.path().join("here/x");
        assert!(matches!(
            canonicalize(p.to_str().unwrap(), &b),
            Err(PathError::OwnProcess(_))
        ));
        // /proc itself and per-host files are not a process's own view.
        assert!(canonicalize("/proc/cpuinfo", &b).is_ok());
        assert!(canonicalize("/procfs/self", &b).is_ok());
    }

    #[test]
    fn a_name_with_a_unicode_equivalent_on_disk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(dir.path()).unwrap();
        let b = Base::default();
        // café in NFC planted; asked in NFD (missing) and the reverse (both existing).
        std::fs::create_dir(d.join("caf\u{e9}")).unwrap();
        let nfd = d.join("cafe\u{301}/Makefile");
        assert!(matches!(
            canonicalize(nfd.to_str().unwrap(), &b),
            Err(PathError::UnicodeAmbiguous { .. })
        ));
        std::fs::create_dir(d.join("cafe\u{301}")).unwrap();
        assert!(matches!(
            canonicalize(nfd.to_str().unwrap(), &b),
            Err(PathError::UnicodeAmbiguous { .. })
        ));
        // KELVIN SIGN normalises to K: an ASCII name that is missing still finds it.
        std::fs::create_dir(d.join("\u{212a}ey")).unwrap();
        let k = d.join("Key/x");
        assert!(matches!(
            canonicalize(k.to_str().unwrap(), &b),
            Err(PathError::UnicodeAmbiguous { .. })
        ));
        // Control: an unambiguous non-ASCII name and a new ASCII name resolve.
        std::fs::create_dir(d.join("na\u{ef}ve")).unwrap();
        let ok = d.join("na\u{ef}ve/new");
        assert_eq!(canonicalize(ok.to_str().unwrap(), &b).unwrap(), ok);
        let ok = d.join("plain/new");
        assert_eq!(canonicalize(ok.to_str().unwrap(), &b).unwrap(), ok);
    }

    #[test]
    fn the_walk_names_the_links_it_followed() {
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        let r = canonicalize_traced(d.join("link/f").to_str().unwrap(), &Base::default()).unwrap();
        assert_eq!(r.path, d.join("real/f"));
        assert_eq!(r.links, vec![d.join("link")]);
        let r = canonicalize_traced(d.join("real/f").to_str().unwrap(), &Base::default()).unwrap();
        assert!(r.links.is_empty());
    }

    #[test]
    fn within_is_component_wise() {
        assert!(is_within(Path::new("/a/b/c"), Path::new("/a/b")));
        assert!(is_within(Path::new("/a/b"), Path::new("/a/b")));
        assert!(!is_within(Path::new("/a/bc"), Path::new("/a/b")));
    }
}

#[cfg(test)]
mod decode_tests {
    use super::*;

    #[test]
    fn file_uris_are_decoded_once() {
        let b = Base::default();
        assert_eq!(
            normalize("file:///home/u/my%20docs", &b).unwrap(),
            PathBuf::from("/home/u/my docs")
        );
        assert_eq!(
            normalize("file://localhost/etc/x", &b).unwrap(),
            PathBuf::from("/etc/x")
        );
        // Decoded once: a doubly encoded dot stays a literal `%2e` name component.
        assert_eq!(
            normalize("file:///a/%252e%252e/b", &b).unwrap(),
            PathBuf::from("/a/%2e%2e/b")
        );
        assert_eq!(
            normalize("file://evil.host/x", &b).unwrap_err(),
            PathError::Uri
        );
        assert_eq!(
            normalize("file:///a%ff", &b).unwrap_err(),
            PathError::Encoding
        );
        assert_eq!(normalize("file:///a%00b", &b).unwrap_err(), PathError::Nul);
    }

    #[test]
    fn encoded_dots_and_separators_in_plain_paths_are_refused() {
        let b = Base::default();
        for bad in [
            "/ok/%2e%2e/etc",
            "/ok/..%2fetc",
            "/ok/%2E%2E",
            "/a%5c..",
            "/a%00",
        ] {
            assert_eq!(
                normalize(bad, &b).unwrap_err(),
                PathError::Encoding,
                "{bad}"
            );
        }
        assert_eq!(
            normalize("/ok/100%25done", &b).unwrap_err(),
            PathError::Encoding
        );
        assert_eq!(
            normalize("/ok/a%20b", &b).unwrap(),
            PathBuf::from("/ok/a%20b")
        );
        assert_eq!(normalize("/ok/50%", &b).unwrap(), PathBuf::from("/ok/50%"));
    }
}

#[cfg(test)]
mod prop_tests {
    use super::*;
    use proptest::prelude::*;

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("..".to_string()),
            Just(".".to_string()),
            Just("%2e%2e".to_string()),
            Just("%2f".to_string()),
            Just("".to_string()),
            "[a-z]{1,4}",
            Just("link".to_string()),
        ]
    }

    proptest! {
        /// Whatever mix of `..`, `.`, empty segments and encodings follows the root, the
        /// result either is refused or lies lexically inside the root iff it has no `..`
        /// climbing above it; and it never contains a `..` component.
        #[test]
        fn normalize_never_leaves_dotdot(segs in prop::collection::vec(segment(), 0..12)) {
            let raw = format!("/root/{}", segs.join("/"));
            let encoded = segs.iter().any(|s| s.contains('%'));
            // Encoded dots and separators are refused outright, never interpreted.
            prop_assert_eq!(normalize(&raw, &Base::default()).is_err(), encoded);
            // The same path as a file:// URI is decoded once, then judged the same way
            // (a decoded `%2e%2e` becomes a real `..`, so it is checked as one).
            let uri = format!("file:///root/{}", segs.join("/"));
            if let Ok(p) = normalize(&uri, &Base::default()) {
                prop_assert!(!p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
                let mut depth: i64 = 0;
                let mut escaped = false;
                for s in &segs {
                    let s = if s == "%2e%2e" { ".." } else { s.as_str() };
                    for part in s.split("%2f") {
                        match part {
                            ".." => { depth -= 1; escaped |= depth < 0; }
                            "." | "" => {}
                            _ => depth += 1,
                        }
                    }
                }
                prop_assert_eq!(is_within(&p, Path::new("/root")), !escaped, "{} -> {}", uri, p.display());
            }
            if let Ok(p) = normalize(&raw, &Base::default()) {
                prop_assert!(p.is_absolute());
                prop_assert!(!p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
                // Depth accounting: it is within /root exactly when no prefix climbs out.
                let mut depth: i64 = 0;
                let mut escaped = false;
                for s in &segs {
                    match s.as_str() {
                        ".." => { depth -= 1; if depth < 0 { escaped = true; } }
                        "." | "" => {}
                        _ => depth += 1,
                    }
                }
                prop_assert_eq!(is_within(&p, Path::new("/root")), !escaped, "{} -> {}", raw, p.display());
            }
        }

        /// Through a real directory with a symlink pointing outside, canonicalisation
        /// reports the real target: a path is judged inside the root only if it really is.
        #[test]
        fn symlinks_cannot_smuggle_paths_out(segs in prop::collection::vec(segment(), 0..8)) {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("root");
            let outside = dir.path().join("outside");
            std::fs::create_dir_all(&root).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
            let root = std::fs::canonicalize(&root).unwrap();
            let raw = format!("{}/{}", root.display(), segs.join("/"));
            if let Ok(p) = canonicalize(&raw, &Base::default()) {
                let through_link = {
                    let mut depth: i64 = 0;
                    let mut via = false;
                    let mut escaped = false;
                    for s in &segs {
                        match s.as_str() {
                            ".." => {
                                depth -= 1;
                                escaped |= depth < 0;
                                via &= depth > 0;
                            }
                            "." | "" => {}
                            "link" if depth == 0 && !escaped => { via = true; depth += 1; }
                            _ => depth += 1,
                        }
                    }
                    via || escaped
                };
                if is_within(&p, &root) {
                    prop_assert!(!through_link, "{} -> {}", raw, p.display());
                }
            }
        }
    }
}

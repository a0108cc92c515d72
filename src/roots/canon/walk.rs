//! The disk walk: a path resolved the way the kernel walks it (each symlink followed, a
//! `..` applied where the walk really is), and for a policy decision the refusals at every
//! step (a process's own view, a Unicode-ambiguous name). The only part of `canon` that
//! reads the filesystem; kept apart so the pure lexical work in `canon` reads on its own.
//!
//! Never: resolve a path through palisade's own process.

use std::path::{Component, Path, PathBuf};

use super::{is_own_process, lexical_normalize, PathError, Resolved};

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
        // Fast path, the common case: an existing ASCII path reached through no symlink is its
        // own canonical form, so there is nothing more to check.
        let unlinked = match reached_without_links(path) {
            Some(answer) => answer,
            // The kernel could not say: realpath(3) leaves such a path as it is.
            None => std::fs::canonicalize(path).is_ok_and(|real| real == path),
        };
        if unlinked {
            // In its canonical spelling, as realpath writes it: no trailing or doubled `/`.
            return Ok(Resolved {
                path: path.components().collect(),
                links: Vec::new(),
            });
        }
    }
    walk(path, true)
}

/// Whether the kernel reaches `path` (absolute, with no `.` or `..`) and follows no symlink
/// on the way, final component included: one `openat2(O_PATH, RESOLVE_NO_SYMLINKS)` and a
/// close, where realpath(3) reads every prefix of the path as a link (a `readlink` for each
/// component). `None` when the kernel cannot answer: no `openat2` (Linux before 5.6) or a
/// seccomp filter refusing it. Any other failure (missing, a symlink, not a directory,
/// not searchable) is `false`: realpath would not have left such a path as it is either.
fn reached_without_links(path: &Path) -> Option<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    if !path.is_absolute() {
        return Some(false);
    }
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match openat2(libc::AT_FDCWD, path, how) {
        Ok(fd) => {
            // Ours alone: `openat2` just returned it.
            let _ = nix::unistd::close(fd);
            Some(true)
        }
        Err(Errno::ENOSYS | Errno::EPERM | Errno::EINVAL | Errno::E2BIG) => None,
        Err(_) => Some(false),
    }
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
pub(super) fn walk(path: &Path, checked: bool) -> Result<Resolved, PathError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path's answer against the disk: only a path with no symlink anywhere, the
    /// last component included, is its own canonical form.
    #[test]
    fn only_a_path_through_no_symlink_is_reached_without_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::fs::write(base.join("real/f"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("real/f"), base.join("real/flink")).unwrap();
        let kernel = reached_without_links(&base.join("real/f"));
        if kernel.is_none() {
            // No openat2 here: the realpath fallback answers, tested through resolve_checked.
            return;
        }
        assert_eq!(kernel, Some(true));
        for through_a_link in ["link/f", "real/flink", "link", "real/missing", "real/f/x"] {
            assert_eq!(
                reached_without_links(&base.join(through_a_link)),
                Some(false),
                "{through_a_link}"
            );
        }
        // Through the link, the resolution names the real file and the link it went through.
        let r = resolve_checked(&base.join("link/f")).unwrap();
        assert_eq!(r.path, base.join("real/f"));
        assert!(!r.links.is_empty());
        let r = resolve_checked(&base.join("real/f")).unwrap();
        assert_eq!((r.path, r.links.len()), (base.join("real/f"), 0));
        // Spelt as realpath spells it: a trailing or doubled `/` is not part of the path
        // (a root is matched against it as text too).
        for spelt in ["real/", "real//f"] {
            let raw = format!("{}/{spelt}", base.display());
            let r = resolve_checked(Path::new(&raw)).unwrap();
            let want = std::fs::canonicalize(&raw).unwrap();
            assert_eq!(r.path.as_os_str(), want.as_os_str(), "{raw}");
        }
    }
}

//! The filesystem operations behind the fs-server's tools and resources.
//!
//! Blocking I/O: callers run these on `spawn_blocking`. Every function takes a path the
//! RootGuard has already canonicalised and allowed; none of them follows a symlink in the
//! final component (`O_NOFOLLOW`, `symlink_metadata`, no descent into symlinked dirs), so a
//! link swapped in after the check fails instead of leading outside. They never touch a path
//! they were not given.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::error::{ErrorCode, FsError};

/// Size caps, fixed at start.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest file `read` returns (keeps a JSON-RPC line well under 16 MiB even when every
    /// byte needs escaping).
    pub max_read_bytes: u64,
    pub max_write_bytes: usize,
    pub max_list_entries: usize,
    pub max_search_results: usize,
    /// Directory entries `search` may visit before it stops (bounds its time).
    pub max_search_visits: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read_bytes: 2 * 1024 * 1024,
            max_write_bytes: 2 * 1024 * 1024,
            max_list_entries: 10_000,
            max_search_results: 1_000,
            max_search_visits: 200_000,
        }
    }
}

/// Flags that make an open refuse a symlink in the final component and never block on a
/// FIFO.
fn safe_flags() -> i32 {
    libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenFor {
    Read,
    /// Create or truncate.
    Write,
}

/// Opens a canonical path so that NO component may be a symlink (openat2 with
/// `RESOLVE_NO_SYMLINKS`): a directory swapped for a link between the guard's check and this
/// open fails with ELOOP instead of leading outside the roots. Where openat2 is unavailable
/// (ENOSYS before Linux 5.6, or EPERM from a seccomp filter) it falls back to `O_NOFOLLOW`,
/// which protects the final component only.
fn open_confined(path: &Path, how: OpenFor) -> std::io::Result<std::fs::File> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    use nix::sys::stat::Mode;
    use std::os::fd::FromRawFd;

    let access = match how {
        OpenFor::Read => OFlag::O_RDONLY,
        OpenFor::Write => OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC,
    };
    let flags = access | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let mut open_how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    if how == OpenFor::Write {
        // The kernel rejects a mode without O_CREAT (EINVAL).
        open_how = open_how.mode(Mode::from_bits_truncate(0o644));
    }
    match openat2(libc::AT_FDCWD, path, open_how) {
        // SAFETY: openat2 just returned this descriptor; nothing else owns or closes it.
        Ok(fd) => Ok(unsafe { std::fs::File::from_raw_fd(fd) }),
        Err(nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM) => {
            let mut o = OpenOptions::new();
            match how {
                OpenFor::Read => o.read(true),
                OpenFor::Write => o.write(true).create(true).truncate(true).mode(0o644),
            };
            o.custom_flags(safe_flags()).open(path)
        }
        Err(e) => Err(std::io::Error::from(e)),
    }
}

fn kind_of(ft: fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    }
}

/// Reads a regular UTF-8 file of at most `max` bytes.
pub fn read_text(path: &Path, max: u64) -> Result<String, FsError> {
    let file =
        open_confined(path, OpenFor::Read).map_err(|e| FsError::from_io(&e, path, "read"))?;
    let meta = file
        .metadata()
        .map_err(|e| FsError::from_io(&e, path, "stat"))?;
    if meta.is_dir() {
        return Err(FsError::new(
            ErrorCode::NotAFile,
            format!("{} is a directory (use list)", path.display()),
        ));
    }
    if !meta.is_file() {
        return Err(FsError::new(
            ErrorCode::NotAFile,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if meta.len() > max {
        return Err(too_large(path, meta.len(), max));
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // `take(max + 1)`: a file growing after the fstat is still caught.
    file.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| FsError::from_io(&e, path, "read"))?;
    if buf.len() as u64 > max {
        return Err(too_large(path, buf.len() as u64, max));
    }
    String::from_utf8(buf).map_err(|_| {
        FsError::new(
            ErrorCode::NotText,
            format!("{} is not UTF-8 text", path.display()),
        )
    })
}

fn too_large(path: &Path, size: u64, max: u64) -> FsError {
    FsError::new(
        ErrorCode::TooLarge,
        format!(
            "{} is {size} bytes; the limit is {max} bytes",
            path.display()
        ),
    )
}

/// Creates or truncates a regular file and writes `content`. The parent must exist.
pub fn write_file(path: &Path, content: &str, max: usize) -> Result<Value, FsError> {
    if content.len() > max {
        return Err(FsError::new(
            ErrorCode::TooLarge,
            format!(
                "content is {} bytes; the limit is {max} bytes",
                content.len()
            ),
        ));
    }
    let parent = path
        .parent()
        .ok_or_else(|| FsError::new(ErrorCode::BadPath, "cannot write the root directory"))?;
    match fs::symlink_metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(m) if m.file_type().is_symlink() => {
            // The guard resolved every link; one here was planted after the check.
            return Err(FsError::new(
                ErrorCode::Forbidden,
                format!("parent {} is a symlink", parent.display()),
            ));
        }
        Ok(_) => {
            return Err(FsError::new(
                ErrorCode::NotADir,
                format!("parent {} is not a directory", parent.display()),
            ))
        }
        Err(e) => {
            return Err(FsError::new(
                ErrorCode::NotFound,
                format!("parent directory {} does not exist: {e}", parent.display()),
            ))
        }
    }
    let created = !path.exists();
    let mut file =
        open_confined(path, OpenFor::Write).map_err(|e| FsError::from_io(&e, path, "write"))?;
    let meta = file
        .metadata()
        .map_err(|e| FsError::from_io(&e, path, "stat"))?;
    if !meta.is_file() {
        return Err(FsError::new(
            ErrorCode::NotAFile,
            format!("{} is not a regular file", path.display()),
        ));
    }
    file.write_all(content.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| FsError::from_io(&e, path, "write"))?;
    Ok(json!({
        "path": display(path),
        "bytesWritten": content.len(),
        "created": created,
    }))
}

/// Entries of a directory: name, type (without following symlinks) and size of files.
pub fn list_dir(path: &Path, max: usize) -> Result<Value, FsError> {
    let meta = fs::symlink_metadata(path).map_err(|e| FsError::from_io(&e, path, "list"))?;
    if !meta.is_dir() {
        return Err(FsError::new(
            ErrorCode::NotADir,
            format!("{} is not a directory", path.display()),
        ));
    }
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in fs::read_dir(path).map_err(|e| FsError::from_io(&e, path, "list"))? {
        let entry = entry.map_err(|e| FsError::from_io(&e, path, "list"))?;
        if entries.len() >= max {
            truncated = true;
            break;
        }
        let ft = entry
            .file_type()
            .map_err(|e| FsError::from_io(&e, &entry.path(), "stat"))?;
        let mut item = json!({
            "name": entry.file_name().to_string_lossy(),
            "type": kind_of(ft),
        });
        if ft.is_file() {
            if let Ok(m) = entry.metadata() {
                item["size"] = json!(m.len());
            }
        }
        entries.push(item);
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(json!({ "path": display(path), "entries": entries, "truncated": truncated }))
}

/// Type, size, permissions and modification time of a path.
pub fn stat(path: &Path) -> Result<Value, FsError> {
    let m = fs::symlink_metadata(path).map_err(|e| FsError::from_io(&e, path, "stat"))?;
    let modified = chrono::DateTime::from_timestamp(m.mtime(), 0)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default();
    Ok(json!({
        "path": display(path),
        "type": kind_of(m.file_type()),
        "size": m.len(),
        "mode": format!("{:04o}", m.permissions().mode() & 0o7777),
        "modified": modified,
    }))
}

/// Files and directories below `dir` whose name matches `pattern` (a glob when it contains
/// `*`, `?` or `[`, else a case-insensitive substring). Symlinks are reported, never entered.
pub fn search(
    dir: &Path,
    pattern: &str,
    limits: &Limits,
    max_results: usize,
) -> Result<Value, FsError> {
    let meta = fs::symlink_metadata(dir).map_err(|e| FsError::from_io(&e, dir, "search"))?;
    if !meta.is_dir() {
        return Err(FsError::new(
            ErrorCode::NotADir,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let matcher = NameMatcher::new(pattern);
    let max_results = max_results.min(limits.max_search_results);
    let mut results = Vec::new();
    let mut visited = 0usize;
    let mut truncated = false;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    'walk: while let Some(current) = stack.pop() {
        // Unreadable subdirectories are skipped, as `find` does; the top one was checked.
        let Ok(rd) = fs::read_dir(&current) else {
            continue;
        };
        let mut children: Vec<(PathBuf, fs::FileType)> = rd
            .filter_map(Result::ok)
            .filter_map(|e| e.file_type().ok().map(|t| (e.path(), t)))
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (child, ft) in children {
            visited += 1;
            if visited > limits.max_search_visits {
                truncated = true;
                break 'walk;
            }
            let name = child.file_name().map(|n| n.as_bytes()).unwrap_or_default();
            if matcher.matches(&String::from_utf8_lossy(name)) {
                if results.len() >= max_results {
                    truncated = true;
                    break 'walk;
                }
                results.push(json!({ "path": display(&child), "type": kind_of(ft) }));
            }
            if ft.is_dir() {
                subdirs.push(child);
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(json!({
        "path": display(dir),
        "pattern": pattern,
        "results": results,
        "truncated": truncated,
    }))
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Matches file names against a glob or a substring.
#[derive(Debug, Clone)]
pub enum NameMatcher {
    Glob(Vec<char>),
    Substring(String),
}

impl NameMatcher {
    pub fn new(pattern: &str) -> Self {
        if pattern.contains(['*', '?', '[']) {
            NameMatcher::Glob(pattern.chars().collect())
        } else {
            NameMatcher::Substring(pattern.to_lowercase())
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            NameMatcher::Substring(s) => name.to_lowercase().contains(s.as_str()),
            NameMatcher::Glob(p) => {
                let n: Vec<char> = name.chars().collect();
                glob_match(p, &n)
            }
        }
    }
}

/// Iterative glob matching with single-star backtracking: linear in practice, never
/// exponential on hostile patterns like `*a*a*a*b`.
fn glob_match(p: &[char], n: &[char]) -> bool {
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class_match(p, pi, n[ni]) {
                        if matched {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        // An unclosed `[` is a literal.
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// `[abc]`, `[a-z]`, `[!x]`/`[^x]` at `p[start]`: (matched, index after `]`), or `None`
/// when the class is not closed.
fn class_match(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_substrings() {
        let g = |p: &str, n: &str| NameMatcher::new(p).matches(n);
        assert!(g("*.rs", "main.rs"));
        assert!(!g("*.rs", "main.rsx"));
        assert!(g("ma?n.*", "main.rs"));
        assert!(g("[mn]ain.rs", "main.rs"));
        assert!(g("[!x]ain.rs", "main.rs"));
        assert!(g("[a-z]*", "q"));
        assert!(!g("[a-z]*", "Q"));
        assert!(g("MAIN", "src_main.rs"));
        assert!(g("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab"));
        assert!(!g("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
        assert!(g("[x", "[x"));
    }

    #[test]
    fn read_refuses_large_binary_and_directories() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "hello").unwrap();
        assert_eq!(read_text(&f, 5).unwrap(), "hello");
        assert_eq!(read_text(&f, 4).unwrap_err().code, ErrorCode::TooLarge);
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert_eq!(read_text(&f, 10).unwrap_err().code, ErrorCode::NotText);
        assert_eq!(
            read_text(t.path(), 10).unwrap_err().code,
            ErrorCode::NotAFile
        );
        assert_eq!(
            read_text(&t.path().join("nope"), 10).unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn final_symlink_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("target");
        std::fs::write(&target, "secret").unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // Unprotected, opening the link reaches the target.
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "secret");
        assert_eq!(
            read_text(&link, 100).unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert_eq!(
            write_file(&link, "x", 100).unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret");
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_the_check_is_refused() {
        // The guard checked `root/dir/f` (a real directory then); the attacker swaps `dir`
        // for a link to the outside before the open.
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("f"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dir")).unwrap();
        let checked = root.join("dir/f");
        // Unprotected, the swapped path leads outside.
        assert_eq!(std::fs::read_to_string(&checked).unwrap(), "secret");
        assert_eq!(
            read_text(&checked, 100).unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert_eq!(
            write_file(&checked, "pwned", 100).unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("f")).unwrap(),
            "secret"
        );
    }

    #[test]
    fn write_needs_a_parent_and_truncates() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        let v = write_file(&f, "long content", 100).unwrap();
        assert_eq!(v["created"], true);
        let v = write_file(&f, "short", 100).unwrap();
        assert_eq!(v["created"], false);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "short");
        assert_eq!(
            write_file(&t.path().join("no/f"), "x", 100)
                .unwrap_err()
                .code,
            ErrorCode::NotFound
        );
        assert_eq!(
            write_file(&f, "xx", 1).unwrap_err().code,
            ErrorCode::TooLarge
        );
    }

    #[test]
    fn list_and_search_do_not_follow_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("hit.txt"), "").unwrap();
        std::fs::write(root.join("sub/hit.txt"), "abc").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let l = list_dir(&root, 100).unwrap();
        let names: Vec<_> = l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap(), e["type"].as_str().unwrap()))
            .collect();
        assert_eq!(names, vec![("escape", "symlink"), ("sub", "dir")]);
        let s = search(&root, "*.txt", &Limits::default(), 10).unwrap();
        let hits: Vec<_> = s["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(hits, vec![root.join("sub/hit.txt").display().to_string()]);
        assert_eq!(
            list_dir(&root.join("sub/hit.txt"), 10).unwrap_err().code,
            ErrorCode::NotADir
        );
    }

    #[test]
    fn search_is_bounded() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..20 {
            std::fs::write(t.path().join(format!("f{i}")), "").unwrap();
        }
        let s = search(t.path(), "f", &Limits::default(), 5).unwrap();
        assert_eq!(s["results"].as_array().unwrap().len(), 5);
        assert_eq!(s["truncated"], true);
    }
}

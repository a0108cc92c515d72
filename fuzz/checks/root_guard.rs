//! Path canonicalisation and the RootGuard (src/roots/canon/, src/roots/guard.rs) against a
//! real directory tree with fuzzer-planted symlinks.
//!
//! Each input builds, in a fresh scratch directory T: roots `T/r1` (with `sub/`) and `T/r2`,
//! an outside directory `T/out` holding a secret, and up to four symlinks at fixed places
//! whose targets the fuzzer picks (outside, inside, `..` chains, `/`, loops). It then builds
//! a guard over a chosen subset of roots (one possibly through a symlink) and checks paths
//! written as plain paths, `~` paths, relative paths and `file://` URIs.
//!
//! Invariants, for every candidate the guard accepts:
//! 1. The returned path is absolute, without `.`/`..`, and lies inside the returned root,
//!    which is one of the guard's roots, the deepest one containing it; a write is only ever
//!    granted by a read-write root.
//! 2. It is where the kernel would really go: resolving the same candidate component by
//!    component on the filesystem (symlinks followed, then `..` applied to where they led)
//!    gives the same path, so a server handed the raw argument cannot land elsewhere.
//! 3. It is a fixed point: checking the returned path again gives the same answer.
//! 4. Allowed for writing implies allowed for reading.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use palisade::roots::guard::{GuardOptions, Need, RootGuard};
use palisade::roots::uri;
use palisade::sandbox::Access;

use super::Input;

const WORDS: &[&str] = &[
    "r1", "r2", "out", "sub", "secret", "l0", "l1", "l2", "l3", "..", ".", "", "x", "new",
];

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let dir = super::scratch();
    let t = std::fs::canonicalize(dir.path()).expect("scratch is canonical");
    for d in ["r1/sub", "r2", "out"] {
        std::fs::create_dir_all(t.join(d)).expect("fixture dir");
    }
    std::fs::write(t.join("out/secret"), "s").expect("fixture file");
    std::fs::write(t.join("r1/sub/file"), "f").expect("fixture file");

    // Symlinks at fixed places, targets chosen by the fuzzer.
    let places = ["r1/l0", "r1/sub/l1", "r2/l2", "out/l3"];
    let links = inp.below(5);
    for place in places.iter().take(links) {
        let target: OsString = match inp.below(10) {
            0 => t.join("out").into(),
            1 => t.join("r1/sub").into(),
            2 => t.join("r2").into(),
            3 => "..".into(),
            4 => "../..".into(),
            5 => "/".into(),
            6 => t.join("r1/l0").into(),
            7 => "sub".into(),
            8 => "../out/secret".into(),
            _ => {
                let parts: Vec<&str> = (0..inp.below(4)).map(|_| inp.pick(WORDS)).collect();
                parts.join("/").into()
            }
        };
        if !target.is_empty() {
            let _ = std::os::unix::fs::symlink(&target, t.join(place));
        }
    }

    let mut roots = Vec::new();
    let mask = inp.byte();
    let candidates_roots = [
        ("r1", Access::Rw),
        ("r1/sub", Access::Ro),
        ("r2", Access::Ro),
        ("r1/l0", Access::Rw),
        ("r2/l2", Access::Ro),
    ];
    for (i, (p, a)) in candidates_roots.iter().enumerate() {
        if mask & (1 << i) != 0 {
            roots.push((t.join(p), *a));
        }
    }
    let options = GuardOptions {
        cwd: inp.bool().then(|| t.join("r1")),
        home: inp.bool().then(|| t.join("r2")),
        // A denyWrite path inside the writable root: never writable, nor anything below it.
        deny_write: if inp.bool() {
            vec![t.join("r1/deny")]
        } else {
            Vec::new()
        },
    };
    let Ok(guard) = RootGuard::new(roots, options.clone()) else {
        return;
    };

    // A few candidates per tree: each costs dozens of syscalls, and libFuzzer does better
    // with many short runs than with a few long ones.
    for _ in 0..8 {
        if inp.is_empty() {
            break;
        }
        let form = inp.below(5);
        let mut parts: Vec<String> = Vec::new();
        for _ in 0..inp.below(8) {
            if inp.below(8) == 0 {
                parts.push(String::from_utf8_lossy(inp.bytes(6)).into_owned());
            } else {
                parts.push(inp.pick(WORDS).to_string());
            }
        }
        let tail = parts.join("/");
        let raw = match form {
            0 => format!("{}/{tail}", t.display()),
            1 => format!("~/{tail}"),
            2 => tail.clone(),
            3 => match uri::path_to_uri(&t.join(&tail)) {
                Ok(u) => u,
                Err(_) => continue,
            },
            _ => format!("{}/r1/{tail}", t.display()),
        };
        // Where the candidate points before any normalisation, as the server would read it.
        let literal: Option<PathBuf> = match form {
            0 | 4 => Some(PathBuf::from(&raw)),
            1 => options.home.as_ref().map(|h| h.join(&tail)),
            // A relative tail that starts with `~` is read as the home directory, as the guard
            // (and the servers it stands for) expand it; only then is it relative to the cwd.
            2 if tail == "~" => options.home.clone(),
            2 => match tail.strip_prefix("~/") {
                Some(rest) => options.home.as_ref().map(|h| h.join(rest)),
                None => options.cwd.as_ref().map(|c| c.join(&tail)),
            },
            _ => uri::uri_to_path(&raw).ok(),
        };
        check_one(&guard, &raw, literal.as_deref(), &options.deny_write);
    }
}

fn check_one(guard: &RootGuard, raw: &str, literal: Option<&Path>, deny_write: &[PathBuf]) {
    let read = guard.check(raw, Need::Read);
    let write = guard.check(raw, Need::Write);
    if write.is_ok() {
        assert!(read.is_ok(), "{raw:?}: writable but not readable");
    }
    for (need, got) in [(Need::Read, &read), (Need::Write, &write)] {
        let Ok(allowed) = got else { continue };
        let p = &allowed.path;
        assert!(p.is_absolute(), "{raw:?} -> {p:?}");
        assert!(
            !p.components()
                .any(|c| matches!(c, Component::CurDir | Component::ParentDir)),
            "{raw:?} -> {p:?} keeps . or .."
        );
        assert!(
            p.starts_with(&allowed.root.path),
            "{raw:?} -> {p:?} is outside its root {:?}",
            allowed.root.path
        );
        assert!(
            guard.roots().contains(allowed.root),
            "{raw:?}: unknown root"
        );
        let deepest = guard
            .roots()
            .iter()
            .filter(|r| p.starts_with(&r.path))
            .max_by_key(|r| r.path.components().count())
            .expect("some root contains it");
        assert_eq!(deepest, allowed.root, "{raw:?}: not the deepest root");
        if need == Need::Write {
            assert_eq!(
                allowed.root.access,
                Access::Rw,
                "{raw:?}: write via ro root"
            );
            for denied in deny_write {
                assert!(
                    !p.starts_with(denied),
                    "{raw:?} -> {p:?}: writable at or below denyWrite {denied:?}"
                );
            }
        }
        let real = literal.and_then(kernel_resolve);
        if let Some(real) = &real {
            assert_eq!(
                real, p,
                "{raw:?}: the guard judged {p:?} but the kernel resolves it to {real:?}"
            );
        }
        // A path the kernel cannot walk (a symlink loop, a `..` below a missing directory)
        // reaches nothing; the guard need not answer it stably. Any other answer is a fixed
        // point.
        if real.is_some() || literal.is_none() {
            let again = guard
                .check_path(p, need)
                .unwrap_or_else(|e| panic!("{raw:?} -> {p:?}, which is then refused: {e}"));
            assert_eq!(
                &again.path, p,
                "{raw:?}: canonical path is not a fixed point"
            );
        }
    }
}

/// The path the kernel reaches for `path`, prefix by prefix with realpath(3): symlinks are
/// followed (a `..` after a symlink climbs from where the link led; a dangling link leads to
/// where creating through it would create), `.` is skipped, and components below the
/// deepest existing directory are appended as written. `None` when the kernel would fail
/// (a `..` below a missing directory, a symlink loop).
pub fn kernel_resolve(path: &Path) -> Option<PathBuf> {
    resolve_from(path, 0)
}

fn resolve_from(path: &Path, depth: usize) -> Option<PathBuf> {
    let parts: Vec<Component<'_>> = path.components().collect();
    let mut cur = PathBuf::from("/");
    let mut missing = false;
    for (i, c) in parts.iter().enumerate() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                if missing {
                    return None;
                }
                cur.pop();
            }
            Component::Normal(n) => {
                cur.push(n);
                if missing {
                    continue;
                }
                match std::fs::canonicalize(&cur) {
                    Ok(real) => cur = real,
                    Err(_) => match std::fs::read_link(&cur) {
                        // A dangling link: continue from its target.
                        Ok(target) if depth < 16 => {
                            let mut next = cur.parent().unwrap_or(Path::new("/")).join(target);
                            for rest in &parts[i + 1..] {
                                next.push(rest.as_os_str());
                            }
                            return resolve_from(&next, depth + 1);
                        }
                        Ok(_) => return None,
                        Err(_) => missing = true,
                    },
                }
            }
        }
    }
    Some(cur)
}

//! A `SandboxSpec` rendered as a bubblewrap argument vector. Pure: no filesystem access, no
//! environment lookups; the same spec always gives the same argv, which the golden tests
//! compare whole. The environment is not rendered: `launch` starts bwrap itself with exactly
//! `spec.env` (so bwrap's own PID 1 shows nothing of the launcher in `/proc/1/environ`).
//!
//! # Argument order
//! bubblewrap applies its setup operations in the order they appear, and a later mount at or
//! below a path covers what an earlier one put there. The rules, in emission order:
//!
//! 1. Namespace and process flags: `--unshare-all` (or each namespace but PID when the spec
//!    shares the PID namespace), `--unshare-user --disable-userns`, `--share-net` only for
//!    `NetworkSpec::Host`, `--die-with-parent --new-session --cap-drop ALL`.
//! 2. A fresh `/proc` and a minimal `/dev`. No `/sys` at all.
//! 3. The base symlinks (`/bin -> usr/bin`, ...).
//! 4. All directory operations, sorted by path depth (component count), ties kept in the
//!    order given: bind mounts (`--ro-bind`/`--bind`), the private HOME and `/tmp` tmpfs.
//!    Parents before children means a read-only grant inside a read-write grant stays
//!    read-only, a grant inside the private HOME is visible, and HOME's tmpfs hides whatever a
//!    shallower mount showed there. When two mounts name the same path only the last one
//!    given is emitted (callers put user grants after the base and the runtime closure).
//!    Then, for `NetworkSpec::Proxied`, the egress socket bind (`egress::wiring`):
//!    `--ro-bind HOST_SOCKET /run/palisade/egress.sock`, after the directory operations so
//!    no mount can cover it.
//!    Pins (`--bind D D`) go among them, by depth: the directories inside a read-write
//!    grant on the way down to a write-protected or masked path, each made a mount point so
//!    that the server cannot rename it (EBUSY) and put a directory without the protection in
//!    its place (which the host's git, or the next launch's masks, would then read).
//! 5. The write-protect re-binds (`--ro-bind P P`) of the dangerous files found inside read-write grants and
//!    of the `denyWrite` paths (or their placeholders, see `deny_write`), and of every
//!    read-write grant below a `denyWrite` path (a deny above a grant holds, as it does
//!    under Landlock), after every mount so that no grant can make them writable again,
//!    but before the deny masks so that a deny still hides them.
//! 6. Deny masks last, after every mount, so a deny always wins over a grant, however deep
//!    the grant: a tmpfs over a denied directory, `/dev/null` over a denied file. A mask for
//!    a path that no mount shows, at or below it, is dropped (nothing to hide, and bwrap
//!    would have to create it).
//! 7. `--remount-ro /`: the sandbox's own root tmpfs becomes read-only, so the only writable
//!    places are the rw grants, HOME and `/tmp`.
//! 8. `--seccomp FD` (when a filter is given), `--chdir CWD`, `--`, the program, its args.
//!    A proxied spec runs the egress wrapper first (`/bin/sh -c SCRIPT palisade-egress
//!    SOCAT SOCKET 3128 1080 PROGRAM ARGS...`), which starts the socat bridges and then
//!    `exec`s the program. The proxy variables are in `spec.env` (see `launch`).
//!
//! The golden tests that hold these rules are in `tests` (this module's `tests.rs`).

use std::ffi::OsString;
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};

use super::spec::{Access, Mount, NetworkSpec, SandboxSpec};
use crate::egress::wiring::{self, WiringOptions};

/// How a path that must not be readable is masked; decided by `launch` from the host
/// (directory or file), so that rendering stays pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// An empty tmpfs over a directory.
    Dir(PathBuf),
    /// `/dev/null` over a file.
    File(PathBuf),
}

impl Mask {
    pub fn path(&self) -> &Path {
        match self {
            Mask::Dir(p) | Mask::File(p) => p,
        }
    }
}

/// Inputs that are not part of the spec because they exist only at launch time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Render {
    /// The inherited descriptor bwrap reads the seccomp BPF program from.
    pub seccomp_fd: Option<RawFd>,
    /// Deny masks, already classified (see `Mask`).
    pub masks: Vec<Mask>,
    /// Existing files and directories inside read-write grants that are re-bound read-only
    /// (`.git/hooks`, `.git/config`, shell rc files: see `write_protect`; and the `denyWrite`
    /// paths: see `deny_write`), found by `launch` on the host so that rendering stays pure.
    pub write_protect: Vec<PathBuf>,
    /// Existing directories inside read-write grants on the way to a write-protected or
    /// masked path (see `pins_for`), found by `launch`: bound onto themselves, rw.
    pub pinned: Vec<PathBuf>,
}

/// The directories strictly between the deepest mount showing each of `paths` (other than a
/// mount at the path itself: a read-only grant nested in a read-write one is guarded too)
/// and the path, where that mount is read-write: what `Render::pinned` should hold once
/// `launch` has kept only those that exist as real directories. Pure.
pub fn pins_for<'a>(mounts: &[Mount], paths: impl IntoIterator<Item = &'a Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        let Some(m) = mounts
            .iter()
            .filter(|m| p.starts_with(&m.path) && m.path != p)
            .max_by_key(|m| depth(&m.path))
        else {
            continue;
        };
        if m.access != Access::Rw {
            continue;
        }
        out.extend(
            p.ancestors()
                .skip(1)
                .take_while(|a| *a != m.path && a.starts_with(&m.path))
                .map(Path::to_path_buf),
        );
    }
    out.sort_by(|x, y| depth(x).cmp(&depth(y)).then(x.cmp(y)));
    out.dedup();
    out
}

/// One step of the depth-sorted mount sequence.
enum DirOp<'a> {
    Bind(&'a Mount),
    Tmpfs(&'a Path),
    /// A directory inside a read-write grant bound onto itself (`Render::pinned`): sorted
    /// with the grants, so that a grant deeper inside it still comes after it.
    Pin(&'a Path),
}

impl DirOp<'_> {
    fn path(&self) -> &Path {
        match self {
            DirOp::Bind(m) => &m.path,
            DirOp::Tmpfs(p) | DirOp::Pin(p) => p,
        }
    }
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

/// True when the deepest mount showing `path` is read-write (a pin anywhere else would
/// make writable what a grant shows read-only).
fn shown_read_write(mounts: &[Mount], path: &Path) -> bool {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.path))
        .max_by_key(|m| depth(&m.path))
        .is_some_and(|m| m.access == Access::Rw)
}

/// True when some mount shows `path` (the mount is `path` or one of its ancestors).
fn covered(mounts: &[Mount], path: &Path) -> bool {
    mounts.iter().any(|m| path.starts_with(&m.path))
}

/// Renders `spec` as bwrap arguments (everything after the `bwrap` program name).
pub fn render(spec: &SandboxSpec, extra: &Render) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));

    // 1. namespaces and process hygiene
    if spec.share_pid {
        push(&[
            "--unshare-user-try",
            "--unshare-ipc",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]);
    } else {
        push(&["--unshare-all"]);
    }
    push(&["--unshare-user", "--disable-userns"]);
    if spec.network == NetworkSpec::Host {
        push(&["--share-net"]);
    }
    push(&["--die-with-parent", "--new-session", "--cap-drop", "ALL"]);

    // 2. fresh /proc and /dev
    push(&["--proc", "/proc", "--dev", "/dev"]);

    // 3. base symlinks
    for l in &spec.links {
        a.push("--symlink".into());
        a.push(l.target.clone().into());
        a.push(l.path.clone().into());
    }

    // 4. directory operations, parents first; the last mount given for a path wins.
    let mut mounts: Vec<Mount> = Vec::new();
    for m in &spec.mounts {
        mounts.retain(|x| x.path != m.path);
        mounts.push(m.clone());
    }
    let mut ops: Vec<DirOp> = mounts.iter().map(DirOp::Bind).collect();
    let tmp = Path::new("/tmp");
    if !covered(&mounts, &spec.home) {
        ops.push(DirOp::Tmpfs(&spec.home));
    }
    if !covered(&mounts, tmp) && spec.home != tmp {
        ops.push(DirOp::Tmpfs(tmp));
    }
    // A pin is only ever inside a read-write grant, below its deepest mount (`pins_for`);
    // one a mount also names would be that mount.
    let mut pins: Vec<&Path> = extra
        .pinned
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| !mounts.iter().any(|m| m.path == *p))
        .filter(|p| shown_read_write(&mounts, p))
        .collect();
    pins.sort();
    pins.dedup();
    ops.extend(pins.into_iter().map(DirOp::Pin));
    ops.sort_by_key(|op| depth(op.path()));
    for op in &ops {
        match op {
            DirOp::Bind(m) => {
                let flag = match m.access {
                    Access::Ro => "--ro-bind",
                    Access::Rw => "--bind",
                };
                a.push(flag.into());
                a.push(m.path.clone().into());
                a.push(m.path.clone().into());
            }
            DirOp::Tmpfs(p) => {
                a.push("--tmpfs".into());
                a.push(p.to_path_buf().into());
            }
            DirOp::Pin(p) => {
                a.push("--bind".into());
                a.push(p.to_path_buf().into());
                a.push(p.to_path_buf().into());
            }
        }
    }

    let egress = WiringOptions::from_spec(&spec.network).map(|o| wiring::wiring(&o));
    if let Some(w) = &egress {
        a.extend(w.bwrap_args.iter().cloned());
    }

    // 5. write-protect re-binds of dangerous files inside read-write grants. Only paths a
    // read-write mount shows: elsewhere they are read-only or invisible already.
    let mut protect: Vec<&PathBuf> = extra
        .write_protect
        .iter()
        .filter(|p| shown_read_write(&mounts, p))
        .collect();
    // A read-write grant below a protected path is held read-only too.
    protect.extend(mounts.iter().filter_map(|m| {
        let below = extra
            .write_protect
            .iter()
            .any(|p| m.path.starts_with(p) && m.path != *p);
        (m.access == Access::Rw && below).then_some(&m.path)
    }));
    // By depth (a denied directory before protected files inside it), then by path so
    // that a path listed twice (dangerous file and denyWrite) is emitted once.
    protect.sort_by(|x, y| depth(x).cmp(&depth(y)).then(x.cmp(y)));
    protect.dedup();
    for p in protect {
        a.push("--ro-bind".into());
        a.push(p.clone().into());
        a.push(p.clone().into());
    }

    // 6. deny masks, after every mount. A mask is needed where a mount shows the path, or
    // shows something below it (a grant inside a denied directory: the deny still wins;
    // the bwrap_argv fuzz target found grants below an unmounted deny left visible).
    let mut masks: Vec<&Mask> = extra
        .masks
        .iter()
        .filter(|m| {
            covered(&mounts, m.path()) || mounts.iter().any(|x| x.path.starts_with(m.path()))
        })
        .collect();
    masks.sort_by_key(|m| depth(m.path()));
    for m in masks {
        match m {
            Mask::Dir(p) => {
                a.push("--tmpfs".into());
                a.push(p.clone().into());
                // The mask must not become a writable place inside a read-only grant.
                a.push("--remount-ro".into());
                a.push(p.clone().into());
            }
            Mask::File(p) => {
                a.push("--ro-bind".into());
                a.push("/dev/null".into());
                a.push(p.clone().into());
            }
        }
    }

    // 7. the sandbox root itself is read-only
    a.push("--remount-ro".into());
    a.push("/".into());

    // 8. seccomp, cwd, command
    if let Some(fd) = extra.seccomp_fd {
        a.push("--seccomp".into());
        a.push(fd.to_string().into());
    }
    a.push("--chdir".into());
    a.push(spec.cwd.clone().into());
    a.push("--".into());
    if let Some(w) = &egress {
        a.extend(w.wrapper_prefix.iter().cloned());
    }
    a.push(spec.program.clone().into());
    a.extend(spec.args.iter().map(OsString::from));
    a
}

#[cfg(test)]
mod tests;

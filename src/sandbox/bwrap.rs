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
//! 5. Write-protect re-binds (`--ro-bind P P`) of the dangerous files found inside read-write
//!    grants and of the `denyWrite` paths (or their placeholders, see `deny_write`), after
//!    every mount so that no grant can make them writable again, but before the deny masks
//!    so that a deny still hides them.
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
    fn path(&self) -> &Path {
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
}

/// One step of the depth-sorted mount sequence.
enum DirOp<'a> {
    Bind(&'a Mount),
    Tmpfs(&'a Path),
}

impl DirOp<'_> {
    fn path(&self) -> &Path {
        match self {
            DirOp::Bind(m) => &m.path,
            DirOp::Tmpfs(p) => p,
        }
    }
}

fn depth(p: &Path) -> usize {
    p.components().count()
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
        .filter(|p| {
            mounts
                .iter()
                .filter(|m| p.starts_with(&m.path))
                .max_by_key(|m| depth(&m.path))
                .is_some_and(|m| m.access == Access::Rw)
        })
        .collect();
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
mod tests {
    use super::*;
    use crate::sandbox::spec::{MountOrigin, ResourceLimits, Symlink};
    use std::collections::BTreeMap;

    fn m(path: &str, access: Access, origin: MountOrigin) -> Mount {
        Mount {
            path: path.into(),
            access,
            origin,
        }
    }

    fn spec() -> SandboxSpec {
        SandboxSpec {
            program: "/usr/bin/node".into(),
            args: vec!["server.js".into(), "--flag".into()],
            env: BTreeMap::new(),
            cwd: "/work/proj".into(),
            mounts: vec![
                m("/usr", Access::Ro, MountOrigin::SystemBase),
                m("/etc/passwd", Access::Ro, MountOrigin::SystemBase),
                m("/work/proj", Access::Rw, MountOrigin::Root),
            ],
            links: vec![Symlink {
                path: "/bin".into(),
                target: "usr/bin".into(),
            }],
            deny: vec![],
            home: "/home/u".into(),
            network: NetworkSpec::None,
            limits: ResourceLimits::default(),
            share_pid: false,
            seccomp: true,
        }
    }

    fn strings(v: &[OsString]) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn golden_default_spec() {
        let got = render(
            &spec(),
            &Render {
                seccomp_fd: Some(7),
                masks: vec![],
                write_protect: vec![],
            },
        );
        let want = [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--symlink",
            "usr/bin",
            "/bin",
            "--ro-bind",
            "/usr",
            "/usr",
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            "/etc/passwd",
            "/etc/passwd",
            "--bind",
            "/work/proj",
            "/work/proj",
            "--tmpfs",
            "/home/u",
            "--remount-ro",
            "/",
            "--seccomp",
            "7",
            "--chdir",
            "/work/proj",
            "--",
            "/usr/bin/node",
            "server.js",
            "--flag",
        ];
        assert_eq!(strings(&got), want);
    }

    #[test]
    fn golden_proxied_network_binds_the_socket_and_wraps_the_command() {
        let mut s = spec();
        s.network = NetworkSpec::Proxied {
            socket: "/tmp/palisade-egress-x/0-fetch.sock".into(),
            http_port: 3128,
            socks_port: 1080,
            socat: "/usr/bin/socat".into(),
        };
        s.mounts.truncate(1);
        s.links.clear();
        let got = strings(&render(&s, &Render::default()));
        let script = crate::egress::wiring::wiring(&WiringOptions::new("/s", "/usr/bin/socat"))
            .wrapper_prefix[2]
            .to_string_lossy()
            .into_owned();
        let want = [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--ro-bind",
            "/usr",
            "/usr",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/home/u",
            "--ro-bind",
            "/tmp/palisade-egress-x/0-fetch.sock",
            "/run/palisade/egress.sock",
            "--remount-ro",
            "/",
            "--chdir",
            "/work/proj",
            "--",
            "/bin/sh",
            "-c",
            &script,
            "palisade-egress",
            "/usr/bin/socat",
            "/run/palisade/egress.sock",
            "3128",
            "1080",
            "/usr/bin/node",
            "server.js",
            "--flag",
        ];
        assert_eq!(got, want);
        // No --share-net: the proxied sandbox keeps its own empty network namespace.
        assert!(!got.iter().any(|a| a == "--share-net"));
    }

    #[test]
    fn golden_host_network_shared_pid_no_seccomp() {
        let mut s = spec();
        s.network = NetworkSpec::Host;
        s.share_pid = true;
        s.mounts.truncate(1);
        s.links.clear();
        s.args.clear();
        s.cwd = "/home/u".into();
        let got = render(&s, &Render::default());
        let want = [
            "--unshare-user-try",
            "--unshare-ipc",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--unshare-user",
            "--disable-userns",
            "--share-net",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--ro-bind",
            "/usr",
            "/usr",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/home/u",
            "--remount-ro",
            "/",
            "--chdir",
            "/home/u",
            "--",
            "/usr/bin/node",
        ];
        assert_eq!(strings(&got), want);
    }

    #[test]
    fn ro_child_inside_rw_parent_comes_after_it_even_when_given_first() {
        let mut s = spec();
        s.mounts = vec![
            m("/data/ro/deeper", Access::Ro, MountOrigin::Root),
            m("/data", Access::Rw, MountOrigin::Root),
        ];
        let args = strings(&render(&s, &Render::default()));
        let rw = args.iter().position(|x| x == "/data").unwrap();
        let ro = args.iter().position(|x| x == "/data/ro/deeper").unwrap();
        assert!(rw < ro, "{args:?}");
        assert_eq!(args[ro - 1], "--ro-bind");
    }

    #[test]
    fn grant_inside_home_is_mounted_after_the_home_tmpfs() {
        let mut s = spec();
        s.mounts = vec![m("/home/u/project", Access::Rw, MountOrigin::Root)];
        let args = strings(&render(&s, &Render::default()));
        let home = args.iter().position(|x| x == "/home/u").unwrap();
        let proj = args.iter().position(|x| x == "/home/u/project").unwrap();
        assert_eq!(args[home - 1], "--tmpfs");
        assert!(home < proj, "{args:?}");
    }

    #[test]
    fn a_mount_covering_home_or_tmp_replaces_their_tmpfs() {
        let mut s = spec();
        s.mounts = vec![
            m("/home/u", Access::Rw, MountOrigin::Root),
            m("/tmp", Access::Rw, MountOrigin::Root),
        ];
        let args = strings(&render(&s, &Render::default()));
        assert!(!args.iter().any(|x| x == "--tmpfs"), "{args:?}");
    }

    #[test]
    fn same_path_keeps_the_last_mount_given() {
        let mut s = spec();
        s.mounts = vec![
            m("/opt/tool", Access::Ro, MountOrigin::Runtime),
            m("/opt/tool", Access::Rw, MountOrigin::Root),
        ];
        let args = strings(&render(&s, &Render::default()));
        assert_eq!(args.iter().filter(|x| *x == "/opt/tool").count(), 2);
        let i = args.iter().position(|x| x == "/opt/tool").unwrap();
        assert_eq!(args[i - 1], "--bind");
    }

    #[test]
    fn masks_come_after_all_mounts_and_win_over_deeper_grants() {
        let mut s = spec();
        s.mounts = vec![
            m("/w", Access::Rw, MountOrigin::Root),
            m("/w/secret/inner", Access::Rw, MountOrigin::Root),
        ];
        let r = Render {
            seccomp_fd: None,
            masks: vec![
                Mask::Dir("/w/secret".into()),
                Mask::File("/w/.env".into()),
                Mask::File("/not/mounted".into()),
            ],
            write_protect: vec![],
        };
        let args = strings(&render(&s, &r));
        let inner = args.iter().position(|x| x == "/w/secret/inner").unwrap();
        let mask = args.iter().position(|x| x == "/w/secret").unwrap();
        assert!(inner < mask);
        assert_eq!(args[mask - 1], "--tmpfs");
        assert_eq!(args[mask + 1], "--remount-ro");
        let f = args.iter().position(|x| x == "/w/.env").unwrap();
        assert_eq!(&args[f - 2..f], ["--ro-bind", "/dev/null"]);
        assert!(!args.iter().any(|x| x == "/not/mounted"), "{args:?}");
    }

    #[test]
    fn a_non_utf8_socket_path_is_bound_byte_for_byte() {
        // Found by the bwrap_argv fuzz target: the egress wiring turned paths into text
        // lossily, so bwrap would have bound another host path than the spec's.
        use std::os::unix::ffi::OsStringExt;
        let socket = PathBuf::from(OsString::from_vec(b"/run/p/\xff\xfe.sock".to_vec()));
        let socat = PathBuf::from(OsString::from_vec(b"/opt/\xff/socat".to_vec()));
        let mut s = spec();
        s.network = NetworkSpec::Proxied {
            socket: socket.clone(),
            http_port: 3128,
            socks_port: 1080,
            socat: socat.clone(),
        };
        let args = render(&s, &Render::default());
        assert!(args.windows(3).any(|w| w[0] == "--ro-bind"
            && w[1] == socket.as_os_str()
            && w[2] == "/run/palisade/egress.sock"));
        assert!(args.iter().any(|a| a == socat.as_os_str()));
    }

    #[test]
    fn a_deny_above_every_mount_still_hides_the_grants_below_it() {
        // Found by the bwrap_argv fuzz target: /w/secret is denied, no mount shows /w/secret
        // itself, but a grant inside it does; the mask must still come, after the grant.
        let mut s = spec();
        s.mounts = vec![m("/w/secret/inner", Access::Rw, MountOrigin::Root)];
        let r = Render {
            masks: vec![Mask::Dir("/w/secret".into())],
            ..Render::default()
        };
        let args = strings(&render(&s, &r));
        let inner = args.iter().position(|x| x == "/w/secret/inner").unwrap();
        let mask = args
            .windows(2)
            .position(|w| w[0] == "--tmpfs" && w[1] == "/w/secret")
            .unwrap_or_else(|| panic!("no mask over /w/secret: {args:?}"));
        assert!(inner < mask, "{args:?}");
    }

    #[test]
    fn write_protected_paths_are_rebound_read_only_only_inside_rw_grants() {
        let mut s = spec();
        s.mounts = vec![
            m("/w", Access::Rw, MountOrigin::Root),
            m("/w/ro", Access::Ro, MountOrigin::Root),
            m("/w/deep/rw", Access::Rw, MountOrigin::Root),
        ];
        let r = Render {
            seccomp_fd: None,
            masks: vec![Mask::Dir("/w/.git/hooks".into())],
            write_protect: vec![
                "/w/.git/hooks".into(),
                "/w/.bashrc".into(),
                "/w/ro/.bashrc".into(),
                "/w/deep/rw/.git/config".into(),
                "/elsewhere/.bashrc".into(),
            ],
        };
        let args = strings(&render(&s, &r));
        let rebind = |p: &str| {
            args.windows(3)
                .position(|w| w[0] == "--ro-bind" && w[1] == p && w[2] == p)
        };
        let deepest_grant = args.iter().rposition(|x| x == "/w/deep/rw").unwrap();
        for p in ["/w/.bashrc", "/w/deep/rw/.git/config", "/w/.git/hooks"] {
            let at = rebind(p).unwrap_or_else(|| panic!("{p} not re-bound: {args:?}"));
            assert!(at > deepest_grant, "{p} must come after every grant");
        }
        // Already read-only, or not visible at all: nothing to protect.
        assert!(rebind("/w/ro/.bashrc").is_none(), "{args:?}");
        assert!(!args.iter().any(|x| x == "/elsewhere/.bashrc"), "{args:?}");
        // A deny mask over the same path still wins (it comes later).
        let mask = args
            .windows(2)
            .position(|w| w[0] == "--tmpfs" && w[1] == "/w/.git/hooks")
            .unwrap();
        assert!(mask > rebind("/w/.git/hooks").unwrap());
    }

    #[test]
    fn golden_deny_write_rebinds_read_only_after_every_grant() {
        let mut s = spec();
        s.links.clear();
        s.mounts = vec![
            m("/usr", Access::Ro, MountOrigin::SystemBase),
            m("/work/proj", Access::Rw, MountOrigin::Root),
            m("/work/proj/out/cache", Access::Rw, MountOrigin::Root),
        ];
        s.args.clear();
        // What `launch` hands over for denyWrite [/work/proj/out, /work/proj/.env] (the
        // latter a placeholder it created) plus a dangerous file that is also denied.
        let r = Render {
            seccomp_fd: None,
            masks: vec![],
            write_protect: vec![
                "/work/proj/.env".into(),
                "/work/proj/out".into(),
                "/work/proj/.bashrc".into(),
                "/work/proj/.env".into(),
            ],
        };
        let got = strings(&render(&s, &r));
        let want = [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--ro-bind",
            "/usr",
            "/usr",
            "--tmpfs",
            "/tmp",
            "--bind",
            "/work/proj",
            "/work/proj",
            "--tmpfs",
            "/home/u",
            "--bind",
            "/work/proj/out/cache",
            "/work/proj/out/cache",
            "--ro-bind",
            "/work/proj/.bashrc",
            "/work/proj/.bashrc",
            "--ro-bind",
            "/work/proj/.env",
            "/work/proj/.env",
            "--ro-bind",
            "/work/proj/out",
            "/work/proj/out",
            "--remount-ro",
            "/",
            "--chdir",
            "/work/proj",
            "--",
            "/usr/bin/node",
        ];
        assert_eq!(got, want);
    }
}

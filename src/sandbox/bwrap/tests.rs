//! The golden argv tests of `render`: whole argument vectors compared with the expected ones,
//! mount ordering and masking included. Apart from the renderer so the rules read on their
//! own. Pure: no sandbox is started.

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
            pinned: vec![],
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
        pinned: vec![],
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
        pinned: vec![],
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
        pinned: vec![],
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
        // The read-write grant below the denied directory is held read-only too.
        "--ro-bind",
        "/work/proj/out/cache",
        "/work/proj/out/cache",
        "--remount-ro",
        "/",
        "--chdir",
        "/work/proj",
        "--",
        "/usr/bin/node",
    ];
    assert_eq!(got, want);
}

// Adversarial review of stop 43: a protected or masked path deeper than its read-write grant
// could be moved away with a directory above it (`mv .git .git-old`, then a fresh `.git` with
// hooks the host runs). Every directory between the grant and the path is pinned (bound
// onto itself: a mount point cannot be renamed), among the grants by depth, before the
// re-binds.
#[test]
fn directories_on_the_way_to_a_protected_path_are_pinned_among_the_grants() {
    let mounts = vec![
        m("/w", Access::Rw, MountOrigin::Root),
        m("/w/ro", Access::Ro, MountOrigin::Root),
        m("/w/a/b/ro", Access::Ro, MountOrigin::Root),
    ];
    let pins = pins_for(
        &mounts,
        [
            Path::new("/w/.git/hooks"),
            Path::new("/w/.git/config"),
            Path::new("/w/a/b/secret"),
            Path::new("/w/.bashrc"),
            Path::new("/w/ro/x/.bashrc"),
            Path::new("/elsewhere/a/b"),
            // A read-only grant nested in the read-write one: its own mount is not counted.
            Path::new("/w/a/b/ro"),
            Path::new("/w/ro"),
        ],
    );
    let want: Vec<PathBuf> = ["/w/.git", "/w/a", "/w/a/b"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(pins, want);
    let mut s = spec();
    s.mounts = mounts;
    let r = Render {
        seccomp_fd: None,
        masks: vec![Mask::Dir("/w/a/b/secret".into())],
        write_protect: vec!["/w/.git/hooks".into()],
        pinned: pins,
    };
    let args = strings(&render(&s, &r));
    let at = |flag: &str, p: &str| {
        args.windows(3)
            .position(|w| w[0] == flag && w[1] == p && w[2] == p)
            .unwrap_or_else(|| panic!("{flag} {p} missing: {args:?}"))
    };
    assert!(at("--bind", "/w/.git") > at("--bind", "/w"), "{args:?}");
    assert!(at("--bind", "/w/a/b") > at("--bind", "/w/a"), "{args:?}");
    assert!(
        at("--ro-bind", "/w/.git/hooks") > at("--bind", "/w/.git"),
        "{args:?}"
    );
    // A read-only grant inside a pinned directory comes after the pin, which would
    // otherwise show the host's directory read-write over it.
    assert!(
        at("--ro-bind", "/w/a/b/ro") > at("--bind", "/w/a/b"),
        "{args:?}"
    );
    // A pin where no read-write grant is deepest is never emitted.
    let r = Render {
        pinned: vec!["/w/ro/x".into(), "/elsewhere".into()],
        ..r
    };
    let args = strings(&render(&s, &r));
    assert!(
        !args.iter().any(|x| x == "/w/ro/x" || x == "/elsewhere"),
        "{args:?}"
    );
}

// Adversarial review of stop 43: `denyWrite w` with a read-write grant of `w/sub` and no
// grant of `w` itself left `w/sub` writable under bwrap (Landlock refused the write).
#[test]
fn a_read_write_grant_below_a_denied_path_is_held_read_only() {
    let mut s = spec();
    s.mounts = vec![m("/w/sub", Access::Rw, MountOrigin::Root)];
    let r = Render {
        seccomp_fd: None,
        masks: vec![],
        write_protect: vec!["/w".into()],
        pinned: vec![],
    };
    let args = strings(&render(&s, &r));
    let grant = args
        .windows(3)
        .position(|w| w[0] == "--bind" && w[1] == "/w/sub")
        .unwrap();
    let held = args
        .windows(3)
        .position(|w| w[0] == "--ro-bind" && w[1] == "/w/sub" && w[2] == "/w/sub")
        .unwrap_or_else(|| panic!("not held read-only: {args:?}"));
    assert!(held > grant);
}

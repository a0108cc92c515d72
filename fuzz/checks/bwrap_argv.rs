//! The bwrap argv builder (src/sandbox/bwrap/, `render`) against a model of what
//! bubblewrap does with the argv.
//!
//! Input: a spec decoded from bytes. Paths are absolute and normal (the spec's contract),
//! built from a small alphabet so that they nest and collide often, with option-like,
//! control and non-UTF-8 names mixed in. Grants (read-only or read-write mounts, in any
//! order, repeated), deny masks (directory or file), write-protected paths, HOME, cwd, the
//! network (none, host, proxied with any socket and socat path), a shared PID namespace and
//! the seccomp descriptor are all chosen by the fuzzer.
//!
//! Invariants:
//! 1. Read the way bubblewrap reads it (each option takes a fixed number of values, whatever
//!    they look like), the argv before `--` holds only known options; after `--` comes
//!    exactly the egress wrapper (proxied only), the program and its arguments.
//! 2. Isolation is never dropped: every namespace is unshared (`--unshare-all`, or each one
//!    but PID when the spec shares it), `--unshare-user --disable-userns --die-with-parent
//!    --new-session --cap-drop ALL` are there, `--share-net` appears iff the spec's network
//!    is `Host`, and the last mount-table operation is `--remount-ro /`.
//! 3. Model: replaying the mount operations in order (a later mount at or above a path hides
//!    what was there; `--remount-ro` makes the topmost mount at that path read-only), for
//!    every path the spec names and a child of each:
//!    a. every host path visible in the sandbox is shown by a mount of the spec (or is
//!    `/dev/null` of a file mask, or the egress socket at its fixed place) and is not
//!    under a deny path;
//!    b. every host path writable in the sandbox is one the spec grants read-write: its
//!    deepest mount (the last given for a path) is read-write, it is not under a deny path,
//!    and not under a write-protected path inside a read-write grant.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use palisade::egress::wiring::SANDBOX_SOCKET;
use palisade::sandbox::bwrap::{pins_for, render, Mask, Render};
use palisade::sandbox::{
    Access, Mount, MountOrigin, NetworkSpec, ResourceLimits, SandboxSpec, Symlink,
};

use super::Input;

const COMPONENTS: &[&[u8]] = &[
    b"a",
    b"b",
    b"home",
    b"tmp",
    b"u",
    b"run",
    b"palisade",
    b"egress.sock",
    b".git",
    b"--bind",
    b"-",
    b"...",
    b"a b",
    b"x\ny",
    b"\xff\xfe",
];

fn path(inp: &mut Input<'_>) -> PathBuf {
    let n = inp.below(4);
    let mut bytes = Vec::new();
    for _ in 0..n {
        bytes.push(b'/');
        bytes.extend_from_slice(inp.pick(COMPONENTS));
    }
    if bytes.is_empty() {
        bytes.push(b'/');
    }
    PathBuf::from(OsString::from_vec(bytes))
}

/// Decodes a spec and the launch-time inputs.
pub fn decode(data: &[u8]) -> (SandboxSpec, Render) {
    let mut inp = Input::new(data);
    let flags = inp.byte();
    let mounts = (0..inp.below(8))
        .map(|_| Mount {
            path: path(&mut inp),
            access: if inp.bool() { Access::Rw } else { Access::Ro },
            origin: MountOrigin::Root,
        })
        .collect();
    let masks = (0..inp.below(4))
        .map(|_| {
            if inp.bool() {
                Mask::Dir(path(&mut inp))
            } else {
                Mask::File(path(&mut inp))
            }
        })
        .collect::<Vec<_>>();
    let write_protect: Vec<PathBuf> = (0..inp.below(4)).map(|_| path(&mut inp)).collect();
    let home = if flags & 1 == 0 {
        PathBuf::from("/home/u")
    } else {
        path(&mut inp)
    };
    let cwd = path(&mut inp);
    let network = match inp.below(3) {
        0 => NetworkSpec::None,
        1 => NetworkSpec::Host,
        _ => NetworkSpec::Proxied {
            socket: path(&mut inp),
            http_port: 3128,
            socks_port: 1080,
            socat: path(&mut inp),
        },
    };
    let args = (0..inp.below(4))
        .map(|_| String::from_utf8_lossy(inp.bytes(8)).into_owned())
        .collect();
    let spec = SandboxSpec {
        program: path(&mut inp),
        args,
        env: BTreeMap::new(),
        cwd,
        mounts,
        links: vec![Symlink {
            path: "/bin".into(),
            target: "usr/bin".into(),
        }],
        deny: masks.iter().map(|m| mask_path(m).to_path_buf()).collect(),
        home,
        network,
        limits: ResourceLimits::default(),
        share_pid: flags & 2 != 0,
        seccomp: flags & 4 != 0,
    };
    // The pins `launch` would find for these paths (all of them, as if each existed).
    let guarded: Vec<PathBuf> = write_protect
        .iter()
        .cloned()
        .chain(masks.iter().map(|m| mask_path(m).to_path_buf()))
        .collect();
    let pinned = pins_for(&spec.mounts, guarded.iter().map(PathBuf::as_path));
    let render = Render {
        seccomp_fd: (flags & 4 != 0).then_some(3 + i32::from(flags >> 4)),
        masks,
        write_protect,
        pinned,
    };
    (spec, render)
}

fn mask_path(m: &Mask) -> &Path {
    match m {
        Mask::Dir(p) | Mask::File(p) => p,
    }
}

/// Values each option takes, as bubblewrap parses them.
fn arity(flag: &[u8]) -> Option<usize> {
    Some(match flag {
        b"--unshare-all"
        | b"--unshare-user"
        | b"--unshare-user-try"
        | b"--unshare-ipc"
        | b"--unshare-net"
        | b"--unshare-uts"
        | b"--unshare-cgroup-try"
        | b"--share-net"
        | b"--disable-userns"
        | b"--die-with-parent"
        | b"--new-session" => 0,
        b"--cap-drop" | b"--proc" | b"--dev" | b"--tmpfs" | b"--remount-ro" | b"--seccomp"
        | b"--chdir" => 1,
        b"--symlink" | b"--ro-bind" | b"--bind" => 2,
        _ => return None,
    })
}

/// One mount in the modelled sandbox mount table.
struct Layer {
    dest: PathBuf,
    /// Host directory shown there; `None` for a private tmpfs, /proc or /dev.
    src: Option<PathBuf>,
    writable: bool,
}

pub fn run(data: &[u8]) {
    let (spec, extra) = decode(data);
    let argv = render(&spec, &extra);
    check(&spec, &extra, &argv);
}

pub fn check(spec: &SandboxSpec, extra: &Render, argv: &[OsString]) {
    let b = |a: &OsString| a.as_bytes().to_vec();
    // 1. options and their values
    let mut i = 0;
    let mut flags: Vec<&[u8]> = Vec::new();
    let mut table = vec![Layer {
        dest: "/".into(),
        src: None,
        writable: true,
    }];
    let mut last_table_op = Vec::new();
    loop {
        assert!(i < argv.len(), "no `--` in {argv:?}");
        let flag = argv[i].as_bytes();
        if flag == b"--" {
            break;
        }
        let n =
            arity(flag).unwrap_or_else(|| panic!("unknown option {:?} at {i}: {argv:?}", argv[i]));
        assert!(
            i + n < argv.len(),
            "option {:?} without its values",
            argv[i]
        );
        let v = |k: usize| PathBuf::from(argv[i + k].clone());
        match flag {
            b"--bind" | b"--ro-bind" => {
                table.push(Layer {
                    dest: v(2),
                    src: Some(v(1)),
                    writable: flag == b"--bind",
                });
                last_table_op = b(&argv[i]);
            }
            b"--tmpfs" | b"--proc" | b"--dev" => {
                table.push(Layer {
                    dest: v(1),
                    src: None,
                    writable: true,
                });
                last_table_op = b(&argv[i]);
            }
            b"--remount-ro" => {
                let dest = v(1);
                let top = table
                    .iter_mut()
                    .rev()
                    .find(|l| l.dest == dest)
                    .unwrap_or_else(|| panic!("--remount-ro {dest:?} is not a mount point"));
                top.writable = false;
                last_table_op = [b(&argv[i]), b"=".to_vec(), b(&argv[i + 1])].concat();
            }
            _ => {}
        }
        flags.push(flag);
        i += 1 + n;
    }
    let tail: Vec<&OsStr> = argv[i + 1..].iter().map(OsString::as_os_str).collect();

    // 2. isolation
    let has = |f: &[u8]| flags.contains(&f);
    if spec.share_pid {
        for f in [
            &b"--unshare-user-try"[..],
            b"--unshare-ipc",
            b"--unshare-net",
            b"--unshare-uts",
            b"--unshare-cgroup-try",
        ] {
            assert!(has(f), "shared-PID spec without {:?}", OsStr::from_bytes(f));
        }
    } else {
        assert!(has(b"--unshare-all"), "no --unshare-all: {argv:?}");
    }
    for f in [
        &b"--unshare-user"[..],
        b"--disable-userns",
        b"--die-with-parent",
        b"--new-session",
    ] {
        assert!(has(f), "no {:?}: {argv:?}", OsStr::from_bytes(f));
    }
    assert!(
        argv.windows(2)
            .any(|w| w[0] == "--cap-drop" && w[1] == "ALL"),
        "capabilities kept: {argv:?}"
    );
    assert_eq!(
        has(b"--share-net"),
        spec.network == NetworkSpec::Host,
        "--share-net does not follow the spec's network: {argv:?}"
    );
    assert_eq!(
        last_table_op,
        b"--remount-ro=/".to_vec(),
        "the root is left writable"
    );

    // 1 (tail). the command
    let mut want: Vec<&OsStr> = Vec::new();
    let wiring = palisade::egress::wiring::WiringOptions::from_spec(&spec.network)
        .map(|o| palisade::egress::wiring::wiring(&o));
    if let Some(w) = &wiring {
        want.extend(w.wrapper_prefix.iter().map(OsStr::new));
    }
    want.push(spec.program.as_os_str());
    want.extend(spec.args.iter().map(OsStr::new));
    assert_eq!(tail, want, "the command after `--` is not the spec's");

    // 3. model
    let socket = match &spec.network {
        NetworkSpec::Proxied { socket, .. } => Some(socket.clone()),
        _ => None,
    };
    let mut effective: Vec<&Mount> = Vec::new();
    for m in &spec.mounts {
        effective.retain(|x| x.path != m.path);
        effective.push(m);
    }
    let deepest = |h: &Path| {
        effective
            .iter()
            .filter(|m| h.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
            .copied()
    };
    let denied = |h: &Path| spec.deny.iter().any(|d| h.starts_with(d));
    let protected = |h: &Path| {
        extra
            .write_protect
            .iter()
            .any(|p| h.starts_with(p) && deepest(p).is_some_and(|m| m.access == Access::Rw))
    };
    let mut probes: Vec<PathBuf> = vec!["/".into()];
    probes.extend(spec.mounts.iter().map(|m| m.path.clone()));
    probes.extend(spec.deny.iter().cloned());
    probes.extend(extra.write_protect.iter().cloned());
    probes.extend([
        spec.home.clone(),
        spec.cwd.clone(),
        SANDBOX_SOCKET.into(),
        "/tmp".into(),
    ]);
    let children: Vec<PathBuf> = probes.iter().map(|p| p.join("zz")).collect();
    probes.extend(children);
    for p in &probes {
        let Some(layer) = table.iter().rev().find(|l| p.starts_with(&l.dest)) else {
            continue;
        };
        let Some(src) = &layer.src else { continue };
        let rel = p.strip_prefix(&layer.dest).expect("covering layer");
        let host = if rel.as_os_str().is_empty() {
            src.clone()
        } else {
            src.join(rel)
        };
        let special = host.starts_with("/dev/null")
            || (socket.as_ref() == Some(src) && layer.dest == Path::new(SANDBOX_SOCKET));
        if !special {
            assert!(
                deepest(&host).is_some(),
                "{p:?} shows host {host:?}, which no mount of the spec shows: {argv:?}"
            );
            assert!(!denied(&host), "{p:?} shows denied host {host:?}: {argv:?}");
        }
        if layer.writable {
            assert!(!special, "{p:?}: {host:?} is writable: {argv:?}");
            assert!(
                deepest(&host).is_some_and(|m| m.access == Access::Rw),
                "{p:?}: host {host:?} is writable, the spec grants it read-only: {argv:?}"
            );
            assert!(
                !protected(&host),
                "{p:?}: write-protected {host:?} is writable: {argv:?}"
            );
        }
    }
}

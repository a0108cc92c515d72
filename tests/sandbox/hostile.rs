//! The attack scene and its runner: a temporary host with secrets, a marker process,
//! sockets and an inherited descriptor for the hostile program (tests/attacks/hostile.py) to
//! reach for; `attack` runs it and reads its report, deciding the host-checked attacks by
//! looking at the host. `ATTACKS` describes each attack for the table in docs/security.md,
//! which `write_attack_table` keeps in step. Nothing here asserts what an attack proves.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::text;

/// Inherit `file` as descriptor 7 (without close-on-exec) in the child.
pub fn pass_fd(cmd: &mut Command, file: &std::fs::File) {
    let raw = file.as_raw_fd();
    // SAFETY: dup2 and fcntl are async-signal-safe and only act on an open descriptor.
    unsafe {
        cmd.pre_exec(move || {
            // When the file already is fd 7, dup2 does nothing and the descriptor keeps
            // the close-on-exec flag Rust opened it with: clear it, or the control run
            // sees no inherited descriptor (a flake that depended on fd numbering).
            let ok = if raw == 7 {
                libc::fcntl(7, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, 7)
            };
            if ok < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// What each attack tries, for the table in docs/security.md.
pub const ATTACKS: &[(&str, &str)] = &[
    ("read_secret", "read a planted secret outside the grants"),
    (
        "read_ssh_key",
        "read ~/.ssh/id_ed25519 of the launching user",
    ),
    ("read_etc_shadow", "read /etc/shadow"),
    (
        "write_outside_grants",
        "create a file outside the grants (checked on the host)",
    ),
    (
        "write_into_ro_grant",
        "create a file in a read-only grant (checked on the host)",
    ),
    (
        "plant_bashrc_in_home",
        "plant ~/.bashrc in the real home (checked on the host)",
    ),
    (
        "see_host_process",
        "read /proc/PID/cmdline of a host process",
    ),
    (
        "launcher_env_in_own_env",
        "find the launcher's secret env var in its own environment",
    ),
    (
        "launcher_env_via_proc_environ",
        "read the launcher's env from /proc/1/environ or the parent's",
    ),
    (
        "inherited_fd",
        "find a descriptor inherited from the launcher (fd 7 open on the secret)",
    ),
    (
        "tcp_to_host_loopback",
        "connect to a TCP listener on the host's 127.0.0.1",
    ),
    (
        "host_unix_socket",
        "connect to a unix socket on the host filesystem",
    ),
    (
        "abstract_unix_socket",
        "connect to an abstract unix socket of the host",
    ),
    (
        "create_user_namespace",
        "unshare(CLONE_NEWUSER) (the srt 0.0.78 escape)",
    ),
    ("mount_filesystem", "mount a tmpfs"),
    ("af_vsock_socket", "create an AF_VSOCK socket"),
    ("io_uring_setup", "create an io_uring"),
    ("kernel_keyring", "add a key to the kernel keyring"),
    (
        "tiocsti_injection",
        "inject input into a terminal with TIOCSTI",
    ),
    ("read_sys", "list /sys/class/net"),
];

/// Attacks that depend on what the host kernel allows: if the unsandboxed control fails,
/// the attack is reported as skipped instead of asserted.
pub const HOST_DEPENDENT: &[&str] = &[
    "create_user_namespace",
    "mount_filesystem",
    "af_vsock_socket",
    "io_uring_setup",
    "kernel_keyring",
    "tiocsti_injection",
    "read_sys",
];

/// Attacks whose success is decided by looking at the host afterwards, not by the report.
pub const HOST_CHECKED: &[(&str, &str)] = &[
    ("write_outside_grants", "outside_write"),
    ("write_into_ro_grant", "ro_write"),
    ("plant_bashrc_in_home", "bashrc"),
];

pub struct Scene {
    pub dir: tempfile::TempDir,
    pub cfg: Value,
    pub marker_proc: std::process::Child,
    _tcp: std::net::TcpListener,
    _unix: std::os::unix::net::UnixListener,
    _abstract: std::os::unix::net::UnixListener,
    pub secret_file: std::fs::File,
    pub canary: String,
}

impl Drop for Scene {
    fn drop(&mut self) {
        // The shell and its `sleep`, a process group of their own (see attacks/scene.rs).
        let pgid = nix::unistd::Pid::from_raw(self.marker_proc.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.marker_proc.wait();
    }
}

pub fn scene() -> Scene {
    use std::os::linux::net::SocketAddrExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = format!(
        "{}-{}",
        std::process::id(),
        d.file_name().unwrap().to_string_lossy()
    );
    let marker = format!("palisade-marker-{id}");
    for sub in ["home/.ssh", "outside", "ro", "work/mnt"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("outside/secret.txt"), &marker).unwrap();
    std::fs::write(d.join("home/.ssh/id_ed25519"), &marker).unwrap();
    std::fs::write(d.join("ro/readme"), "read me").unwrap();
    let marker_proc = Command::new("/bin/sh")
        .args(["-c", "sleep 600", &marker])
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = d.join("outside/host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let abstract_name = format!("palisade-test-{id}");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
    let abs = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let cfg = json!({
        "secret": d.join("outside/secret.txt"),
        "marker_reversed": marker.chars().rev().collect::<String>(),
        "ssh_key": d.join("home/.ssh/id_ed25519"),
        "outside_write": d.join("outside/pwned"),
        "ro_write": d.join("ro/pwned"),
        "bashrc": d.join("home/.bashrc"),
        "host_pid": marker_proc.id(),
        "canary": format!("canary-{id}"),
        "tcp_port": tcp.local_addr().unwrap().port(),
        "unix_socket": sock,
        "abstract_name": abstract_name,
        "mount_target": d.join("work/mnt"),
    });
    let secret_file = std::fs::File::open(d.join("outside/secret.txt")).unwrap();
    Scene {
        canary: format!("canary-{id}"),
        dir,
        cfg,
        marker_proc,
        _tcp: tcp,
        _unix: unix,
        _abstract: abs,
        secret_file,
    }
}

/// Runs the hostile program and returns its report, with host-checked attacks decided by
/// the host's filesystem (and the planted files removed again).
pub fn attack(sc: &Scene, mut cmd: Command) -> BTreeMap<String, (bool, String)> {
    pass_fd(&mut cmd, &sc.secret_file);
    let out = cmd
        .env("PALISADE_CANARY", &sc.canary)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hostile program failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let report: BTreeMap<String, Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad report ({e}): {}", text(&out.stdout)));
    let mut res: BTreeMap<String, (bool, String)> = report
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                (
                    v["ok"].as_bool().unwrap(),
                    v["detail"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect();
    for (name, key) in HOST_CHECKED {
        let path = PathBuf::from(sc.cfg[key].as_str().unwrap());
        let planted = path.exists();
        let _ = std::fs::remove_file(&path);
        let entry = res.get_mut(*name).unwrap();
        entry.1 = format!(
            "{} (host: {})",
            entry.1,
            if planted { "file planted" } else { "no file" }
        );
        entry.0 = planted;
    }
    res
}

/// Keeps the table in docs/security.md in step with what the test observed: always written
/// under target/, copied into the doc when PALISADE_UPDATE_DOCS=1.
pub fn write_attack_table(table: &str) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("attack-table.md");
    let _ = std::fs::write(&target, table);
    if std::env::var_os("PALISADE_UPDATE_DOCS").is_some() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let (start, end) = ("<!-- attack-table:start -->\n", "<!-- attack-table:end -->");
        let a = text.find(start).expect("start marker") + start.len();
        let b = text.find(end).expect("end marker");
        let new = format!("{}{}{}", &text[..a], table, &text[b..]);
        std::fs::write(&doc, new).unwrap();
    }
}

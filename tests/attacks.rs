//! The hostile MCP server (tests/attacks/hostile_server.py) behind `palisade serve` under
//! enforce, once per native tier (bubblewrap, Landlock) and once under srt where the test
//! dependencies hold it, driven by palisade's own rmcp client, and the same server launched
//! directly as the control. Every attack must succeed in the control
//! (so the suite cannot pass vacuously) and fail behind palisade; the table is printed and
//! written to target/ (and into docs/security.md with PALISADE_UPDATE_DOCS=1, see
//! scripts/security-report.sh).
//!
//! The serve table ends with the network allowlist rows (`ALLOWLIST_ATTACKS`), run by a third
//! server with an allowlist on every tier that can enforce one here, beside a positive row
//! that must reach the allowed name.
//!
//! Needs bwrap with working user namespaces and the Python venv with the `mcp` SDK
//! (PALISADE_TEST_DEPS). Attacks the host itself refuses are reported as skipped.
//!
//! scripts/container-test.sh runs the serve table inside the unprivileged container, where
//! bubblewrap cannot run: there PALISADE_ATTACK_TIERS names the tiers (`landlock`),
//! PALISADE_ATTACK_BIN the image's palisade, and PALISADE_ATTACK_TABLE where the table goes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use palisade::client::{result_text, McpClient, SpawnOptions, StderrMode};
use serde_json::{json, Value};

#[path = "egress_support/mod.rs"]
mod egress_support;
#[path = "support/skip.rs"]
mod skip;

/// Whether servers get a cgroup here, as `palisade check --json` reports it.
fn check_says_cgroup() -> bool {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--json"])
        .output()
        .expect("run palisade check");
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    report["resource_limits"]["status"] == "usable"
        && report["resource_limits"]["memory"] == true
        && report["resource_limits"]["pids"] == true
}

fn deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

fn venv_python() -> PathBuf {
    let p = deps().join("venv/bin/python");
    assert!(p.exists(), "test dependencies missing at {}", p.display());
    p
}

fn attacks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks")
}

const PLANTED: &str = "planted by hostile_server.py";

/// (tool, what it tries), in call order. `read_audit_log` comes late so that the real audit
/// log already holds records when the sandboxed server tries to read it.
const ATTACKS: &[(&str, &str)] = &[
    ("read_secret", "read a planted secret outside every root"),
    ("read_ssh_key", "read ~/.ssh/id_ed25519 of the user running palisade"),
    ("read_etc_shadow", "read /etc/shadow"),
    ("read_palisade_config", "read palisade's config file"),
    ("read_palisade_policy", "read palisade's policy file (dynamic lists)"),
    ("read_other_server_state", "read a file in another server's private writable root"),
    ("write_outside_roots", "create a file outside every root (checked on the host)"),
    ("write_into_ro_root", "create a file in a read-only root (checked on the host)"),
    ("write_audit_log", "append to palisade's audit log (checked on the host)"),
    ("write_host_tmp", "create a file in the host's /tmp (checked on the host)"),
    ("write_git_hook", "create .git/hooks/pre-commit in a writable root (checked on the host)"),
    ("write_git_config", "append to .git/config in a writable root (checked on the host)"),
    ("write_nested_git_hook", "create a git hook of a repository nested in a writable root, work/app/.git/hooks (checked on the host)"),
    ("write_bashrc_in_root", "append to .bashrc in a writable root (checked on the host)"),
    ("plant_hard_link", "hard-link the outside secret into a writable root (checked on the host)"),
    ("symlink_then_proxied_read", "plant a symlink to the secret in a shared writable root, then have another server read it through a proxied call"),
    ("hard_link_then_proxied_read", "hard-link the secret into a shared writable root, then have another server read it through a proxied call"),
    ("see_host_process", "read /proc/PID/cmdline of a host process"),
    ("own_env", "find palisade's environment (a canary variable) in its own environment"),
    ("proc_1_environ", "read the launcher's environment from /proc/1/environ or the parent's"),
    ("inherited_fd", "find a descriptor inherited from palisade (fd 7 open on the secret)"),
    ("read_sys", "list /sys/class/net"),
    ("open_block_device", "open a block device node in /dev"),
    ("tcp_to_host_loopback", "connect to a TCP listener on the host's 127.0.0.1"),
    ("tcp_external", "connect to pypi.org:443"),
    ("udp_to_host_loopback", "UDP round trip with an echo server on the host's 127.0.0.1"),
    ("dns_lookup", "resolve pypi.org"),
    ("host_unix_socket", "connect to a unix socket on the host filesystem"),
    ("abstract_unix_socket", "connect to an abstract unix socket of the host"),
    ("af_vsock_socket", "create an AF_VSOCK socket"),
    ("io_uring_setup", "create an io_uring"),
    ("create_user_namespace", "unshare(CLONE_NEWUSER) (the srt 0.0.78 escape)"),
    ("mount_filesystem", "mount a tmpfs"),
    ("pivot_root", "pivot_root into a fresh tmpfs"),
    ("ptrace_host_process", "ptrace (PTRACE_SEIZE) a host process"),
    ("sethostname", "sethostname"),
    ("tiocsti_injection", "inject terminal input with TIOCSTI"),
    ("kill_host_process", "send a signal to a host process"),
    ("kernel_keyring", "add a key to the kernel keyring"),
    ("read_audit_log", "read palisade's audit log"),
];

/// The network allowlist, tried by a third server, `allowlisted` (the same hostile program),
/// whose allowlist names only `allowed.test` on the test's loopback origin, beside the peer,
/// whose list names only `other.test` (the same origin). `egressHostsFile` maps the names to
/// 127.0.0.1. Each attack's goal is the origin answering a request that allowlist does not
/// permit; launched directly there is no proxy and the request goes straight to the origin
/// (the control: the origin answers it). `egress_allowed` is the positive row: the allowed
/// name through the proxy must work on every tier, so the rows cannot pass by everything
/// being closed. The peer hands its proxy URL (port and, under Landlock, secret) to
/// `allowlisted` through their shared writable root: a colluding pair.
const ALLOWLIST_ATTACKS: &[(&str, &str)] = &[
    ("egress_allowed", "allowlist: reach the allowed name through the proxy (positive row: must work)"),
    ("egress_direct_tcp", "allowlist: GET from the allowed origin's port on the host's 127.0.0.1 directly, not through the proxy"),
    ("egress_denied_http", "allowlist: a name not in the allowlist through the HTTP proxy"),
    ("egress_denied_socks", "allowlist: a name not in the allowlist through the SOCKS5 proxy"),
    ("egress_peer_port_no_secret", "allowlist: another server's allowed name through that server's proxy endpoint, without a secret"),
    ("egress_peer_port_peer_secret", "allowlist: another server's allowed name through that server's proxy endpoint with its secret (handed over)"),
    ("egress_own_port_peer_secret", "allowlist: another server's allowed name through this server's proxy endpoint with the other server's secret"),
    ("egress_udp", "allowlist: UDP round trip with an echo server on the host's 127.0.0.1"),
    ("egress_listen", "allowlist: listen() on a TCP port, then a host process connects to it (checked on the host)"),
    ("egress_fastopen", "allowlist: GET from the origin's port by a TCP Fast Open connect (sendto with MSG_FASTOPEN)"),
];

/// The allowlist row that must succeed everywhere.
const POSITIVE: &str = "egress_allowed";

/// Why `tier` cannot run the allowlist rows here, if it cannot: srt's own proxy resolves
/// names itself (the test's names need palisade's `egressHostsFile`), bubblewrap's bridge
/// needs socat, Landlock's network rules need ABI 4.
fn allowlist_unsupported(tier: &str) -> Option<String> {
    match tier {
        // Measured: with the rows enabled, srt's proxy answers 502 for the allowed name.
        "srt" => Some("srt's own proxy cannot resolve the test's names".into()),
        "bwrap" if which::which("socat").is_err() => Some("socat is not installed".into()),
        "landlock" => {
            let out = std::process::Command::new(palisade_bin())
                .args(["check", "--json"])
                .output()
                .expect("run palisade check");
            let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
            match report["machine"]["landlock"]["abi"].as_u64() {
                Some(abi) if abi >= 4 => None,
                abi => Some(format!("Landlock ABI {abi:?}: network rules need 4")),
            }
        }
        _ => None,
    }
}

/// The native sandbox tiers the suite runs behind, each a `backend` value; srt joins them
/// where it is installed (see `tiers`).
const TIERS: &[&str] = &["bwrap", "landlock"];

/// The srt binary of the test dependencies, if installed (scripts/install-test-deps.sh).
fn srt_path() -> Option<PathBuf> {
    let p = deps().join("node_modules/.bin/srt");
    p.exists().then_some(p)
}

/// The tiers of this run: the native ones, then srt when installed (said when not); or the
/// comma-separated subset in PALISADE_ATTACK_TIERS (an unknown or empty name fails the run
/// rather than shrink it).
fn tiers() -> Vec<&'static str> {
    let Ok(list) = std::env::var("PALISADE_ATTACK_TIERS") else {
        let mut out = TIERS.to_vec();
        if srt_path().is_some() {
            out.push("srt");
        } else {
            eprintln!("skipped the srt column: srt is not installed in the test dependencies");
        }
        return out;
    };
    let picked: Vec<&'static str> = list
        .split(',')
        .map(|t| {
            *TIERS
                .iter()
                .chain(["srt"].iter())
                .find(|k| **k == t.trim())
                .unwrap_or_else(|| panic!("PALISADE_ATTACK_TIERS: unknown tier {t:?}"))
        })
        .collect();
    assert!(!picked.is_empty(), "PALISADE_ATTACK_TIERS names no tier");
    picked
}

/// The palisade binary the serve table drives: this build's, or PALISADE_ATTACK_BIN (the
/// image's own binary when the table runs inside the container).
fn palisade_bin() -> String {
    std::env::var("PALISADE_ATTACK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_palisade").into())
}

/// Attacks srt does not stop, by its own design (docs/security.md, "Known gaps of the
/// launcher"), with why: listed so the table says so; under srt they may succeed or fail
/// without failing the suite. Every other attack must be blocked under srt too.
const BEYOND_SRT: &[(&str, &str)] = &[
    ("read_secret", "reads are open outside denyRead"),
    ("read_other_server_state", "reads are open outside denyRead"),
    ("read_sys", "/sys is visible"),
    ("sethostname", "UTS is shared"),
    ("kernel_keyring", "no palisade seccomp filter inside srt"),
    ("inherited_fd", "a pipe of srt's own reaches the command"),
];

/// Attacks the Landlock tier does not stop, by design (docs/security.md says why): it has no
/// PID namespace, so a host process's command line is visible in /proc.
const BEYOND_LANDLOCK: &[&str] = &["see_host_process"];

/// Attacks the host kernel or network may refuse on its own: a failing control skips them.
/// `read_etc_shadow` only works as root: in the container the suite runs as a non-root user.
const HOST_DEPENDENT: &[&str] = &[
    "read_etc_shadow",
    "create_user_namespace",
    "mount_filesystem",
    "pivot_root",
    "af_vsock_socket",
    "io_uring_setup",
    "kernel_keyring",
    "tiocsti_injection",
    "read_sys",
    "open_block_device",
    "tcp_external",
    "dns_lookup",
    "ptrace_host_process",
    "sethostname",
];

struct Scene {
    dir: tempfile::TempDir,
    /// The loopback HTTP origin of the allowlist rows.
    origin_port: u16,
    cfg: Value,
    host_tmp: PathBuf,
    canary: String,
    marker_proc: std::process::Child,
    stop: Arc<AtomicBool>,
    _tcp: std::net::TcpListener,
    _unix: std::os::unix::net::UnixListener,
    _abstract: std::os::unix::net::UnixListener,
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.marker_proc.kill();
        let _ = self.marker_proc.wait();
        let _ = std::fs::remove_file(&self.host_tmp);
    }
}

impl Scene {
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn audit_log(&self) -> PathBuf {
        self.p("palisade/audit.jsonl")
    }

    /// The writable-root files an attack may change, in their original state; planted
    /// files from a previous run removed.
    fn reset(&self) {
        std::fs::write(self.p("work/.git/config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(self.p("work/.bashrc"), "# the user's own\n").unwrap();
        for rel in [
            "outside/pwned",
            "ro/pwned",
            "work/.git/hooks/pre-commit",
            "work/app/.git/hooks/pre-commit",
            "work/hardlink",
            "work/link",
            "work/drop/proxy.json",
        ] {
            let _ = std::fs::remove_file(self.p(rel));
        }
        let _ = std::fs::remove_file(&self.host_tmp);
    }
}

async fn scene() -> Scene {
    use std::os::linux::net::SocketAddrExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = format!(
        "{}-{}",
        std::process::id(),
        d.file_name().unwrap().to_string_lossy()
    );
    let marker = format!("palisade-marker-{id}");
    for sub in [
        "home/.ssh",
        "outside",
        "ro",
        "work/mnt",
        "work/drop",
        "work/.git/hooks",
        "work/app/.git/hooks",
        "peer",
        "palisade",
        "sandbox",
    ] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("outside/secret.txt"), &marker).unwrap();
    std::fs::write(d.join("home/.ssh/id_ed25519"), &marker).unwrap();
    std::fs::write(d.join("peer/secret.txt"), &marker).unwrap();
    std::fs::write(d.join("ro/readme"), "read me").unwrap();
    std::fs::write(
        d.join("palisade/lists.json"),
        r#"{"lists": {"hostile-test": {"values": ["example.org"]}}}"#,
    )
    .unwrap();
    let marker_proc = std::process::Command::new("/bin/sh")
        .args(["-c", "sleep 600", &marker])
        .spawn()
        .unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = d.join("outside/host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let abstract_name = format!("palisade-attacks-{id}");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
    let abs = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !s2.load(Ordering::SeqCst) {
            if let Ok((_, from)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(b"pong", from);
            }
        }
    });
    let host_tmp = PathBuf::from(format!("/tmp/palisade-hostile-{id}"));
    let origin_port = egress_support::http_origin().await.port();
    std::fs::write(
        d.join("palisade/hosts"),
        "127.0.0.1 allowed.test denied.test other.test\n",
    )
    .unwrap();
    let url = |name: &str, path: &str| format!("http://{name}.test:{origin_port}/{path}");
    let cfg = json!({
        "secret": d.join("outside/secret.txt"),
        "marker_reversed": marker.chars().rev().collect::<String>(),
        "ssh_key": d.join("home/.ssh/id_ed25519"),
        "palisade_config": d.join("palisade/config.json"),
        "palisade_policy": d.join("palisade/lists.json"),
        "audit_log": d.join("palisade/audit.jsonl"),
        "peer_secret": d.join("peer/secret.txt"),
        "outside_write": d.join("outside/pwned"),
        "ro_write": d.join("ro/pwned"),
        "host_tmp": host_tmp,
        "git_hook": d.join("work/.git/hooks/pre-commit"),
        "git_config": d.join("work/.git/config"),
        "nested_git_hook": d.join("work/app/.git/hooks/pre-commit"),
        "root_bashrc": d.join("work/.bashrc"),
        "hard_link": d.join("work/hardlink"),
        "sym_link": d.join("work/link"),
        "host_pid": marker_proc.id(),
        "canary": format!("canary-{id}"),
        "tcp_port": tcp.local_addr().unwrap().port(),
        "udp_port": udp_port,
        "external_host": "pypi.org",
        "unix_socket": sock,
        "abstract_name": abstract_name,
        "mount_target": d.join("work/mnt"),
        "egress": {
            "origin_port": origin_port,
            "allowed_url": url("allowed", "allowed"),
            "denied_url": url("denied", "denied"),
            "other_url": url("other", "other"),
            // A directory of its own: under Landlock, `work/` itself, on the way to its
            // protected files, cannot have new entries made in it directly.
            "proxy_drop": d.join("work/drop/proxy.json"),
        },
    });
    let sc = Scene {
        origin_port,
        canary: format!("canary-{id}"),
        dir,
        cfg,
        host_tmp,
        marker_proc,
        stop,
        _tcp: tcp,
        _unix: unix,
        _abstract: abs,
    };
    sc.reset();
    sc
}

/// The config `palisade serve` runs: the hostile server and a peer (another instance of the
/// same program) that shares the hostile server's writable root and owns a private one. With
/// `allowlist`, a third instance, `allowlisted`, gets a network allowlist (`allowed.test` on
/// the origin) and the peer one of its own (`other.test`); both share `work/`.
fn write_config(sc: &Scene, backend: &str, allowlist: bool) -> PathBuf {
    let server = |name: &str, allow_write: Vec<PathBuf>, allow_read: Vec<PathBuf>| {
        json!({
            "command": venv_python(),
            "args": [attacks_dir().join("hostile_server.py"), sc.cfg.to_string(), name],
            "sandbox": {"filesystem": {"allowWrite": allow_write, "allowRead": allow_read}}
        })
    };
    let mut servers = json!({
        "hostile": server("hostile", vec![sc.p("work")], vec![attacks_dir(), sc.p("ro")]),
        "peer": server("peer", vec![sc.p("work"), sc.p("peer")], vec![attacks_dir()]),
    });
    if allowlist {
        let allow =
            |name: &str| json!({"allowedDomains": [format!("{name}.test:{}", sc.origin_port)]});
        servers["peer"]["sandbox"]["network"] = allow("other");
        servers["allowlisted"] = server("allowlisted", vec![sc.p("work")], vec![attacks_dir()]);
        servers["allowlisted"]["sandbox"]["network"] = allow("allowed");
    }
    let cfg = json!({
        "mcpServers": servers,
        "palisade": {
            "egressHostsFile": sc.p("palisade/hosts"),
            "sandboxDir": sc.p("sandbox"),
            "sandboxPolicy": "enforce",
            "backend": backend,
            "auditLog": sc.audit_log(),
            "lists": sc.p("palisade/lists.json"),
        }
    });
    let path = sc.p("palisade/config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    path
}

/// A client for `cmd`, started under a shell that holds the canary in its environment and
/// gives the command descriptor 7 open on the secret.
async fn client(sc: &Scene, cmd: Vec<String>, log: &Path) -> McpClient {
    let mut opts = SpawnOptions::new("/bin/sh").args(
        [
            "-c".to_string(),
            "\"$@\" 7<\"$PALISADE_SECRET\"; exit $?".into(),
            "sh".into(),
        ]
        .into_iter()
        .chain(cmd),
    );
    opts.env = vec![
        ("PALISADE_CANARY".into(), sc.canary.clone().into()),
        ("PALISADE_SECRET".into(), sc.p("outside/secret.txt").into()),
        ("HOME".into(), sc.p("home").into()),
        ("PALISADE_LOG_LEVEL".into(), "warn".into()),
        // No proxy of the test runner's reaches the control: launched directly, the
        // allowlist rows go straight to the origin.
        ("HTTP_PROXY".into(), "".into()),
        ("ALL_PROXY".into(), "".into()),
    ];
    if let Some(srt) = srt_path() {
        // Where `backend: srt` finds it (it is installed outside PATH).
        opts.env.push(("PALISADE_SRT".into(), srt.into()));
    }
    opts.stderr = StderrMode::File(log.to_path_buf());
    opts.timeout = Duration::from_secs(60);
    match McpClient::spawn(opts).await {
        Ok(c) => c,
        Err(e) => panic!(
            "start the MCP server: {e}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

/// Calls one attack tool; an error or an `isError` result counts as blocked.
async fn call(c: &McpClient, tool: &str, args: Value) -> (bool, String) {
    match c.call_tool(tool, args).await {
        Err(e) => (false, format!("call refused: {e}")),
        Ok(r) if r.is_error == Some(true) => (false, format!("call refused: {}", result_text(&r))),
        Ok(r) => {
            // The tool's one-line report; after it, what palisade added for the agent (an
            // egress refusal during the call).
            let text = result_text(&r);
            let (report, added) = text.split_once('\n').unwrap_or((&text, ""));
            match serde_json::from_str::<Value>(report) {
                Ok(v) => {
                    let detail = v["detail"].as_str().unwrap_or("").to_string();
                    let detail = if added.trim().is_empty() {
                        detail
                    } else {
                        format!("{detail}; palisade told the agent: {}", added.trim())
                    };
                    (v["ok"].as_bool().unwrap_or(false), detail)
                }
                Err(_) => (false, format!("unexpected answer: {text}")),
            }
        }
    }
}

/// Why a blocked row does not count as a refusal by the sandbox, if it does not: the hostile
/// tool must have run and reported its own failure. A call that never reached it (a crashed
/// server, a timeout, a transport error) proves nothing. The two link rows are the
/// exception by design: the gateway's policy refuses the proxied read of a path outside
/// the roots before the peer server sees it.
fn not_a_sandbox_refusal(name: &str, detail: &str) -> Option<&'static str> {
    let proxied = name.ends_with("_then_proxied_read");
    if proxied {
        let read = detail.rsplit("; read: ").next().unwrap_or(detail);
        if read.starts_with("call refused: DENIED by policy") {
            return None;
        }
        return not_a_sandbox_refusal("", read);
    }
    if detail.starts_with("call refused:") {
        Some("the call failed before the hostile tool could report")
    } else if detail.starts_with("unexpected answer:") {
        Some("the tool's answer was not its JSON report")
    } else {
        None
    }
}

/// Runs every attack through `c`; `prefix` is `hostile__`/`peer__` behind the gateway and
/// empty for the direct control (where the peer is the same process). `allowlisted` is the
/// prefix of the allowlisted server, when the allowlist rows run.
async fn run_all(
    sc: &Scene,
    c: &McpClient,
    prefix: (&str, &str),
    allowlisted: Option<&str>,
) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    for (name, _) in ATTACKS {
        // The link rows plant from `hostile`, then have `peer` read through the link. In the
        // control the hard link already exists from the `plant_hard_link` row (a second plant
        // reports EEXIST); the read decides.
        let link = match *name {
            "symlink_then_proxied_read" => Some(("plant_symlink", "work/link")),
            "hard_link_then_proxied_read" => Some(("plant_hard_link", "work/hardlink")),
            _ => None,
        };
        let r = if let Some((plant, path)) = link {
            let planted = call(c, &format!("{}{plant}", prefix.0), json!({})).await;
            let read = call(
                c,
                &format!("{}read_path", prefix.1),
                json!({"path": sc.p(path)}),
            )
            .await;
            (read.0, format!("plant: {}; read: {}", planted.1, read.1))
        } else {
            call(c, &format!("{}{name}", prefix.0), json!({})).await
        };
        out.insert(name.to_string(), r);
    }
    // Decided on the host, not by the report.
    let contains = |p: PathBuf| {
        std::fs::read_to_string(p)
            .map(|t| t.contains(PLANTED))
            .unwrap_or(false)
    };
    let host: Vec<(&str, bool)> = vec![
        ("write_outside_roots", sc.p("outside/pwned").exists()),
        ("write_into_ro_root", sc.p("ro/pwned").exists()),
        ("write_audit_log", contains(sc.audit_log())),
        ("write_host_tmp", sc.host_tmp.exists()),
        (
            "write_git_hook",
            sc.p("work/.git/hooks/pre-commit").exists(),
        ),
        ("write_git_config", contains(sc.p("work/.git/config"))),
        (
            "write_nested_git_hook",
            sc.p("work/app/.git/hooks/pre-commit").exists(),
        ),
        ("write_bashrc_in_root", contains(sc.p("work/.bashrc"))),
        ("plant_hard_link", sc.p("work/hardlink").exists()),
    ];
    for (name, planted) in host {
        let e = out.get_mut(name).unwrap();
        e.1 = format!(
            "{} (host: {})",
            e.1,
            if planted { "changed" } else { "unchanged" }
        );
        e.0 = planted;
    }
    if let Some(p) = allowlisted {
        out.extend(run_allowlist(c, prefix.1, p).await);
    }
    out
}

/// The allowlist rows: the peer hands over its proxy URL first; the listener is tried from
/// the host while the server still runs.
async fn run_allowlist(
    c: &McpClient,
    peer: &str,
    allowlisted: &str,
) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    let (leaked, detail) = call(c, &format!("{peer}leak_proxy"), json!({})).await;
    assert!(leaked, "the peer hands over its proxy URL: {detail}");
    for (name, _) in ALLOWLIST_ATTACKS {
        let r = call(c, &format!("{allowlisted}{name}"), json!({})).await;
        let r = if *name == "egress_listen" {
            host_connects(&r.1)
        } else {
            r
        };
        out.insert(name.to_string(), r);
    }
    out
}

/// Decided on the host: whether a host process reaches the listener the tool reported
/// ("listening on 127.0.0.1:PORT") and is greeted by it.
fn host_connects(detail: &str) -> (bool, String) {
    use std::io::Read;
    let Some(port) = detail
        .strip_prefix("listening on 127.0.0.1:")
        .and_then(|p| p.parse::<u16>().ok())
    else {
        return (false, format!("{detail} (host: no listener to try)"));
    };
    let shown = detail.replace(&port.to_string(), "PORT");
    match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Err(e) => (false, format!("{shown} (host: {e})")),
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut greeting = String::new();
            let _ = s.read_to_string(&mut greeting);
            let greeted = greeting.contains("hostile listener");
            let seen = if greeted {
                "connected, greeted by the listener"
            } else {
                "connected to another listener"
            };
            (greeted, format!("{shown} (host: {seen})"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_through_serve_fails_and_succeeds_without_palisade() {
    let sc = scene().await;
    let log = sc.p("stderr.log");
    let server_cmd = vec![
        venv_python().display().to_string(),
        attacks_dir()
            .join("hostile_server.py")
            .display()
            .to_string(),
        sc.cfg.to_string(),
    ];

    // Control: the same server launched directly; a stand-in audit log and config exist at
    // the paths palisade will use.
    std::fs::write(sc.audit_log(), "{\"stand-in\": true}\n").unwrap();
    write_config(&sc, "bwrap", false);
    let direct = client(&sc, server_cmd, &log).await;
    let plain = run_all(&sc, &direct, ("", ""), Some("")).await;
    direct.shutdown().await;

    // Behind palisade: enforce, once per tier; the allowlist rows where the tier can run them.
    let tiers = tiers();
    let unsupported: Vec<Option<String>> = tiers.iter().map(|t| allowlist_unsupported(t)).collect();
    let mut boxed = Vec::new();
    for (tier, why) in tiers.iter().zip(&unsupported) {
        if let Some(why) = why {
            eprintln!("skipped the allowlist rows under {tier}: {why}");
        }
        boxed.push(behind_serve(&sc, tier, &log, why.is_none()).await);
    }

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut controls = 0;
    let mut succeeded = vec![0; tiers.len()];
    let all = ATTACKS.iter().chain(ALLOWLIST_ATTACKS);
    for (name, what) in all.clone() {
        let (c_ok, c_detail) = plain[*name].clone();
        if c_ok {
            controls += 1;
        } else if HOST_DEPENDENT.contains(name) {
            eprintln!("skipped {name}: the host itself refuses it ({c_detail})");
        } else {
            failures.push(format!("control for {name} failed: {c_detail}"));
        }
        let control_cell = if c_ok {
            "succeeds".to_string()
        } else {
            format!("fails ({c_detail})")
        };
        let mut cells = vec![control_cell];
        for (i, tier) in tiers.iter().enumerate() {
            let Some((s_ok, s_detail)) = boxed[i].get(*name).cloned() else {
                let why = unsupported[i].clone().unwrap_or_default();
                cells.push(format!("not run: {why}"));
                continue;
            };
            if *name == POSITIVE {
                if !s_ok {
                    failures.push(format!(
                        "the allowed name must be reachable through the proxy ({tier}): {s_detail}"
                    ));
                }
                cells.push(if s_ok {
                    format!("reached, as it must be ({s_detail})")
                } else {
                    format!("**BLOCKED** ({s_detail})")
                });
                continue;
            }
            let beyond_srt = BEYOND_SRT
                .iter()
                .find(|(n, _)| *tier == "srt" && n == name)
                .map(|(_, why)| *why);
            let beyond = *tier == "landlock" && BEYOND_LANDLOCK.contains(name);
            if s_ok {
                succeeded[i] += 1;
                if !beyond && beyond_srt.is_none() {
                    failures.push(format!("ESCAPE through serve ({tier}) {name}: {s_detail}"));
                }
            } else if let Some(why) = not_a_sandbox_refusal(name, &s_detail) {
                failures.push(format!(
                    "{name} did not run behind serve ({tier}) ({why}): {s_detail}"
                ));
            } else if beyond {
                failures.push(format!(
                    "{name} is listed as beyond Landlock but was blocked: update BEYOND_LANDLOCK and docs/security.md ({s_detail})"
                ));
            }
            cells.push(match (s_ok, beyond) {
                (true, _) if beyond_srt.is_some() => format!(
                    "succeeds: srt's model ({}) ({s_detail})",
                    beyond_srt.unwrap_or_default()
                ),
                (true, true) => {
                    format!("succeeds: beyond this tier (no PID namespace) ({s_detail})")
                }
                (true, false) => format!("**SUCCEEDS** ({s_detail})"),
                (false, _) => format!("blocked: {s_detail}"),
            });
        }
        rows.push(format!("| {what} | {} |", cells.join(" | ")));
    }
    let headers: Vec<String> = tiers
        .iter()
        .map(|t| format!("behind `palisade serve` (enforce, {t})"))
        .collect();
    let totals: Vec<String> = tiers
        .iter()
        .zip(&succeeded)
        .map(|(t, n)| format!("{n} under {t}"))
        .collect();
    let table = format!(
        "| attack (hostile MCP server) | launched directly (control) | {} |\n|---|---|{}\n{}\n\n{} attacks and 1 positive row (the allowed name, which must be reached); control succeeded for {controls}; succeeded behind palisade: {} (beyond Landlock by design: {}{}).\n",
        headers.join(" | "),
        "---|".repeat(tiers.len()),
        rows.join("\n"),
        all.count() - 1,
        totals.join(", "),
        BEYOND_LANDLOCK.join(", "),
        if tiers.contains(&"srt") {
            let names: Vec<&str> = BEYOND_SRT.iter().map(|(n, _)| *n).collect();
            format!("; beyond srt by its design: {}", names.join(", "))
        } else {
            String::new()
        },
    )
    .replace(&sc.dir.path().display().to_string(), "$SCENE")
    .replace(&sc.host_tmp.display().to_string(), "/tmp/palisade-hostile-ID")
    .replace(&format!("pid {}", sc.marker_proc.id()), "pid PID")
    .replace(&format!("/proc/{}/", sc.marker_proc.id()), "/proc/PID/")
    .replace(&format!(", {})", sc.marker_proc.id()), ", PID)")
    .replace(&format!(".test:{}", sc.origin_port), ".test:ORIGIN");
    println!("{table}");
    write_table(&table);
    assert!(
        failures.is_empty(),
        "{}\n\n{table}\npalisade stderr:\n{}",
        failures.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    if let Some(b) = tiers.iter().position(|t| *t == "bwrap") {
        assert_eq!(succeeded[b], 0, "nothing gets through bwrap");
    }
}

/// Runs every attack behind `palisade serve` with `backend`, after checking that both
/// servers are up and the peer's own root works.
async fn behind_serve(
    sc: &Scene,
    backend: &str,
    log: &Path,
    allowlist: bool,
) -> BTreeMap<String, (bool, String)> {
    sc.reset();
    // A fresh log per tier, and its head file with it (the head anchors the old log's end).
    let _ = std::fs::remove_file(sc.audit_log());
    let _ = std::fs::remove_file(palisade::audit::anchor::head_path(&sc.audit_log()));
    let config = write_config(sc, backend, allowlist);
    let serve = vec![
        palisade_bin(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let gw = client(sc, serve, log).await;
    let tools: Vec<String> = gw
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        tools.contains(&"hostile__read_secret".to_string())
            && tools.contains(&"peer__read_path".to_string()),
        "both servers must be up under enforce ({backend}): {tools:?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert!(
        !allowlist || tools.contains(&"allowlisted__egress_allowed".to_string()),
        "the allowlisted server must be up under enforce ({backend}): {tools:?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    // Positive control: the roots themselves work through the gateway.
    let (ok, detail) = call(
        &gw,
        "peer__read_path",
        json!({"path": sc.p("peer/secret.txt")}),
    )
    .await;
    assert!(
        ok,
        "a read inside the peer's own root must work ({backend}): {detail}"
    );
    let boxed = run_all(
        sc,
        &gw,
        ("hostile__", "peer__"),
        allowlist.then_some("allowlisted__"),
    )
    .await;
    gw.shutdown().await;
    // The audit log names the tier actually used.
    let audit = std::fs::read_to_string(sc.audit_log()).unwrap_or_default();
    assert!(
        audit.contains(&format!("\"sandboxBackend\":\"{backend}\"")),
        "the audit log names the {backend} tier: {}",
        audit.lines().next().unwrap_or("")
    );
    boxed
}

/// Issue 23, finding 6 (regression: Palisade's own files were refused to the agent by the
/// policy, but a server whose writable root held them could truncate the audit log). The
/// hostile server gets `allowWrite` on the directory holding the config, the lists file, the
/// audit log and its head file. The control: launched directly, every attack works; behind
/// `palisade serve` each fails, and the log still verifies against its head afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palisades_own_files_are_masked_in_a_writable_root_that_holds_them() {
    const OWN: &[&str] = &[
        "read_palisade_config",
        "read_palisade_policy",
        "read_audit_log",
        "write_audit_log",
        "truncate_audit_log",
        "replace_audit_log",
        "rewrite_audit_head",
    ];
    let sc = scene().await;
    let log = sc.p("stderr-own.log");
    let config = sc.p("palisade/config.json");
    let write_own_config = || {
        let cfg = json!({
            "mcpServers": {"hostile": {
                "command": venv_python(),
                "args": [attacks_dir().join("hostile_server.py"), sc.cfg.to_string()],
                "sandbox": {"filesystem": {"allowWrite": [sc.p("palisade")],
                                           "allowRead": [attacks_dir()]}}
            }},
            "palisade": {"sandboxDir": sc.p("sandbox"), "sandboxPolicy": "enforce",
                         "backend": "bwrap", "auditLog": sc.audit_log(),
                         "lists": sc.p("palisade/lists.json")}
        });
        std::fs::write(&config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    };
    let head = PathBuf::from(format!("{}.head", sc.audit_log().display()));

    // Control: launched directly, with stand-ins at the paths palisade uses.
    write_own_config();
    for attack in OWN {
        std::fs::write(sc.audit_log(), "{\"stand-in\": true}\n").unwrap();
        let direct = client(
            &sc,
            vec![
                venv_python().display().to_string(),
                attacks_dir()
                    .join("hostile_server.py")
                    .display()
                    .to_string(),
                sc.cfg.to_string(),
            ],
            &log,
        )
        .await;
        let (ok, detail) = call(&direct, attack, json!({})).await;
        direct.shutdown().await;
        assert!(ok, "control {attack} failed: {detail}");
    }

    // Behind palisade.
    let _ = std::fs::remove_file(sc.audit_log());
    let _ = std::fs::remove_file(&head);
    write_own_config();
    let serve = vec![
        env!("CARGO_BIN_EXE_palisade").to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let gw = client(&sc, serve, &log).await;
    let mut escaped = Vec::new();
    for attack in OWN {
        let (ok, detail) = call(&gw, &format!("hostile__{attack}"), json!({})).await;
        if ok || not_a_sandbox_refusal(attack, &detail).is_some() {
            escaped.push(format!("{attack}: ok={ok} {detail}"));
        }
    }
    gw.shutdown().await;
    let text = std::fs::read_to_string(sc.audit_log()).unwrap();
    assert!(
        escaped.is_empty(),
        "{}\n{}",
        escaped.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!text.contains(PLANTED), "{text}");
    assert_eq!(text.lines().count(), OWN.len(), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["audit", "verify"])
        .arg(sc.audit_log())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("chain intact") && !report.contains("no head"),
        "{report}"
    );
}

/// Always written under target/ (or to PALISADE_ATTACK_TABLE); copied into docs/security.md
/// with PALISADE_UPDATE_DOCS=1.
fn write_table(table: &str) {
    let target = std::env::var_os("PALISADE_ATTACK_TABLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-attack-table.md"));
    let _ = std::fs::write(&target, table);
    if std::env::var_os("PALISADE_UPDATE_DOCS").is_some() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let (start, end) = (
            "<!-- serve-attack-table:start -->\n",
            "<!-- serve-attack-table:end -->",
        );
        let a = text.find(start).expect("start marker") + start.len();
        let b = text.find(end).expect("end marker");
        std::fs::write(&doc, format!("{}{}{}", &text[..a], table, &text[b..])).unwrap();
    }
}

/// Resource limits: a fork bomb and a memory hog in the hostile server, with `sandbox.limits`
/// set low. The control (the same server launched directly) reaches both targets; behind
/// palisade the fork bomb is refused at the cgroup's task limit and the memory hog is
/// killed, each server restarted with the reason given to the agent, and the peer server and
/// the gateway keep working throughout. Needs a cgroup (without one, tests/limits.rs covers
/// the rlimit fallbacks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_and_memory_hog_are_stopped_and_the_rest_keeps_working() {
    if !check_says_cgroup() {
        skip::host_skip(
            "attacks::fork_bomb_and_memory_hog_are_stopped_and_the_rest_keeps_working",
            "palisade check: servers get no cgroup on this machine",
        );
        return;
    }
    let sc = scene().await;
    let log = sc.p("limits-stderr.log");
    const BOMB: u64 = 300;
    const HOG_MB: u64 = 768;

    // Control: no limits, both reach their targets.
    let direct = client(
        &sc,
        vec![
            venv_python().display().to_string(),
            attacks_dir()
                .join("hostile_server.py")
                .display()
                .to_string(),
            sc.cfg.to_string(),
        ],
        &log,
    )
    .await;
    let (bomb_ok, bomb) = call(&direct, "fork_bomb", json!({"limit": BOMB})).await;
    assert!(bomb_ok, "control fork bomb must reach {BOMB}: {bomb}");
    let (hog_ok, hog) = call(&direct, "memory_hog", json!({"mb": HOG_MB})).await;
    assert!(hog_ok, "control memory hog must succeed: {hog}");
    direct.shutdown().await;

    let config = write_config(&sc, "bwrap", false);
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    cfg["mcpServers"]["hostile"]["sandbox"]["limits"] = json!({"memoryMb": 256, "processes": 64});
    std::fs::write(&config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let gw = client(
        &sc,
        vec![
            env!("CARGO_BIN_EXE_palisade").to_string(),
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
        ],
        &log,
    )
    .await;
    assert!(peer_works(&sc, &gw).await, "peer must work before");

    let (bomb_ok, bomb) = call(&gw, "hostile__fork_bomb", json!({"limit": BOMB})).await;
    // Refused forks (EAGAIN), or the server already stopped for hitting the limit.
    assert!(
        !bomb_ok
            && (bomb.contains("refused: [Errno 11]") || bomb.contains("process limit reached")),
        "the task limit must refuse forks: {bomb}"
    );
    assert!(
        peer_works(&sc, &gw).await,
        "peer must work after the fork bomb"
    );
    // The server that hit its task limit is restarted; the agent is told why meanwhile.
    let (back, bomb_told) = until_restarted(&gw, &log, 0).await;
    assert!(back, "hostile must be restarted: {bomb_told:?}");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        bomb_told
            .iter()
            .any(|t| t.contains("process limit reached (64 processes"))
            || stderr.contains("process limit reached (64 processes"),
        "the restart reason must name the task limit: {bomb_told:?}\n{stderr}"
    );

    let before_hog = restarts(&log);
    let (hog_ok, hog) = call(&gw, "hostile__memory_hog", json!({"mb": HOG_MB})).await;
    assert!(!hog_ok, "the memory limit must stop the hog: {hog}");
    // Poll until the server is back; the agent must have been told why on the way.
    let (back, mut told) = until_restarted(&gw, &log, before_hog).await;
    told.insert(0, hog.clone());
    assert!(back, "hostile must be restarted: {told:?}");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        told.iter().any(|t| t.contains("memory limit reached"))
            || stderr.contains("memory limit reached"),
        "the restart reason must name the memory limit: {told:?}\n{stderr}"
    );
    assert!(
        peer_works(&sc, &gw).await,
        "peer must work after the memory hog"
    );
    println!(
        "fork bomb: {bomb}\nagent was told: {bomb_told:?}\nmemory hog: {hog}\nagent was told: {told:?}"
    );
    gw.shutdown().await;
}

/// Polls `own_env` until the hostile server answers again after going down (at most 15 s),
/// collecting what the agent is told meanwhile. A call made while the server restarts waits
/// for it, so "back" is: the gateway logged one more restart than `restarts_before`, and a
/// call then succeeds.
async fn until_restarted(
    gw: &McpClient,
    log: &std::path::Path,
    restarts_before: usize,
) -> (bool, Vec<String>) {
    let mut told: Vec<String> = Vec::new();
    for _ in 0..300 {
        match gw.call_tool("hostile__own_env", json!({})).await {
            Ok(r) if r.is_error != Some(true) => {
                if restarts(log) > restarts_before {
                    return (true, told);
                }
            }
            Ok(r) => told.push(result_text(&r)),
            Err(e) => told.push(e.to_string()),
        }
        told.dedup();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (false, told)
}

/// How many restarts the gateway has logged ("down: REASON; restart N/M in S").
fn restarts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("; restart ")
        .count()
}

/// A read inside the peer's own root through the gateway: true when it works.
async fn peer_works(sc: &Scene, gw: &McpClient) -> bool {
    call(
        gw,
        "peer__read_path",
        json!({"path": sc.p("peer/secret.txt")}),
    )
    .await
    .0
}

/// The hostile AGENT (issue 23, findings 1, 2, 8 and 12): `hostile_server.py`'s agent-side
/// tools, prompt and resource template open whatever they are given, and the agent names
/// files the gateway must not let them reach, through argument names no list knows, nested
/// objects, `/proc/self`, a Unicode spelling of a link planted in the shared sandbox dir, a
/// prompt argument and a resource URI of the server's own scheme. Control: the same server
/// launched directly under a client declaring the same roots, where every attack works.
/// Behind serve the rows run from a client that declares no roots, except the row about the
/// agent's own roots, which runs from a second session whose client declares `work/`.
/// Behind `palisade serve` (enforce, bwrap, built-in default policy) each must be refused by
/// the gateway; the positive controls (the same tools inside the roots) must still work.
const AGENT_ATTACKS: &[(&str, &str)] = &[
    ("unlisted_name", "read `/etc/passwd` (outside every root, visible in the sandbox's curated `/etc`) through `get_file(file_name)`, an argument name no list knows, in a tool read-only by its name (finding 1)"),
    ("file_uri_unlisted", "the same as a `file:` URI through `read_config(location)` (finding 1)"),
    ("unlisted_src", "the same through `cat(src)`, marked read-only (finding 1)"),
    ("nested_object", "the same through a nested object, `get_info({\"options\": {\"path\": ...}})` (finding 1)"),
    ("own_environ", "read the server's own environment (an API token from its config) at `/proc/self/environ` through `get_file(file_name)` (findings 1, 8)"),
    ("agent_roots_unlisted", "read a file inside the server's read-only root but outside the roots the agent's client declared, through `get_file(file_name)` (finding 1)"),
    ("proc_self_cwd_write", "write `/proc/self/cwd/pwned-cwd`: palisade's cwd is the sandbox dir, the server's a root whose writes need approval (checked on the host) (finding 8)"),
    ("unicode_planted_link", "plant NFC `sandbox/café` -> a writable root, then write `sandbox/cafe\\u0301/Makefile` (NFD) through a server that normalises names (checked on the host) (finding 2)"),
    ("prompt_argument", "read `/etc/passwd` through a prompt's path argument, `prompts/get show_file` (finding 12)"),
    ("custom_scheme_resource", "read `/etc/passwd` through `resources/read` of the server's own scheme, `hostile://file//etc/passwd` (finding 12)"),
];

/// The first JSON report `{"ok", "detail"}` in a tool, prompt or resource result.
fn report_in(v: &Value) -> Option<(bool, String)> {
    match v {
        Value::String(s) => serde_json::from_str::<Value>(s).ok().and_then(|r| {
            r.get("ok").map(|ok| {
                (
                    ok.as_bool().unwrap_or(false),
                    r["detail"].as_str().unwrap_or("").to_string(),
                )
            })
        }),
        Value::Array(items) => items.iter().find_map(report_in),
        Value::Object(m) => m.values().find_map(report_in),
        _ => None,
    }
}

fn reported<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> (bool, String) {
    match r {
        Err(e) => (false, format!("call refused: {e}")),
        Ok(v) => {
            let v = serde_json::to_value(&v).unwrap_or_default();
            if v["isError"] == true {
                return (false, format!("call refused: {}", report_text(&v)));
            }
            report_in(&v).unwrap_or_else(|| (false, format!("unexpected answer: {v}")))
        }
    }
}

fn report_text(v: &Value) -> String {
    v["content"]
        .as_array()
        .and_then(|c| c.iter().find_map(|b| b["text"].as_str()))
        .unwrap_or_default()
        .to_string()
}

/// A client for the agent attacks: `cmd` started in `cwd`, with the API token in the
/// environment and the client declaring `roots`.
async fn agent_client(
    sc: &Scene,
    cmd: Vec<String>,
    log: &Path,
    cwd: &Path,
    token: &str,
    roots: Option<Vec<String>>,
) -> McpClient {
    let mut opts = SpawnOptions::new("/bin/sh").args(
        [
            "-c".to_string(),
            "cd \"$PALISADE_CWD\" && exec \"$@\"".into(),
            "sh".into(),
        ]
        .into_iter()
        .chain(cmd),
    );
    opts.env = vec![
        ("PALISADE_CWD".into(), cwd.into()),
        ("HOSTILE_API_TOKEN".into(), token.into()),
        ("HOME".into(), sc.p("home").into()),
        ("PALISADE_LOG_LEVEL".into(), "warn".into()),
    ];
    opts.roots = roots;
    opts.stderr = StderrMode::File(log.to_path_buf());
    opts.timeout = Duration::from_secs(60);
    McpClient::spawn(opts).await.expect("start the MCP client")
}

/// Runs every agent attack; `prefix` is `hostile__` behind the gateway, empty directly.
async fn run_agent_attacks(
    sc: &Scene,
    c: &McpClient,
    prefix: &str,
    scheme: &str,
) -> BTreeMap<String, (bool, String)> {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    // Outside every root, yet bound into every sandbox (the curated /etc): only the
    // gateway's checks stand between the agent and it.
    let secret = "/etc/passwd".to_string();
    let tool = |name: &str| format!("{prefix}{name}");
    let mut out = BTreeMap::new();
    let calls: Vec<(&str, String, Value)> = vec![
        (
            "unlisted_name",
            tool("get_file"),
            json!({"file_name": secret}),
        ),
        (
            "file_uri_unlisted",
            tool("read_config"),
            json!({"location": format!("file://{secret}")}),
        ),
        ("unlisted_src", tool("cat"), json!({"src": secret})),
        (
            "nested_object",
            tool("get_info"),
            json!({"options": {"path": secret}}),
        ),
        (
            "own_environ",
            tool("get_file"),
            json!({"file_name": "/proc/self/environ"}),
        ),
        (
            "agent_roots_unlisted",
            tool("get_file"),
            json!({"file_name": sc.p("ro/notes.txt")}),
        ),
        (
            "proc_self_cwd_write",
            tool("write_path"),
            json!({"path": "/proc/self/cwd/pwned-cwd", "content": PLANTED}),
        ),
    ];
    for (row, name, args) in calls {
        out.insert(row.to_string(), call(c, &name, args).await);
    }
    let planted = call(c, &tool("plant_unicode_link"), json!({})).await;
    let nfd = format!("{}/cafe\u{301}/Makefile", sc.p("sandbox").display());
    let wrote = call(
        c,
        &tool("write_path"),
        json!({"path": nfd, "content": PLANTED}),
    )
    .await;
    out.insert(
        "unicode_planted_link".into(),
        (wrote.0, format!("plant: {}; write: {}", planted.1, wrote.1)),
    );
    let mut pargs = serde_json::Map::new();
    pargs.insert("path".into(), json!(secret));
    let prompt = c
        .peer()
        .get_prompt(GetPromptRequestParams::new(tool("show_file")).with_arguments(pargs))
        .await;
    out.insert("prompt_argument".into(), reported(prompt));
    let uri = format!("{scheme}://file/{secret}");
    let res = c
        .peer()
        .read_resource(ReadResourceRequestParams::new(uri))
        .await;
    out.insert("custom_scheme_resource".into(), reported(res));
    // Decided on the host, not by the report.
    for (row, file) in [
        ("proc_self_cwd_write", "work/pwned-cwd"),
        ("unicode_planted_link", "work/Makefile"),
    ] {
        let changed = sc.p(file).exists();
        let e = out.get_mut(row).unwrap();
        e.1 = format!(
            "{} (host: {})",
            e.1,
            if changed { "changed" } else { "unchanged" }
        );
        e.0 = changed;
    }
    out
}

/// The positive controls behind serve: the same tools inside the roots still work.
async fn agent_positive_controls(sc: &Scene, gw: &McpClient) {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    let inside = sc.p("work/ok.txt").display().to_string();
    for (name, args) in [
        ("hostile__get_file", json!({"file_name": inside})),
        ("hostile__get_info", json!({"options": {"path": inside}})),
    ] {
        let (ok, detail) = call(gw, name, args).await;
        assert!(ok, "{name} inside the roots must work: {detail}");
    }
    let plain = sc.p("sandbox/plain.txt").display().to_string();
    let (ok, detail) = call(
        gw,
        "hostile__write_path",
        json!({"path": plain, "content": "x"}),
    )
    .await;
    assert!(ok, "a write in the sandbox dir must work: {detail}");
    let mut pargs = serde_json::Map::new();
    pargs.insert("path".into(), json!(inside));
    let (ok, detail) = reported(
        gw.peer()
            .get_prompt(GetPromptRequestParams::new("hostile__show_file").with_arguments(pargs))
            .await,
    );
    assert!(ok, "a prompt reading inside the roots must work: {detail}");
    let (ok, detail) = reported(
        gw.peer()
            .read_resource(ReadResourceRequestParams::new(format!(
                "hostile://file/{inside}"
            )))
            .await,
    );
    assert!(ok, "a resource inside the roots must work: {detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_attack_through_serve_fails_and_succeeds_without_palisade() {
    let sc = scene().await;
    let log = sc.p("agent-stderr.log");
    let marker = sc.cfg["marker_reversed"]
        .as_str()
        .unwrap()
        .chars()
        .rev()
        .collect::<String>();
    std::fs::write(sc.p("ro/notes.txt"), &marker).unwrap();
    std::fs::write(sc.p("work/ok.txt"), &marker).unwrap();
    let token = format!("api-token-{}", std::process::id());
    let mut cfg = sc.cfg.clone();
    cfg["api_token"] = json!(token);
    cfg["unicode_link"] = json!(sc.p("sandbox/caf\u{e9}"));
    cfg["unicode_link_target"] = json!(sc.p("work"));
    let script = attacks_dir()
        .join("hostile_server.py")
        .display()
        .to_string();
    let agent_roots = vec![format!("file://{}", sc.p("work").display())];
    let reset = || {
        for f in [
            "work/pwned-cwd",
            "work/Makefile",
            "sandbox/caf\u{e9}",
            "sandbox/plain.txt",
        ] {
            let _ = std::fs::remove_file(sc.p(f));
        }
    };

    // Control: the server launched directly, its cwd the writable root.
    reset();
    let direct = agent_client(
        &sc,
        vec![
            venv_python().display().to_string(),
            script.clone(),
            cfg.to_string(),
            "hostile".into(),
        ],
        &log,
        &sc.p("work"),
        &token,
        Some(agent_roots.clone()),
    )
    .await;
    let plain = run_agent_attacks(&sc, &direct, "", "hostile").await;
    direct.shutdown().await;

    // Behind palisade: enforce, bwrap, the built-in default policy; palisade started in the
    // sandbox dir, the server's cwd the writable root.
    reset();
    let server = json!({
        "command": venv_python(),
        "args": [script, cfg.to_string(), "hostile"],
        "cwd": sc.p("work"),
        "env": {"HOSTILE_API_TOKEN": token},
        "sandbox": {"filesystem": {"allowWrite": [sc.p("work")], "allowRead": [attacks_dir(), sc.p("ro")]}}
    });
    let config = json!({
        "mcpServers": {"hostile": server},
        "palisade": {
            "sandboxDir": sc.p("sandbox"),
            "sandboxPolicy": "enforce",
            "backend": "bwrap",
            "auditLog": sc.audit_log(),
        }
    });
    let path = sc.p("palisade/agent-config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let serve = vec![
        env!("CARGO_BIN_EXE_palisade").to_string(),
        "serve".into(),
        "--config".into(),
        path.display().to_string(),
    ];
    // First a client that declares no roots (only the server's roots and the policy stand in
    // the way), then one that declares them, for the row about the agent's own roots.
    let gw = agent_client(&sc, serve.clone(), &log, &sc.p("sandbox"), &token, None).await;
    let mut boxed = run_agent_attacks(&sc, &gw, "hostile__", "hostile").await;
    agent_positive_controls(&sc, &gw).await;
    gw.shutdown().await;
    reset();
    let gw = agent_client(
        &sc,
        serve,
        &log,
        &sc.p("sandbox"),
        &token,
        Some(agent_roots),
    )
    .await;
    let row = call(
        &gw,
        "hostile__get_file",
        json!({"file_name": sc.p("ro/notes.txt")}),
    )
    .await;
    boxed.insert("agent_roots_unlisted".into(), row);
    agent_positive_controls(&sc, &gw).await;
    gw.shutdown().await;
    reset();

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut succeeded = 0;
    for (name, what) in AGENT_ATTACKS {
        let (c_ok, c_detail) = plain[*name].clone();
        let (s_ok, s_detail) = boxed[*name].clone();
        if !c_ok {
            failures.push(format!("control for {name} failed: {c_detail}"));
        }
        let by_palisade = ["DENIED", "FORBIDDEN", "BAD_PATH", "ESCALATION REQUIRED"]
            .iter()
            .any(|w| s_detail.contains(w));
        if s_ok {
            succeeded += 1;
            failures.push(format!("ESCAPE through serve {name}: {s_detail}"));
        } else if !by_palisade {
            failures.push(format!("{name} was not refused by palisade: {s_detail}"));
        }
        let control_cell = if c_ok {
            "succeeds".to_string()
        } else {
            format!("fails ({c_detail})")
        };
        let sandbox_cell = if s_ok {
            format!("**SUCCEEDS** ({s_detail})")
        } else {
            format!("blocked: {s_detail}")
        };
        rows.push(format!("| {what} | {control_cell} | {sandbox_cell} |"));
    }
    let table = format!(
        "| attack (hostile agent) | server launched directly (control) | behind `palisade serve` (enforce, bwrap, default policy) |\n|---|---|---|\n{}\n\n{} attacks; control succeeded for {}; {succeeded} succeeded behind palisade.\n",
        rows.join("\n"),
        AGENT_ATTACKS.len(),
        AGENT_ATTACKS.iter().filter(|(n, _)| plain[*n].0).count(),
    )
    .replace(&sc.dir.path().display().to_string(), "$SCENE")
    .replace(&attacks_dir().display().to_string(), "$REPO/tests/attacks")
    .replace(&token, "TOKEN");
    println!("{table}");
    write_marked_table(&table, "agent-attack-table", "agent-attack-table.md");
    assert!(
        failures.is_empty(),
        "{}\n\n{table}\npalisade stderr:\n{}",
        failures.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(succeeded, 0);
}

/// `write_table` for another marked table of docs/security.md.
fn write_marked_table(table: &str, marker: &str, file: &str) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
    let _ = std::fs::write(&target, table);
    if std::env::var_os("PALISADE_UPDATE_DOCS").is_some() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let (start, end) = (
            format!("<!-- {marker}:start -->\n"),
            format!("<!-- {marker}:end -->"),
        );
        let a = text.find(&start).expect("start marker") + start.len();
        let b = text.find(&end).expect("end marker");
        std::fs::write(&doc, format!("{}{}{}", &text[..a], table, &text[b..])).unwrap();
    }
}

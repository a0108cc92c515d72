//! The scene every attack family shares: a temporary tree of secrets, roots and listeners
//! (`scene`), the config `palisade serve` runs over it (`write_config`), a client started
//! with the canary and an open descriptor on the secret (`client`), one attack call
//! (`call`), and which tiers and binary this run uses. Kept apart from the families so each
//! family's file reads as its attacks only.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use palisade::client::{result_text, McpClient, SpawnOptions, StderrMode};
use serde_json::{json, Value};

use crate::egress_support;

/// Whether servers get a cgroup here, as `palisade check --json` reports it.
pub(crate) fn check_says_cgroup() -> bool {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--json"])
        .output()
        .expect("run palisade check");
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    report["resource_limits"]["status"] == "usable"
        && report["resource_limits"]["memory"] == true
        && report["resource_limits"]["pids"] == true
}

pub(crate) fn deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

pub(crate) fn venv_python() -> PathBuf {
    let p = deps().join("venv/bin/python");
    assert!(p.exists(), "test dependencies missing at {}", p.display());
    p
}

pub(crate) fn attacks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks")
}

pub(crate) const PLANTED: &str = "planted by hostile_server.py";

/// The native sandbox tiers the suite runs behind, each a `backend` value; srt joins them
/// where it is installed (see `tiers`).
pub(crate) const TIERS: &[&str] = &["bwrap", "landlock"];

/// The srt binary of the test dependencies, if installed (scripts/install-test-deps.sh).
pub(crate) fn srt_path() -> Option<PathBuf> {
    let p = deps().join("node_modules/.bin/srt");
    p.exists().then_some(p)
}

/// The tiers of this run: the native ones, then srt when installed (said when not); or the
/// comma-separated subset in PALISADE_ATTACK_TIERS (an unknown or empty name fails the run
/// rather than shrink it).
pub(crate) fn tiers() -> Vec<&'static str> {
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
pub(crate) fn palisade_bin() -> String {
    std::env::var("PALISADE_ATTACK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_palisade").into())
}

pub(crate) struct Scene {
    pub(crate) dir: tempfile::TempDir,
    /// The loopback HTTP origin of the allowlist rows.
    pub(crate) origin_port: u16,
    pub(crate) cfg: Value,
    pub(crate) host_tmp: PathBuf,
    pub(crate) canary: String,
    pub(crate) marker_proc: std::process::Child,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) _tcp: std::net::TcpListener,
    pub(crate) _unix: std::os::unix::net::UnixListener,
    pub(crate) _abstract: std::os::unix::net::UnixListener,
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The shell and its `sleep` (a process group of their own): killing the shell alone
        // left the sleep for 600 s, holding the test's output pipe open (a reader of it,
        // such as `cargo test | grep`, then waited for it).
        let pgid = nix::unistd::Pid::from_raw(self.marker_proc.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.marker_proc.wait();
        let _ = std::fs::remove_file(&self.host_tmp);
    }
}

impl Scene {
    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn audit_log(&self) -> PathBuf {
        self.p("palisade/audit.jsonl")
    }

    /// The writable-root files an attack may change, in their original state; planted
    /// files from a previous run removed.
    pub(crate) fn reset(&self) {
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

pub(crate) async fn scene() -> Scene {
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
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
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
pub(crate) fn write_config(sc: &Scene, backend: &str, allowlist: bool) -> PathBuf {
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
pub(crate) async fn client(sc: &Scene, cmd: Vec<String>, log: &Path) -> McpClient {
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
pub(crate) async fn call(c: &McpClient, tool: &str, args: Value) -> (bool, String) {
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
pub(crate) fn not_a_sandbox_refusal(name: &str, detail: &str) -> Option<&'static str> {
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

//! Compatibility suite: each real MCP server runs through `palisade serve` under enforce with
//! the native bubblewrap sandbox and the profile matched from its command line, driven by a
//! real client (the Python `mcp` SDK, tests/compat/client.py). Prints a table of pass/fail
//! per server and check, then fails if any required check failed.
//!
//! Policy: every config uses tests/fixtures/allow-all-policy.json, so that what is refused
//! is refused by the sandbox (or the server's own root checks), which is what a profile must
//! get right; the policy engine is proven in tests/policy*.rs. A failed check fails the test
//! unless it is listed in `KNOWN_GAPS` (the one place, each with its reason), where it is
//! reported as GAP; a listed gap that passes fails the test too, so the list stays true.
//!
//! Needs bubblewrap and the test dependencies ($PALISADE_TEST_DEPS, scripts/test.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::{
    allow_all_policy, deps, driver, merge_settings, node_server, palisade, report, run_ok,
    venv_bin, write_json, write_policy,
};

const SECRET_TEXT: &str = "compat-secret-7d1f";
const ENV_SECRET: &str = "compat-env-secret-91ab";

/// A workspace: a granted dir with a file, a secret dir outside every grant, the session
/// sandbox dir and the state dir.
struct Ws {
    dir: tempfile::TempDir,
    /// The `backend` of the configs this workspace writes.
    backend: &'static str,
}

impl Ws {
    fn new() -> Ws {
        Ws::with_backend("bwrap")
    }

    fn with_backend(backend: &'static str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        for d in ["granted", "secret", "sandbox", "state"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(
            dir.path().join("granted/hello.txt"),
            "hello from the host\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("secret/secret.txt"), SECRET_TEXT).unwrap();
        Ws { dir, backend }
    }

    fn p(&self, rel: &str) -> String {
        self.dir.path().join(rel).display().to_string()
    }

    /// One server `name` in an enforce config with the allow-all policy fixture.
    fn config(&self, name: &str, server: Value) -> String {
        let cfg = json!({
            "mcpServers": {name: server},
            "palisade": {
                "sandboxPolicy": "enforce",
                "backend": self.backend,
                "sandboxDir": self.p("sandbox"),
                "stateDir": self.p("state"),
                "policy": allow_all_policy(),
            }
        });
        let path = self.dir.path().join("config.json");
        write_json(&path, &cfg);
        path.display().to_string()
    }

    /// `config`, with `extra` merged into the `palisade` block (a policy, an approver).
    fn config_with(&self, name: &str, server: Value, extra: Value) -> String {
        let path = self.config(name, server);
        merge_settings(Path::new(&path), extra);
        path
    }

    /// A profiles directory holding `NAME.json` with each `(NAME, JSON)`.
    fn profiles(&self, profiles: &[(&str, &str)]) -> PathBuf {
        let dir = self.dir.path().join("profiles");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in profiles {
            std::fs::write(dir.join(format!("{name}.json")), body).unwrap();
        }
        dir
    }

    fn params(&self, prefix: &str) -> Value {
        json!({
            "prefix": prefix,
            "granted": self.p("granted"),
            "secret_file": self.p("secret/secret.txt"),
            "secret_text": SECRET_TEXT,
            "env_secret": ENV_SECRET,
        })
    }
}

/// Runs client.py SCENARIO against `palisade serve --config CONFIG`; returns its checks.
fn drive(ws: &Ws, scenario: &str, params: &Value, config: &str) -> Vec<Value> {
    let log = ws.dir.path().join("serve-stderr.log");
    let mut c = driver("tests/compat/client.py");
    c.arg(scenario)
        .arg(params.to_string())
        .args(["--", palisade(), "serve", "--config", config])
        .env("PALISADE_COMPAT_SECRET", ENV_SECRET)
        // Some checks read the servers' own stderr, which the gateway relays at info.
        .env("RUST_LOG", "info,rmcp=warn")
        .env("COMPAT_ERRLOG", &log);
    let report = report(&mut c, &format!("client.py {scenario}"), &log, None);
    report["checks"].as_array().cloned().unwrap_or_default()
}

/// Checks known to fail today, each with the reason: (server, check, reason). The only place
/// a failing check may be excused; everything else that fails fails the test.
const KNOWN_GAPS: &[(&str, &str, &str)] = &[];

fn known_gap(server: &str, check: &str) -> Option<&'static str> {
    KNOWN_GAPS
        .iter()
        .find(|(s, c, _)| *s == server && *c == check)
        .map(|(_, _, why)| *why)
}

struct Row {
    server: &'static str,
    profile: &'static str,
    check: String,
    pass: bool,
    detail: String,
}

fn rows(server: &'static str, profile: &'static str, checks: Vec<Value>) -> Vec<Row> {
    assert!(!checks.is_empty(), "{server}: the client ran no checks");
    checks
        .into_iter()
        .map(|c| Row {
            server,
            profile,
            check: c["name"].as_str().unwrap_or("?").to_string(),
            pass: c["pass"].as_bool().unwrap_or(false),
            detail: c["detail"].as_str().unwrap_or("").replace('\n', " "),
        })
        .collect()
}

/// A page served on the host's loopback, counting the requests that reach it.
struct LocalPage {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalPage {
    fn start() -> LocalPage {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, st) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                // Bounds a client that never finishes its request head.
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if !head.starts_with(b"GET ") {
                    continue;
                }
                h.fetch_add(1, Ordering::SeqCst);
                let body = "<html><body><p>local page for palisade compat</p></body></html>";
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        LocalPage {
            port,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/page", self.port)
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for LocalPage {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn filesystem() -> Vec<Row> {
    filesystem_on(Ws::new())
}

fn filesystem_on(ws: Ws) -> Vec<Row> {
    let cfg = ws.config(
        "fs",
        // No directory in args: the profile's rootsAs delivers the roots on the command line.
        json!({"command": "node", "args": [node_server("server-filesystem")],
               "sandbox": {"filesystem": {"allowWrite": [ws.p("granted")]}}}),
    );
    let mut params = ws.params("fs");
    params["roots_in_argv"] = json!([ws.p("granted"), ws.p("sandbox")]);
    rows(
        "server-filesystem",
        "server-filesystem",
        drive(&ws, "filesystem", &params, &cfg),
    )
}

/// The policy allows reads in `granted` and escalates reads elsewhere; the approver is the
/// file IPC the client answers. An approved read in `other` widens the server's roots.
fn filesystem_widen() -> Vec<Row> {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.dir.path().join("other")).unwrap();
    std::fs::create_dir_all(ws.dir.path().join("esc")).unwrap();
    std::fs::write(ws.dir.path().join("other/other.txt"), "other text\n").unwrap();
    let policy = ws.dir.path().join("policy.json");
    write_policy(
        &policy,
        json!([
            {"name": "allow-read-granted", "description": "reads in granted", "principle": "test",
             "if": {"roles": ["read-path"], "paths": {"roles": ["read-path"], "within": ws.p("granted")}},
             "then": "allow", "reason": "reading in granted is allowed"},
            {"name": "escalate-read-elsewhere", "description": "reads elsewhere", "principle": "test",
             "if": {"roles": ["read-path"]},
             "then": "escalate", "reason": "reading elsewhere needs a person"},
            {"name": "allow-the-rest", "description": "everything else", "principle": "test",
             "if": {}, "then": "allow", "reason": "the widening is what this check is about"}
        ]),
    );
    let cfg = ws.config_with(
        "fs",
        json!({"command": "node", "args": [node_server("server-filesystem")],
               "sandbox": {"filesystem": {"allowWrite": [ws.p("granted")]}}}),
        json!({"policy": policy.display().to_string(),
               "escalation": format!("dir:{}", ws.p("esc")),
               // Bounds a client that misses the escalation; never a timing assertion.
               "escalationTimeout": 30}),
    );
    let mut params = ws.params("fs");
    params["sandbox"] = json!(ws.p("sandbox"));
    params["other_dir"] = json!(ws.p("other"));
    params["other_file"] = json!(ws.p("other/other.txt"));
    params["esc"] = json!(ws.p("esc"));
    rows(
        "server-filesystem",
        "server-filesystem",
        drive(&ws, "filesystem-widen", &params, &cfg),
    )
}

fn fs_server() -> Vec<Row> {
    fs_server_on(Ws::new())
}

fn fs_server_on(ws: Ws) -> Vec<Row> {
    let cfg = ws.config(
        "pfs",
        json!({"command": palisade(), "args": ["fs-server", "--root", ws.p("granted")],
               "sandbox": {"filesystem": {"allowWrite": [ws.p("granted")]}}}),
    );
    rows(
        "palisade fs-server",
        "palisade-fs-server",
        drive(&ws, "fs-server", &ws.params("pfs"), &cfg),
    )
}

fn everything() -> Vec<Row> {
    let ws = Ws::new();
    let cfg = ws.config(
        "every",
        json!({"command": "node", "args": [node_server("server-everything"), "stdio"],
               "sandbox": {"filesystem": {"allowRead": [ws.p("granted")]}},
               // Relaying is opt-in (docs/security.md); the compat run checks it works.
               "relay": {"sampling": true, "elicitation": true}}),
    );
    rows(
        "server-everything",
        "server-everything",
        drive(&ws, "everything", &ws.params("every"), &cfg),
    )
}

fn memory() -> Vec<Row> {
    let ws = Ws::new();
    let cfg = ws.config(
        "memory",
        json!({"command": "node", "args": [node_server("server-memory")]}),
    );
    let mut params = ws.params("memory");
    params["state_file"] = json!(ws.p("state/memory/memory.jsonl"));
    // A restart inside one session: the server's process is killed, the supervisor starts a
    // new one in a new sandbox, the entity is read back.
    let mut checks = drive(&ws, "memory-restart", &params, &cfg);
    // Two gateway sessions with the same config and state dir: the state dir also outlives
    // the gateway (a new sandbox, a new server, a new palisade process).
    checks.extend(drive(&ws, "memory-write", &params, &cfg));
    checks.extend(drive(&ws, "memory-read", &params, &cfg));
    rows("server-memory", "server-memory", checks)
}

fn git_repo(dir: &Path) {
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    };
    std::fs::create_dir_all(dir).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.name", "Compat"]);
    git(&["config", "user.email", "compat@example.invalid"]);
    std::fs::write(dir.join("README"), "repo\n").unwrap();
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "init"]);
}

fn git() -> Vec<Row> {
    let ws = Ws::new();
    let repo = ws.dir.path().join("granted/repo");
    git_repo(&repo);
    std::fs::write(repo.join("new.txt"), "to be committed\n").unwrap();
    let outside = ws.dir.path().join("secret/repo");
    git_repo(&outside);
    let cfg = ws.config(
        "git",
        json!({"command": venv_bin("mcp-server-git"),
               "sandbox": {"filesystem": {"allowWrite": [repo.display().to_string()]}}}),
    );
    let mut params = ws.params("git");
    params["repo"] = json!(repo.display().to_string());
    params["outside_repo"] = json!(outside.display().to_string());
    params["direct_cmd"] = json!([venv_bin("mcp-server-git")]);
    rows(
        "mcp-server-git",
        "mcp-server-git",
        drive(&ws, "git", &params, &cfg),
    )
}

fn sequential_thinking() -> Vec<Row> {
    let ws = Ws::new();
    let cfg = ws.config(
        "think",
        json!({"command": "node", "args": [node_server("server-sequential-thinking")]}),
    );
    let mut checks = drive(&ws, "sequential-thinking", &ws.params("think"), &cfg);
    let control = Ws::new();
    let cfg = control.config(
        "think",
        json!({"command": "node", "args": [node_server("server-sequential-thinking")],
               "env": {"DISABLE_THOUGHT_LOGGING": "false"}}),
    );
    let mut params = control.params("think");
    params["thought_logging"] = json!(true);
    checks.extend(
        drive(&control, "sequential-thinking", &params, &cfg)
            .into_iter()
            .filter(|c| c["name"] != "tools listed"),
    );
    rows("server-seq-thinking", "server-sequential-thinking", checks)
}

fn time() -> Vec<Row> {
    let ws = Ws::new();
    let cfg = ws.config("time", json!({"command": venv_bin("mcp-server-time")}));
    rows(
        "mcp-server-time",
        "mcp-server-time",
        drive(&ws, "time", &ws.params("time"), &cfg),
    )
}

fn fetch() -> Vec<Row> {
    let ws = Ws::new();
    let allowed = LocalPage::start();
    let other = LocalPage::start();
    // Loopback inside the sandbox is the sandbox's own, so the launcher's NO_PROXY keeps
    // 127.0.0.1 off the proxy; `--proxy-url` sends every fetch through it, and the explicit
    // `127.0.0.1:PORT` entry is the deliberate grant of that one host port.
    let cfg = ws.config(
        "fetch",
        json!({"command": venv_bin("mcp-server-fetch"),
               "args": ["--ignore-robots-txt", "--allow-private-ips",
                        "--proxy-url", "http://127.0.0.1:3128"],
               "sandbox": {"network": {"allowedDomains": [format!("127.0.0.1:{}", allowed.port)]}}}),
    );
    let mut params = ws.params("fetch");
    params["allowed_url"] = json!(allowed.url());
    params["other_url"] = json!(other.url());
    params["direct_cmd"] = json!([
        venv_bin("mcp-server-fetch"),
        "--ignore-robots-txt",
        "--allow-private-ips"
    ]);
    let mut checks = drive(&ws, "fetch", &params, &cfg);
    // The refusals happened before the host: the other page saw the control's request only.
    checks.push(json!({
        "name": "refused fetches never reached the host",
        "pass": other.hits() == 1 && allowed.hits() >= 1,
        "detail": format!("other port: {} request(s) (control only = 1); allowed port: {}",
                          other.hits(), allowed.hits()),
    }));
    rows("mcp-server-fetch", "mcp-server-fetch", checks)
}

fn bwrap_usable() -> bool {
    Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-all", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True (after saying so) when this machine cannot run the sandbox, so the test skips.
fn skipped_without_bwrap() -> bool {
    if bwrap_usable() {
        return false;
    }
    support::skip("bubblewrap cannot create namespaces on this machine");
    true
}

#[test]
fn real_servers_work_inside_their_profiles() {
    if skipped_without_bwrap() {
        return;
    }
    // COMPAT_ONLY=git,time runs a subset (while developing a profile).
    let only = std::env::var("COMPAT_ONLY").unwrap_or_default();
    let mut all = Vec::new();
    for (name, run) in [
        ("filesystem", filesystem as fn() -> Vec<Row>),
        ("filesystem-widen", filesystem_widen),
        ("fs-server", fs_server),
        ("everything", everything),
        ("memory", memory),
        ("git", git),
        ("time", time),
        ("sequential-thinking", sequential_thinking),
        ("fetch", fetch),
    ] {
        if only.is_empty() || only.split(',').any(|o| o == name) {
            all.extend(run());
        }
    }
    let status = |r: &Row| match (r.pass, known_gap(r.server, &r.check)) {
        (true, Some(_)) => "STALE",
        (true, None) => "PASS",
        (false, Some(_)) => "GAP",
        (false, None) => "FAIL",
    };
    // The report goes to stdout (seen with --nocapture) and to target/tmp/compat-report.txt,
    // which scripts/test.sh prints: libtest shows a passing test's output to no one.
    use std::fmt::Write as _;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "{:<20} {:<26} {:<50} {:<6} detail",
        "server", "profile", "check", "result"
    );
    for r in &all {
        let detail: String = r.detail.chars().take(90).collect();
        let _ = writeln!(
            report,
            "{:<20} {:<26} {:<50} {:<6} {detail}",
            r.server,
            r.profile,
            r.check,
            status(r)
        );
    }
    let _ = writeln!(report);
    let mut servers: Vec<&str> = all.iter().map(|r| r.server).collect();
    servers.dedup();
    for server in servers {
        let mine: Vec<&Row> = all.iter().filter(|r| r.server == server).collect();
        let count = |s: &str| mine.iter().filter(|r| status(r) == s).count();
        let _ = writeln!(
            report,
            "{server:<20} {} passed, {} failed, {} known gaps{}",
            count("PASS") + count("STALE"),
            count("FAIL"),
            count("GAP"),
            if count("STALE") > 0 {
                format!(", {} known gaps that now pass", count("STALE"))
            } else {
                String::new()
            }
        );
    }
    for (server, check, why) in KNOWN_GAPS {
        let _ = writeln!(report, "known gap: {server} / {check}: {why}");
    }
    println!("\n{report}");
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("compat-report.txt"),
        &report,
    );
    let failed: Vec<String> = all
        .iter()
        .filter(|r| matches!(status(r), "FAIL" | "STALE"))
        .map(|r| match status(r) {
            "STALE" => format!(
                "{} / {}: listed in KNOWN_GAPS but passes now; remove it from the list",
                r.server, r.check
            ),
            _ => format!("{} / {}: {}", r.server, r.check, r.detail),
        })
        .collect();
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
}

/// The Landlock tier (no namespaces) runs real servers too: server-filesystem (node, roots
/// delivered on its command line) and palisade's own fs-server pass every check of their
/// scenarios, the sandbox checks (secret outside the roots, the launcher's environment)
/// included.
#[test]
fn server_filesystem_and_fs_server_work_under_landlock() {
    let mut all = filesystem_on(Ws::with_backend("landlock"));
    all.extend(fs_server_on(Ws::with_backend("landlock")));
    let failed: Vec<String> = all
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} / {}: {}", r.server, r.check, r.detail))
        .collect();
    println!(
        "landlock: {} checks, {} passed",
        all.len(),
        all.len() - failed.len()
    );
    assert!(
        failed.is_empty(),
        "failed under landlock:\n{}",
        failed.join("\n")
    );
}

/// `palisade profiles list|show` and `palisade check --config` report the profiles.
#[test]
fn profiles_commands_show_what_a_profile_yields() {
    let out = Command::new(palisade())
        .args(["profiles", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for name in [
        "server-filesystem",
        "server-everything",
        "server-memory",
        "mcp-server-git",
        "mcp-server-fetch",
        "mcp-server-time",
        "palisade-fs-server",
        "server-sequential-thinking",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }

    let ws = Ws::new();
    let out = Command::new(palisade())
        .args([
            "profiles",
            "show",
            "server-memory",
            "--json",
            "--state-dir-root-unused",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "unknown flags are refused");
    let cfg = ws.config(
        "memory",
        json!({"command": "node", "args": [node_server("server-memory")]}),
    );
    let out = Command::new(palisade())
        .args([
            "profiles",
            "show",
            "server-memory",
            "--server",
            "memory",
            "--json",
            "--config",
            &cfg,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("profiles show --json");
    let state = ws.p("state/memory");
    assert_eq!(
        v["env"]["MEMORY_FILE_PATH"],
        json!(format!("{state}/memory.jsonl"))
    );
    assert_eq!(v["mounts"][0]["path"], json!(state));
    assert_eq!(v["mounts"][0]["access"], json!("rw"));

    // How roots reach a server is shown, the session-dir rule included.
    for (name, words) in [
        ("server-filesystem", "each root appended as an argument"),
        ("mcp-server-git", "never the session sandbox dir"),
        ("mcp-server-time", "MCP roots and bind mounts only"),
    ] {
        let out = Command::new(palisade())
            .args(["profiles", "show", name, "--json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).expect("profiles show --json");
        let roots = v["roots"].as_str().unwrap_or_default();
        assert!(roots.contains(words), "{name}: {roots}");
    }

    let out = Command::new(palisade())
        .args(["check", "--config", &cfg])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("profile: server-memory (package @modelcontextprotocol/server-memory)"),
        "{text}"
    );

    // A broken override is reported with file and field.
    let dir = ws.dir.path().join("profiles");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mine.json"),
        r#"{"description": "x", "reads": []}"#,
    )
    .unwrap();
    let out = Command::new(palisade())
        .args(["profiles", "list", "--profiles-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("mine.json") && err.contains("reads"), "{err}");
}

/// Runs `palisade run ARGS -- CMD` with `stdin` written and closed; returns (status ok, stderr).
fn run_with_input(args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(palisade())
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn has_strace() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The learn aid names what an unknown server was refused: server-memory without its
/// profile tries to write its graph next to its code (read-only); with the profile, it
/// writes into its state dir and nothing is refused there.
#[test]
fn trace_denials_names_what_a_server_without_a_profile_was_refused() {
    if !bwrap_usable() || !has_strace() {
        support::skip("needs bubblewrap namespaces and strace");
        return;
    }
    let ws = Ws::new();
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_entities","arguments":{"entities":[{"name":"a","entityType":"t","observations":["x"]}]}}}"#,
        "\n"
    );
    let server = node_server("server-memory");
    let state = ws.p("state");
    let (_, without) = run_with_input(
        &[
            "--profile",
            "none",
            "--trace-denials",
            "--",
            "node",
            &server,
        ],
        input,
    );
    let dist = Path::new(&server).parent().unwrap().display().to_string();
    assert!(
        without
            .lines()
            .any(|l| l.contains("write") && l.contains(&dist) && l.contains("memory")),
        "no write denial under {dist} reported:\n{without}"
    );
    let (_, with) = run_with_input(
        &[
            "--state-dir",
            &state,
            "--trace-denials",
            "--",
            "node",
            &server,
        ],
        input,
    );
    assert!(with.contains("trace-denials:"), "{with}");
    assert!(
        !with
            .lines()
            .any(|l| l.contains("write") && l.contains("memory")),
        "the profile should have made the write succeed:\n{with}"
    );
    assert!(Path::new(&state)
        .join("server-memory/memory.jsonl")
        .exists());
}

/// Control and attack for the trace: the same read succeeds unsandboxed and is reported as
/// refused inside.
#[test]
fn trace_denials_reports_a_host_file_the_sandbox_hides() {
    if !bwrap_usable() || !has_strace() {
        support::skip("needs bubblewrap namespaces and strace");
        return;
    }
    let ws = Ws::new();
    let secret = ws.p("secret/secret.txt");
    let script = format!("open({secret:?}).read()");
    let control = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(control.success(), "control: unsandboxed read must work");
    let (ok, err) = run_with_input(
        &["--trace-denials", "--", "/usr/bin/python3", "-c", &script],
        "",
    );
    assert!(!ok, "the read must fail inside the sandbox");
    assert!(
        err.lines()
            .any(|l| l.contains("read") && l.contains(&secret) && l.contains("ENOENT")),
        "{err}"
    );
}

/// A second, independent client: the MCP Inspector CLI (pinned in tests/deps/package.json)
/// lists the tools of `palisade serve` and calls one (mcp-server-time in its sandbox).
#[test]
fn inspector_cli_lists_and_calls_tools_through_palisade() {
    if skipped_without_bwrap() {
        return;
    }
    let inspector = deps().join("node_modules/.bin/mcp-inspector");
    assert!(
        inspector.exists(),
        "{} missing: run scripts/install-test-deps.sh",
        inspector.display()
    );
    let ws = Ws::new();
    let cfg = ws.config("time", json!({"command": venv_bin("mcp-server-time")}));
    let inspect = |extra: &[&str]| -> Value {
        let out = Command::new(&inspector)
            .arg("--cli")
            .args(extra)
            .args([
                "--",
                palisade(),
                "--log-level",
                "warn",
                "serve",
                "--config",
                &cfg,
            ])
            // The Inspector keeps a catalog file; keep it in the workspace, not in HOME.
            .env(
                "MCP_CATALOG_PATH",
                ws.dir.path().join("inspector-catalog.json"),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "inspector {extra:?}: not JSON ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let listed = inspect(&["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["time__get_current_time", "time__convert_time"]);
    let called = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "time__convert_time",
        "--tool-arg",
        "source_timezone=America/New_York",
        "time=16:30",
        "target_timezone=Asia/Tokyo",
    ]);
    let text = called["content"][0]["text"].as_str().unwrap_or_default();
    assert_ne!(called["isError"], json!(true), "{called}");
    assert!(text.contains("\"timezone\": \"Asia/Tokyo\""), "{called}");
}

/// A profile's relaxation reaches the sandbox: with `relax.sharePid` the command sees the
/// host's processes, without it only its own (the control).
#[test]
fn a_profile_from_a_directory_relaxes_the_pid_namespace_and_unknown_names_are_refused() {
    if skipped_without_bwrap() {
        return;
    }
    let ws = Ws::new();
    let dir = ws.profiles(&[(
        "shared-pids",
        r#"{"description": "test", "relax": {"sharePid": "test of the relaxation"}}"#,
    )]);
    let count = |extra: &[&str]| -> usize {
        let out = run_ok(Command::new(palisade()).arg("run").args(extra).args([
            "--",
            "/bin/sh",
            "-c",
            "ls /proc | grep -c '^[0-9]'",
        ]));
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let dir_s = dir.display().to_string();
    // bwrap's init, sh, ls, grep.
    let own = count(&[]);
    let shared = count(&["--profiles-dir", &dir_s, "--profile", "shared-pids"]);
    assert!(
        own <= 5,
        "a private PID namespace shows only the sandbox's processes: {own}"
    );
    assert!(
        shared > own,
        "sharePid should show the host's processes: {shared} vs {own}"
    );

    let out = Command::new(palisade())
        .args(["run", "--profile", "no-such-profile", "--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no-such-profile") && err.contains("server-memory"),
        "{err}"
    );
}

/// `palisade run` delivers its grants per the profile's `rootsAs` too: as arguments and as a
/// joined variable (a profile from a directory), and not at all without the profile (the
/// control: the command itself adds nothing).
#[test]
fn run_delivers_its_grants_per_the_profiles_roots_as() {
    if skipped_without_bwrap() {
        return;
    }
    let ws = Ws::new();
    let dir = ws.profiles(&[
        (
            "dirs-as-args",
            r#"{"description": "test", "rootsAs": {"flag": "--dir"}}"#,
        ),
        (
            "dirs-in-env",
            r#"{"description": "test", "rootsAs": {"env": "DIRS", "separator": ","}}"#,
        ),
    ]);
    let (granted, other) = (ws.p("granted"), ws.p("secret"));
    let run = |profile: &str| -> String {
        let out = run_ok(
            Command::new(palisade())
                .args(["run", "--profiles-dir"])
                .arg(&dir)
                .args(["--profile", profile, "--rw", &granted, "--ro", &other])
                .args([
                    "--",
                    "/bin/sh",
                    "-c",
                    r#"echo "args:$*"; echo "env:${DIRS:-unset}""#,
                    "sh",
                ]),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // `run` grants in its own order: the --ro directories, then the --rw ones.
    assert_eq!(
        run("dirs-as-args"),
        format!("args:--dir {other} --dir {granted}\nenv:unset\n")
    );
    assert_eq!(
        run("dirs-in-env"),
        format!("args:\nenv:{other},{granted}\n")
    );
    assert_eq!(run("none"), "args:\nenv:unset\n");
}

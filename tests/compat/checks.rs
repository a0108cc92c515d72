//! Each real server's checks, as rows of the table: what it must do inside its profile and
//! what its sandbox must refuse (a local page stands in for the web where `fetch` needs one).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::{node_server, palisade, venv_bin, write_policy};
use crate::*;

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

pub(crate) fn filesystem() -> Vec<Row> {
    filesystem_on(Ws::new())
}

pub(crate) fn filesystem_on(ws: Ws) -> Vec<Row> {
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
pub(crate) fn filesystem_widen() -> Vec<Row> {
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

pub(crate) fn fs_server() -> Vec<Row> {
    fs_server_on(Ws::new())
}

pub(crate) fn fs_server_on(ws: Ws) -> Vec<Row> {
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

pub(crate) fn everything() -> Vec<Row> {
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

pub(crate) fn memory() -> Vec<Row> {
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

pub(crate) fn git() -> Vec<Row> {
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

pub(crate) fn sequential_thinking() -> Vec<Row> {
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

pub(crate) fn time() -> Vec<Row> {
    let ws = Ws::new();
    let cfg = ws.config("time", json!({"command": venv_bin("mcp-server-time")}));
    rows(
        "mcp-server-time",
        "mcp-server-time",
        drive(&ws, "time", &ws.params("time"), &cfg),
    )
}

pub(crate) fn fetch() -> Vec<Row> {
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

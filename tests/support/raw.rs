//! A raw JSON-RPC line client over `palisade serve`'s stdio: it sees exactly the bytes a
//! client sees, and answers `roots/list` with the agent roots a test declares.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{palisade, Workspace};

/// `palisade serve` driven over its stdio, one JSON-RPC line at a time.
pub struct Serve {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    errlog: PathBuf,
    /// The agent's declared roots (`file://` URIs), answered to `roots/list`; `None`: the
    /// client does not declare the roots capability.
    pub agent_roots: Option<Vec<String>>,
    /// Notifications read while waiting for a response, oldest first.
    pub seen: Vec<Value>,
}

/// Guards a test against a hung gateway; never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

impl Serve {
    pub fn start(ws: &Workspace, config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Serve {
        let errlog = ws.errlog();
        let mut cmd = Command::new(palisade());
        cmd.arg("serve")
            .arg("--config")
            .arg(config)
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("PALISADE_LOG_LEVEL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&errlog).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let lines = super::read_lines(stdout);
        Serve {
            child,
            stdin,
            lines,
            errlog,
            agent_roots: None,
            seen: Vec::new(),
        }
    }

    pub fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its response, skipping notifications and other ids.
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.recv_timeout(PATIENCE).unwrap_or_else(|_| {
                panic!(
                    "no response to {method} (id {id}); stderr:\n{}",
                    self.stderr()
                )
            });
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) && v.get("method").is_none() {
                return v;
            }
            if v.get("id").is_none() && v.get("method").is_some() {
                self.seen.push(v);
                continue;
            }
            if v["method"] == "roots/list" {
                let roots: Vec<Value> = self
                    .agent_roots
                    .iter()
                    .flatten()
                    .map(|u| json!({"uri": u}))
                    .collect();
                self.send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {"roots": roots}}));
            }
        }
    }

    /// The first notification `method` the gateway sent (seen already, or waited for).
    pub fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self.seen.iter().position(|n| n["method"] == method) {
            return self.seen.remove(i);
        }
        loop {
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no {method} notification; stderr:\n{}", self.stderr()));
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["method"] == method && v.get("id").is_none() {
                return v;
            }
            if v.get("id").is_none() {
                self.seen.push(v);
            }
        }
    }

    pub fn initialize(&mut self) -> Value {
        let caps = match self.agent_roots {
            Some(_) => json!({"roots": {"listChanged": true}}),
            None => json!({}),
        };
        let r = self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": caps,
                   "clientInfo": {"name": "first-contact", "version": "1"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    pub fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": args}))
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.errlog).unwrap_or_default()
    }

    /// Closes stdin (end of input) and waits for the gateway to exit.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let status = wait_bounded(&mut self.child);
        let err = self.stderr();
        (status, err)
    }
}

pub fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    wait_or_show(child, None)
}

/// As `wait_bounded`, and a gateway that does not exit is shown by the end of its log.
pub fn wait_bounded_logged(
    child: &mut Child,
    errlog: &std::path::Path,
) -> std::process::ExitStatus {
    wait_or_show(child, Some(errlog))
}

fn wait_or_show(child: &mut Child, errlog: Option<&std::path::Path>) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = errlog
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            let tail: String = log
                .chars()
                .rev()
                .take(6000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            panic!("palisade did not exit within {PATIENCE:?}; the end of its log:\n{tail}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The first text block of a tool result, else the whole response.
pub fn text_of(resp: &Value) -> String {
    resp["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| resp.to_string())
}

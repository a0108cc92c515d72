//! A running `palisade serve` (the faulty server and the fs-server behind it) and the
//! byte-level client in front of it: lines in, responses claimed by id, the reader paused to
//! play an agent that does not read, and the audit checked against the calls that reached the
//! pipeline. Dropping it reaps serve.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::*;

/// A running `palisade serve` and the byte-level client in front of it.
pub(crate) struct Gw {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(crate) rx: Receiver<Value>,
    /// While set, the reader thread stops reading serve's stdout (an agent that does not
    /// read: serve's writes block once the pipe is full).
    pub(crate) paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Responses not yet claimed, by id.
    pub(crate) responses: HashMap<String, Value>,
    /// Every notification and request the gateway sent to the client.
    pub(crate) from_gateway: Vec<Value>,
    next: u64,
    /// Ids of the `tools/call` requests that reached the pipeline (routed to a server).
    audited_calls: Vec<String>,
    dir: tempfile::TempDir,
}

pub(crate) fn id_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Gw {
    /// Starts serve with the faulty server and the fs-server; `faulty_limits` is the faulty
    /// server's `sandbox.limits` block.
    pub(crate) fn start(faulty_limits: Value, settings: Value) -> Gw {
        Gw::start_with(faulty_limits, settings, json!({}), true)
    }

    /// `start`, with `faulty_env` in the faulty server's environment; waits for the faulty
    /// server's tools only when `wait_faulty`.
    pub(crate) fn start_with(
        faulty_limits: Value,
        settings: Value,
        faulty_env: Value,
        wait_faulty: bool,
    ) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("fs-root");
        std::fs::create_dir_all(&root).unwrap();
        let mut faulty_sandbox = json!({});
        if faulty_limits != Value::Null {
            faulty_sandbox["limits"] = faulty_limits;
        }
        let servers = json!({
            "faulty": {
                "command": deps().join("venv/bin/python").display().to_string(),
                "args": [faulty_server()],
                "env": faulty_env,
                "sandbox": faulty_sandbox,
            },
            "fs": {
                "command": env!("CARGO_BIN_EXE_palisade"),
                "args": ["fs-server", "--root", root.display().to_string()],
                "sandbox": {"filesystem": {"allowWrite": [root.display().to_string()]}},
            },
        });
        let mut settings = settings;
        settings["sandboxDir"] = json!(dir.path().join("sandbox").display().to_string());
        settings["sandboxPolicy"] = json!("warn");
        settings["policy"] = json!(Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/allow-all-policy.json")
            .display()
            .to_string());
        if settings.get("callTimeout").is_none() {
            settings["callTimeout"] = json!(20);
        }
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            serde_json::to_vec_pretty(&json!({"mcpServers": servers, "palisade": settings}))
                .unwrap(),
        )
        .unwrap();
        let errlog = std::fs::File::create(dir.path().join("serve-stderr.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--audit-log")
            .arg(dir.path().join("audit.jsonl"))
            .env("RUST_LOG", "info,rmcp=warn")
            .env("NO_COLOR", "1")
            .env("HOME", dir.path())
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(errlog)
            .spawn()
            .expect("spawn palisade serve");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pause = paused.clone();
        std::thread::spawn(move || {
            // Every line the gateway writes must be JSON: a non-JSON line is reported as a
            // string (and fails the test when it is looked at).
            let mut lines = BufReader::with_capacity(4096, stdout).split(b'\n');
            loop {
                while pause.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let Some(Ok(line)) = lines.next() else { break };
                let v = serde_json::from_slice(&line)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&line).into()));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut gw = Gw {
            child,
            stdin,
            rx,
            paused,
            responses: HashMap::new(),
            from_gateway: Vec::new(),
            next: 0,
            audited_calls: Vec::new(),
            dir,
        };
        let init = gw.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "faults-test", "version": "0"}}),
        );
        let r = gw.response(&init);
        assert!(r.get("result").is_some(), "initialize: {r}");
        gw.send_line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        if wait_faulty {
            gw.wait_listed("faulty__echo");
        }
        gw.wait_listed("fs__list_roots");
        gw
    }

    /// Waits (bounded by ANSWER_LIMIT, a hang guard) until serve's stderr contains `text`.
    pub(crate) fn wait_stderr(&self, text: &str) -> bool {
        let deadline = Instant::now() + ANSWER_LIMIT;
        while Instant::now() < deadline {
            if self.stderr_text().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve-stderr.log")).unwrap_or_default()
    }

    pub(crate) fn send_line(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> String {
        self.next += 1;
        let id = format!("t-{}", self.next);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&serde_json::to_vec(&msg).unwrap());
        id
    }

    /// Sends a tools/call; it reaches the pipeline when the tool is listed (the tests only
    /// call listed tools), so it must have exactly one audit record.
    pub(crate) fn send_call(&mut self, tool: &str, args: Value) -> String {
        let id = self.request("tools/call", json!({"name": tool, "arguments": args}));
        self.audited_calls.push(id.clone());
        id
    }

    /// Reads the gateway's output until the response to `id` arrives.
    pub(crate) fn response(&mut self, id: &str) -> Value {
        let deadline = Instant::now() + ANSWER_LIMIT;
        loop {
            if let Some(v) = self.responses.remove(id) {
                return v;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(v) => self.take(v),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no answer to {id} within {ANSWER_LIMIT:?} (a hang)\nserve stderr:\n{}",
                    self.stderr_text()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "serve closed stdout before answering {id}\nserve stderr:\n{}",
                    self.stderr_text()
                ),
            }
        }
    }

    pub(crate) fn take(&mut self, v: Value) {
        match &v {
            Value::String(s) => panic!("serve wrote a non-JSON line on stdout: {s:.200}"),
            Value::Object(o) if o.contains_key("method") => self.from_gateway.push(v),
            Value::Object(o) => {
                let id = o.get("id").map(id_key).unwrap_or_default();
                self.responses.insert(id, v);
            }
            other => panic!("serve wrote a non-object: {other}"),
        }
    }

    /// A tools/call and its outcome: (ok, text of the result or the error message).
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let id = self.send_call(tool, args);
        outcome(&self.response(&id))
    }

    pub(crate) fn tools(&mut self) -> Vec<String> {
        let id = self.request("tools/list", json!({}));
        let r = self.response(&id);
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Waits until `tool` is in the catalog (a restarted server is back).
    pub(crate) fn wait_listed(&mut self, tool: &str) {
        let deadline = Instant::now() + ANSWER_LIMIT;
        while !self.tools().iter().any(|t| t == tool) {
            assert!(
                Instant::now() < deadline,
                "{tool} never (re)appeared\nserve stderr:\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// (VmRSS, VmHWM) of serve, in kB.
    pub(crate) fn rss_kb(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The checks every fault ends with: serve runs, its memory stayed bounded, the healthy
    /// server answers, and the faulty server answers again (restarted if it had to be).
    pub(crate) fn still_healthy(&mut self, label: &str) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "{label}: serve exited\n{}",
            self.stderr_text()
        );
        let (rss, hwm) = self.rss_kb();
        println!("{label}: serve VmRSS {rss} kB, VmHWM {hwm} kB");
        assert!(
            hwm < RSS_BOUND_KB,
            "{label}: serve's peak RSS {hwm} kB is over {RSS_BOUND_KB} kB"
        );
        let (ok, text) = self.call("fs__list_roots", json!({}));
        assert!(ok, "{label}: the healthy server must answer: {text}");
        self.wait_listed("faulty__echo");
        let (ok, text) = self.call("faulty__echo", json!({"text": label}));
        assert!(
            ok && text == format!("echo: {label}"),
            "{label}: faulty server works again: {text}"
        );
    }

    /// Closes stdin, waits for serve to exit (it reaps its children first); returns its exit
    /// code.
    pub(crate) fn finish(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = Instant::now() + ANSWER_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Drain what is left of stdout into the bookkeeping.
                while let Ok(v) = self.rx.recv_timeout(Duration::from_millis(100)) {
                    self.take(v);
                }
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit after stdin EOF"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The audit log holds exactly one record per call that reached the pipeline, and its
    /// hash chain verifies.
    pub(crate) fn audit_complete(&self) -> Vec<Value> {
        let path = self.dir.path().join("audit.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let records: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect();
        // Tool calls are the records without a `kind`; the others (a server's relayed or
        // refused sampling request, say) are checked by the tests that cause them.
        let mut seen = HashMap::<String, usize>::new();
        for r in records.iter().filter(|r| r.get("kind").is_none()) {
            *seen.entry(id_key(&r["requestId"])).or_default() += 1;
        }
        for id in &self.audited_calls {
            assert_eq!(
                seen.get(id).copied().unwrap_or(0),
                1,
                "call {id} must have exactly one audit record; records: {seen:?}"
            );
        }
        assert_eq!(
            seen.values().sum::<usize>(),
            self.audited_calls.len(),
            "one record per call, no more: {seen:?}"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
            .args(["audit", "verify"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "audit verify: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        records
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if self.child.try_wait().ok().flatten().is_none() {
            // Give serve its orderly shutdown (it reaps its servers); kill only our own
            // child, by its id, if it does not finish.
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

//! Fault suite: `palisade serve` with a faulty server (tests/servers/faulty_server.py, raw
//! JSON-RPC, each tool a fault on demand) and a healthy one (the built-in `palisade
//! fs-server`), driven by a client that writes JSON-RPC lines to serve's stdin itself, so
//! that it can send garbage too.
//!
//! For every fault: serve is still running, the healthy server still answers, the faulting
//! call got an answer or an error (the waits are generous guards against hangs, never timing
//! assertions), the gateway's peak RSS (VmHWM) stays under `RSS_BOUND_KB`, and the audit log
//! holds exactly one record per call that reached the pipeline (`palisade audit verify`
//! passes too). Every test reaps serve, and serve reaps its servers; everything lives in a
//! temporary directory that is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/skip.rs"]
mod skip;

/// The gateway's peak resident memory must stay under this, whatever the servers or the
/// client do (a 100 MB line, tens of MB of floods, 1,000 concurrent calls). Its idle RSS is
/// about 20 MB; one maximal (16 MiB) message may be held a few times over while it is
/// parsed and re-serialised.
const RSS_BOUND_KB: u64 = 200 * 1024;
/// Guards against a hang only (generous on a loaded 2-core machine); never a timing claim.
const ANSWER_LIMIT: Duration = Duration::from_secs(120);

fn deps() -> PathBuf {
    let dir = std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
    assert!(
        dir.join("venv/bin/python").exists(),
        "test dependencies missing at {} (set PALISADE_TEST_DEPS)",
        dir.display()
    );
    dir
}

fn faulty_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/faulty_server.py")
        .display()
        .to_string()
}

/// A running `palisade serve` and the byte-level client in front of it.
struct Gw {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    /// While set, the reader thread stops reading serve's stdout (an agent that does not
    /// read: serve's writes block once the pipe is full).
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Responses not yet claimed, by id.
    responses: HashMap<String, Value>,
    /// Every notification and request the gateway sent to the client.
    from_gateway: Vec<Value>,
    next: u64,
    /// Ids of the `tools/call` requests that reached the pipeline (routed to a server).
    audited_calls: Vec<String>,
    dir: tempfile::TempDir,
}

fn id_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Gw {
    /// Starts serve with the faulty server and the fs-server; `faulty_limits` is the faulty
    /// server's `sandbox.limits` block.
    fn start(faulty_limits: Value, settings: Value) -> Gw {
        Gw::start_with(faulty_limits, settings, json!({}), true)
    }

    /// `start`, with `faulty_env` in the faulty server's environment; waits for the faulty
    /// server's tools only when `wait_faulty`.
    fn start_with(
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
    fn wait_stderr(&self, text: &str) -> bool {
        let deadline = Instant::now() + ANSWER_LIMIT;
        while Instant::now() < deadline {
            if self.stderr_text().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve-stderr.log")).unwrap_or_default()
    }

    fn send_line(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> String {
        self.next += 1;
        let id = format!("t-{}", self.next);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&serde_json::to_vec(&msg).unwrap());
        id
    }

    /// Sends a tools/call; it reaches the pipeline when the tool is listed (the tests only
    /// call listed tools), so it must have exactly one audit record.
    fn send_call(&mut self, tool: &str, args: Value) -> String {
        let id = self.request("tools/call", json!({"name": tool, "arguments": args}));
        self.audited_calls.push(id.clone());
        id
    }

    /// Reads the gateway's output until the response to `id` arrives.
    fn response(&mut self, id: &str) -> Value {
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

    fn take(&mut self, v: Value) {
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
    fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let id = self.send_call(tool, args);
        outcome(&self.response(&id))
    }

    fn tools(&mut self) -> Vec<String> {
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
    fn wait_listed(&mut self, tool: &str) {
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
    fn rss_kb(&self) -> (u64, u64) {
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
    fn still_healthy(&mut self, label: &str) {
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
    fn finish(&mut self) -> Option<i32> {
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
    fn audit_complete(&self) -> Vec<Value> {
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

/// (ok, text): a result's first text block, or the error's message.
fn outcome(r: &Value) -> (bool, String) {
    if let Some(res) = r.get("result") {
        let text = res["content"][0]["text"].as_str().unwrap_or("").to_string();
        (res["isError"] != json!(true), text)
    } else {
        (
            false,
            r["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }
}

/// Every process whose parent chain leads to `root` (from /proc).
fn descendants(root: u32) -> HashSet<u32> {
    let mut parent = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: split after the last ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if let Some(ppid) = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut out = HashSet::new();
    let mut changed = true;
    while changed {
        changed = false;
        for (&pid, &ppid) in &parent {
            if (ppid == root || out.contains(&ppid)) && out.insert(pid) {
                changed = true;
            }
        }
    }
    out
}

/// True while `pid` runs. A zombie has finished: serve reaps its own children (it exits only
/// after that); bwrap's inner processes, orphaned when bwrap dies, are reaped by init.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            after.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------------------
// Downstream faults
// ---------------------------------------------------------------------------------------

#[test]
fn a_server_that_crashes_mid_call_fails_that_call_with_its_exit_and_comes_back() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__crash", json!({"after": 0.3}));
    assert!(!ok, "the crashed call is an error: {text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("exit status: 3"),
        "the agent is told how it ended: {text}"
    );
    gw.still_healthy("crash");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_hung_call_ends_at_the_call_timeout_and_the_server_keeps_serving() {
    let mut gw = Gw::start(Value::Null, json!({"callTimeout": 3}));
    let (ok, text) = gw.call("faulty__hang", json!({}));
    assert!(!ok);
    assert!(
        text.contains("server `faulty` did not answer within 3s"),
        "{text}"
    );
    gw.still_healthy("hang");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn stdout_garbage_invalid_json_and_unknown_ids_are_ignored() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__garbage", json!({"mb": 20}));
    assert!(ok, "garbage: {text}");
    assert!(text.starts_with("garbage: "), "{text}");
    gw.still_healthy("garbage");
    let (ok, text) = gw.call("faulty__invalid_json", json!({"count": 3000}));
    assert_eq!((ok, text.as_str()), (true, "invalid lines: 3000"));
    gw.still_healthy("invalid json");
    let (ok, text) = gw.call("faulty__unknown_ids", json!({"count": 2000}));
    assert_eq!((ok, text.as_str()), (true, "unknown ids: 4000"));
    gw.still_healthy("unknown ids");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn unsolicited_notifications_do_not_reach_the_agent_as_anything_but_logs() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__notify_flood", json!({"count": 20000}));
    assert_eq!((ok, text.as_str()), (true, "notified 20000"));
    gw.still_healthy("notification flood");
    assert_eq!(gw.finish(), Some(0));
    // Progress for a token nobody registered is dropped; log messages are relayed.
    let progress = gw
        .from_gateway
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 0, "progress for unknown tokens is not relayed");
    gw.audit_complete();
}

#[test]
fn a_stderr_flood_is_drained_with_bounded_memory() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__stderr_flood", json!({"mb": 40, "newlines": true}));
    assert_eq!((ok, text.as_str()), (true, "stderr: 41943040 bytes"));
    gw.still_healthy("stderr flood (lines)");
    let (ok, text) = gw.call("faulty__stderr_flood", json!({"mb": 40, "newlines": false}));
    assert_eq!((ok, text.as_str()), (true, "stderr: 41943040 bytes"));
    gw.still_healthy("stderr flood (one 40 MB line)");
    let log = gw.stderr_text();
    assert!(log.contains("the rest is discarded"), "the log is capped");
    assert!(
        log.len() < 4 * 1024 * 1024,
        "serve's own log stays small: {}",
        log.len()
    );
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_100_mb_line_is_a_protocol_fault_the_server_is_restarted_and_memory_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__huge_line", json!({"mb": 100}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("16777216-byte limit")
            && text.contains("protocol fault"),
        "the call names the fault: {text}"
    );
    gw.still_healthy("100 MB line");
    let log = gw.stderr_text();
    assert!(log.contains("protocol fault"), "the log says it too");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_sampling_request_is_refused_and_never_reaches_the_agent() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__sampling", json!({}));
    assert!(ok, "{text}");
    assert!(
        text.starts_with("error: "),
        "the server's sampling request got an error: {text}"
    );
    gw.still_healthy("sampling");
    assert_eq!(gw.finish(), Some(0));
    let asked: Vec<&Value> = gw
        .from_gateway
        .iter()
        .filter(|m| m.get("id").is_some())
        .collect();
    assert!(asked.is_empty(), "no request reached the agent: {asked:?}");
    let records = gw.audit_complete();
    let refused: Vec<&Value> = records.iter().filter(|r| r["kind"] == "sampling").collect();
    assert!(
        refused.len() == 1 && refused[0]["result"]["status"] == "denied",
        "the refused sampling request is audited as denied: {refused:?}"
    );
}

#[test]
fn a_roots_list_flood_is_answered_and_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__roots_flood", json!({"count": 5000}));
    assert!(ok, "{text}");
    assert_eq!(text, "roots answers: 5000/5000");
    gw.still_healthy("roots/list flood");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn output_over_the_rate_limit_kills_and_restarts_the_server_and_says_why() {
    // 1 MiB/s (bursts of 8 MiB): the flood passes it within a second or so.
    let mut gw = Gw::start(json!({"outputBytesPerSecond": 1048576}), json!({}));
    let (ok, text) = gw.call("faulty__rate_flood", json!({}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("output-rate limit (1048576 bytes/s")
            && text.contains("sandbox.limits.outputBytesPerSecond"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("output-rate limit");
    assert!(
        gw.stderr_text().contains("output-rate limit"),
        "the log says it"
    );
    // Ordinary traffic stays under the same limit.
    for i in 0..50 {
        let (ok, text) = gw.call("faulty__echo", json!({"text": i.to_string()}));
        assert!(ok, "{text}");
    }
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// A server floods `roots/list` requests and stops reading its stdin: the answers cannot be
/// written and must not pile up in the gateway (regression: 1 GB before `stdin_watch.rs`).
/// Its requests are held while its stdin is full; still stalled after the stall limit (the
/// call timeout, 5 s here), it is a protocol fault: killed, restarted, the call told why.
#[test]
fn a_roots_list_flood_from_a_server_that_does_not_read_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({"callTimeout": 5}));
    let id = gw.send_call(
        "faulty__roots_flood_deaf",
        json!({"count": 300000, "after": 30}),
    );
    let mut peak = 0;
    let answer = loop {
        if let Ok(v) = gw.rx.recv_timeout(Duration::from_millis(100)) {
            gw.take(v);
        }
        peak = peak.max(gw.rss_kb().1);
        if let Some(v) = gw.responses.remove(&id) {
            break v;
        }
    };
    let (ok, text) = outcome(&answer);
    println!("deaf roots flood: serve VmHWM {peak} kB; call: {text}");
    assert!(peak < RSS_BOUND_KB, "serve's peak RSS {peak} kB");
    // The call timeout and the stall limit are the same 5 s: either ends the call first.
    assert!(!ok, "{text}");
    assert!(
        text.contains("kept sending requests without reading its stdin for 5s")
            || text.contains("did not answer within 5s"),
        "{text}"
    );
    gw.still_healthy("roots/list flood, server not reading");
    assert!(
        gw.stderr_text()
            .contains("kept sending requests without reading its stdin for 5s (protocol fault)"),
        "the stall was a fault: the server was killed and restarted"
    );
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// The existing `sandbox.limits.memoryMb`: a server killed by it is restarted like a crash,
/// and the call it was running is told which limit killed it. Control: the same allocation
/// succeeds without the limit.
#[test]
fn a_memory_limit_kill_tells_the_in_flight_call_why() {
    // Without a cgroup the memory limit is RLIMIT_DATA: allocations fail, nothing is killed
    // (tests/limits.rs covers that).
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--json"])
        .output()
        .expect("run palisade check");
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    if report["resource_limits"]["memory"] != true {
        skip::host_skip(
            "faults::a_memory_limit_kill_tells_the_in_flight_call_why",
            "palisade check: servers get no cgroup on this machine",
        );
        return;
    }
    let mut control = Gw::start(Value::Null, json!({}));
    let (ok, text) = control.call("faulty__hog", json!({"mb": 300}));
    assert_eq!((ok, text.as_str()), (true, "allocated 300 MiB"), "control");
    assert_eq!(control.finish(), Some(0));
    control.audit_complete();
    drop(control);

    let mut gw = Gw::start(json!({"memoryMb": 128}), json!({}));
    let (ok, text) = gw.call("faulty__hog", json!({"mb": 300}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("memory limit reached (128 MB, sandbox.limits.memoryMb)"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("memory limit");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// The existing `sandbox.limits.cpuSeconds`: the kernel's SIGXCPU ends the server, and the
/// call it was running is told it was the CPU limit. Control: the same spin succeeds
/// without the limit.
#[test]
fn a_cpu_limit_kill_tells_the_in_flight_call_why() {
    let mut control = Gw::start(Value::Null, json!({}));
    let (ok, text) = control.call("faulty__spin", json!({"after": 3}));
    assert!(ok && text.starts_with("spun "), "control: {text}");
    assert_eq!(control.finish(), Some(0));
    control.audit_complete();
    drop(control);

    let mut gw = Gw::start(json!({"cpuSeconds": 2}), json!({}));
    let (ok, text) = gw.call("faulty__spin", json!({"after": 30}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("CPU time limit reached (2 s, sandbox.limits.cpuSeconds)"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("cpu limit");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

// ---------------------------------------------------------------------------------------
// Upstream faults

/// A server floods log notifications while the agent does not read: serve cannot relay them
/// (its stdout is full), and must not queue them without bound. Regression: before the relay
/// budget (`UpstreamLink::for_relay`) serve's RSS reached 775 MB here.
#[test]
fn a_notification_flood_to_an_agent_that_does_not_read_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    gw.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    let id = gw.send_call("faulty__notify_flood", json!({"count": 400000}));
    let mut peak = 0;
    for _ in 0..80 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(gw.rss_kb().1);
    }
    gw.paused.store(false, std::sync::atomic::Ordering::SeqCst);
    println!("agent not reading: serve VmHWM {peak} kB");
    assert!(
        peak < RSS_BOUND_KB,
        "serve's peak RSS {peak} kB while the agent stalled"
    );
    let (ok, text) = outcome(&gw.response(&id));
    assert_eq!((ok, text.as_str()), (true, "notified 400000"));
    gw.still_healthy("flood to a stalled agent");
    assert!(
        gw.stderr_text()
            .contains("notification(s) from servers dropped"),
        "the drops are logged"
    );
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

// ---------------------------------------------------------------------------------------

#[test]
fn malformed_lines_and_unknown_methods_from_the_client_do_not_stop_the_session() {
    let mut gw = Gw::start(Value::Null, json!({}));
    gw.send_line(b"{\"jsonrpc\": \"2.0\", \"id\": ");
    gw.send_line(b"not json at all");
    gw.send_line(b"\xff\xfe\xfd");
    gw.send_line(b"[1, 2, 3]");
    let id = gw.request("no/such/method", json!({}));
    let r = gw.response(&id);
    assert_eq!(r["error"]["code"], -32601, "unknown method: {r}");
    let id = gw.request("ping", json!({}));
    assert!(gw.response(&id).get("result").is_some());
    gw.still_healthy("malformed client input");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// A client message over the 16 MiB line limit is not read into memory: serve answers the
/// request (its id is read from the line's first bytes) with an error, and goes on.
#[test]
fn a_huge_client_message_gets_an_error_and_the_session_goes_on() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let mut huge = br#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"faulty__echo","arguments":{"text":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'h', 40 * 1024 * 1024));
    huge.extend(br#""}}}"#);
    gw.send_line(&huge);
    drop(huge);
    let r = gw.response("huge");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let text = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("over the 16777216-byte limit of one message"),
        "{text}"
    );
    gw.still_healthy("40 MB client message");
    assert_eq!(gw.finish(), Some(0));
    // It never reached the pipeline: no audit record (`audit_complete` counts exactly).
    gw.audit_complete();
}

#[test]
fn a_thousand_concurrent_calls_are_all_answered_and_audited() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let mut ids = Vec::new();
    for i in 0..1000 {
        let (tool, args) = if i % 2 == 0 {
            ("faulty__echo", json!({"text": i.to_string()}))
        } else {
            ("fs__list_roots", json!({}))
        };
        ids.push((i, gw.send_call(tool, args)));
    }
    for (i, id) in ids {
        let (ok, text) = outcome(&gw.response(&id));
        assert!(ok, "call {i}: {text}");
        if i % 2 == 0 {
            assert_eq!(text, format!("echo: {i}"));
        }
    }
    gw.still_healthy("1000 concurrent calls");
    assert_eq!(gw.finish(), Some(0));
    let records = gw.audit_complete();
    assert!(records.len() >= 1000);
}

#[test]
fn a_client_that_disconnects_mid_call_gets_its_call_audited_and_every_child_reaped() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, _) = gw.call("faulty__echo", json!({"text": "before"}));
    assert!(ok);
    let children = descendants(gw.pid());
    assert!(children.len() >= 2, "saw the servers: {children:?}");
    let hung = gw.send_call("faulty__hang", json!({}));
    // Let the call reach the server, then go away: stdin closed, stdout unread.
    std::thread::sleep(Duration::from_millis(500));
    let code = gw.finish();
    assert_eq!(code, Some(0), "serve exits cleanly\n{}", gw.stderr_text());
    let left: Vec<String> = children
        .iter()
        .filter(|p| alive(**p))
        .map(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            format!(
                "{p}: {} [{stat}]",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            )
        })
        .collect();
    assert!(left.is_empty(), "every child reaped: {left:?}");
    let records = gw.audit_complete();
    let rec = records
        .iter()
        .find(|r| id_key(&r["requestId"]) == hung)
        .expect("the in-flight call has its record");
    assert_eq!(rec["result"]["status"], "error", "{rec}");
    assert!(
        rec["result"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled"),
        "{rec}"
    );
}

/// Issue 23, finding 5 (regression: `serve` answered the agent's `initialize` only once every
/// server was up, so one slow server held up the healthy ones). With `readyTimeout` 1 the
/// agent is answered while a server that lists for about 6 s is still starting: the healthy
/// server's tools are there, the slow one's are not, and it joins later, announced with
/// `notifications/tools/list_changed`. The control: without `readyTimeout` the agent waits,
/// and its first list has the slow server's tools.
#[test]
fn a_slow_server_joins_late_instead_of_holding_up_the_agent() {
    let slow = json!({"FAULTY_PAGES": "20", "FAULTY_PAGE_DELAY": "0.3"});
    let mut gw = Gw::start_with(
        Value::Null,
        json!({"startupTimeout": 30, "readyTimeout": 1}),
        slow.clone(),
        false,
    );
    let first = gw.tools();
    assert!(first.iter().any(|t| t == "fs__list_roots"), "{first:?}");
    assert!(
        !first.iter().any(|t| t.starts_with("faulty__")),
        "the slow server was waited for: {first:?}"
    );
    gw.wait_listed("faulty__page19");
    assert!(
        gw.from_gateway
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "the late server's tools were not announced: {:?}",
        gw.from_gateway
    );
    gw.finish();

    // Control: the default waits for every server.
    let mut gw = Gw::start_with(Value::Null, json!({"startupTimeout": 30}), slow, false);
    let first = gw.tools();
    assert!(first.iter().any(|t| t == "faulty__page19"), "{first:?}");
    gw.finish();
}

/// Issue 23, finding 5 (regression: `startupTimeout` applied per page of a listing, so a
/// slow-paging server took as long as it liked, and pages piled up without bound). A server
/// paging 40 slow pages (12 s in all, each page well within the 3 s startupTimeout) is cut
/// at one 3 s deadline for the whole listing; one paging 20 pages of 1 MiB descriptions is
/// cut at the listing cap. Neither is listed; the other server is. The control: the same
/// server with 3 slow pages (0.9 s) is listed.
#[test]
fn a_slow_or_bloated_listing_is_cut_at_one_deadline_and_a_cap() {
    let slow = json!({"FAULTY_PAGES": "40", "FAULTY_PAGE_DELAY": "0.3"});
    // Paced (20 MiB over about a second) under the output-rate limit, as in the review.
    let big =
        json!({"FAULTY_PAGES": "20", "FAULTY_PAGE_BYTES": "1048576", "FAULTY_PAGE_DELAY": "0.05"});
    for (env, want) in [
        (slow, "the listing did not finish within 3s"),
        (big, "its lists exceed the cap"),
    ] {
        let mut gw = Gw::start_with(
            Value::Null,
            json!({"startupTimeout": 3}),
            env.clone(),
            false,
        );
        assert!(gw.wait_stderr(want), "{env}: {}", gw.stderr_text());
        let tools = gw.tools();
        assert!(
            !tools.iter().any(|t| t.starts_with("faulty__")),
            "{env}: {tools:?}"
        );
        assert!(tools.iter().any(|t| t == "fs__list_roots"), "{tools:?}");
        gw.finish();
    }
    // Control: a short slow listing completes.
    let mut gw = Gw::start_with(
        Value::Null,
        json!({"startupTimeout": 3}),
        json!({"FAULTY_PAGES": "3", "FAULTY_PAGE_DELAY": "0.3"}),
        true,
    );
    let tools = gw.tools();
    assert!(tools.iter().any(|t| t == "faulty__page2"), "{tools:?}");
    gw.finish();
}

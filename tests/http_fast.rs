//! The HTTP front's fast path for `tools/call` (`src/gateway/agent/http/fast.rs`), over real
//! HTTP: a plain call on an initialized session is answered as `application/json` with the
//! server's own result bytes in one SSE event of known length (rmcp's path streams its SSE
//! answer and re-types the result); policy,
//! the kernel's refusals and the audit's `principal` hold on it; an unknown session still gets
//! rmcp's 404; a call that may need the session's stream (progress, an agent that can be
//! asked) still goes through rmcp.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{node_server, palisade, Workspace};

const ALICE: &str = "alice-token-fast-5e6f";
const BOB: &str = "bob-token-fast-7a8b";

struct Front {
    child: Child,
    addr: SocketAddr,
}

impl Front {
    fn start(ws: &Workspace, config: &Path) -> Front {
        use std::os::unix::fs::PermissionsExt;
        let tokens = ws.path().join("tokens");
        let hash = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
        std::fs::write(
            &tokens,
            format!("alice {}\nbob {}\n", hash(ALICE), hash(BOB)),
        )
        .unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(config)
            .args(["--http", &addr.to_string(), "--tokens"])
            .arg(&tokens)
            // The fast path logs each call it serves at debug.
            .env(
                "RUST_LOG",
                "info,rmcp=warn,palisade::gateway::agent::http::fast=debug",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ws.errlog()).unwrap())
            .spawn()
            .unwrap();
        let front = Front { child, addr };
        for _ in 0..400 {
            if TcpStream::connect(addr).is_ok() {
                return front;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("the HTTP front did not come up: {}", ws.stderr_text());
    }

    /// One raw HTTP/1.1 POST to /mcp as alice.
    fn post(&self, session: Option<&str>, extra: &[(&str, &str)], body: &Value) -> Answer {
        self.post_as(ALICE, session, extra, body)
    }

    /// One raw HTTP/1.1 POST to /mcp with `token`.
    fn post_as(
        &self,
        token: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &Value,
    ) -> Answer {
        self.post_text(token, session, extra, &body.to_string())
    }

    /// One raw HTTP/1.1 POST to /mcp with `token`, its body `body` as written.
    fn post_text(
        &self,
        token: &str,
        session: Option<&str>,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(id) = session {
            req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        Answer::parse(&String::from_utf8_lossy(&raw))
    }

    /// An initialized session (`capabilities` declared); its id.
    fn session(&self, capabilities: Value) -> String {
        let init = self.post(
            None,
            &[],
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
                {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                 "clientInfo": {"name": "fast-test", "version": "1"}}}),
        );
        assert_eq!(init.status, 200, "{init:?}");
        let id = init.header("mcp-session-id").expect("a session id");
        let ack = self.post(
            Some(&id),
            &[],
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(ack.status, 202, "{ack:?}");
        id
    }

    fn call(&self, session: &str, id: u64, tool: &str, args: Value) -> Answer {
        self.post(
            Some(session),
            &[],
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": tool, "arguments": args}}),
        )
    }

    fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        support::raw::wait_bounded(&mut self.child);
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    /// The body, or the data of its last SSE event carrying a JSON-RPC response.
    message: String,
}

impl Answer {
    fn parse(raw: &str) -> Answer {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        let message = if Answer::is(head, "text/event-stream") {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|d| d.contains("\"id\""))
                .unwrap_or("")
                .to_string()
        } else {
            body.trim_end().to_string()
        };
        Answer {
            status,
            head: head.to_string(),
            message,
        }
    }

    fn is(head: &str, content_type: &str) -> bool {
        head.lines().any(|l| {
            l.to_ascii_lowercase()
                .starts_with(&format!("content-type: {content_type}"))
        })
    }

    /// Answered by the fast path: one SSE event in a body of known length (rmcp's path
    /// streams its SSE answer, chunked).
    fn fast(&self) -> bool {
        Answer::is(&self.head, "text/event-stream") && self.header("content-length").is_some()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.message).unwrap_or_else(|_| panic!("not JSON: {self:?}"))
    }

    /// The raw text of the response's `result`.
    fn result_text(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Msg<'a> {
            #[serde(borrow)]
            result: Option<&'a RawValue>,
        }
        let m: Msg<'_> = serde_json::from_str(&self.message).unwrap();
        m.result
            .unwrap_or_else(|| panic!("no result: {self:?}"))
            .get()
            .to_string()
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// server-everything over stdio, directly: each call's raw result text.
struct Direct {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<String>,
}

impl Direct {
    fn start() -> Direct {
        let mut child = Command::new("node")
            .arg(node_server("server-everything"))
            .arg("stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut d = Direct { child, stdin, rx };
        d.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25",
                   "capabilities": {"roots": {"listChanged": true}},
                   "clientInfo": {"name": "fast-direct", "version": "1"}}),
        );
        d.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        d
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> String {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .rx
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["method"] == "roots/list" {
                let rid = v["id"].clone();
                self.send(&json!({"jsonrpc": "2.0", "id": rid, "result": {"roots": []}}));
                continue;
            }
            if v.get("method").is_some() || v["id"] != json!(id) {
                continue;
            }
            let a = Answer {
                status: 200,
                head: String::new(),
                message: line,
            };
            return a.result_text();
        }
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fs_config(ws: &Workspace, settings: Value) -> (PathBuf, PathBuf) {
    let audit = ws.path().join("audit.jsonl");
    let mut settings = settings;
    settings["auditLog"] = json!(audit);
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"]}}),
        settings,
    );
    (config, audit)
}

// The fast path relays the server's own bytes: each tool result of server-everything reaches
// the HTTP agent exactly as the server wrote it (rmcp's typed path re-spells and drops
// fields), as one JSON body.
#[test]
fn http_call_results_are_the_servers_own_bytes() {
    let ws = Workspace::new();
    let config = ws.config(
        json!({"everything": {"command": "node",
                              "args": [node_server("server-everything"), "stdio"]}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let mut direct = Direct::start();
    let mut id = 1;
    let mut differ = Vec::new();
    for (tool, args) in support::everything_result_calls() {
        id += 1;
        let d = direct.request(id, "tools/call", json!({"name": tool, "arguments": args}));
        let t = front.call(&session, id, &format!("everything__{tool}"), args);
        assert_eq!(t.status, 200, "{tool}: {t:?}");
        assert!(t.fast(), "{tool} was not answered by the fast path: {t:?}");
        assert_eq!(t.json()["id"], json!(id), "{t:?}");
        if t.result_text() != d {
            differ.push(format!(
                "{tool}:\n  direct {d}\n  http   {}",
                t.result_text()
            ));
        }
    }
    front.stop();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

// The fast path forwards a call's params as the agent wrote them, as stdio does: numbers
// keep their spelling (an integer past 2^64 stays that integer), keys their order; only the
// tool's name is the server's. The server answers with the line it read (a raw JSON-lines
// server: one from npm or PyPI decodes what it reads before a tool sees it).
#[test]
fn fast_calls_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let config = ws.config(
        json!({"faulty": {"command": support::python(), "args": [server]}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let params = r#"{"name":"faulty__request_line","arguments":{"count":12345678901234567890123,"after":1e3,"text":"\u00e9"},"_meta":{"x.example/trace":[1.50]}}"#;
    let body = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{params}}}"#);
    let answer = front.post_text(ALICE, Some(&session), &[], &body);
    front.stop();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.fast(), "not answered by the fast path: {answer:?}");
    let seen = answer.json()["result"]["content"][0]["text"]
        .as_str()
        .expect("the line the server read")
        .to_string();
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(&seen).expect("a JSON-RPC request");
    assert_eq!(
        request.params.get(),
        params.replace("faulty__request_line", "request_line"),
        "the server read: {seen}"
    );
}

// The routed requests take the fast path too, their params forwarded as the agent wrote
// them (through rmcp's path, unknown fields were dropped and `1e3` became `1000.0`); a
// request asking for progress is left to rmcp (its notifications need the POST's stream).
#[test]
fn fast_routed_requests_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let config = ws.config(
        json!({"faulty": {"command": support::python(), "args": [server],
                          "env": {"FAULTY_ECHO_LINES": "1"}}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let post = |id: u64, method: &str, params: &str| {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        front.post_text(ALICE, Some(&session), &[], &body)
    };
    let prompt = r#"{"name":"faulty__request_line","arguments":{"path":"word"},"future":[1e3]}"#;
    let read = r#"{"uri":"line://request","future":12345678901234567890123}"#;
    let answers = [
        (
            post(5, "prompts/get", prompt),
            "/result/messages/0/content/text",
        ),
        (post(6, "resources/read", read), "/result/contents/0/text"),
    ];
    let progress = post(
        7,
        "resources/read",
        r#"{"uri":"line://request","_meta":{"progressToken":"p"}}"#,
    );
    front.stop();
    let expected = [
        prompt.replace("faulty__request_line", "request_line"),
        read.to_string(),
    ];
    for ((answer, at), want) in answers.iter().zip(expected) {
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.fast(), "not answered by the fast path: {answer:?}");
        let seen = answer
            .json()
            .pointer(at)
            .and_then(|v| v.as_str().map(String::from));
        let seen = seen.unwrap_or_else(|| panic!("no line in {answer:?}"));
        #[derive(serde::Deserialize)]
        struct Request<'a> {
            #[serde(borrow)]
            params: &'a RawValue,
        }
        let request: Request<'_> = serde_json::from_str(&seen).expect("a JSON-RPC request");
        assert_eq!(request.params.get(), want, "the server read: {seen}");
    }
    assert_eq!(progress.status, 200, "{progress:?}");
    assert!(
        !progress.fast(),
        "a request asking for progress is rmcp's: {progress:?}"
    );
}

// Policy, the kernel's refusal and the audit's principal hold on the fast path.
#[test]
fn fast_calls_keep_policy_sandbox_blocked_and_the_principal() {
    let ws = Workspace::new();
    let policy = ws.path().join("compiled-policy.json");
    support::write_policy(
        &policy,
        json!([
            {"name": "no-listing", "description": "no listing", "principle": "test",
             "if": {"server": ["fs"], "tool": ["list"]},
             "then": "deny", "reason": "listing is not for you"},
            {"name": "allow-the-rest", "description": "the rest", "principle": "test",
             "if": {}, "then": "allow", "reason": "test"}
        ]),
    );
    let (config, audit) = fs_config(&ws, json!({"policy": policy, "sandboxPolicy": "enforce"}));
    // A write-protected directory inside alice's writable sandbox dir (it must exist at launch).
    let home = ws.canonical().join("sandbox/principals/alice");
    std::fs::create_dir_all(home.join(".git/hooks")).unwrap();
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let ok = front.call(
        &session,
        1,
        "fs__write",
        json!({"path": home.join("note.txt"), "content": "hi"}),
    );
    let denied = front.call(&session, 2, "fs__list", json!({"path": ws.canonical()}));
    let blocked = front.call(
        &session,
        3,
        "fs__write",
        json!({"path": home.join(".git/hooks/pre-commit"), "content": "evil"}),
    );
    front.stop();
    for a in [&ok, &denied, &blocked] {
        assert!(a.fast(), "not the fast path: {a:?}");
    }
    assert!(ok.json()["result"]["isError"] != json!(true), "{ok:?}");
    assert_eq!(
        std::fs::read_to_string(home.join("note.txt")).unwrap(),
        "hi"
    );
    let denied_text = denied.json().to_string();
    assert!(denied_text.contains("listing is not for you"), "{denied:?}");
    let blocked_text = blocked.json().to_string();
    assert!(blocked_text.contains("[SANDBOX BLOCKED]"), "{blocked:?}");
    assert!(!home.join(".git/hooks/pre-commit").exists());
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 3, "{records:?}");
    for r in &records {
        assert_eq!(r["principal"], "alice", "{r}");
    }
    assert_eq!(
        records[1]["policyDecision"]["rule"], "no-listing",
        "{}",
        records[1]
    );
}

// An unknown or ended session gets rmcp's own 404, and so does one principal presenting
// another's session.
#[test]
fn unknown_and_deleted_sessions_get_404() {
    let ws = Workspace::new();
    let (config, audit) = fs_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let bogus = front.call("not-a-session", 1, "fs__stat", json!({"path": "/"}));
    let session = front.session(json!({}));
    let live = front.call(&session, 2, "fs__stat", json!({"path": ws.canonical()}));
    // End the session (DELETE), then call on it.
    let mut s = TcpStream::connect(front.addr).unwrap();
    write!(
        s,
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {ALICE}\r\n\
         Mcp-Session-Id: {session}\r\n\r\n",
        front.addr
    )
    .unwrap();
    let mut deleted = String::new();
    let _ = s.read_to_string(&mut deleted);
    let after = front.call(&session, 3, "fs__stat", json!({"path": "/"}));
    // Another principal presenting alice's live session: his own session manager does not
    // know it (rmcp's 404), and nothing reaches alice's servers.
    let other = front.session(json!({}));
    let bobs = front.post_as(
        BOB,
        Some(&other),
        &[],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": {"name": "fs__stat", "arguments": {"path": "/"}}}),
    );
    front.stop();
    assert_eq!(bobs.status, 404, "{bobs:?}");
    assert_eq!(bogus.status, 404, "{bogus:?}");
    assert!(live.fast(), "{live:?}");
    assert!(deleted.starts_with("HTTP/1.1 2"), "{deleted}");
    assert_eq!(after.status, 404, "{after:?}");
    // Only the live call reached a server.
    assert_eq!(support::read_jsonl(&audit).len(), 1);
}

// What may need the session's stream stays on rmcp's path: a progress token, and an agent
// that declared elicitation (a server or the approver may ask it).
#[test]
fn calls_that_may_need_the_stream_go_through_rmcp() {
    let ws = Workspace::new();
    let (config, _) = fs_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let dir = ws.canonical();
    let plain = front.session(json!({}));
    let progress = front.post(
        Some(&plain),
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "fs__stat", "arguments": {"path": dir},
                           "_meta": {"progressToken": "p1"}}}),
    );
    // The control: the same call without a progress token, before any asking agent, is fast.
    let control = front.call(&plain, 9, "fs__stat", json!({"path": dir}));
    let asking = front.session(json!({"elicitation": {}}));
    let elicit = front.call(&asking, 2, "fs__stat", json!({"path": dir}));
    // Once an asking agent is the principal's linked one, no call of the principal is fast.
    let plain_after = front.call(&plain, 3, "fs__stat", json!({"path": dir}));
    front.stop();
    assert!(control.fast(), "{control:?}");
    for a in [&progress, &elicit, &plain_after] {
        assert_eq!(a.status, 200, "{a:?}");
        assert!(!a.fast(), "took the fast path: {a:?}");
        assert!(a.json()["result"]["content"].is_array(), "{a:?}");
    }
}

// The Python `mcp` SDK's Streamable HTTP client works against the fast path's JSON answers.
#[test]
fn the_python_sdk_client_calls_through_the_fast_path() {
    let ws = Workspace::new();
    let (config, audit) = fs_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let home = ws.canonical().join("sandbox/principals/alice");
    let note = home.join("sdk.txt");
    let out = support::driver("tests/clients/http_client.py")
        .args([
            &format!("http://{}/mcp", front.addr),
            ALICE,
            &json!([{"tool": "fs__write", "args": {"path": note, "content": "from the sdk"}},
                    {"tool": "fs__read", "args": {"path": note}}])
            .to_string(),
        ])
        .output()
        .unwrap();
    front.stop();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(report["calls"][1]["text"], "from the sdk", "{report}");
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records.iter().all(|r| r["principal"] == "alice"),
        "{records:?}"
    );
    // The SDK's calls were served by the fast path: the log says how many.
    assert!(
        ws.stderr_text()
            .matches("tools/call served on the fast path")
            .count()
            == 2,
        "{}",
        ws.stderr_text()
    );
}

// `notifications/cancelled` naming a fast call cancels it: the call ends at once (its response
// with no answer, as JSON-RPC asks) instead of sleeping on, and its audit record is written. (Without the fast path's own
// cancellation, rmcp's session knows no such request and the call sleeps for 600 s.)
#[test]
fn a_fast_call_is_cancelled_by_notifications_cancelled() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"faulty": {
            "command": support::deps().join("venv/bin/python"),
            "args": [support::repo("tests/servers/faulty_server.py")],
        }}),
        json!({"auditLog": audit}),
    );
    let front = std::sync::Arc::new(Front::start(&ws, &config));
    let session = front.session(json!({}));
    let call = {
        let (front, session) = (front.clone(), session.clone());
        std::thread::spawn(move || {
            front.call(&session, 7, "faulty__sleep", json!({"after": 600.0}))
        })
    };
    let mut started = false;
    for _ in 0..1200 {
        if ws.stderr_text().contains("sleep: started") {
            started = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let cancel = front.post(
        Some(&session),
        &[],
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 7, "reason": "changed my mind"}}),
    );
    let answer = call.join().unwrap();
    let err = ws.stderr_text();
    std::sync::Arc::try_unwrap(front)
        .unwrap_or_else(|_| panic!("the front is still shared"))
        .stop();
    assert!(started, "{err}");
    assert_eq!(cancel.status, 202, "{cancel:?}");
    assert!(answer.fast(), "{answer:?}\n{err}");
    // As rmcp's path does, the cancelled request's response ends with no answer.
    assert_eq!(answer.message, "", "{answer:?}");
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["principal"], "alice", "{records:?}");
}

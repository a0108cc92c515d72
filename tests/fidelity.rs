//! Fidelity: what a real server sends reaches the agent as the server sent it.
//!
//! The same requests go to server-everything and server-filesystem (from npm) directly and
//! through `palisade serve`; each result's raw JSON text through Palisade must equal the
//! direct one byte for byte once the names Palisade namespaces (`SERVER__NAME`) are
//! rewritten the same way. rmcp's typed models dropped a tool's `execution` and re-spelled
//! numbers (`1` as `1.0`) before the gateway relayed raw JSON (issue 18); a tool with
//! `execution` is asserted outright so the test cannot pass on a list that lost it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use support::{node_server, palisade, Workspace};

/// Guards against a hung peer; never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

/// A JSON-RPC line client over any child's stdio that keeps each response's raw text.
struct Lines {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<String>,
    next: u64,
    /// The notifications read so far, as their lines.
    notes: Vec<String>,
    /// The result of `initialize`, as its text.
    init: String,
}

impl Lines {
    fn spawn(cmd: &mut Command) -> Lines {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = Lines {
            child,
            stdin,
            rx,
            next: 1,
            notes: Vec::new(),
            init: String::new(),
        };
        let init = me.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25",
                   // What Palisade declares to its servers, so both see the same tool set.
                   "capabilities": {"roots": {"listChanged": true}},
                   "clientInfo": {"name": "fidelity", "version": "1"}}),
        );
        assert!(init.contains("protocolVersion"), "{init}");
        me.init = init;
        me.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        me
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{v}").expect("write");
        stdin.flush().expect("flush");
    }

    /// The raw text of the request's `result` (panics on an error response).
    fn request(&mut self, method: &str, params: Value) -> String {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.request_line(id, method, &line.to_string())
    }

    /// As `request`, for a request `line` with `id` written by the caller as it wants it spelt.
    fn request_line(&mut self, id: u64, method: &str, line: &str) -> String {
        {
            let stdin = self.stdin.as_mut().expect("open");
            writeln!(stdin, "{line}").expect("write");
            stdin.flush().expect("flush");
        }
        loop {
            let line = self
                .rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            #[derive(serde::Deserialize)]
            struct Msg<'a> {
                id: Option<Value>,
                method: Option<String>,
                #[serde(borrow)]
                result: Option<&'a RawValue>,
                error: Option<Value>,
            }
            let msg: Msg<'_> = serde_json::from_str(&line).expect("JSON line");
            if msg.method.as_deref() == Some("roots/list") {
                let id = msg.id.clone().unwrap_or(Value::Null);
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}}));
                continue;
            }
            if msg.method.is_some() && msg.id.is_none() {
                self.notes.push(line.clone());
                continue;
            }
            if msg.method.is_some() || msg.id != Some(json!(id)) {
                continue;
            }
            if let Some(e) = msg.error {
                panic!("{method} failed: {e}");
            }
            return msg.result.expect("a result").get().to_string();
        }
    }
}

impl Lines {
    /// The error answering request `id`, sent as `line`.
    fn error_of(&mut self, id: u64, line: &str) -> Value {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let got = self.rx.recv_timeout(PATIENCE).expect("an answer");
            let v: Value = serde_json::from_str(&got).expect("JSON line");
            if v["id"] == json!(id) {
                return v
                    .get("error")
                    .cloned()
                    .unwrap_or_else(|| panic!("not an error: {v}"));
            }
        }
    }

    /// The params of the notifications of `method` read so far, as their text; waits for
    /// more lines until there are `count` of them.
    fn notes_of(&mut self, method: &str, count: usize) -> Vec<String> {
        loop {
            let found: Vec<String> = self
                .notes
                .iter()
                .filter_map(|line| {
                    #[derive(serde::Deserialize)]
                    struct Note<'a> {
                        method: &'a str,
                        #[serde(borrow)]
                        params: &'a RawValue,
                    }
                    let n: Note<'_> = serde_json::from_str(line).ok()?;
                    (n.method == method).then(|| n.params.get().to_string())
                })
                .collect();
            if found.len() >= count {
                return found;
            }
            let line = self
                .rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("{count} {method} expected, got {found:?}"));
            let v: Value = serde_json::from_str(&line).expect("JSON line");
            if v.get("method").is_some() && v.get("id").is_none() {
                self.notes.push(line);
            }
        }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The direct result with each entry of `list` renamed `SERVER__NAME`, re-serialized (key
/// order kept): what Palisade must send byte for byte.
fn renamed(direct: &str, list: &str, server: &str) -> String {
    let mut v: Value = serde_json::from_str(direct).expect("JSON");
    for item in v[list].as_array_mut().expect("a list") {
        let name = item["name"].as_str().expect("a name").to_string();
        item["name"] = Value::String(format!("{server}__{name}"));
    }
    v.to_string()
}

/// Re-serialized unchanged: proves the server's own spelling survives a serde round trip,
/// so a difference through Palisade is Palisade's.
fn same(direct: &str) -> String {
    let v: Value = serde_json::from_str(direct).expect("JSON");
    let again = v.to_string();
    assert_eq!(again, direct, "the server's JSON does not round-trip as is");
    again
}

/// The raw JSON-lines test server answering requests with their lines (`FAULTY_ECHO_LINES`)
/// in a config's `mcpServers`, as `faulty`.
fn faulty_echoing() -> Value {
    let server = support::repo("tests/servers/faulty_server.py");
    json!({"faulty": {"command": support::python(), "args": [server],
                      "env": {"FAULTY_ECHO_LINES": "1"}}})
}

/// server-everything in a config's `mcpServers`, as `everything`.
fn everything() -> Value {
    json!({"everything": {"command": "node",
                          "args": [node_server("server-everything"), "stdio"]}})
}

fn everything_cmd() -> Command {
    let mut c = Command::new("node");
    c.arg(node_server("server-everything"))
        .arg("stdio")
        .stderr(Stdio::null());
    c
}

fn serve(ws: &Workspace, servers: Value) -> Lines {
    serve_with(ws, servers, json!({}))
}

/// As `serve`, with these `palisade` settings.
fn serve_with(ws: &Workspace, servers: Value, settings: Value) -> Lines {
    let config = ws.config(servers, settings);
    let mut c = Command::new(palisade());
    c.arg("serve")
        .arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(ws.errlog()).expect("errlog"));
    Lines::spawn(&mut c)
}

#[test]
fn server_everything_through_palisade_is_its_own_json() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let mut through = serve(&ws, everything());

    // Lists: every entry as the server wrote it, names rewritten.
    let tools = direct.request("tools/list", json!({}));
    let got = through.request("tools/list", json!({}));
    assert_eq!(got, renamed(&tools, "tools", "everything"), "tools/list");
    let listed: Value = serde_json::from_str(&got).expect("JSON");
    assert!(
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|t| t["execution"]["taskSupport"].is_string()),
        "no tool kept its `execution` field: {got}"
    );
    let prompts = direct.request("prompts/list", json!({}));
    assert_eq!(
        through.request("prompts/list", json!({})),
        renamed(&prompts, "prompts", "everything"),
        "prompts/list"
    );
    for method in ["resources/list", "resources/templates/list"] {
        let d = direct.request(method, json!({}));
        assert_eq!(through.request(method, json!({})), same(&d), "{method}");
    }

    // Tool results, including annotations whose numbers rmcp used to re-spell.
    for (tool, args) in support::everything_result_calls() {
        let d = direct.request("tools/call", json!({"name": tool, "arguments": args}));
        let t = through.request(
            "tools/call",
            json!({"name": format!("everything__{tool}"), "arguments": args}),
        );
        assert_eq!(t, same(&d), "tools/call {tool}");
    }

    // Prompts, resource reads and completions.
    for (name, args) in [
        ("simple-prompt", json!({})),
        ("args-prompt", json!({"city": "Lyon", "state": "Rhône"})),
    ] {
        let d = direct.request("prompts/get", json!({"name": name, "arguments": args}));
        let t = through.request(
            "prompts/get",
            json!({"name": format!("everything__{name}"), "arguments": args}),
        );
        assert_eq!(t, same(&d), "prompts/get {name}");
    }
    for uri in [
        "demo://resource/static/document/features.md",
        "demo://resource/dynamic/text/3",
        "demo://resource/dynamic/blob/4",
    ] {
        let d = direct.request("resources/read", json!({"uri": uri}));
        let t = through.request("resources/read", json!({"uri": uri}));
        // A dynamic resource says the time of day to the second: when that second turned
        // between the two reads, the direct one is read again (Palisade's came between).
        let d = if t != d && uri.contains("/dynamic/") {
            direct.request("resources/read", json!({"uri": uri}))
        } else {
            d
        };
        assert_eq!(t, same(&d), "resources/read {uri}");
    }
    let d = direct.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "completable-prompt"},
               "argument": {"name": "department", "value": "E"}}),
    );
    let t = through.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
               "argument": {"name": "department", "value": "E"}}),
    );
    assert_eq!(t, same(&d), "completion/complete");
}

#[test]
fn server_filesystem_tools_through_palisade_are_its_own_json() {
    let ws = Workspace::new();
    let dir = ws.path().join("files");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let dir = std::fs::canonicalize(&dir).expect("canonical");
    let args = json!([node_server("server-filesystem"), dir.display().to_string()]);
    let mut cmd = Command::new("node");
    cmd.args(
        args.as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str),
    )
    .stderr(Stdio::null());
    let mut direct = Lines::spawn(&mut cmd);
    let mut through = serve(&ws, json!({"files": {"command": "node", "args": args}}));
    let tools = direct.request("tools/list", json!({}));
    let got = through.request("tools/list", json!({}));
    assert_eq!(got, renamed(&tools, "tools", "files"), "tools/list");
}

/// `palisade serve -- CMD ARGS`: one server, its names its own, its JSON unchanged, its
/// `serverInfo` and `instructions` the agent's first sight of it; and still policed and
/// audited (the call is in the audit log under the server's name).
#[test]
fn one_server_mode_is_the_server_itself() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let audit = ws.path().join("audit.jsonl");
    let mut c = Command::new(palisade());
    c.arg("serve")
        .arg("--sandbox-policy")
        .arg("warn")
        .arg("--sandbox-dir")
        .arg(ws.path().join("sandbox"))
        .arg("--policy")
        .arg(support::allow_all_policy())
        .arg("--audit-log")
        .arg(&audit)
        .arg("--")
        .arg("node")
        .arg(node_server("server-everything"))
        .arg("stdio")
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(ws.errlog()).expect("errlog"));
    let mut through = Lines::spawn(&mut c);
    // The agent meets the server: its name, version and instructions, not Palisade's.
    let (d, t): (Value, Value) = (
        serde_json::from_str(&direct.init).expect("JSON"),
        serde_json::from_str(&through.init).expect("JSON"),
    );
    assert_eq!(t["serverInfo"], d["serverInfo"], "{t}");
    assert!(d["instructions"].is_string(), "{d}");
    assert_eq!(t["instructions"], d["instructions"], "{t}");
    for method in ["tools/list", "prompts/list", "resources/list"] {
        let d = direct.request(method, json!({}));
        assert_eq!(through.request(method, json!({})), same(&d), "{method}");
    }
    let args = json!({"name": "echo", "arguments": {"message": "one server"}});
    let d = direct.request("tools/call", args.clone());
    assert_eq!(
        through.request("tools/call", args),
        same(&d),
        "tools/call echo"
    );
    drop(through);
    let call = record_of(&audit, "echo");
    assert_eq!(call["serverName"], "server-everything", "{call}");
}

/// Under tool pinning the one server's instructions are not relayed: the pins review covers
/// its tool definitions, and instructions are server-written text it could change unreviewed.
/// Its name still is.
#[test]
fn one_server_under_pinning_keeps_its_instructions_back() {
    let ws = Workspace::new();
    let direct = Lines::spawn(&mut everything_cmd());
    let mut servers = everything();
    servers["everything"]["prefix"] = json!(false);
    let through = serve_with(&ws, servers, json!({"pins": ws.path().join("pins.json")}));
    let (d, t): (Value, Value) = (
        serde_json::from_str(&direct.init).expect("JSON"),
        serde_json::from_str(&through.init).expect("JSON"),
    );
    assert_eq!(t["serverInfo"], d["serverInfo"], "{t}");
    assert!(d["instructions"].is_string(), "{d}");
    assert_ne!(t["instructions"], d["instructions"], "{t}");
    assert!(
        t["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("not relayed")),
        "{t}"
    );
}

/// The other direction: a call's params reach a real server process (sandboxed, through
/// `palisade serve`) as the agent wrote them. Numbers keep their spelling (an integer past
/// 2^64 stays that integer, not the nearest float), keys their order, unknown fields stay;
/// only the tool's name is the server's. The server is the raw JSON-lines test server
/// (`tests/servers/faulty_server.py`): a server from npm or PyPI decodes what it reads
/// before any tool sees it, so it cannot show the bytes it was sent.
#[test]
fn a_calls_params_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let mut through = serve(
        &ws,
        json!({"faulty": {"command": support::python(), "args": [server]}}),
    );
    let params = r#"{"name":"faulty__request_line","future":{"q":1.50},"arguments":{"count":12345678901234567890123,"after":1e3,"text":"é"},"_meta":{"x.example/trace":[1e3]}}"#;
    let line = format!(r#"{{"jsonrpc":"2.0","id":1000,"method":"tools/call","params":{params}}}"#);
    let result: Value =
        serde_json::from_str(&through.request_line(1000, "tools/call", &line)).expect("a result");
    let seen = result["content"][0]["text"]
        .as_str()
        .expect("the line the server read");
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(seen).expect("a JSON-RPC request");
    assert_eq!(
        request.params.get(),
        params.replace("faulty__request_line", "request_line"),
        "the server read: {seen}"
    );
}

/// Notifications too reach the agent as the server wrote them: server-everything's progress
/// through Palisade equals its progress direct, byte for byte (Palisade's own token put back
/// as the agent's); before, rmcp's typed model made `"progress":1` into `1.0` and moved the
/// token first. A log message and a resource update from the raw test server keep their
/// number spellings and unknown fields; only the logger gets the server's name before it.
#[test]
fn notifications_reach_the_agent_as_the_server_wrote_them() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let mut through = serve(&ws, everything());
    let call = |name: &str| {
        json!({"name": name, "arguments": {"duration": 0.2, "steps": 2},
               "_meta": {"progressToken": "tok-7"}})
    };
    direct.request("tools/call", call("trigger-long-running-operation"));
    through.request(
        "tools/call",
        call("everything__trigger-long-running-operation"),
    );
    let want = direct.notes_of("notifications/progress", 2);
    assert!(want[0].contains(r#""progress":1"#), "{want:?}");
    assert_eq!(through.notes_of("notifications/progress", 2), want);
    drop(through);

    // (Alone: server-everything logs too, at times of its own.)
    let server = support::repo("tests/servers/faulty_server.py");
    let mut through = serve(
        &Workspace::new(),
        json!({"faulty": {"command": support::python(), "args": [server]}}),
    );
    through.request(
        "tools/call",
        json!({"name": "faulty__notify_lines", "arguments": {}}),
    );
    assert_eq!(
        through.notes_of("notifications/message", 1),
        [
            r#"{"level":"info","logger":"faulty/x.y","data":{"n":1e3,"big":12345678901234567890123},"future":[1.50]}"#
        ]
    );
    assert_eq!(
        through.notes_of("notifications/resources/updated", 1),
        [r#"{"uri":"line://request","future":{"q":2.50}}"#]
    );
}

/// A method Palisade does not know (an extension's) passes to the server that keeps its own
/// names (`prefix: false`), in both directions: a request reaches it and its answer comes
/// back, audited with the method as `toolName`; a notification reaches it, and the server's
/// own notification reaches the agent as the server wrote it. Before, the request got
/// "method not found" and both notifications were dropped.
#[test]
fn extensions_pass_to_the_server_that_keeps_its_own_names() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let mut servers = faulty_echoing();
    servers["faulty"]["prefix"] = json!(false);
    let mut through = serve_with(
        &ws,
        servers,
        json!({"auditLog": audit.display().to_string()}),
    );
    let result: Value = serde_json::from_str(&through.request(
        "x.example/echo",
        json!({"q": [1, "two"], "_meta": {"k": true}}),
    ))
    .expect("a result");
    let read: Value = serde_json::from_str(result["line"].as_str().expect("the line read"))
        .expect("a JSON-RPC request");
    assert_eq!(read["method"], "x.example/echo", "{read}");
    assert_eq!(read["params"]["q"], json!([1, "two"]), "{read}");
    assert_eq!(read["params"]["_meta"]["k"], true, "{read}");

    through.send(&json!({"jsonrpc": "2.0", "method": "x.example/ping", "params": {"p": 7}}));
    let pong = through.notes_of("x.example/pong", 1);
    let pong: Value = serde_json::from_str(&pong[0]).expect("JSON");
    let ping: Value =
        serde_json::from_str(pong["line"].as_str().expect("the line read")).expect("JSON");
    assert_eq!(ping["method"], "x.example/ping", "{ping}");
    assert_eq!(ping["params"], json!({"p": 7}), "{ping}");
    assert!(
        through.notes_of("x.example/pong", 1)[0].ends_with(r#","n":1e3}"#),
        "the server's own spelling"
    );
    drop(through);
    let rec = record_of(&audit, "x.example/echo");
    assert_eq!(rec["kind"], "extension", "{rec}");
    assert_eq!(rec["serverName"], "faulty", "{rec}");
    assert_eq!(rec["arguments"]["q"], json!([1, "two"]), "{rec}");
}

/// With every server prefixed there is no server an unknown method could be meant for: it
/// gets "method not found", as before.
#[test]
fn an_unknown_method_among_prefixed_servers_is_not_found() {
    let ws = Workspace::new();
    let mut through = serve(&ws, faulty_echoing());
    let line = r#"{"jsonrpc":"2.0","id":77,"method":"x.example/echo","params":{}}"#;
    let error = through.error_of(77, line);
    assert_eq!(error["code"], -32601, "{error}");
}

/// The audit log's record whose `toolName` is `name`.
fn record_of(audit: &std::path::Path, name: &str) -> Value {
    let records = support::read_jsonl(audit);
    records
        .iter()
        .find(|r| r["toolName"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no audit record of {name}: {records:?}"))
}

/// The params of a request as the server read them, from the line it answered with.
fn params_read(line: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(line).expect("a JSON-RPC request");
    request.params.get().to_string()
}

/// The routed requests (`prompts/get`, `resources/read`, `resources/(un)subscribe`,
/// `completion/complete`) reach a real server process the same way: as the agent wrote them,
/// only a prompt's name (at the top, or in a completion's `ref`) made the server's. Before,
/// rmcp's typed models dropped the unknown fields and re-spelled the numbers. Params that
/// repeat a key go re-encoded from what the checks read, once. The server is the raw
/// JSON-lines test server, answering each with the line it read (see the test above).
#[test]
fn routed_requests_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let mut through = serve(&ws, faulty_echoing());
    let cases = [
        (
            "prompts/get",
            r#"{"name":"faulty__request_line","arguments":{"path":"word"},"future":{"q":1.50},"_meta":{"x.example/trace":[1e3]}}"#,
            r#"{"name":"request_line","arguments":{"path":"word"},"future":{"q":1.50},"_meta":{"x.example/trace":[1e3]}}"#,
            "/messages/0/content/text",
        ),
        (
            "resources/read",
            r#"{"future":12345678901234567890123,"uri":"line://request","_meta":{}}"#,
            r#"{"future":12345678901234567890123,"uri":"line://request","_meta":{}}"#,
            "/contents/0/text",
        ),
        (
            "resources/subscribe",
            r#"{"uri":"line://request","x":1e3}"#,
            r#"{"uri":"line://request","x":1e3}"#,
            "/_meta/line",
        ),
        (
            "resources/unsubscribe",
            r#"{"uri":"line://request","x":-0.0}"#,
            r#"{"uri":"line://request","x":-0.0}"#,
            "/_meta/line",
        ),
        (
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"faulty__request_line","v":2.50},"argument":{"name":"path","value":"w"},"future":[1e3]}"#,
            r#"{"ref":{"type":"ref/prompt","name":"request_line","v":2.50},"argument":{"name":"path","value":"w"},"future":[1e3]}"#,
            "/completion/values/0",
        ),
    ];
    for (n, (method, params, expected, answer_at)) in cases.into_iter().enumerate() {
        let id = 2000 + n as u64;
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        let result: Value =
            serde_json::from_str(&through.request_line(id, method, &line)).expect("a result");
        let seen = result
            .pointer(answer_at)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{method}: no line in {result}"));
        assert_eq!(
            params_read(seen),
            expected,
            "{method}: the server read {seen}"
        );
    }
    // A repeated key: the server reads the one value the checks read, re-encoded.
    let line = r#"{"jsonrpc":"2.0","id":3000,"method":"prompts/get","params":{"name":"faulty__request_line","arguments":{"path":"/etc/shadow"},"arguments":{"path":"word"}}}"#;
    let result: Value =
        serde_json::from_str(&through.request_line(3000, "prompts/get", line)).expect("a result");
    let seen = result["messages"][0]["content"]["text"]
        .as_str()
        .expect("the line the server read");
    let read = params_read(seen);
    assert_eq!(read.matches("\"arguments\"").count(), 1, "{read}");
    let read: Value = serde_json::from_str(&read).expect("JSON");
    assert_eq!(read["arguments"], json!({"path": "word"}), "{read}");
    assert_eq!(read["name"], "request_line", "{read}");
}

#[test]
fn serve_refuses_a_config_and_a_command_together_and_neither() {
    let ws = Workspace::new();
    let config = ws.config(json!({}), json!({}));
    let both = Command::new(palisade())
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--", "node", "x.js"])
        .output()
        .expect("run");
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("not both"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let neither = Command::new(palisade()).arg("serve").output().expect("run");
    assert!(!neither.status.success());
    assert!(
        String::from_utf8_lossy(&neither.stderr).contains("nothing to serve"),
        "{}",
        String::from_utf8_lossy(&neither.stderr)
    );
}

//! Helpers shared by the integration tests (`mod support;` in each test crate; the gateway
//! crate reaches it through tests/gateway/support.rs): locating the real test dependencies
//! ($PALISADE_TEST_DEPS), writing configs and policies into a temporary workspace, running a
//! Python driver against `palisade serve` and reading its JSON report, reading audit logs.
//!
//! Test code: helpers panic with the context a failing test needs rather than return errors.
//! Nothing here asserts what a test is about; it only refuses to go on from a broken setup.
//! Time limits here guard against a hung test and are never timing assertions.

// Each test crate uses a different part of this module.
#![allow(dead_code)]

pub mod http_front;
pub mod raw;
pub mod skip;
#[allow(unused_imports)]
pub use skip::skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The lines a child writes to `out`, read on a thread of their own so that a test waits on
/// them with a timeout (`recv_timeout`) instead of blocking on the pipe. The channel closes
/// when the child closes `out`.
pub fn read_lines(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// server-everything tool calls whose results carry what a re-encoding changes: escapes and
/// U+2028, a float, annotations with numbers, an image, resource links, structured content
/// (the fidelity tests compare each through palisade, byte for byte, with the server's own).
pub fn everything_result_calls() -> Vec<(&'static str, Value)> {
    use serde_json::json;
    vec![
        ("echo", json!({"message": "fidelity ✓ \"quoted\" \u{2028}"})),
        ("get-sum", json!({"a": 1, "b": 2.5})),
        (
            "get-annotated-message",
            json!({"messageType": "error", "includeImage": true}),
        ),
        ("get-annotated-message", json!({"messageType": "success"})),
        ("get-tiny-image", json!({})),
        ("get-resource-links", json!({"count": 3})),
        ("get-structured-content", json!({"location": "New York"})),
    ]
}

/// Whether `what` came true within `limit`, asked every 50 ms (a guard against a hung
/// test, never a timing assertion; some checks scan all of /proc).
pub fn eventually(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if what() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `rel` inside the repository.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Where scripts/test.sh installed the real servers and the Python SDK.
pub fn deps() -> PathBuf {
    let dir = std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo("target/test-deps"));
    assert!(
        dir.join("venv/bin/python").exists() && dir.join("node_modules/@modelcontextprotocol").exists(),
        "test dependencies missing at {} (run scripts/install-test-deps.sh or set PALISADE_TEST_DEPS)",
        dir.display()
    );
    dir
}

/// The venv's Python, which has the `mcp` SDK and the Python MCP servers.
pub fn python() -> PathBuf {
    deps().join("venv/bin/python")
}

/// An executable the venv installed (`mcp-server-git`, ...).
pub fn venv_bin(name: &str) -> String {
    deps().join("venv/bin").join(name).display().to_string()
}

/// The entry point of the npm package `@modelcontextprotocol/PKG`.
pub fn node_server(pkg: &str) -> String {
    let dir = deps().join("node_modules/@modelcontextprotocol").join(pkg);
    assert!(
        dir.exists(),
        "test dependency {pkg} missing at {} (run scripts/install-test-deps.sh)",
        dir.display()
    );
    dir.join("dist/index.js").display().to_string()
}

/// A config's servers: server-everything alone, over stdio, as `everything`.
pub fn everything_servers() -> Value {
    serde_json::json!({"everything": {"command": "node",
                                      "args": [node_server("server-everything"), "stdio"]}})
}

pub fn palisade() -> &'static str {
    env!("CARGO_BIN_EXE_palisade")
}

/// tests/fixtures/allow-all-policy.json: for tests where the sandbox or the gateway's
/// mechanics, not the policy engine, must decide.
pub fn allow_all_policy() -> PathBuf {
    repo("tests/fixtures/allow-all-policy.json")
}

/// Writes `v` as pretty JSON to `path`.
pub fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Writes a compiled policy (`{"rules": rules}`) to `path`.
pub fn write_policy(path: &Path, rules: Value) {
    write_json(path, &serde_json::json!({ "rules": rules }));
}

/// Writes a compiled policy to `path` whose one rule gives `then` (`deny`, `escalate`) for
/// `tool` of `server`, saying `reason`, and allows everything else.
pub fn write_one_rule_policy(path: &Path, server: &str, tool: &str, then: &str, reason: &str) {
    write_policy(
        path,
        serde_json::json!([
            {"name": format!("{then}-{tool}"), "description": reason, "principle": "test",
             "if": {"server": [server], "tool": [tool]}, "then": then, "reason": reason},
            {"name": "allow-the-rest", "description": "the rest", "principle": "test",
             "if": {}, "then": "allow", "reason": "test"}
        ]),
    );
}

/// Merges `settings` into the `palisade` block of the config file at `config`.
pub fn merge_settings(config: &Path, settings: Value) {
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    for (k, v) in settings.as_object().unwrap() {
        cfg["palisade"][k] = v.clone();
    }
    write_json(config, &cfg);
}

/// The `result` of the JSON-RPC response line a tool result carries as its text (the test
/// servers' `sampling_line`: the answer as the server read it), as its text.
pub fn response_result_in(tool_result: &Value) -> String {
    #[derive(serde::Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        result: &'a serde_json::value::RawValue,
    }
    let line = tool_result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {tool_result}"));
    let response: Response<'_> =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a response ({e}): {line:?}"));
    response.result.get().to_string()
}

/// The records of a JSON-lines audit log, in log order; none when the file does not exist.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Whether the audit log at `audit` holds a relayed `kind` (`sampling`, `elicitation`) record
/// whose result has `status`.
pub fn relay_recorded(audit: &Path, kind: &str, status: &str) -> bool {
    read_jsonl(audit)
        .iter()
        .any(|r| r["kind"] == kind && r["result"]["status"] == status)
}

/// The strings of a JSON array of strings.
pub fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// Runs `cmd` to the end and fails the test, with its output, unless it succeeded.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `python SCRIPT` with the venv's Python; `script` is relative to the repository.
pub fn driver(script: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(repo(script));
    c
}

/// `python SCRIPT SCENARIO -- palisade serve --config CONFIG`: a scenario driver in front of
/// the gateway (further `serve` arguments may follow). Its environment is `serve_log_env`'s.
pub fn serve_driver(script: &str, scenario: &str, config: &Path, errlog: &Path) -> Command {
    let mut c = driver(script);
    c.arg(scenario)
        .arg("--")
        .arg(palisade())
        .args(["serve", "--config"])
        .arg(config);
    serve_log_env(&mut c, errlog);
    c
}

/// The environment of a driver that starts `palisade serve`: palisade's stderr to `errlog`
/// (the drivers read DRIVE_ERRLOG), info logs without rmcp's chatter, no colour codes.
pub fn serve_log_env<'a>(cmd: &'a mut Command, errlog: &Path) -> &'a mut Command {
    cmd.env("DRIVE_ERRLOG", errlog)
        .env("RUST_LOG", "info,rmcp=warn")
        .env("NO_COLOR", "1")
}

/// Runs a driver (stdin closed, output captured) and returns the JSON report it printed.
/// Fails the test when the driver fails, prints no JSON, or, with `limit`, is still running
/// after it (then the driver is killed, by its id). `log` (palisade's stderr) is shown with
/// every failure.
pub fn report(cmd: &mut Command, name: &str, log: &Path, limit: Option<Duration>) -> Value {
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the driver {name}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let waited = match limit {
        Some(limit) => rx.recv_timeout(limit).ok(),
        None => rx.recv().ok(),
    };
    let out = match waited {
        Some(out) => out.expect("driver output"),
        None => {
            // Kill exactly the driver we started, by its id.
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!(
                "driver {name} did not finish within {limit:?}\npalisade stderr:\n{}",
                log_text()
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "driver {name} failed: {}\n{stderr}\npalisade stderr:\n{}",
        out.status,
        log_text()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "driver {name} printed no JSON ({e}): {stdout}\n{stderr}\npalisade stderr:\n{}",
            log_text()
        )
    })
}

/// The audit records the default `LogAudit` sink wrote to palisade's stderr.
pub fn audit_records(ws: &Workspace) -> Vec<Value> {
    ws.stderr_text()
        .lines()
        .filter_map(|l| l.split_once(" audit=").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json.trim()).ok())
        .collect()
}

/// A temporary workspace (removed on drop) with a config file and palisade's stderr log.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The workspace's own path with symlinks resolved, as palisade reports paths.
    pub fn canonical(&self) -> PathBuf {
        std::fs::canonicalize(self.path()).unwrap()
    }

    /// Writes `{"mcpServers": servers, "palisade": settings + sandboxDir}` and returns its path.
    /// Unless `settings` say otherwise: warn mode and the allow-all policy (for the tests of
    /// the gateway's mechanics: forwarding, crashes, timeouts, sandbox errors; the engine's own
    /// behaviour is tested in tests/policy/ and by the tests that set a policy).
    pub fn config(&self, servers: Value, mut settings: Value) -> PathBuf {
        settings["sandboxDir"] = Value::String(self.path().join("sandbox").display().to_string());
        if settings.get("sandboxPolicy").is_none() {
            settings["sandboxPolicy"] = Value::String("warn".into());
        }
        if settings.get("policy").is_none() {
            settings["policy"] = Value::String(allow_all_policy().display().to_string());
        }
        let path = self.path().join("config.json");
        write_json(
            &path,
            &serde_json::json!({"mcpServers": servers, "palisade": settings}),
        );
        path
    }

    pub fn errlog(&self) -> PathBuf {
        self.path().join("palisade-stderr.log")
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.errlog()).unwrap_or_default()
    }
}

/// The direct result with each entry of `list` renamed `SERVER__NAME`, re-serialized (key
/// order kept): what Palisade must send byte for byte.
pub fn renamed(direct: &str, list: &str, server: &str) -> String {
    let mut v: Value = serde_json::from_str(direct).expect("JSON");
    for item in v[list].as_array_mut().expect("a list") {
        let name = item["name"].as_str().expect("a name").to_string();
        item["name"] = Value::String(format!("{server}__{name}"));
    }
    v.to_string()
}

/// Re-serialized unchanged: proves the server's own spelling survives a serde round trip,
/// so a difference through Palisade is Palisade's.
pub fn same(direct: &str) -> String {
    let v: Value = serde_json::from_str(direct).expect("JSON");
    let again = v.to_string();
    assert_eq!(again, direct, "the server's JSON does not round-trip as is");
    again
}

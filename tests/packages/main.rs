//! Package runners in client configs, as the servers' READMEs give them (`npx -y PKG`,
//! `uvx PKG`), under `palisade run` and `palisade serve`, with the REAL npm and uv: the first
//! use fetches into palisade's cache outside the sandbox and locks the version; later uses
//! start from the cache with the registry unreachable; a first use without a registry fails
//! at once naming the package and the fix.
//!
//! Needs bubblewrap, npm and the npm registry / PyPI, and uv in the test venv
//! ($PALISADE_TEST_DEPS/venv/bin/uv, scripts/install-test-deps.sh). Every test has its own
//! HOME and XDG_CACHE_HOME, so no two share a cache. "Unreachable" is a registry URL on a
//! loopback port nothing listens on (the client's own configuration, as a user would set it).
//!
//! One test binary, one module per subject: `runners` (`npx -y` and `uvx` under `palisade
//! run`, pinned versions, a first use without a registry), `serve` (the same configs under
//! `palisade serve`, `check`, `docker run`), `cache` (what a cached entry and a fetch sandbox
//! can reach), `scripts` (install scripts run in the fetch sandbox, or not at all). What they
//! share (a home of their own, a client, a server run) is here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod cache;
mod runners;
mod scripts;
mod serve;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

const UNREACHABLE_NPM: &str = "http://127.0.0.1:9/";
const UNREACHABLE_PYPI: &str = "http://127.0.0.1:9/simple";
/// Guards a hung test; never a timing assertion.
const GUARD: Duration = Duration::from_secs(120);

/// A private HOME and cache, and the PATH that has the test venv's uv.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let uv = support::deps().join("venv/bin/uv");
        assert!(
            uv.exists(),
            "uv missing at {} (run scripts/install-test-deps.sh)",
            uv.display()
        );
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn cache(&self) -> PathBuf {
        self.path().join("cache/palisade/packages")
    }

    fn lock(&self) -> Value {
        let text = std::fs::read_to_string(self.cache().join("lock.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// `palisade ARGS` in this home; `offline` points npm and uv at a dead registry.
    fn palisade(&self, args: &[&str], offline: bool) -> Command {
        let mut cmd = Command::new(support::palisade());
        let path = format!(
            "{}:{}",
            support::deps().join("venv/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.args(args)
            .current_dir(self.path())
            .env("HOME", self.path())
            .env("XDG_CACHE_HOME", self.path().join("cache"))
            .env("PATH", path)
            .env_remove("PALISADE_PACKAGE_CACHE")
            .env_remove("npm_config_registry")
            .env_remove("UV_INDEX_URL")
            .env_remove("UV_DEFAULT_INDEX");
        if offline {
            cmd.env("npm_config_registry", UNREACHABLE_NPM)
                .env("UV_INDEX_URL", UNREACHABLE_PYPI)
                .env("UV_DEFAULT_INDEX", UNREACHABLE_PYPI);
        }
        cmd
    }
}

/// A line-oriented MCP client on a child's stdio.
struct Client {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Client {
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        Client {
            child,
            lines: support::read_lines(out),
        }
    }

    fn send(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// The response to request `id` (notifications and other messages skipped).
    fn response(&mut self, id: u64) -> Value {
        loop {
            let line = match self.lines.recv_timeout(GUARD) {
                Ok(l) => l,
                Err(_) => panic!("no response {id}: {}", self.finish()),
            };
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// initialize, initialized, tools/list: the tool names.
    fn tools(&mut self) -> Vec<String> {
        self.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "packages-test", "version": "1"}}}),
        );
        let init = self.response(1);
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        self.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let list = self.response(2);
        list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// `tools/call` of `name` (the gateway's full tool name) as request `id`: the response.
    fn call(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
        self.response(id)
    }

    /// Closes stdin, waits, and returns stderr.
    fn finish(&mut self) -> String {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        err
    }
}

fn run_server(home: &Home, argv: &[&str], offline: bool) -> (Vec<String>, String) {
    let mut args = vec!["run", "--"];
    args.extend_from_slice(argv);
    let mut c = Client::start(home.palisade(&args, offline));
    let tools = c.tools();
    let err = c.finish();
    (tools, err)
}

fn output(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn has(tools: &[String], want: &str) -> bool {
    tools.iter().any(|t| t.ends_with(want))
}

/// The full name of the listed tool that ends with `want`.
fn named<'a>(tools: &'a [String], want: &str) -> &'a str {
    tools
        .iter()
        .find(|t| t.ends_with(want))
        .unwrap_or_else(|| panic!("no tool {want}: {tools:?}"))
}

/// `palisade serve` of `config` in `home`, its sandbox dir inside the home, all calls allowed.
fn serve(home: &Home, config: &Path, offline: bool) -> Command {
    let sandbox_dir = home.path().join("sb");
    let policy = support::allow_all_policy();
    home.palisade(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--sandbox-dir",
            sandbox_dir.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ],
        offline,
    )
}

/// A result that is a success (no JSON-RPC error, not `isError`), or a panic showing it.
fn assert_ok(v: &Value, err: &str) {
    assert!(
        v["result"].is_object() && v["result"]["isError"] != json!(true),
        "{v}\n{err}"
    );
}

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
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::io::{BufRead, BufReader, Write};
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
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client { child, lines: rx }
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

#[test]
fn npx_yes_server_memory_runs_sandboxed_then_starts_offline_from_the_lock() {
    let home = Home::new();
    let argv = ["npx", "-y", "@modelcontextprotocol/server-memory"];
    let (tools, err) = run_server(&home, &argv, false);
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(
        err.contains("fetching @modelcontextprotocol/server-memory"),
        "{err}"
    );
    let locked = &home.lock()["packages"]["npm:@modelcontextprotocol/server-memory@latest"];
    let version = locked["version"].as_str().unwrap().to_string();
    assert!(
        locked["integrity"].as_str().unwrap().starts_with("sha512-"),
        "{locked}"
    );
    // The registry is gone: the locked version starts, nothing is fetched.
    let (tools, err) = run_server(&home, &argv, true);
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
    assert_eq!(
        home.lock()["packages"]["npm:@modelcontextprotocol/server-memory@latest"]["version"],
        json!(version)
    );
}

/// The issue's own example: a filesystem server wrapped in place, its directory granted.
#[test]
fn npx_yes_server_filesystem_wrapped_in_place_serves_its_granted_directory() {
    let home = Home::new();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("hello.txt"), "hi").unwrap();
    let dir = project.to_str().unwrap();
    let mut c = Client::start(home.palisade(
        &[
            "run",
            "--rw",
            dir,
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            dir,
        ],
        false,
    ));
    let tools = c.tools();
    assert!(has(&tools, "list_directory"), "{tools:?}");
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "list_directory", "arguments": {"path": dir}}}),
    );
    let listed = c.response(3);
    let err = c.finish();
    assert!(listed.to_string().contains("hello.txt"), "{listed}\n{err}");
}

#[test]
fn uvx_mcp_server_time_runs_sandboxed_then_starts_offline_from_the_lock() {
    let home = Home::new();
    let argv = ["uvx", "mcp-server-time"];
    let (tools, err) = run_server(&home, &argv, false);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    let locked = &home.lock()["packages"]["pypi:mcp-server-time@latest"];
    assert!(locked["version"].is_string(), "{locked}");
    let (tools, err) = run_server(&home, &argv, true);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
}

#[test]
fn pinned_versions_in_the_args_are_honoured() {
    let home = Home::new();
    let (tools, err) = run_server(
        &home,
        &["npx", "-y", "@modelcontextprotocol/server-memory@2026.7.4"],
        false,
    );
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    let (tools, err) = run_server(&home, &["uvx", "mcp-server-time@2026.8.18"], false);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    let lock = home.lock();
    assert_eq!(
        lock["packages"]["npm:@modelcontextprotocol/server-memory@=2026.7.4"]["version"],
        "2026.7.4"
    );
    assert_eq!(
        lock["packages"]["pypi:mcp-server-time@=2026.8.18"]["version"],
        "2026.8.18"
    );
}

#[test]
fn a_first_fetch_without_a_registry_fails_at_once_naming_the_package_and_the_fix() {
    let home = Home::new();
    for argv in [
        &[
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/tmp",
        ][..],
        &["uvx", "mcp-server-time"][..],
    ] {
        let mut args = vec!["run", "--"];
        args.extend_from_slice(argv);
        let out = output(home.palisade(&args, true));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "nothing on the MCP channel");
        let package = argv[argv.len() - 1 - usize::from(argv[0] == "npx")];
        assert!(err.contains(&format!("`{package}`")), "{err}");
        assert!(err.contains("palisade prefetch"), "{err}");
        assert!(
            err.contains("127.0.0.1:9"),
            "the client's cause is shown: {err}"
        );
    }
}

#[test]
fn serve_config_as_the_readmes_give_it_then_offline_after_prefetch() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]}
        }}),
    );
    let cfg = config.to_str().unwrap();
    let out = output(home.palisade(&["prefetch", "--config", cfg], false));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("memory: npm @modelcontextprotocol/server-memory"),
        "{text}"
    );
    assert!(text.contains("time: pypi mcp-server-time"), "{text}");
    let sandbox_dir = home.path().join("sb");
    let policy = support::allow_all_policy();
    let serve = |offline| {
        home.palisade(
            &[
                "serve",
                "--config",
                cfg,
                "--sandbox-dir",
                sandbox_dir.to_str().unwrap(),
                "--policy",
                policy.to_str().unwrap(),
            ],
            offline,
        )
    };
    let mut c = Client::start(serve(true));
    let tools = c.tools();
    let err = c.finish();
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
    // --refresh resolves the unpinned packages again (the registry is back).
    let out = output(home.palisade(&["prefetch", "--refresh", "--config", cfg], false));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("(fetched,").count(), 2, "{text}");
    // Without --refresh nothing is fetched.
    let out = output(home.palisade(&["prefetch", "--config", cfg], true));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("(cached,").count(), 2, "{text}");
}

/// Regression: under `serve`, a package that could not be fetched stopped the whole gateway.
/// Now that server alone is refused (named in the log with the fix) and the others start: the
/// agent lists and calls palisade's own fs-server beside it.
#[test]
fn serve_refuses_only_the_server_whose_package_cannot_be_fetched() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "everything": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-everything"]},
            "fs": {"command": support::palisade(), "args": ["fs-server"]}
        }}),
    );
    let sandbox_dir = home.path().join("sb");
    std::fs::create_dir_all(&sandbox_dir).unwrap();
    std::fs::write(sandbox_dir.join("marker.txt"), "m").unwrap();
    // The registry is unreachable and the cache empty.
    let mut c = Client::start(serve(&home, &config, true));
    let tools = c.tools();
    let list = named(&tools, "__list").to_string();
    assert!(
        !tools.iter().any(|t| t.starts_with("everything")),
        "{tools:?}"
    );
    let listed = c.call(3, &list, json!({"path": sandbox_dir.to_str().unwrap()}));
    // A call to the refused server's tool says why it is not there.
    let refused = c.call(4, "everything__echo", json!({"message": "hi"}));
    let err = c.finish();
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("was not started") && why.contains("palisade prefetch"),
        "{refused}"
    );
    assert_ok(&listed, &err);
    assert!(listed.to_string().contains("marker.txt"), "{listed}\n{err}");
    // The reason runs over two lines: the package and cause, then the fix.
    let at = err
        .find("not started: cannot fetch npm package")
        .unwrap_or_else(|| panic!("the failed server is not reported: {err}"));
    let refusal = &err[at..];
    let server = refusal.find("server=").map(|i| &refusal[i..]);
    assert!(
        server.is_some_and(|s| s.starts_with("server=everything")),
        "the server is named: {refusal}"
    );
    assert!(
        refusal.contains("`@modelcontextprotocol/server-everything`")
            && refusal.contains("fix: run `palisade prefetch"),
        "the package and the fix are named: {refusal}"
    );
}

/// The other servers of the list, each with its config exactly as its README gives
/// it (the version pinned to the one the test deps install), under `serve`: tools listed and
/// one simple call each (mcp-server-fetch: the list only, a real fetch needs egress); then
/// with the registry unreachable, under `serve` and `run`, from the lock. One test, so each
/// package is fetched once per run of this binary.
#[test]
fn serve_everything_sequential_thinking_and_fetch_as_their_readmes_give_them() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "everything": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]},
            "sequential-thinking": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-sequential-thinking@2026.8.31"]},
            "fetch": {"command": "uvx", "args": ["mcp-server-fetch@2026.10.24"]}
        }}),
    );
    let mut c = Client::start(serve(&home, &config, false));
    let tools = c.tools();
    let echo = named(&tools, "__echo").to_string();
    let think = named(&tools, "__sequentialthinking").to_string();
    assert!(has(&tools, "fetch__fetch"), "{tools:?}");
    let echoed = c.call(3, &echo, json!({"message": "through the cache"}));
    let thought = c.call(
        4,
        &think,
        json!({"thought": "one step", "nextThoughtNeeded": false,
            "thoughtNumber": 1, "totalThoughts": 1}),
    );
    let err = c.finish();
    assert_ok(&echoed, &err);
    assert!(echoed.to_string().contains("through the cache"), "{echoed}");
    assert_ok(&thought, &err);
    assert!(thought.to_string().contains("thoughtNumber"), "{thought}");
    assert!(err.contains("fetching"), "fetched on first use: {err}");
    let lock = home.lock();
    for (key, version) in [
        (
            "npm:@modelcontextprotocol/server-everything@=2026.8.31",
            "2026.8.31",
        ),
        (
            "npm:@modelcontextprotocol/server-sequential-thinking@=2026.8.31",
            "2026.8.31",
        ),
        ("pypi:mcp-server-fetch@=2026.10.24", "2026.10.24"),
    ] {
        assert_eq!(lock["packages"][key]["version"], version, "{lock}");
    }
    // The registry is gone: under `serve` and under `run`, each starts its locked version.
    let mut c = Client::start(serve(&home, &config, true));
    let offline = c.tools();
    let err = c.finish();
    for want in ["__echo", "__sequentialthinking", "fetch__fetch"] {
        assert!(has(&offline, want), "{offline:?}\n{err}");
    }
    assert!(!err.contains("fetching"), "{err}");
    for (argv, want) in [
        (
            &[
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything@2026.8.31",
            ][..],
            "echo",
        ),
        (
            &[
                "npx",
                "-y",
                "@modelcontextprotocol/server-sequential-thinking@2026.8.31",
            ][..],
            "sequentialthinking",
        ),
        (&["uvx", "mcp-server-fetch@2026.10.24"][..], "fetch"),
    ] {
        let (tools, err) = run_server(&home, argv, true);
        assert!(has(&tools, want), "{argv:?}: {tools:?}\n{err}");
        assert!(!err.contains("fetching"), "{err}");
    }
    // `check` reports each package as locked, with its cache entry; no fetch.
    let out = output(home.palisade(
        &["check", "--json", "--config", config.to_str().unwrap()],
        true,
    ));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for server in report["servers"].as_array().unwrap() {
        let p = &server["package"];
        assert!(p["version"].is_string(), "{server}");
        let entry = PathBuf::from(p["entry"].as_str().unwrap());
        assert!(
            entry.starts_with(home.cache()) && entry.is_dir(),
            "{server}"
        );
    }
}

/// `palisade check --config` names each package runner server's package and, before any
/// fetch, says it is not fetched yet and how to fix that; plain servers have no package.
#[test]
fn check_reports_package_runner_servers_not_fetched_yet_with_the_fix() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "fs": {"command": support::palisade(), "args": ["fs-server"]}
        }}),
    );
    let cfg = config.to_str().unwrap();
    let out = output(home.palisade(&["check", "--config", cfg], true));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "package: npm @modelcontextprotocol/server-memory (`npx`): not fetched yet: run \
             `palisade prefetch"
        ),
        "{text}"
    );
    assert!(
        text.contains("package: pypi mcp-server-time (`uvx`): not fetched yet"),
        "{text}"
    );
    assert_eq!(text.matches("package:").count(), 2, "fs has none: {text}");
    let out = output(home.palisade(&["check", "--json", "--config", cfg], true));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = report["servers"].as_array().unwrap();
    assert_eq!(
        servers[0]["package"]["package"],
        "@modelcontextprotocol/server-memory"
    );
    assert_eq!(servers[0]["package"]["ecosystem"], "npm");
    assert!(servers[0]["package"]["version"].is_null());
    assert!(servers[0]["package"]["problem"]
        .as_str()
        .unwrap()
        .contains("palisade prefetch"));
    assert!(servers[2].get("package").is_none(), "{}", servers[2]);
    assert!(
        !home.cache().join("lock.json").exists(),
        "check never fetches"
    );
}

#[test]
fn docker_run_is_refused_in_enforce_and_runs_uncontained_in_warn() {
    let home = Home::new();
    let out = output(home.palisade(
        &["run", "--", "docker", "run", "-i", "--rm", "mcp/time"],
        true,
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("docker daemon"), "{err}");
    let out = output(home.palisade(
        &[
            "run",
            "--sandbox-policy",
            "warn",
            "--",
            "docker",
            "run",
            "-i",
            "--rm",
            "mcp/time",
        ],
        true,
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UNCONTAINED"), "{err}");
}

/// What a process with the venv of a cached `uvx` entry sees, as the rewritten server does:
/// the sandbox binds that venv (its install directory) read-only and nothing else of the
/// cache, nor the home the cache lives in (the attack suite's SSH-key read, and ~/.npmrc).
/// The same probe run directly is the control: there it writes into the entry, sees the
/// other entry and the lock, and reads both files.
#[test]
fn a_cached_entry_is_read_only_and_other_entries_and_the_lock_are_invisible_in_the_sandbox() {
    let home = Home::new();
    for argv in [
        &["npx", "-y", "@modelcontextprotocol/server-memory"][..],
        &["uvx", "mcp-server-time"][..],
    ] {
        let mut args = vec!["prefetch", "--"];
        args.extend_from_slice(argv);
        let out = output(home.palisade(&args, false));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lock = home.lock();
    let entry = |key: &str, eco: &str| {
        home.cache()
            .join(eco)
            .join(lock["packages"][key]["entry"].as_str().unwrap())
    };
    let time = entry("pypi:mcp-server-time@latest", "pypi");
    let memory = entry("npm:@modelcontextprotocol/server-memory@latest", "npm");
    let python = time.join("venv/bin/python");
    // The attack suite's home reads, from a server whose entry lives under HOME/.cache: an
    // SSH key, and ~/.npmrc (registry tokens; the fetch sandbox reads it, a server must not).
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(home.path().join(".ssh/id_ed25519"), "key").unwrap();
    std::fs::write(
        home.path().join(".npmrc"),
        "//registry.npmjs.org/:_authToken=palisade-test-token\n",
    )
    .unwrap();
    let probe = "import os, sys\n\
        entry, other, lock, key, npmrc = sys.argv[1:6]\n\
        seen = []\n\
        try:\n    open(os.path.join(entry, 'planted'), 'w').close(); seen.append('wrote-entry')\n\
        except OSError:\n    pass\n\
        seen += ['sees-other'] if os.path.exists(other) else []\n\
        seen += ['sees-lock'] if os.path.exists(lock) else []\n\
        for name, path in (('reads-key', key), ('reads-npmrc', npmrc)):\n\
        \x20   try:\n\
        \x20       open(path).read(); seen.append(name)\n\
        \x20   except OSError:\n\
        \x20       pass\n\
        print(','.join(seen) or 'contained')\n";
    let probe_args = [
        "-c".to_string(),
        probe.to_string(),
        time.join("venv").display().to_string(),
        memory.display().to_string(),
        home.cache().join("lock.json").display().to_string(),
        home.path().join(".ssh/id_ed25519").display().to_string(),
        home.path().join(".npmrc").display().to_string(),
    ];
    let mut sandboxed = home.palisade(&["run", "--", python.to_str().unwrap()], true);
    sandboxed.args(&probe_args);
    let out = output(sandboxed);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        "contained",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !time.join("venv/planted").exists(),
        "nothing planted on the host"
    );
    // Control: the same probe outside the sandbox reaches all three.
    let mut direct = Command::new(&python);
    direct.args(&probe_args);
    let out = output(direct);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "wrote-entry,sees-other,sees-lock,reads-key,reads-npmrc"
    );
}

/// A fetch sandbox (`build` makes it for an entry directory) running a probe in the client's
/// place: it writes its entry and reaches `allowed`, but cannot write beside the entry in the
/// cache (checked on the host) nor reach `other`. The same probe run directly is the control.
fn probe_fetch_sandbox(
    build: impl Fn(&Path) -> palisade::sandbox::launch::LaunchRequest,
    allowed: &str,
    other: &str,
) {
    let work = tempfile::tempdir().unwrap();
    let eco = work.path().join("cache/eco");
    let entry = eco.join(".fetch-probe");
    std::fs::create_dir_all(&entry).unwrap();
    let script = format!(
        "touch {eco}/planted 2>/dev/null && echo wrote-outside\n\
         touch {entry}/inside && echo wrote-entry\n\
         curl -s -m 20 -o /dev/null {allowed} && echo reached-allowed\n\
         curl -s -m 20 -o /dev/null {other} && echo reached-other\n\
         exit 0\n",
        eco = eco.display(),
        entry = entry.display()
    );
    let mut req = build(&entry);
    req.command = "/bin/sh".into();
    req.args = vec!["-c".into(), script.clone()];
    let log = work.path().join("probe.log");
    palisade::packages::contained::run_in_sandbox(req, &log, "a probe").unwrap();
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.contains("wrote-entry"), "{seen}");
    assert!(seen.contains("reached-allowed"), "{seen}");
    assert!(!seen.contains("reached-other"), "{seen}");
    // A write beside the entry may succeed in the sandbox's own scratch root (bwrap makes
    // the entry's parents there); what matters is the host.
    assert!(
        !eco.join("planted").exists(),
        "nothing planted beside the entry: {seen}"
    );
    // Control: unsandboxed, the same probe writes beside the entry and reaches `other`.
    let out = output({
        let mut c = Command::new("/bin/sh");
        c.args(["-c", &script]);
        c
    });
    let direct = String::from_utf8_lossy(&out.stdout);
    assert!(eco.join("planted").exists(), "{direct}");
    assert!(direct.contains("reached-other"), "{direct}");
}

#[test]
fn the_npm_fetch_sandbox_writes_only_its_entry_and_reaches_only_the_registry() {
    probe_fetch_sandbox(
        |entry| {
            palisade::packages::contained::fetch_request(
                Path::new("/usr/bin/npm"),
                Vec::new(),
                entry,
                "https://registry.npmjs.org/",
            )
            .unwrap()
        },
        "https://registry.npmjs.org/",
        "https://pypi.org/simple/",
    );
}

#[test]
fn the_uv_fetch_sandbox_writes_only_its_entry_and_reaches_only_the_index() {
    let uv = support::deps().join("venv/bin/uv");
    probe_fetch_sandbox(
        |entry| {
            palisade::packages::contained::uv_request(
                &uv,
                Vec::new(),
                entry,
                "https://pypi.org/simple",
                None,
            )
            .unwrap()
        },
        "https://files.pythonhosted.org/",
        "https://registry.npmjs.org/",
    );
}

/// A package built here whose `postinstall` tries to write outside its cache entry (a host
/// directory under a temp dir, the host HOME, another cache entry) and records in its own
/// package directory (the legitimate part of an install) which writes it believed done. Its
/// bin needs nothing the script makes: it says it started and whether the script ran.
const PROBE: &str = "palisade-probe-postinstall";

/// Where the probe's script tries to write, on the host.
struct Targets {
    outside: PathBuf,
    host_home: PathBuf,
    other_entry: PathBuf,
}

impl Targets {
    fn new(home: &Home, outside_dir: &Path) -> Self {
        let other = home.cache().join("npm/0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("index.js"), "// another package\n").unwrap();
        Targets {
            outside: outside_dir.join("planted-by-postinstall"),
            host_home: home.path().join(".bashrc"),
            other_entry: other.join("planted-by-postinstall"),
        }
    }

    /// The targets the script managed to write on the host.
    fn planted(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.outside.exists() {
            out.push("outside");
        }
        if self.host_home.exists() {
            out.push("host-home");
        }
        if self.other_entry.exists() {
            out.push("other-entry");
        }
        out
    }
}

/// `npm pack` of the probe package writing to `t`: the tarball's bytes, its integrity and
/// shasum (as npm computed them).
fn pack_probe(work: &Path, t: &Targets) -> (Vec<u8>, String, String) {
    let src = work.join("probe-src");
    std::fs::create_dir_all(&src).unwrap();
    let manifest = json!({
        "name": PROBE,
        "version": "1.0.0",
        "bin": {PROBE: "bin.js"},
        "scripts": {"postinstall": "node postinstall.js"},
    });
    std::fs::write(src.join("package.json"), manifest.to_string()).unwrap();
    let script = format!(
        "const fs = require('fs');\n\
         const seen = [];\n\
         for (const [label, path] of [['outside', {outside}], ['host-home', {home}], \
         ['env-home', process.env.HOME + '/.profile'], ['other-entry', {other}]]) {{\n\
         \x20 try {{ fs.writeFileSync(path, 'planted\\n'); seen.push(label); }}\n\
         \x20 catch (e) {{ seen.push(label + ':' + e.code); }}\n\
         }}\n\
         fs.writeFileSync(__dirname + '/built.txt', seen.join(',') + '\\n');\n",
        outside = json!(t.outside.display().to_string()),
        home = json!(t.host_home.display().to_string()),
        other = json!(t.other_entry.display().to_string()),
    );
    std::fs::write(src.join("postinstall.js"), script).unwrap();
    std::fs::write(
        src.join("bin.js"),
        "#!/usr/bin/env node\n\
         const built = require('fs').existsSync(__dirname + '/built.txt');\n\
         console.log('probe started, postinstall ran: ' + built);\n",
    )
    .unwrap();
    let out = Command::new("npm")
        .args(["pack", "--json", "--pack-destination"])
        .arg(work)
        .current_dir(&src)
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tgz = std::fs::read(work.join(packed[0]["filename"].as_str().unwrap())).unwrap();
    (
        tgz,
        packed[0]["integrity"].as_str().unwrap().to_string(),
        packed[0]["shasum"].as_str().unwrap().to_string(),
    )
}

/// A registry for one package, on 127.0.0.2 (a loopback address outside the sandbox's
/// NO_PROXY list, so npm in the fetch sandbox reaches it through the egress proxy as it
/// would a real registry). Answers the package document and the tarball; stops on drop.
struct Registry {
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Registry {
    fn serve(tgz: Vec<u8>, integrity: String, shasum: String) -> Self {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let tarball_path = format!("/{PROBE}/-/{PROBE}-1.0.0.tgz");
        let doc = json!({
            "name": PROBE,
            "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {
                "name": PROBE,
                "version": "1.0.0",
                "bin": {PROBE: "bin.js"},
                "scripts": {"postinstall": "node postinstall.js"},
                "hasInstallScript": true,
                "dist": {
                    "tarball": format!("{}{}", url.trim_end_matches('/'), tarball_path),
                    "integrity": integrity,
                    "shasum": shasum,
                },
            }},
        })
        .to_string()
        .into_bytes();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, kind, body) = if path == format!("/{PROBE}") {
                    ("200 OK", "application/json", &doc)
                } else if path == tarball_path {
                    ("200 OK", "application/octet-stream", &tgz)
                } else {
                    ("404 Not Found", "application/json", &b"{}".to_vec())
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(body);
            }
        });
        Registry {
            url,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let addr = self.url.trim_start_matches("http://").trim_end_matches('/');
        let _ = std::net::TcpStream::connect(addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A profiles directory whose profile for the probe turns its install scripts on.
fn scripts_profile(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    support::write_json(
        &dir.join("probe.json"),
        &json!({
            "description": "the install-script probe",
            "match": {"packages": [PROBE]},
            "package": {"installScripts": true, "reason": "its postinstall writes built.txt"},
        }),
    );
}

/// `palisade run [--profiles-dir DIR] -- npx -y PROBE` against `registry`, `uncontained`
/// fetching without the fetch sandbox: the probe's stdout, stderr.
fn run_probe(
    home: &Home,
    registry: &Registry,
    profiles: Option<&Path>,
    uncontained: bool,
) -> (String, String) {
    let mut args = vec!["run"];
    if let Some(p) = profiles {
        args.extend(["--profiles-dir", p.to_str().unwrap()]);
    }
    args.extend(["--", "npx", "-y", PROBE]);
    let mut cmd = home.palisade(&args, false);
    cmd.env("npm_config_registry", &registry.url);
    if uncontained {
        cmd.env("PALISADE_FETCH_UNCONTAINED", "1");
    } else {
        cmd.env_remove("PALISADE_FETCH_UNCONTAINED");
    }
    let out = output(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The proof: a package whose profile turns install scripts on has its `postinstall`
/// run in the fetch sandbox. Its write inside its own package directory lands in the cache
/// entry (and the lock says scripts ran); its writes to a host directory, the host HOME and
/// another cache entry do not reach the host. Control: the same fetch with the sandbox
/// turned off (`PALISADE_FETCH_UNCONTAINED=1`, as `npx` itself would run it) plants all three.
#[test]
fn install_scripts_a_profile_asks_for_run_in_the_fetch_sandbox_and_write_only_their_entry() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&home, outside.path());
    let (tgz, integrity, shasum) = pack_probe(home.path(), &t);
    let registry = Registry::serve(tgz, integrity.clone(), shasum);
    let profiles = home.path().join("profiles");
    scripts_profile(&profiles);
    let (stdout, err) = run_probe(&home, &registry, Some(&profiles), false);
    assert_eq!(t.planted(), Vec::<&str>::new(), "{err}");
    assert!(err.contains("(sandboxed)"), "{err}");
    assert_eq!(stdout.trim(), "probe started, postinstall ran: true");
    let locked = &home.lock()["packages"][&format!("npm:{PROBE}@latest scripts")];
    assert_eq!(locked["install_scripts"], json!(true), "{locked}");
    assert_eq!(locked["integrity"], json!(integrity));
    let entry = home
        .cache()
        .join("npm")
        .join(locked["entry"].as_str().unwrap());
    let built =
        std::fs::read_to_string(entry.join("node_modules").join(PROBE).join("built.txt")).unwrap();
    assert!(built.starts_with("outside"), "the script ran: {built}");
    assert!(
        !home.path().join(".profile").exists(),
        "the script's HOME is private: {built}"
    );
    // A config's servers find the same entry through the config's profiles directory:
    // prefetch serves it from the lock, check reports it as fetched.
    let config = home.path().join("mcp.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {"probe": {"command": "npx", "args": ["-y", PROBE]}},
                "palisade": {"profilesDir": profiles}}),
    );
    let out = output(home.palisade(&["prefetch", "--config", config.to_str().unwrap()], true));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("(cached, ") && said.contains("install scripts ran"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(home.palisade(
        &["check", "--config", config.to_str().unwrap(), "--json"],
        true,
    ));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["servers"][0]["package"]["version"],
        json!("1.0.0"),
        "{report}"
    );
    // Control: without the fetch sandbox the same script plants every file.
    let control = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&control, outside.path());
    let (tgz, integrity, shasum) = pack_probe(control.path(), &t);
    let registry = Registry::serve(tgz, integrity, shasum);
    let profiles = control.path().join("profiles");
    scripts_profile(&profiles);
    let (stdout, err) = run_probe(&control, &registry, Some(&profiles), true);
    assert!(!err.contains("(sandboxed)"), "{err}");
    assert_eq!(
        t.planted(),
        ["outside", "host-home", "other-entry"],
        "{err}"
    );
    assert_eq!(stdout.trim(), "probe started, postinstall ran: true");
}

/// Install scripts are off unless a profile turns them on: the same package fetched without
/// such a profile never runs its `postinstall` (nothing planted, not even inside its entry),
/// the lock records no scripts, and the package, which does not need the script, starts.
/// The control is the test above: with scripts on and no sandbox, the script plants them.
#[test]
fn install_scripts_are_off_by_default_and_a_package_that_needs_none_still_starts() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&home, outside.path());
    let (tgz, integrity, shasum) = pack_probe(home.path(), &t);
    let registry = Registry::serve(tgz, integrity, shasum);
    // Even with the fetch sandbox off, no profile means no scripts.
    for uncontained in [false, true] {
        let (stdout, err) = run_probe(&home, &registry, None, uncontained);
        assert_eq!(t.planted(), Vec::<&str>::new(), "{err}");
        assert_eq!(
            stdout.trim(),
            "probe started, postinstall ran: false",
            "{err}"
        );
        let lock = home.lock();
        let locked = &lock["packages"][&format!("npm:{PROBE}@latest")];
        assert!(locked["install_scripts"].is_null(), "{locked}");
        assert!(lock["packages"]
            .get(format!("npm:{PROBE}@latest scripts"))
            .is_none());
        let entry = home
            .cache()
            .join("npm")
            .join(locked["entry"].as_str().unwrap());
        assert!(!entry
            .join("node_modules")
            .join(PROBE)
            .join("built.txt")
            .exists());
        // The next round fetches again (without the sandbox).
        std::fs::remove_file(home.cache().join("lock.json")).unwrap();
        std::fs::remove_dir_all(&entry).unwrap();
    }
}

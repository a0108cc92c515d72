//! Regressions from first contact: what a new user and a real client (Claude Code among them)
//! met running palisade as users run it. Each test is named after what broke and fails on the
//! code that broke it.
//!
//! The client here is a raw JSON-RPC line client over the gateway's stdio: it sees exactly the
//! bytes a client sees, stderr included.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::raw::{text_of, wait_bounded, Serve};
use support::{palisade, Workspace};

/// One built-in fs-server over `root`, with `settings` merged into the palisade block.
fn fs_config(ws: &Workspace, root: &Path, settings: Value) -> PathBuf {
    ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server", "--root", root],
                      "sandbox": {"filesystem": {"allowWrite": [root]}}}}),
        settings,
    )
}

// #7: a normal start wrote seven INFO lines on stderr, which Claude Code stores as an error
// entry on every start. A normal start and a normal call now print nothing.
#[test]
fn a_normal_start_and_call_print_nothing_on_stderr() {
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    let audit = ws.path().join("audit.jsonl");
    if !bwrap_installed() {
        return support::skip("bubblewrap is not installed");
    }
    let config = fs_config(
        &ws,
        &root,
        json!({"auditLog": audit, "sandboxPolicy": "enforce", "policy": null}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let r = serve.call(2, "fs__read", json!({"path": root.join("a.txt")}));
    assert_eq!(text_of(&r), "alpha", "{r}");
    let (status, err) = serve.finish();
    assert!(status.success(), "{status}: {err}");
    assert_eq!(err, "", "stderr of a normal start and call");
    assert_eq!(
        support::read_jsonl(&audit).len(),
        1,
        "the call is audited in the file"
    );
}

fn bwrap_installed() -> bool {
    which("bwrap").is_some()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

// #8: `serve` ran `srt --version` (a Node start, 100-300 ms) at every start although no
// server used srt. Now only a config that can use srt asks it.
#[test]
fn serve_asks_srt_only_when_a_server_uses_it() {
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let marker = ws.path().join("srt-was-run");
    let fake_srt = ws.path().join("srt");
    std::fs::write(
        &fake_srt,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\necho 0.0.83\n",
            marker.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_srt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let srt_env = [("PALISADE_SRT", fake_srt.to_str().unwrap())];

    for (backend, expect_run) in [(None, false), (Some("srt"), true)] {
        let _ = std::fs::remove_file(&marker);
        let mut settings = json!({"sandboxPolicy": "warn", "policy": null});
        if let Some(b) = backend {
            settings["backend"] = json!(b);
        }
        let config = fs_config(&ws, &root, settings);
        let mut serve = Serve::start(&ws, &config, &[], &srt_env);
        serve.initialize();
        let (_, err) = serve.finish();
        let ran = std::fs::read_to_string(&marker).unwrap_or_default();
        assert_eq!(
            ran.lines().any(|l| l.trim() == "--version"),
            expect_run,
            "backend {backend:?}: srt invocations {ran:?}; stderr:\n{err}"
        );
    }
}

// #9: fs-server's `list_roots` said `"access": "rw"` for a root the gateway mounted (and
// logged) read-only: MCP roots carry no access, so every client root was taken as rw.
#[test]
fn fs_server_reports_a_read_only_grant_as_read_only() {
    let ws = Workspace::new();
    let rw = ws.canonical().join("work");
    let ro = ws.canonical().join("reference");
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::create_dir_all(&ro).unwrap();
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"],
                      "sandbox": {"filesystem": {"allowWrite": [rw], "allowRead": [ro]}}}}),
        json!({"sandboxPolicy": "warn", "policy": null}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    // The fs-server applies the roots it asks for after `initialized`; wait until it has.
    let mut roots = Value::Null;
    for i in 0..200 {
        let r = serve.call(10 + i, "fs__list_roots", json!({}));
        roots = serde_json::from_str(&text_of(&r)).unwrap_or(Value::Null);
        if roots["source"] == "client" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = serve.finish();
    let access_of = |p: &Path| -> Value {
        roots["roots"]
            .as_array()
            .unwrap_or(&vec![])
            .iter()
            .find(|r| r["path"] == json!(p))
            .map(|r| r["access"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(access_of(&ro), "ro", "{roots}");
    assert_eq!(access_of(&rw), "rw", "{roots}");
}

// #6: Claude Code (Node) connects a server's stdio with a socket pair and stops it with
// SIGINT, then SIGTERM 100 ms later. With a socket stdin palisade read it on a blocking
// thread that the runtime's shutdown waited for: 215 ms to exit, so every stop escalated.
// The socket is now on the reactor; the exit time is printed here and measured by
// scripts/bench.sh, never asserted.
#[test]
fn a_socket_stdin_is_read_on_the_reactor_and_sigint_stops_the_gateway() {
    use std::os::unix::net::UnixStream;
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let config = fs_config(&ws, &root, json!({"sandboxPolicy": "warn", "policy": null}));
    let (ours, theirs) = UnixStream::pair().unwrap();
    let theirs_out = theirs.try_clone().unwrap();
    let mut child = Command::new(palisade())
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "debug,rmcp=warn")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
        .stderr(std::fs::File::create(ws.errlog()).unwrap())
        .spawn()
        .unwrap();
    let mut writer = ours.try_clone().unwrap();
    let mut reader = BufReader::new(ours);
    writeln!(
        writer,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "node-like", "version": "1"}}})
    )
    .unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let init: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(init["id"], 1, "{line}");
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = wait_bounded(&mut child);
    eprintln!("exited {:?} after SIGINT", sent.elapsed());
    let err = ws.stderr_text();
    assert!(status.success(), "{status}: {err}");
    assert!(
        !err.contains("blocking thread"),
        "a socket stdin must not be read on a blocking thread:\n{err}"
    );
}

fn faulty_server() -> String {
    support::repo("tests/servers/faulty_server.py")
        .display()
        .to_string()
}

// #3: after a server crashed mid-call, calls to it in the next half second got "unknown tool
// `x__y`: no running server offers it" and no audit record. A call to a restarting server
// now waits for it (bounded by the start timeout), and every call is audited.
#[test]
fn a_call_during_a_restart_waits_for_the_server_and_every_call_is_audited() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"flaky": {"command": support::python(), "args": [faulty_server()]}}),
        json!({"auditLog": audit}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let crashed = serve.call(2, "flaky__crash", json!({"after": 0}));
    assert!(
        crashed.get("error").is_some(),
        "the crash fails its call: {crashed}"
    );
    // Sent at once: the server is down and its restart is scheduled (backoff 0.5 s).
    let after = serve.call(3, "flaky__echo", json!({"text": "back"}));
    // A name no server offers is refused, and audited too.
    let unknown = serve.call(4, "nobody__nothing", json!({}));
    let (_, err) = serve.finish();
    assert_eq!(text_of(&after), "echo: back", "{after}\n{err}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "{unknown}"
    );
    let records = support::read_jsonl(&audit);
    let of = |id: &str| records.iter().find(|r| r["requestId"] == id).cloned();
    for id in ["2", "3", "4"] {
        assert!(
            of(id).is_some(),
            "no audit record for call {id}: {records:?}"
        );
    }
    let unknown_rec = of("4").unwrap();
    assert_eq!(
        unknown_rec["policyDecision"]["status"], "deny",
        "{unknown_rec}"
    );
    assert_eq!(
        unknown_rec["policyDecision"]["rule"], "unroutable",
        "{unknown_rec}"
    );
    assert_eq!(unknown_rec["result"]["status"], "denied", "{unknown_rec}");
    assert_eq!(of("3").unwrap()["result"]["status"], "success");
}

// #4: when the agent's own declared roots refused a path (Claude Code declares its working
// folder and each --add-dir), the call failed with FORBIDDEN but its record read
// `policyDecision: allow` (`default-read-in-roots`). The record now names the stage that
// decided.
#[test]
fn a_call_the_agents_roots_refuse_is_not_audited_as_allowed() {
    let ws = Workspace::new();
    let base = ws.canonical();
    let (inside, outside) = (base.join("project"), base.join("elsewhere"));
    for d in [&inside, &outside] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("f.txt"), "x").unwrap();
    }
    let audit = ws.path().join("audit.jsonl");
    // Both directories are the server's roots; the agent declares only `project`.
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"],
                      "sandbox": {"filesystem": {"allowWrite": [inside, outside]}}}}),
        json!({"auditLog": audit, "policy": null}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.agent_roots = Some(vec![format!("file://{}", inside.display())]);
    serve.initialize();
    let ok = serve.call(2, "fs__read", json!({"path": inside.join("f.txt")}));
    let refused = serve.call(3, "fs__read", json!({"path": outside.join("f.txt")}));
    let (_, err) = serve.finish();
    assert_eq!(text_of(&ok), "x", "{ok}\n{err}");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let records = support::read_jsonl(&audit);
    let rec = records
        .iter()
        .find(|r| r["requestId"] == "3")
        .unwrap_or_else(|| panic!("no record: {records:?}"));
    assert_eq!(rec["result"]["status"], "denied", "{rec}");
    assert_eq!(rec["policyDecision"]["status"], "deny", "{rec}");
    assert_eq!(rec["policyDecision"]["rule"], "agent-roots", "{rec}");
    let allowed = records.iter().find(|r| r["requestId"] == "2").unwrap();
    assert_eq!(allowed["policyDecision"]["status"], "allow", "{allowed}");
}

// #5: where namespaces fail (a container, a nested sandbox), `palisade run` under enforce
// printed bubblewrap's raw error and exited 1. Asked for bubblewrap, it now refuses itself,
// with the cause and the fix, and exits 3 (as `check` explains); under the default `auto` it
// runs under the Landlock tier instead (tests/sandbox/tiers.rs). The place without user namespaces
// is real: an outer bubblewrap with --disable-userns, inside which creating one fails with
// ENOSPC.
#[test]
fn run_refuses_with_its_own_reason_where_namespaces_fail() {
    let Some(bwrap) = which("bwrap") else {
        return support::skip("bubblewrap is not installed");
    };
    let out = Command::new(bwrap)
        .args(["--dev-bind", "/", "/", "--unshare-user", "--disable-userns"])
        .args(["--die-with-parent", "--", palisade()])
        .args([
            "run",
            "--backend",
            "bwrap",
            "--sandbox-policy",
            "enforce",
            "--",
            "/bin/true",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.starts_with("palisade: refusing to run"), "{err}");
    assert!(err.contains("cannot create its namespaces"), "{err}");
    assert!(err.contains("fix:"), "{err}");
}

/// A server that fails at start says why on stderr; the call that finds it down, and the log,
/// carry its words (before, they said only "closed its connection before answering").
#[test]
fn a_server_that_dies_at_start_is_reported_with_its_own_words() {
    let ws = Workspace::new();
    let script = ws.path().join("bad.js");
    std::fs::write(
        &script,
        "console.error('boom: API_KEY is not set'); process.exit(3);\n",
    )
    .unwrap();
    let config = ws.config(
        json!({"bad": {"command": "node", "args": [script]}}),
        json!({"startupTimeout": 2}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let got = serve.call(2, "bad__anything", json!({}));
    let (_, stderr) = serve.finish();
    let said = got["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("boom: API_KEY is not set"),
        "the agent is told the server's own reason: {got}"
    );
    assert!(
        stderr.contains("last words on stderr: boom: API_KEY is not set"),
        "{stderr}"
    );
}

/// `palisade run -- node build/index.js` from the project directory: the script is found
/// although the sandbox's working directory is not the caller's.
#[test]
fn run_finds_a_script_given_relative_to_the_callers_directory() {
    let ws = Workspace::new();
    let project = ws.path().join("project");
    std::fs::create_dir_all(project.join("build")).unwrap();
    std::fs::write(
        project.join("build/index.js"),
        "process.stdout.write('relative script ran\\n');\n",
    )
    .unwrap();
    let out = Command::new(palisade())
        .args([
            "run",
            "--sandbox-policy",
            "warn",
            "--",
            "node",
            "build/index.js",
        ])
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("relative script ran"),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// Busy polling (`busyPollMicros`, on by default for an agent on stdio) is a setting a user
// meets when a laptop's fan spins up: off at 0 the gateway still answers, and a spin past the
// cap is refused at start, naming the field, the flag and the fix. (Its effect on latency is
// a benchmark's to show: docs/benchmarks.md, "Busy polling before the thread sleeps".)
#[test]
fn busy_polling_turns_off_at_zero_and_a_spin_past_its_cap_is_refused() {
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    let off = fs_config(
        &ws,
        &root,
        json!({"busyPollMicros": 0, "sandboxPolicy": "warn", "policy": null}),
    );
    let mut serve = Serve::start(&ws, &off, &[], &[]);
    serve.initialize();
    let r = serve.call(2, "fs__read", json!({"path": root.join("a.txt")}));
    assert_eq!(text_of(&r), "alpha", "{r}");
    let (status, err) = serve.finish();
    assert!(status.success(), "{status}: {err}");

    let too_long = fs_config(&ws, &root, json!({"busyPollMicros": 6000}));
    for (config, extra, named) in [
        (&too_long, vec![], "busyPollMicros (palisade block) is 6000"),
        (
            &off,
            vec!["--busy-poll-micros", "7000"],
            "--busy-poll-micros is 7000",
        ),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(config)
            .args(&extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "nothing on the MCP channel");
        assert!(err.contains(named), "the one given is named: {err}");
        assert!(err.contains("at most 1000"), "the cap: {err}");
        assert!(err.contains("0 turns busy polling off"), "the fix: {err}");
    }
}

// README's one-server line, as a user copies it: `serve -- npx -y server-filesystem DIR`
// served nothing of DIR (the server was told of Palisade's sandbox directory only, and the
// policy refused DIR as outside its roots), and `serve` had no way to grant it. `serve --rw
// DIR -- CMD` grants DIR to the one server: its roots name it and a read works, with the
// real server-filesystem and the Python SDK client. Control: without `--rw` the read is
// refused.
#[test]
fn serve_rw_grants_the_one_server_its_directory() {
    let ws = Workspace::new();
    let project = ws.canonical().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "alpha").unwrap();
    let fs =
        support::deps().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let calls = json!([
        {"tool": "list_allowed_directories", "args": {}},
        {"tool": "read_text_file", "args": {"path": project.join("a.txt")}},
    ]);
    let run = |grant: bool| -> Value {
        let mut c = support::driver("tests/clients/calls.py");
        c.arg(calls.to_string())
            .arg("--")
            .arg(palisade())
            .arg("serve");
        if grant {
            c.arg("--rw").arg(&project);
        }
        c.args(["--sandbox-dir"]).arg(ws.path().join("sandbox"));
        c.arg("--").arg("node").arg(&fs).arg(&project);
        let out = c.output().unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&out.stdout), text(&out.stderr)))
    };
    let granted = run(true);
    let listed = granted["calls"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(listed.contains(project.to_str().unwrap()), "{granted}");
    assert_eq!(granted["calls"][1]["error"], false, "{granted}");
    assert_eq!(granted["calls"][1]["text"], "alpha", "{granted}");
    let control = run(false);
    assert_eq!(control["calls"][1]["error"], true, "{control}");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// The configuration reference's own example writes `"auditLog": "~/.local/state/..."`: the
// `~` was taken literally (`cannot open audit log ~/...: No such file or directory`, the
// cause said twice) and `"sandboxDir": "~/sbx"` made a directory named `~` in the working
// directory. A `~` in the palisade block's paths is now the home, and the audit log's
// directory is made when missing.
#[test]
fn a_tilde_in_the_palisade_block_is_the_home_and_the_logs_directory_is_made() {
    let ws = Workspace::new();
    let home = ws.canonical().join("home");
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    let config = fs_config(
        &ws,
        &root,
        json!({"auditLog": "~/.local/state/palisade/audit.jsonl",
               "sandboxPolicy": "warn", "policy": null}),
    );
    // (The workspace's config names its own sandbox directory; this one is the home's.)
    let mut v: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["palisade"]["sandboxDir"] = json!("~/sbx");
    support::write_json(&config, &v);
    let home_var = home.display().to_string();
    let mut serve = Serve::start(&ws, &config, &[], &[("HOME", &home_var)]);
    serve.initialize();
    let r = serve.call(2, "fs__read", json!({"path": root.join("a.txt")}));
    let (status, err) = serve.finish();
    assert_eq!(text_of(&r), "alpha", "{r}\n{err}");
    assert!(status.success(), "{status}: {err}");
    let audit = home.join(".local/state/palisade/audit.jsonl");
    assert_eq!(support::read_jsonl(&audit).len(), 1, "{err}");
    assert!(home.join("sbx").is_dir(), "{err}");
    assert!(!ws.path().join("~").exists(), "{err}");
}

// `"command": "npx", "args": ["-y"]` (the package forgotten) was accepted with a warning
// about fetching, and npx then ran the agent's JSON-RPC lines as shell commands. Such a line
// is refused, naming the field to fix: that server alone under `serve` (the others start),
// and `run` with a usage error.
#[test]
fn a_runner_line_without_a_package_is_refused_naming_its_args() {
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let config = fs_config(&ws, &root, json!({}));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["mcpServers"]["mem"] = json!({"command": "npx", "args": ["-y"]});
    support::write_json(&config, &v);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let tools = serve.request(2, "tools/list", json!({}));
    let (_, err) = serve.finish();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        names.contains(&"fs__read"),
        "the other server starts: {tools}\n{err}"
    );
    assert!(!names.iter().any(|n| n.starts_with("mem__")), "{tools}");
    assert!(
        err.contains("`npx` names no package to run") && err.contains("mcpServers.mem.args"),
        "{err}"
    );
    let out = Command::new(palisade())
        .args(["run", "--", "npx", "-y"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("names no package"),
        "{}",
        text(&out.stderr)
    );
}

// `check --config` said "sandboxed" for a server whose command does not exist and whose
// granted directory does not either; `serve` then restarted it five times. check now names
// both, and a server that is fine gets no such line.
#[test]
fn check_names_a_missing_command_and_a_missing_grant() {
    let ws = Workspace::new();
    let config = ws.path().join("check.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "gone": {"command": "/opt/surely-not-here/bin/server",
                     "sandbox": {"filesystem": {"allowRead": ["/surely/not/a/dir"]}}},
            "fine": {"command": palisade(), "args": ["fs-server"]},
        }}),
    );
    let out = Command::new(palisade())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(
        report.contains("PROBLEM: command `/opt/surely-not-here/bin/server` does not exist"),
        "{report}"
    );
    assert!(
        report.contains("PROBLEM: sandbox.filesystem.allowRead `/surely/not/a/dir` does not exist"),
        "{report}"
    );
    assert_eq!(
        report.matches("PROBLEM:").count(),
        2,
        "fine has none: {report}"
    );
}

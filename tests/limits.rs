//! The default resource limits, with no `sandbox.limits` in the config: a fork bomb and a
//! runaway allocation are stopped whether or not palisade can make a cgroup for the server.
//! The cgroup case is whatever this machine offers (`palisade check` says which; the test
//! asserts the behaviour that goes with its answer); the rlimit fallback is forced with
//! `sandbox.limits.cgroup: false`, as on a host without a delegated cgroup.
//!
//! The kernel exempts uid 0 from RLIMIT_NPROC, so the task-limit fallback is tested with
//! palisade running as an unprivileged user (`setpriv` to nobody when the test runs as
//! root), as it runs on the hosts that lack a cgroup: a desktop session.
//!
//! Also: `openFiles` (RLIMIT_NOFILE) bounds a server's descriptors, and the write protection
//! of `.git/hooks`, `.git/config` and rc files in a writable root is on by default and can be
//! turned off with `protectDangerousFiles: false`.
//!
//! Each attack runs first against the same server launched directly (the control must reach
//! its target, so the test cannot pass vacuously), then through `palisade serve` under
//! enforce with the native bubblewrap backend, driven by palisade's rmcp client.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::path::Path;
use std::time::Duration;

use palisade::client::{result_text, McpClient, SpawnOptions, StderrMode};
use serde_json::{json, Value};
use support::Workspace;

#[path = "limits/cgroup_sweep.rs"]
mod cgroup_sweep;

/// Default `pids` / `processes` (src/sandbox/spec.rs).
const DEFAULT_TASKS: u64 = 1024;
/// Default `memoryMb`.
const DEFAULT_MEMORY_MB: u64 = 4096;
/// More forks than the default allows.
const BOMB: u64 = 1200;

/// A system python3 (the probe server needs only the standard library): unlike the test
/// venv's, which may link into root's home, an unprivileged user can run it.
fn system_python() -> Option<String> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(String::from)
}

fn probe_script() -> String {
    support::repo("tests/servers/limits_probe.py")
        .display()
        .to_string()
}

/// A system python3 and bwrap; said out loud (or failed, under scripts/test.sh) when missing.
fn ready() -> bool {
    if system_python().is_none() {
        support::skip("no system python3 (/usr/bin/python3) for the limits probe");
        return false;
    }
    if which::which("bwrap").is_err() {
        support::skip("no bwrap");
        return false;
    }
    true
}

/// The unprivileged uid the task-limit fallback is tested under, when the test runs as root.
const NOBODY: u32 = 65534;

/// `program args` as an unprivileged user: through setpriv to nobody when running as root.
fn unprivileged(program: &str, args: Vec<String>) -> (String, Vec<String>) {
    if !nix::unistd::getuid().is_root() {
        return (program.into(), args);
    }
    let mut wrapped = vec![
        format!("--reuid={NOBODY}"),
        format!("--regid={NOBODY}"),
        "--clear-groups".into(),
        "--".into(),
        program.into(),
    ];
    wrapped.extend(args);
    ("setpriv".into(), wrapped)
}

/// Hands the workspace to nobody, for a palisade that runs as nobody.
fn give_to_nobody(ws: &Workspace) {
    if nix::unistd::getuid().is_root() {
        let out = std::process::Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(ws.path())
            .status()
            .unwrap();
        assert!(out.success());
    }
}

async fn connect(program: &str, args: Vec<String>, log: &Path) -> McpClient {
    let mut opts = SpawnOptions::new(program).args(args);
    opts.env = vec![("HOME".into(), log.parent().unwrap().into())];
    opts.stderr = StderrMode::File(log.to_path_buf());
    opts.timeout = Duration::from_secs(120);
    McpClient::spawn(opts).await.expect("start the MCP server")
}

/// The control: the probe server launched directly, nothing in between.
async fn direct(ws: &Workspace) -> McpClient {
    connect(
        &system_python().unwrap(),
        vec![probe_script()],
        &ws.path().join("direct-stderr.log"),
    )
    .await
}

/// `palisade serve` (enforce, native bwrap) with the probe server; `limits` is its
/// `sandbox.limits` block (`null`: none, the defaults).
async fn gateway(ws: &Workspace, limits: Value) -> McpClient {
    gateway_as(ws, limits, false).await
}

/// As `gateway`, as an unprivileged user when `unprivileged_user`.
async fn gateway_as(ws: &Workspace, limits: Value, unprivileged_user: bool) -> McpClient {
    let mut sandbox = json!({});
    if !limits.is_null() {
        sandbox["limits"] = limits;
    }
    gateway_with(ws, sandbox, unprivileged_user).await
}

/// `palisade serve` (enforce, native bwrap) with the probe server and its `sandbox` block.
async fn gateway_with(ws: &Workspace, mut sandbox: Value, unprivileged_user: bool) -> McpClient {
    sandbox["backend"] = json!("bwrap");
    let config = ws.config(
        json!({"probe": {
            "command": system_python().unwrap(),
            "args": [probe_script()],
            "sandbox": sandbox,
        }}),
        json!({"sandboxPolicy": "enforce"}),
    );
    let args = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--audit-log".into(),
        ws.path().join("audit.jsonl").display().to_string(),
    ];
    let (program, args) = if unprivileged_user {
        give_to_nobody(ws);
        unprivileged(support::palisade(), args)
    } else {
        (support::palisade().to_string(), args)
    };
    connect(&program, args, &ws.errlog()).await
}

/// Calls `tool`; `Ok` with the tool's JSON answer, `Err` with the error text the agent got.
async fn call(c: &McpClient, tool: &str, args: Value) -> Result<Value, String> {
    match c.call_tool(tool, args).await {
        Err(e) => Err(e.to_string()),
        Ok(r) if r.is_error == Some(true) => Err(result_text(&r)),
        Ok(r) => serde_json::from_str(&result_text(&r))
            .map_err(|e| format!("not JSON ({e}): {}", result_text(&r))),
    }
}

/// Whether servers get a cgroup here, as `palisade check --json` reports it.
fn check_says_cgroup() -> bool {
    let out =
        support::run_ok(std::process::Command::new(support::palisade()).args(["check", "--json"]));
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    let status = report["resource_limits"]["status"].as_str().unwrap_or("");
    assert!(
        status == "usable" || status == "unusable",
        "check must say how limits apply: {}",
        report["resource_limits"]
    );
    status == "usable"
        && report["resource_limits"]["memory"] == true
        && report["resource_limits"]["pids"] == true
}

/// Calls `alive` until a new process answers (its boot token differs from `before`),
/// collecting what the agent is told meanwhile.
async fn until_restarted(c: &McpClient, before: &Value) -> (Option<Value>, Vec<String>) {
    let mut told = Vec::new();
    for _ in 0..600 {
        match call(c, "probe__alive", json!({})).await {
            Ok(v) if v["boot"] != before["boot"] => return (Some(v), told),
            Ok(_) => {}
            Err(e) => {
                if told.last() != Some(&e) {
                    told.push(e);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (None, told)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_task_limit_stops_a_fork_bomb_with_a_cgroup_or_without() {
    if !ready() {
        return;
    }
    let ws = Workspace::new();
    let control = direct(&ws).await;
    let r = call(&control, "fork_bomb", json!({"limit": BOMB}))
        .await
        .expect("control");
    assert_eq!(
        r["forked"], BOMB,
        "the control must reach {BOMB} forks: {r}"
    );
    control.shutdown().await;

    // Rlimit fallback: RLIMIT_NPROC, raised by the tasks the user already runs.
    let ws_rl = Workspace::new();
    let gw = gateway_as(&ws_rl, json!({"cgroup": false}), true).await;
    let r = call(&gw, "probe__fork_bomb", json!({"limit": BOMB}))
        .await
        .expect("without a cgroup the refused forks are the server's own errors");
    let forked = r["forked"].as_u64().unwrap();
    assert!(
        forked < DEFAULT_TASKS && r["error"] == "EAGAIN",
        "RLIMIT_NPROC must refuse forks below {DEFAULT_TASKS}: {r}"
    );
    // The server has its own task budget: what the user already runs does not eat it.
    assert!(forked > DEFAULT_TASKS / 2, "{r}");
    call(&gw, "probe__alive", json!({}))
        .await
        .expect("the server survives its refused forks");
    gw.shutdown().await;
    println!("rlimit fallback: {r}");

    // The cgroup, where check says there is one: pids.max refuses forks, and the server is
    // then restarted like a crash, the agent told which limit it was.
    if !check_says_cgroup() {
        println!("no cgroup on this machine (check says so): the rlimit case above applies");
        return;
    }
    let ws_cg = Workspace::new();
    let gw = gateway(&ws_cg, Value::Null).await;
    let before = call(&gw, "probe__alive", json!({})).await.expect("alive");
    let bomb = call(&gw, "probe__fork_bomb", json!({"limit": BOMB})).await;
    let (after, mut told) = until_restarted(&gw, &before).await;
    if let Err(e) = &bomb {
        told.insert(0, e.clone());
    }
    assert!(
        after.is_some(),
        "the server must be restarted after the limit: {told:?}"
    );
    let stderr = ws_cg.stderr_text();
    let reason =
        format!("process limit reached ({DEFAULT_TASKS} processes, sandbox.limits.processes)");
    assert!(
        told.iter().any(|t| t.contains(&reason)) || stderr.contains(&reason),
        "the agent or the log must name the limit: bomb {bomb:?}, told {told:?}\n{stderr}"
    );
    if let Ok(r) = &bomb {
        assert!(r["forked"].as_u64().unwrap() < DEFAULT_TASKS, "{r}");
    }
    gw.shutdown().await;
    println!("cgroup: bomb {bomb:?}; agent told {told:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_memory_limit_holds_without_a_cgroup() {
    if !ready() {
        return;
    }
    // A block larger than the default limit, never touched: no RAM is used either way.
    let mb = DEFAULT_MEMORY_MB + 1024;
    let ws = Workspace::new();
    let control = direct(&ws).await;
    let r = call(&control, "reserve", json!({"mb": mb}))
        .await
        .expect("control");
    assert_eq!(r["reserved"], mb, "the control must get {mb} MiB: {r}");
    control.shutdown().await;

    let gw = gateway(&ws, json!({"cgroup": false})).await;
    let r = call(&gw, "probe__reserve", json!({"mb": mb}))
        .await
        .expect("answer");
    assert_eq!(
        (r["reserved"].as_u64(), r["error"].as_str()),
        (Some(0), Some("ENOMEM")),
        "RLIMIT_DATA must refuse {mb} MiB by default: {r}"
    );
    // Below the limit, as real servers allocate, nothing is refused.
    let r = call(&gw, "probe__reserve", json!({"mb": 1024}))
        .await
        .expect("answer");
    assert_eq!(r["reserved"], 1024, "{r}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_without_a_cgroup_stops_at_memory_mb() {
    if !ready() {
        return;
    }
    let ws = Workspace::new();
    let control = direct(&ws).await;
    let r = call(&control, "hog", json!({"mb": 512}))
        .await
        .expect("control");
    assert_eq!(r["held"], 512, "the control must hold 512 MiB: {r}");
    control.shutdown().await;

    let gw = gateway(&ws, json!({"cgroup": false, "memoryMb": 192})).await;
    let r = call(&gw, "probe__hog", json!({"mb": 512}))
        .await
        .expect("answer");
    let held = r["held"].as_u64().unwrap();
    assert!(
        held < 192 && r["error"] == "MemoryError",
        "RLIMIT_DATA must stop the hog below 192 MiB: {r}"
    );
    call(&gw, "probe__alive", json!({})).await.expect("alive");
    gw.shutdown().await;
}

/// As root without a cgroup nothing in the kernel holds the task limit (uid 0 is exempt from
/// RLIMIT_NPROC): `serve` counts the server's tasks on every liveness tick and kills and
/// restarts it past the limit, telling the agent why. Against a build without that watchdog
/// the bomb reaches its target and the server is never restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_root_without_a_cgroup_the_task_watchdog_restarts_a_fork_bomb() {
    if !ready() {
        return;
    }
    if !nix::unistd::getuid().is_root() {
        support::skip::host_skip(
            "as_root_without_a_cgroup_the_task_watchdog_restarts_a_fork_bomb",
            "the watchdog is for root, whom RLIMIT_NPROC does not bind; this run is not root",
        );
        return;
    }
    const LIMIT: u64 = 64;
    const TARGET: u64 = 300;
    let ws = Workspace::new();
    let control = direct(&ws).await;
    let r = call(
        &control,
        "fork_and_hold",
        json!({"limit": TARGET, "seconds": 0}),
    )
    .await
    .expect("control");
    assert_eq!(r["forked"], TARGET, "the control must reach {TARGET}: {r}");
    control.shutdown().await;

    let gw = gateway(&ws, json!({"cgroup": false, "processes": LIMIT})).await;
    let before = call(&gw, "probe__alive", json!({})).await.expect("alive");
    // The children are held for 3 s: the watchdog samples every 0.5 s.
    let bomb = call(
        &gw,
        "probe__fork_and_hold",
        json!({"limit": TARGET, "seconds": 3}),
    )
    .await;
    let (after, mut told) = until_restarted(&gw, &before).await;
    if let Err(e) = &bomb {
        told.insert(0, e.clone());
    }
    let stderr = ws.stderr_text();
    assert!(
        after.is_some(),
        "the server must be restarted past its task limit: bomb {bomb:?}, told {told:?}\n{stderr}"
    );
    let reason = format!("process limit reached ({LIMIT} processes, sandbox.limits.processes)");
    assert!(
        told.iter().any(|t| t.contains(&reason)) || stderr.contains(&reason),
        "the agent or the log must name the limit: bomb {bomb:?}, told {told:?}\n{stderr}"
    );
    assert!(
        bomb.is_err(),
        "the bomb's call must fail with the kill: {bomb:?}"
    );
    gw.shutdown().await;
    println!("watchdog: bomb {bomb:?}; agent told {told:?}");
}

/// `palisade run` has no supervisor to remove a cgroup, so it always relies on the rlimit
/// fallbacks: a fork bomb under it (run by an unprivileged user) stops at the default task
/// limit too.
#[test]
fn palisade_run_stops_a_fork_bomb_with_the_default_rlimit() {
    if !ready() {
        return;
    }
    let bomb = format!(
        "import os,signal,errno\nn=0\nerr=None\nkids=[]\ntry:\n  while n<{BOMB}:\n    p=os.fork()\n    if p==0:\n      signal.pause()\n    kids.append(p); n+=1\nexcept OSError as e:\n  err=errno.errorcode[e.errno]\nfor k in kids: os.kill(k,9)\nfor k in kids: os.waitpid(k,0)\nprint(n, err)\n"
    );
    let control =
        support::run_ok(std::process::Command::new(support::python()).args(["-c", &bomb]));
    assert_eq!(
        String::from_utf8_lossy(&control.stdout).trim(),
        format!("{BOMB} None"),
        "control"
    );
    let ws = Workspace::new();
    give_to_nobody(&ws);
    let (program, args) = unprivileged(
        support::palisade(),
        vec![
            "run".into(),
            "--".into(),
            system_python().unwrap(),
            "-c".into(),
            bomb,
        ],
    );
    let out = support::run_ok(
        std::process::Command::new(program)
            .args(args)
            .current_dir(ws.path())
            .env("HOME", ws.path()),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let n: u64 = words
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        n < DEFAULT_TASKS && words.next() == Some("EAGAIN"),
        "palisade run must stop the bomb below {DEFAULT_TASKS}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_bounds_the_descriptors_of_a_server() {
    if !ready() {
        return;
    }
    let ws = Workspace::new();
    let control = direct(&ws).await;
    let r = call(&control, "open_files", json!({"count": 2000}))
        .await
        .expect("control");
    assert_eq!(r["opened"], 2000, "the control must open 2000 files: {r}");
    control.shutdown().await;

    let gw = gateway(&ws, json!({"openFiles": 64})).await;
    let r = call(&gw, "probe__open_files", json!({"count": 2000}))
        .await
        .expect("answer");
    let opened = r["opened"].as_u64().unwrap();
    assert!(
        opened < 64 && r["error"] == "EMFILE",
        "RLIMIT_NOFILE must stop the server below 64 descriptors: {r}"
    );
    // The default (4096) leaves a real server room.
    let ws2 = Workspace::new();
    let gw2 = gateway(&ws2, Value::Null).await;
    let r = call(&gw2, "probe__open_files", json!({"count": 2000}))
        .await
        .expect("answer");
    assert_eq!(r["opened"], 2000, "{r}");
    gw.shutdown().await;
    gw2.shutdown().await;
}

/// Writes to `.git/hooks`, `.git/config` and `.bashrc` in a writable root: refused by
/// default, and allowed when `protectDangerousFiles` is turned off (checked on the host).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protect_dangerous_files_is_on_by_default_and_can_be_turned_off() {
    if !ready() {
        return;
    }
    let targets = [".git/hooks/pre-commit", ".git/config", ".bashrc"];
    for protect in [None, Some(false)] {
        let ws = Workspace::new();
        let work = ws.canonical().join("work");
        std::fs::create_dir_all(work.join(".git/hooks")).unwrap();
        std::fs::write(work.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(work.join(".bashrc"), "# rc\n").unwrap();
        let mut fs = json!({"allowWrite": [work.display().to_string()]});
        if let Some(p) = protect {
            fs["protectDangerousFiles"] = json!(p);
        }
        let gw = gateway_with(&ws, json!({"filesystem": fs}), false).await;
        // The control inside the same sandbox: an ordinary file in the root is writable.
        let plain = work.join("notes.txt");
        let r = call(&gw, "probe__write_file", json!({"path": plain}))
            .await
            .expect("answer");
        assert_eq!(r["written"], true, "the root is writable: {r}");
        for t in targets {
            let path = work.join(t);
            let r = call(&gw, "probe__write_file", json!({"path": path}))
                .await
                .expect("answer");
            let on_host = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .contains("written by limits_probe.py");
            match protect {
                None => assert!(
                    r["written"] == false && !on_host,
                    "{t} must be protected by default: {r}"
                ),
                Some(_) => assert!(
                    r["written"] == true && on_host,
                    "{t} must be writable with protectDangerousFiles: false: {r}"
                ),
            }
        }
        gw.shutdown().await;
    }
}

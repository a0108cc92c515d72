//! End to end through `palisade serve` (enforce, real bwrap, the Python `mcp` SDK client in
//! tests/clients/calls.py): `denyWrite` refused by the proxy and by the native sandbox, and
//! `[SANDBOX BLOCKED]` on errors of sandboxed servers that write or read places their call
//! arguments never name (tests/servers/blocked_probe.py), never on ordinary tool errors nor on
//! unsandboxed servers. Every attack has an unprotected control that must succeed.
//! Also the Landlock tier's missing PID namespace: neither `palisade run --backend landlock`
//! after a forwarded SIGTERM nor `serve` stopping a Landlock server may leave the command's
//! own children running.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "support/sdk_client.rs"]
mod sdk_client;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

// The client's view of a run: tool names, one `{tool, error, text}` per call, the audit
// records and palisade's stderr.
use sdk_client::Outcome as Run;

const MARKER: &str = "[SANDBOX BLOCKED]";

fn deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

fn python() -> String {
    deps().join("venv/bin/python").display().to_string()
}

fn manifest(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(rel)
        .display()
        .to_string()
}

/// What these tests ask of a run's outcome.
impl Run {
    fn call(&self, tool: &str) -> &Value {
        self.calls
            .iter()
            .find(|c| c["tool"] == tool)
            .unwrap_or_else(|| panic!("no call {tool}: {:?}\n{}", self.calls, self.stderr))
    }

    fn text(&self, tool: &str) -> String {
        self.call(tool)["text"].as_str().unwrap_or_default().into()
    }

    fn failed(&self, tool: &str) -> bool {
        self.call(tool)["error"] == true
    }
}

/// Writes the config (enforce, allow-all policy, audit log in `dir`) and runs `calls`.
fn serve(dir: &Path, servers: Value, calls: Value) -> Run {
    let settings = json!({
        "sandboxDir": dir.join("sandbox").display().to_string(),
        "sandboxPolicy": "enforce",
        "auditLog": dir.join("audit.jsonl").display().to_string(),
        "policy": manifest("tests/fixtures/allow-all-policy.json"),
    });
    std::fs::create_dir_all(dir.join("sandbox")).unwrap();
    sdk_client::run(Path::new(&python()), dir, &servers, &settings, &calls, &[])
}

fn probe(target: &Path, sandbox: Value) -> Value {
    json!({
        "command": python(),
        "args": [manifest("tests/servers/blocked_probe.py")],
        "env": {"BLOCKED_TARGET": target.display().to_string()},
        "sandbox": sandbox,
    })
}

fn canon_tempdir() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(t.path()).unwrap();
    (t, p)
}

/// denyWrite: a write-type tool call naming a denied path is refused by the proxy with a
/// message naming denyWrite (before the sandbox would answer EROFS); a server that writes a
/// denied path on its own is stopped by its sandbox and the agent is told it was denyWrite;
/// the same server without denyWrite writes the file (the control).
#[test]
fn deny_write_is_refused_by_the_proxy_and_enforced_by_the_native_sandbox() {
    let (_t, d) = canon_tempdir();
    let (w, free) = (d.join("w"), d.join("free"));
    for p in [w.join("locked"), free.join("locked")] {
        std::fs::create_dir_all(p).unwrap();
    }
    let deny = json!([w.join("locked"), w.join("later/file")]);
    let servers = json!({
        "fs": {
            "command": "node",
            "args": [deps().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), w],
            "sandbox": {"filesystem": {"allowWrite": [w], "denyWrite": deny}},
        },
        "locked": probe(
            &w.join("locked/pwned.txt"),
            json!({"filesystem": {"allowWrite": [w], "denyWrite": deny}}),
        ),
        "unlocked": probe(
            &free.join("locked/pwned.txt"),
            json!({"filesystem": {"allowWrite": [free]}}),
        ),
    });
    let calls = json!([
        {"tool": "fs__write_file", "args": {"path": w.join("locked/x.txt"), "content": "x"}},
        {"tool": "fs__create_directory", "args": {"path": w.join("later/file")}},
        {"tool": "fs__write_file", "args": {"path": w.join("ok.txt"), "content": "fine"}},
        {"tool": "locked__write_fixed", "args": {}},
        {"tool": "unlocked__write_fixed", "args": {}},
    ]);
    let run = serve(&d, servers, calls);

    // The proxy refuses, naming denyWrite; nothing reached the server.
    for tool in ["fs__write_file", "fs__create_directory"] {
        assert!(run.failed(tool), "{tool}: {:?}", run.call(tool));
    }
    let first = &run.calls[0];
    let text = first["text"].as_str().unwrap();
    assert!(text.contains("denyWrite"), "{text}\n{}", run.stderr);
    assert!(!text.contains(MARKER), "{text}");
    assert!(!w.join("locked/x.txt").exists());
    let second = run.calls[1]["text"].as_str().unwrap();
    assert!(second.contains("denyWrite"), "{second}");
    assert!(!w.join("later/file").is_dir());
    // An ordinary write in the same root goes through.
    assert_eq!(run.calls[2]["error"], false, "{:?}", run.calls[2]);
    assert_eq!(std::fs::read_to_string(w.join("ok.txt")).unwrap(), "fine");

    // The sandbox stops the write the arguments never named, and says why.
    let locked = run.text("locked__write_fixed");
    assert!(run.failed("locked__write_fixed"));
    assert!(locked.starts_with(MARKER), "{locked}\n{}", run.stderr);
    assert!(locked.contains("denyWrite"), "{locked}");
    assert!(!w.join("locked/pwned.txt").exists());
    // Control: the same server without denyWrite writes it.
    assert!(
        !run.failed("unlocked__write_fixed"),
        "{}",
        run.text("unlocked__write_fixed")
    );
    assert!(free.join("locked/pwned.txt").is_file());

    // The proxy's refusals are audited as denials.
    let denied: Vec<&Value> = run
        .audit
        .iter()
        .filter(|r| r["serverName"] == "fs" && r["result"]["status"] == "denied")
        .collect();
    assert_eq!(denied.len(), 2, "{:?}", run.audit);
}

/// `[SANDBOX BLOCKED]` end to end for errors the call's arguments do not explain: a write
/// to a read-only grant (EROFS) is marked, as an isError result and as a thrown error. A "no
/// such file" for a path outside every grant (a write to a host directory, a read of
/// /etc/shadow) is not: only the server wrote that path, and answering it would take a look
/// at the host (issue 23, finding 7). The same tools' ordinary errors are not marked, and
/// neither is anything an unsandboxed server says, even a kernel "Permission denied".
/// Unsandboxed, the attacks work.
#[test]
fn sandbox_blocked_marks_sandbox_refusals_only() {
    let (_t, d) = canon_tempdir();
    let (ro, outside, open_dir) = (d.join("ro"), d.join("outside"), d.join("open"));
    for p in [&ro, &outside, &open_dir] {
        std::fs::create_dir_all(p).unwrap();
    }
    let servers = json!({
        "ro": probe(&ro.join("pwned.txt"), json!({"filesystem": {"allowRead": [ro]}})),
        "hidden": probe(&outside.join("pwned.txt"), json!({})),
        "open": probe(&open_dir.join("pwned.txt"), json!(false)),
        "openfail": probe(Path::new("/sys/kernel/notes"), json!(false)),
        "boxedfail": probe(Path::new("/sys/kernel/notes"), json!({})),
    });
    let mut calls = Vec::new();
    for s in ["ro", "hidden", "open"] {
        for t in [
            "write_fixed",
            "write_fixed_raise",
            "read_shadow",
            "admin_only",
        ] {
            calls.push(json!({"tool": format!("{s}__{t}"), "args": {}}));
        }
        calls.push(json!({"tool": format!("{s}__parse_count"), "args": {"text": "seven"}}));
    }
    calls.push(json!({"tool": "openfail__write_fixed", "args": {}}));
    calls.push(json!({"tool": "boxedfail__write_fixed", "args": {}}));
    let run = serve(&d, servers, Value::Array(calls));

    // Sandboxed: a write to a read-only grant is marked, whichever way the server reports it.
    for t in ["write_fixed", "write_fixed_raise"] {
        let tool = format!("ro__{t}");
        let text = run.text(&tool);
        assert!(run.failed(&tool), "{tool}: {text}");
        // A thrown error reaches calls.py as `code=... message="[SANDBOX BLOCKED] ..."`.
        let marked = text.starts_with(MARKER) || text.contains(&format!("\"{MARKER}"));
        assert!(marked, "{tool}: {text}\n{}", run.stderr);
    }
    // Paths outside every grant that only the server named: refused, not explained.
    for tool in [
        "hidden__write_fixed",
        "hidden__write_fixed_raise",
        "hidden__read_shadow",
        "ro__read_shadow",
    ] {
        let text = run.text(tool);
        assert!(run.failed(tool), "{tool}: {text}");
        assert!(!text.contains(MARKER), "{tool}: {text}");
    }
    assert!(run.text("ro__write_fixed").contains("allowWrite"));
    assert!(run
        .text("ro__write_fixed")
        .contains(&ro.join("pwned.txt").display().to_string()));
    assert!(!ro.join("pwned.txt").exists() && !outside.join("pwned.txt").exists());

    // Ordinary tool errors, sandboxed or not: no marker.
    for s in ["ro", "hidden", "open"] {
        for t in ["parse_count", "admin_only"] {
            let tool = format!("{s}__{t}");
            let text = run.text(&tool);
            assert!(run.failed(&tool), "{tool}: {text}");
            assert!(!text.contains(MARKER), "{tool}: {text}");
        }
    }
    // (The SDK reports an unexpected exception without its text.)
    assert!(run.text("open__parse_count").contains("parse_count"));

    // Unsandboxed: the attacks succeed (the control) and a kernel refusal is not blamed on
    // a sandbox. Inside one the same write fails ("no such file": the sandbox has no /sys),
    // unexplained, since only the server named that path.
    for t in [
        "open__write_fixed",
        "open__write_fixed_raise",
        "open__read_shadow",
    ] {
        assert!(!run.failed(t), "{t}: {}", run.text(t));
    }
    assert!(open_dir.join("pwned.txt").is_file());
    let openfail = run.text("openfail__write_fixed");
    assert!(run.failed("openfail__write_fixed"), "{openfail}");
    assert!(openfail.contains("Permission denied"), "{openfail}");
    assert!(!openfail.contains(MARKER), "{openfail}");
    let boxedfail = run.text("boxedfail__write_fixed");
    assert!(run.failed("boxedfail__write_fixed"), "{boxedfail}");
    assert!(boxedfail.contains("No such file"), "{boxedfail}");
    assert!(!boxedfail.contains(MARKER), "{boxedfail}");

    // The audit record carries what the agent saw.
    let rec = run
        .audit
        .iter()
        .find(|r| r["serverName"] == "ro" && r["toolName"] == "write_fixed")
        .unwrap();
    assert_eq!(rec["sandboxed"], true);
    assert!(rec["result"]["error"].as_str().unwrap().starts_with(MARKER));
}

/// Issue 23, finding 7 (regression: the annotator `lstat`ed any path quoted in an error, so
/// an agent that planted `ENOENT … open '<P>/x'` in text a tool echoes back learned whether
/// `<P>` existed on the host, and was told to grant it). The agent plants the same error for
/// a directory the host has and for one it lacks, through a sandboxed server that echoes it:
/// the two answers differ only by the planted path and carry no marker. The control: the
/// echo is a working channel (the planted text comes back, sandboxed or not).
#[test]
fn a_planted_error_path_is_no_oracle_for_the_host() {
    let (_t, d) = canon_tempdir();
    let (present, absent) = (d.join("present"), d.join("absent"));
    std::fs::create_dir_all(&present).unwrap();
    let planted = |p: &Path| {
        format!(
            "ENOENT: no such file or directory, open '{}/x'",
            p.display()
        )
    };
    let servers = json!({
        "boxed_present": probe(&d.join("unused"), json!({})),
        "boxed_absent": probe(&d.join("unused"), json!({})),
        "open": probe(&d.join("unused"), json!(false)),
    });
    let calls = json!([
        {"tool": "boxed_present__echo_error", "args": {"text": planted(&present)}},
        {"tool": "boxed_absent__echo_error", "args": {"text": planted(&absent)}},
        {"tool": "open__echo_error", "args": {"text": planted(&present)}},
    ]);
    let run = serve(&d, servers, calls);
    assert!(run.failed("open__echo_error"));
    assert!(
        run.text("open__echo_error").contains(&planted(&present)),
        "control: {}",
        run.text("open__echo_error")
    );
    let seen = |tool: &str, p: &Path| {
        let text = run.text(tool);
        assert!(run.failed(tool), "{tool}: {text}");
        assert!(text.contains(&planted(p)), "{tool}: {text}");
        assert!(
            !text.contains(MARKER),
            "{tool} answered about the host: {text}"
        );
        text.replace(&p.display().to_string(), "<P>")
    };
    assert_eq!(
        seen("boxed_present__echo_error", &present),
        seen("boxed_absent__echo_error", &absent)
    );
}

/// Runs tests/clients/prompts_resources.py against `palisade serve` with server-everything
/// and the given audit log; returns its report and palisade's stderr.
fn prompts_and_resources(dir: &Path, audit_log: &Path) -> (Value, String) {
    let everything =
        deps().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    std::fs::create_dir_all(dir.join("sandbox")).unwrap();
    let config = json!({
        "mcpServers": {"everything": {"command": "node", "args": [everything, "stdio"]}},
        "palisade": {
            "sandboxDir": dir.join("sandbox"),
            "sandboxPolicy": "enforce",
            "auditLog": audit_log,
            "policy": manifest("tests/fixtures/allow-all-policy.json"),
        },
    });
    let script = "tests/clients/prompts_resources.py";
    sdk_client::client(Path::new(&python()), script, &[], dir, &config, &[])
}

/// Prompts, resources, subscriptions and completions each write exactly one audit record,
/// marked with its method in `kind`; the tool call's record keeps its shape (no `kind`);
/// the log still verifies with `palisade audit verify`.
#[test]
fn prompts_resources_and_completions_are_audited_once_each() {
    let (_t, d) = canon_tempdir();
    let log = d.join("audit.jsonl");
    let (r, stderr) = prompts_and_resources(&d, &log);
    for step in [
        "read",
        "prompt",
        "subscribe",
        "unsubscribe",
        "complete",
        "echo",
    ] {
        assert_eq!(r[step]["ok"], true, "{step}: {r}\n{stderr}");
    }
    assert_eq!(r["complete"]["values"], json!(["Sales"]));
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let uri = r["uri"].as_str().unwrap();
    for (kind, key, value) in [
        ("resources/read", "uri", json!(uri)),
        ("prompts/get", "name", json!("simple-prompt")),
        ("resources/subscribe", "uri", json!(uri)),
        ("resources/unsubscribe", "uri", json!(uri)),
    ] {
        let mine: Vec<&Value> = records.iter().filter(|x| x["kind"] == kind).collect();
        assert_eq!(mine.len(), 1, "{kind}: {records:?}");
        assert_eq!(mine[0]["arguments"][key], value, "{kind}: {:?}", mine[0]);
        assert_eq!(mine[0]["serverName"], "everything");
        assert_eq!(mine[0]["result"]["status"], "success");
        assert_eq!(mine[0]["sandboxed"], true);
    }
    let complete: Vec<&Value> = records
        .iter()
        .filter(|x| x["kind"] == "completion/complete")
        .collect();
    assert_eq!(complete.len(), 1, "{records:?}");
    assert_eq!(complete[0]["arguments"]["argument"]["value"], "Sa");
    let tools: Vec<&Value> = records.iter().filter(|x| x["toolName"] == "echo").collect();
    assert_eq!(tools.len(), 1, "{records:?}");
    assert!(tools[0].get("kind").is_none(), "{:?}", tools[0]);
    assert_eq!(records.len(), 6, "{records:?}");

    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// With an audit log that accepts the open but fails every write (/dev/full), every one of
/// those requests fails closed with a message saying so, like a tool call; nothing a server
/// answered reaches the agent unaudited.
#[test]
fn prompts_resources_and_completions_fail_closed_when_the_audit_log_fails() {
    let (_t, d) = canon_tempdir();
    let (r, stderr) = prompts_and_resources(&d, Path::new("/dev/full"));
    for step in [
        "read",
        "prompt",
        "subscribe",
        "unsubscribe",
        "complete",
        "echo",
    ] {
        assert_eq!(r[step]["ok"], false, "{step}: {r}\n{stderr}");
        let text = r[step]["text"].as_str().unwrap();
        assert!(
            text.contains("audit log could not be written"),
            "{step}: {text}"
        );
    }
}

/// SIGKILLs its processes when dropped (a failed test leaves nothing running).
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The process `pid` is running the command line that holds `mark` (not gone, not a zombie).
fn alive_with(pid: i32, mark: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(") ").map(|(_, r)| r.starts_with('Z'));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state == Some(false) && String::from_utf8_lossy(&cmdline).contains(mark)
}

/// Regression: under Landlock (no PID namespace) SIGTERM forwarded to the command ended it
/// but not its children: `sh -c 'sleep N & wait'` left `sleep` running, reparented to init.
/// palisade now ends every process left beneath it once the command has ended, including one
/// that left the process group and session (`setsid`). Checked on the host, by PID.
#[test]
fn landlock_run_leaves_no_grandchild_after_sigterm() {
    use std::io::BufRead as _;
    let test = "gaps::landlock_run_leaves_no_grandchild_after_sigterm";
    let bin = env!("CARGO_BIN_EXE_palisade");
    if landlock_missing(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 700_000 + std::process::id() % 50_000;
    let (a, b) = (format!("{n}"), format!("{}", n + 1));
    let script = format!("sleep {a} & echo $!; setsid sleep {b} & echo $!; echo up; wait");
    let mut palisade = std::process::Command::new(bin)
        .env("PALISADE_LOG_LEVEL", "warn")
        .env("TMPDIR", tmp.path())
        .args([
            "run",
            "--backend",
            "landlock",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(palisade.stdout.take().unwrap()).lines();
    let mut next = || lines.next().unwrap().unwrap();
    let pids: Vec<i32> = vec![next().parse().unwrap(), next().parse().unwrap()];
    assert_eq!(next(), "up");
    let marks = [format!("sleep\0{a}"), format!("sleep\0{b}")];
    // Whatever fails below, nothing this test started is left running.
    let mut cleanup = KillOnDrop(pids.iter().copied().chain([palisade.id() as i32]).collect());
    // Control: both grandchildren run `sleep`, on the host, before palisade is told to stop
    // (`$!` is printed at fork, before the exec: wait for it, up to a generous bound).
    for (pid, mark) in pids.iter().zip(&marks) {
        let mut tries = 0;
        while !alive_with(*pid, mark) && tries < 1000 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            tries += 1;
        }
        assert!(
            alive_with(*pid, mark),
            "grandchild {pid} ({mark}) did not start"
        );
    }
    // Safety net only: a palisade that never exits fails the test instead of hanging it.
    let ppid = palisade.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watched = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if !watched.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(ppid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ppid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = palisade.wait().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let left: Vec<i32> = pids
        .iter()
        .zip(&marks)
        .filter(|(pid, mark)| alive_with(**pid, mark))
        .map(|(pid, _)| *pid)
        .collect();
    // Only those still running (palisade is reaped: its PID is no longer its own).
    cleanup.0.clone_from(&left);
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "the command ends by the forwarded SIGTERM"
    );
    assert!(left.is_empty(), "grandchildren still running: {left:?}");
}

/// Regression: a Landlock-tier server stopped by `serve` (its stdin closed when the gateway
/// ends) left its own children running: no PID namespace ends them. The server now leads a
/// process group the supervisor signals whole. The server here starts `sleep` and says its
/// PID on stderr (which palisade logs) before it serves; checked on the host, by PID, once
/// serve has exited.
#[test]
fn a_stopped_landlock_server_leaves_no_child_behind() {
    let test = "gaps::a_stopped_landlock_server_leaves_no_child_behind";
    if landlock_missing(test) {
        return;
    }
    let (_t, d) = canon_tempdir();
    let n = 750_000 + std::process::id() % 50_000;
    let code = format!(
        "import runpy, subprocess, sys\n\
         c = subprocess.Popen(['/bin/sleep', '{n}'])\n\
         print('GRANDCHILD=%d' % c.pid, file=sys.stderr, flush=True)\n\
         p = sys.argv[1]\n\
         sys.argv = [p]\n\
         runpy.run_path(p, run_name='__main__')\n"
    );
    let servers = json!({
        "forker": {
            "command": python(),
            "args": ["-c", code, manifest("tests/servers/blocked_probe.py")],
            "env": {"BLOCKED_TARGET": d.join("t").display().to_string()},
            "sandbox": {"backend": "landlock",
                        "filesystem": {"allowRead": [manifest("tests/servers")]}},
        },
    });
    let run = serve(&d, servers, json!([]));
    let pid: i32 = run
        .stderr
        .split("GRANDCHILD=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the server did not start its child:\n{}", run.stderr));
    let mark = format!("sleep\0{n}");
    let alive = alive_with(pid, &mark);
    let _cleanup = KillOnDrop(if alive { vec![pid] } else { Vec::new() });
    assert!(
        run.stderr.contains("sandboxed by landlock") && run.stderr.contains("status: Running"),
        "the server ran and served under Landlock:\n{}",
        run.stderr
    );
    assert!(!alive, "the server's child {pid} outlived it");
}

/// True (and the skip recorded) when `palisade check` finds no Landlock on this kernel.
fn landlock_missing(test: &str) -> bool {
    let missing = skip::landlock_abi().is_none();
    if missing {
        skip::host_skip(test, "Landlock is not available on this kernel");
    }
    missing
}

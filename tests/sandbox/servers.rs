//! Real MCP servers start in the sandbox from their runtime closure and answer
//! `initialize`; `sandbox::launch::prepare`, the API the gateway uses, gives a spawnable
//! sandbox with its deny masks.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::{palisade, test_deps, text};
use crate::skip;

/// Sends an MCP initialize request to a server started by `cmd` and returns the response.
pub fn mcp_initialize(mut cmd: Command) -> Value {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Safety net so a hung server fails the test instead of hanging it; disarmed once the
    // child is reaped, when its pid may belong to another process.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watched = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if watched.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let mut stdin = child.stdin.take().unwrap();
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "palisade-test", "version": "0"}}});
    writeln!(stdin, "{req}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("no response ({e}): {line:?}\n{}", text(&out.stderr)))
}

#[test]
fn real_servers_start_from_their_runtime_closure() {
    let deps = test_deps();
    let time = deps.join("venv/bin/mcp-server-time");
    let fs = deps.join("node_modules/.bin/mcp-server-filesystem");
    if !time.exists() || !fs.exists() {
        skip::skip(&format!(
            "test dependencies not found under {} (run scripts/test.sh)",
            deps.display()
        ));
        return;
    }
    // A Python venv server: venv + its pyenv base installation come from the closure.
    let mut c = palisade();
    c.args(["run", "--"]).arg(&time);
    let resp = mcp_initialize(c);
    assert_eq!(resp["id"], 1, "{resp}");
    assert!(resp["result"]["serverInfo"]["name"].is_string(), "{resp}");

    // A Node server through node_modules/.bin: the project directory comes from the closure.
    let dir = tempfile::tempdir().unwrap();
    let mut c = palisade();
    c.args(["run", "--rw"])
        .arg(dir.path())
        .arg("--")
        .arg(&fs)
        .arg(dir.path());
    let resp = mcp_initialize(c);
    assert_eq!(resp["id"], 1, "{resp}");
    assert!(resp["result"]["serverInfo"]["name"].is_string(), "{resp}");
}

#[tokio::test]
async fn prepare_gives_the_gateway_a_spawnable_sandbox_with_deny_masks() {
    use palisade::sandbox::launch::{prepare, Enforcement, Grant, LaunchRequest};
    use palisade::sandbox::Access;
    use tokio::io::AsyncReadExt;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("secret")).unwrap();
    std::fs::write(d.join("secret/key"), "k").unwrap();
    std::fs::write(d.join(".env"), "TOKEN=x").unwrap();
    std::fs::write(d.join("ok.txt"), "fine").unwrap();
    let script = format!(
        "cat {0}/ok.txt; cat {0}/.env; ls {0}/secret; echo -n end",
        d.display()
    );
    let req = LaunchRequest {
        name: "t".into(),
        command: "/bin/sh".into(),
        args: vec!["-c".into(), script],
        grants: vec![Grant {
            path: d.to_path_buf(),
            access: Access::Ro,
        }],
        deny_read: vec![d.join("secret"), d.join(".env")],
        ..LaunchRequest::default()
    };
    let mut prepared = prepare(&req).unwrap();
    assert_eq!(
        prepared.enforcement,
        Enforcement::Sandboxed {
            backend: palisade::config::Backend::Bwrap
        }
    );
    let mut child = prepared
        .command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(prepared);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    assert!(status.success());
    assert_eq!(out, "fineend", "deny masks must hide .env and secret/");
}

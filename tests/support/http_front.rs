//! `palisade serve --http` on a port the kernel picks (`--http 127.0.0.1:0`), its address
//! read from its own log. A harness that picked a free port itself, released it and handed
//! it over could see a test running beside it bind the same port meanwhile, and then talk to
//! that test's front.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the front logs at info once it is bound (`src/gateway/agent/http/mod.rs`).
const LISTENING: &str = "listening on http://";

/// Spawns `cmd`, a `palisade serve` with its config and flags, listening on `127.0.0.1:0`
/// with its stderr in `errlog`; returns the child and the address it bound. Its `RUST_LOG`
/// must show palisade's info lines (one is set when it has none). Panics with the log when
/// the front exits or has not said where it listens within a minute (a guard against a hung
/// test, not a timing claim).
pub fn spawn_on_any_port(cmd: &mut Command, errlog: &Path) -> (Child, SocketAddr) {
    let rust_log = cmd
        .get_envs()
        .find(|(k, _)| *k == "RUST_LOG")
        .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()));
    match rust_log {
        None => {
            cmd.env("RUST_LOG", "info,rmcp=warn");
        }
        Some(filter) => assert!(
            filter
                .split(',')
                .next()
                .is_some_and(|l| matches!(l, "info" | "debug" | "trace")),
            "RUST_LOG={filter} hides the front's `listening on` line"
        ),
    }
    let mut child = cmd
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(errlog).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(errlog).unwrap_or_default();
        if let Some(addr) = bound_address(&log) {
            return (child, addr);
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            // Read again: the front's last words may have come after the look above.
            let log = std::fs::read_to_string(errlog).unwrap_or_default();
            panic!("the HTTP front did not come up: {log}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The address in the front's first `listening on http://ADDR/mcp` line, once that line is
/// whole.
fn bound_address(log: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|l| l.contains(LISTENING))?;
    let rest = &line[line.find(LISTENING)? + LISTENING.len()..];
    rest.split_once("/mcp")?.0.parse().ok()
}

/// A front a test left running (it panicked before stopping it) is stopped: SIGTERM, then
/// SIGKILL after 10 s, and reaped. Nothing when it has already exited.
pub fn stop_left_running(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    for _ in 0..200 {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

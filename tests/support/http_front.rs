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

/// Spawns `cmd`, a `palisade serve` with its config and flags (an `RUST_LOG` that shows
/// palisade's info lines), listening on `127.0.0.1:0` with its stderr in `errlog`; returns
/// the child and the address it bound. Panics with the log when the front exits or has not
/// said where it listens within a minute (a guard against a hung test, not a timing claim).
pub fn spawn_on_any_port(cmd: &mut Command, errlog: &Path) -> (Child, SocketAddr) {
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

//! Fault suite: `palisade serve` with a faulty server (tests/servers/faulty_server.py, raw
//! JSON-RPC, each tool a fault on demand) and a healthy one (the built-in `palisade
//! fs-server`), driven by a client that writes JSON-RPC lines to serve's stdin itself, so
//! that it can send garbage too.
//!
//! For every fault: serve is still running, the healthy server still answers, the faulting
//! call got an answer or an error (the waits are generous guards against hangs, never timing
//! assertions), the gateway's peak RSS (VmHWM) stays under `RSS_BOUND_KB`, and the audit log
//! holds exactly one record per call that reached the pipeline (`palisade audit verify`
//! passes too). Every test reaps serve, and serve reaps its servers; everything lives in a
//! temporary directory that is removed.
//!
//! One test binary, one module per side: `downstream` (faults of the servers), `upstream`
//! (an agent that does not read, writes garbage, floods or goes away), `startup` (servers
//! slow to start or to list). `gw` is the running serve and the byte-level client they all
//! drive; the bounds and process probes they share are here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;
use support::skip;

mod gw;

mod downstream;
mod startup;
mod upstream;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

/// The gateway's peak resident memory must stay under this, whatever the servers or the
/// client do (a 100 MB line, tens of MB of floods, 1,000 concurrent calls). Its idle RSS is
/// about 20 MB; one maximal (16 MiB) message may be held a few times over while it is
/// parsed and re-serialised.
const RSS_BOUND_KB: u64 = 200 * 1024;
/// Guards against a hang only (generous on a loaded 2-core machine); never a timing claim.
const ANSWER_LIMIT: Duration = Duration::from_secs(120);

fn deps() -> PathBuf {
    let dir = std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
    assert!(
        dir.join("venv/bin/python").exists(),
        "test dependencies missing at {} (set PALISADE_TEST_DEPS)",
        dir.display()
    );
    dir
}

fn faulty_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/faulty_server.py")
        .display()
        .to_string()
}

/// (ok, text): a result's first text block, or the error's message.
fn outcome(r: &Value) -> (bool, String) {
    if let Some(res) = r.get("result") {
        let text = res["content"][0]["text"].as_str().unwrap_or("").to_string();
        (res["isError"] != json!(true), text)
    } else {
        (
            false,
            r["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }
}

/// Every process whose parent chain leads to `root` (from /proc).
fn descendants(root: u32) -> HashSet<u32> {
    let mut parent = HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: split after the last ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if let Some(ppid) = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut out = HashSet::new();
    let mut changed = true;
    while changed {
        changed = false;
        for (&pid, &ppid) in &parent {
            if (ppid == root || out.contains(&ppid)) && out.insert(pid) {
                changed = true;
            }
        }
    }
    out
}

/// True while `pid` runs. A zombie has finished: serve reaps its own children (it exits only
/// after that); bwrap's inner processes, orphaned when bwrap dies, are reaped by init.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            after.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

/// The processes whose environment holds `entry` (`KEY=VALUE`).
pub(crate) fn processes_with_env(entry: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = dir.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(dir.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|e| e == entry.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A path inside the repository.
fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

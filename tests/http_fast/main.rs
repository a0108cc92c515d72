//! The HTTP front's fast path (`src/gateway/agent/http/fast/`), over real HTTP: a plain
//! call or routed request on an initialized session is answered as `application/json` with
//! the server's own result bytes in one SSE event of known length (rmcp's path streams its
//! SSE answer and re-types the result). One test binary; one module per subject:
//!
//! - `as_written`: the server's bytes to the agent (results, progress, and its own
//!   notifications on the session's GET stream), the agent's params to the server;
//! - `malformed`: a request of MCP's own whose params rmcp cannot read is refused, never
//!   relayed as an extension's;
//! - `refused_in_kind`: a 2026-07-28 error gets the status and kind rmcp gives it;
//! - `same_rules`: policy, the kernel's refusals and the audit's `principal` hold on it; an
//!   unknown session still gets rmcp's 404; a call that asks for progress or may ask its
//!   agent gets a stream of its own; cancellation; slots; the Python SDK's client;
//! - `attribution`: whose a server's request is: a call's own stream, a routed request's
//!   session, refused when it could be either of two sessions'; an approval asks its call's
//!   session;
//! - `tasks`: a call's `task` reaches the server, and `tasks/*` reach the server that owns
//!   the task;
//!
//! The harness (`client`): the running front and its raw HTTP client, and server-everything
//! direct.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod client;

mod as_written;
mod attribution;
mod malformed;
mod refused_in_kind;
mod same_rules;
mod tasks;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::{palisade, Workspace};

fn fs_config(ws: &Workspace, settings: Value) -> (PathBuf, PathBuf) {
    let audit = ws.path().join("audit.jsonl");
    let mut settings = settings;
    settings["auditLog"] = json!(audit);
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"]}}),
        settings,
    );
    (config, audit)
}

/// server-everything behind the front, as `everything`.
fn everything_config(ws: &Workspace) -> PathBuf {
    ws.config(support::everything_servers(), json!({}))
}

/// How many requests of `method` the fast path served, by its debug log.
fn served(ws: &Workspace, method: &str) -> usize {
    ws.stderr_text()
        .matches(&format!("{method} served on the fast path"))
        .count()
}

/// The Python SDK's Streamable HTTP client (tests/clients/http_client.py) making `calls`
/// as alice; its report.
fn sdk_report(front: &client::Front, calls: Value) -> Value {
    let out = support::driver("tests/clients/http_client.py")
        .args([
            &format!("http://{}/mcp", front.addr),
            client::ALICE,
            &calls.to_string(),
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The raw JSON-lines test server (tests/servers/faulty_server.py) behind the front, as
/// `faulty`, with these `palisade` settings.
fn faulty_config(ws: &Workspace, settings: Value) -> PathBuf {
    ws.config(
        json!({"faulty": {"command": support::python(),
                          "args": [support::repo("tests/servers/faulty_server.py")]}}),
        settings,
    )
}

/// How long a test waits for something to show before it fails (a guard against a hang).
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(30);

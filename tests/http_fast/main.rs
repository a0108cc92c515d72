//! The HTTP front's fast path (`src/gateway/agent/http/fast.rs`), over real HTTP: a plain
//! call or routed request on an initialized session is answered as `application/json` with
//! the server's own result bytes in one SSE event of known length (rmcp's path streams its
//! SSE answer and re-types the result). One test binary; one module per subject:
//!
//! - `as_written`: the server's bytes to the agent, the agent's params to the server;
//! - `same_rules`: policy, the kernel's refusals and the audit's `principal` hold on it; an
//!   unknown session still gets rmcp's 404; a call that may need the session's stream
//!   (progress, an agent that can be asked) still goes through rmcp; cancellation; the
//!   Python SDK's client.
//!
//! The harness (`client`): the running front and its raw HTTP client, and server-everything
//! direct.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod client;

mod as_written;
mod same_rules;

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

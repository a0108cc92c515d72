//! Fidelity: what a real server sends reaches the agent as the server sent it.
//!
//! The same requests go to server-everything and server-filesystem (from npm) directly and
//! through `palisade serve`; each result's raw JSON text through Palisade must equal the
//! direct one byte for byte once the names Palisade namespaces (`SERVER__NAME`) are
//! rewritten the same way. rmcp's typed models dropped a tool's `execution` and re-spelled
//! numbers (`1` as `1.0`) before the gateway relayed raw JSON (issue 18); a tool with
//! `execution` is asserted outright so the test cannot pass on a list that lost it.
//!
//! The other direction too: what the agent writes reaches the server as written. One test
//! binary; `from_servers` and `from_agent` hold the two directions, `lines` the JSON-RPC line
//! client both drive.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod lines;

mod from_agent;
mod from_servers;

use std::process::{Command, Stdio};

use lines::Lines;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use support::{node_server, palisade, renamed, same, Workspace};

/// The raw JSON-lines test server answering requests with their lines (`FAULTY_ECHO_LINES`)
/// in a config's `mcpServers`, as `faulty`.
fn faulty_echoing() -> Value {
    let server = support::repo("tests/servers/faulty_server.py");
    json!({"faulty": {"command": support::python(), "args": [server],
                      "env": {"FAULTY_ECHO_LINES": "1"}}})
}

fn everything_cmd() -> Command {
    let mut c = Command::new("node");
    c.arg(node_server("server-everything"))
        .arg("stdio")
        .stderr(Stdio::null());
    c
}

fn serve(ws: &Workspace, servers: Value) -> Lines {
    serve_with(ws, servers, json!({}))
}

/// As `serve`, with these `palisade` settings.
fn serve_with(ws: &Workspace, servers: Value, settings: Value) -> Lines {
    Lines::spawn(&mut serve_cmd(ws, servers, settings))
}

/// As `serve`, for a 2026-07-28 agent: no handshake.
fn serve_modern(ws: &Workspace, servers: Value) -> Lines {
    Lines::start(&mut serve_cmd(ws, servers, json!({})))
}

fn serve_cmd(ws: &Workspace, servers: Value, settings: Value) -> Command {
    let config = ws.config(servers, settings);
    let mut c = Command::new(palisade());
    c.arg("serve")
        .arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(ws.errlog()).expect("errlog"));
    c
}

/// The audit log's record whose `toolName` is `name`.
fn record_of(audit: &std::path::Path, name: &str) -> Value {
    let records = support::read_jsonl(audit);
    records
        .iter()
        .find(|r| r["toolName"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no audit record of {name}: {records:?}"))
}

/// The params of a request as the server read them, from the line it answered with.
fn params_read(line: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(line).expect("a JSON-RPC request");
    request.params.get().to_string()
}

//! Integration tests of `palisade serve`, one binary: real MCP clients (the Python `mcp` SDK,
//! a raw JSON-RPC line client, an rmcp client in-process) against real downstream servers
//! (`@modelcontextprotocol/server-filesystem`, `server-everything`, and a small Python MCP
//! server, tests/servers/probe_server.py). Scenario drivers live in tests/clients/drive.py.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "gateway/support.rs"]
mod support;

#[path = "gateway/cli.rs"]
mod cli;

#[path = "gateway/in_process.rs"]
mod in_process;

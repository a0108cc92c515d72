//! Protocol currency over stdio: a 2026-07-28 agent works with no handshake, a 2025-11-25
//! agent as before, and the gateway bridges both to its servers (spoken to in 2025-11-25, or
//! in 2026-07-28 when a server speaks it). Real clients: the Python `mcp` SDK 2.3 in each
//! era, and a raw line client for what the SDK would never send (an incomplete request
//! envelope). Real servers: server-everything and tests/servers/modern_server.py.
//!
//! One test binary; one module per subject:
//!
//! - `agents`: a 2026-07-28 agent with no handshake, the Python SDK in both eras;
//! - `escalations`: an escalation asked of the agent (input-required rounds, or the reason);
//! - `server_requests`: a server's sampling and elicitation reaching the agent;
//! - `servers`: a downstream server that speaks 2026-07-28, or is pinned to it and cannot;
//! - `listen`: list changes heard through `subscriptions/listen`, both ways.
//!
//! `common` holds the server configs, the request envelope and the SDK driver they share.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod common;

mod agents;
mod escalations;
mod listen;
mod server_requests;
mod servers;

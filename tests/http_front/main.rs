//! `palisade serve --http`: the Streamable HTTP front, against the Python `mcp` SDK's HTTP
//! client and raw HTTP for the refusals, with real servers sandboxed behind it. One test
//! binary (it links once); one module per subject:
//!
//! - `auth`: tokens, the Origin check, refusing to serve without authentication;
//! - `jwt`: JWT access tokens and their JWKS (file, URL, https, through a proxy), with the
//!   stand-in JWKS hosts in `jwks_hosts`;
//! - `principals`: per-principal servers and sandbox directories, idle reaping, request caps
//!   and rates, metrics;
//! - `shutdown`: SIGTERM with calls in flight;
//! - `rounds`: calls that go back to the agent (escalation questions, sampling, tasks) in both
//!   protocol eras;
//! - `conformance`: the MCP project's conformance suite;
//! - `load`: the `bench-http` load client.
//!
//! The harness: `front` starts palisade and talks to it; `fixtures` holds the tokens and
//! server configs the tests put behind it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/mod.rs"]
mod support;

mod fixtures;
mod front;
mod jwks_hosts;

mod auth;
mod conformance;
mod jwt;
mod load;
mod principals;
mod rounds;
mod shutdown;

//! The native sandbox against real bubblewrap, one test binary; one module per subject:
//!
//! - `attacks`: escapes a hostile program tries, each also run unsandboxed (where it must
//!   succeed), with the attack scene and runner in `hostile`;
//! - `passthrough`: exit status, death by signal, stdin/stdout and the environment;
//! - `grants`: read-only grants inside read-write ones, and denyWrite;
//! - `tiers`: enforce, warn and auto without bubblewrap or without user namespaces, and
//!   `run --backend landlock`;
//! - `bad_input`: bad input is one line naming the fix;
//! - `teardown`: the process tree ends with palisade, whatever ends it;
//! - `servers`: real MCP servers from their runtime closure, and the `prepare` API the
//!   gateway uses;
//! - `trial_record`: a passed trial sandbox remembered, and what a stale record does.
//!
//! `common` holds the few helpers all of them share. Needs bwrap 0.8+ with working user
//! namespaces and /usr/bin/python3 (the hostile program); attacks the host itself refuses (no
//! vsock, io_uring disabled, ...) are reported as skipped, never passed silently.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../support/skip.rs"]
mod skip;

mod common;
mod hostile;

mod attacks;
mod bad_input;
mod grants;
mod passthrough;
mod servers;
mod teardown;
mod tiers;
mod trial_record;

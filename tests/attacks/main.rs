//! The hostile MCP server (tests/attacks/hostile_server.py) behind `palisade serve` under
//! enforce, once per native tier (bubblewrap, Landlock) and once under srt where the test
//! dependencies hold it, driven by palisade's own rmcp client, and the same server launched
//! directly as the control. Every attack must succeed in the control
//! (so the suite cannot pass vacuously) and fail behind palisade; the table is printed and
//! written to target/ (and into docs/security.md with PALISADE_UPDATE_DOCS=1, see
//! scripts/security-report.sh).
//!
//! The serve table ends with the network allowlist rows (`ALLOWLIST_ATTACKS`), run by a third
//! server with an allowlist on every tier that can enforce one here, beside a positive row
//! that must reach the allowed name.
//!
//! Needs bwrap with working user namespaces and the Python venv with the `mcp` SDK
//! (PALISADE_TEST_DEPS). Attacks the host itself refuses are reported as skipped.
//!
//! scripts/container-test.sh runs the serve table inside the unprivileged container, where
//! bubblewrap cannot run: there PALISADE_ATTACK_TIERS names the tiers (`landlock`),
//! PALISADE_ATTACK_BIN the image's palisade, and PALISADE_ATTACK_TABLE where the table goes.//!
//! One test binary, one module per attack family: `serve` (the serve table, with the
//! `allowlist` rows), `own_files` (Palisade's own files in a writable root), `limits` (fork
//! bomb and memory hog), `agent` (the hostile agent); `scene` is what they share, `table`
//! where their tables go.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../egress_support/mod.rs"]
mod egress_support;
#[path = "../support/skip.rs"]
mod skip;

mod scene;
mod table;

mod agent;
mod allowlist;
mod limits;
mod own_files;
mod serve;

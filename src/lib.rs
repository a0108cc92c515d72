//! Palisade: every MCP server an agent uses in its own OS sandbox, behind one policy proxy.
//!
//! Data flows one way through the modules:
//! `config` (what the user wrote) → `policy` (decide a call; pure) → `roots` (where each
//! server may operate) → `sandbox` (the spec, its bwrap/srt rendering, the launcher) →
//! `gateway` (route, police, forward, audit), with `approval` and `audit` on the side.
//! `fsserver` is a built-in downstream server; `cli` is the thin command-line edge.

pub mod approval;
pub mod audit;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod demo;
pub mod egress;
pub mod fsserver;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod logging;
pub mod packages;
pub mod pins;
pub mod policy;
pub mod private_dir;
pub mod profiles;
pub mod roots;
pub mod sandbox;
pub mod terminal;

//! `palisade fs-server`: a small roots-respecting filesystem MCP server, built in.
//!
//! The embedded default downstream of `demo`, the fast server of the benchmarks, and the
//! seed's governed-resource gate. Flow inside: a call's path → `roots::guard` (canonical,
//! inside a root, ro/rw) → `ops` (blocking I/O on the canonical path, off the runtime).
//! `tools` and `resources` describe the surface; `state` holds the swappable root set;
//! `server` is the rmcp handler. Nothing here writes to stdout except rmcp's transport.

pub mod error;
pub mod ops;
pub mod resources;
pub mod server;
pub mod state;
pub mod tools;

pub use server::{FsServer, FsServerOptions};

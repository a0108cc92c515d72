//! Palisade's egress proxy: how a sandboxed server with `sandbox.network.allowedDomains`
//! reaches exactly those hosts and nothing else.
//!
//! Flow: the server's sandbox has its own empty network namespace; `wiring` (pure) says how
//! the launcher binds this proxy's per-server unix socket into it and starts socat on
//! 127.0.0.1:3128 (HTTP) and :1080 (SOCKS5) in front of the server, with the proxy env vars.
//! In the gateway process, `server` accepts on each server's socket (the socket identifies
//! the server), `http` / `socks5` read the request under size and time bounds, `dial` checks
//! it against that server's `policy` (built from `domains` entries), resolves once through
//! `resolve`, checks the addresses and connects, and `relay` copies bytes. Refusals go to
//! `events` (tracing + broadcast channel) for the gateway to attribute and audit. Under the
//! Landlock tier (no namespace) a server reaches the same proxy on its own loopback port
//! instead, with a secret the proxy checks (`loopback`).
//!
//! Never: connect before the policy said yes, resolve twice, or let one server's socket
//! use another's lists. docs/network.md has the user-facing semantics.

mod dial;
pub mod domains;
pub mod events;
pub mod hosts;
pub mod http;
pub mod loopback;
pub mod policy;
mod relay;
pub mod resolve;
pub mod server;
pub mod socks5;
pub mod wiring;

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

pub use domains::{Entry, Host, HostError};
pub use events::{Protocol, RefusalEvent};
pub use loopback::{LoopbackEndpoint, ProxySecret};
pub use policy::{AddressClass, EgressPolicy, RefusalReason};
pub use resolve::Resolver;
pub use server::{EgressOptions, EgressProxy};
pub use wiring::{EgressWiring, WiringOptions};

/// Bounds that keep a slow or hostile client from pinning proxy resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Time for the whole request head (HTTP) or each of greeting and request (SOCKS5).
    pub handshake_timeout: Duration,
    /// Largest HTTP request head, request line and headers together.
    pub max_head_bytes: usize,
    /// Per upstream address tried.
    pub connect_timeout: Duration,
    /// Simultaneous connections per server; more are dropped at accept.
    pub max_connections_per_server: usize,
    /// Buffer per direction while relaying.
    pub relay_buffer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_connections_per_server: 256,
            relay_buffer: 64 * 1024,
        }
    }
}

/// Errors from managing the proxy (not from serving connections: those are answered to the
/// client and logged).
#[derive(Debug, Error)]
pub enum EgressError {
    #[error("server {server}: sandbox.network: {cause}")]
    Config { server: String, cause: HostError },
    #[error("server {0} already has an egress socket")]
    Duplicate(String),
    #[error("server {0} has no egress socket")]
    UnknownServer(String),
    #[error("egress socket path {0} is longer than a unix socket path may be; use a shorter socket directory")]
    PathTooLong(PathBuf),
    #[error("egress socket directory {0} must be a directory owned by this user with mode 0700")]
    UnsafeDir(PathBuf),
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
}

//! What one launch asks for: the request's plain data (`LaunchRequest`, its grants and the
//! egress socket's state), filled in by the gateway, `palisade run` and `check`.
//!
//! Pure data: nothing here reads the machine or starts anything. Never: a default that
//! loosens the sandbox (an empty request is sandboxed, enforced, with no network).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::{Backend, NetworkConfig, SandboxPolicy};
use crate::egress::LoopbackEndpoint;
use crate::sandbox::{Access, ResourceLimits};

/// A directory a server may operate in, with its access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub path: PathBuf,
    pub access: Access,
}

/// Everything needed to launch one server (or one `palisade run` command).
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    /// Server name, for logs, errors and per-server state.
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Environment given by the user/config; nothing else of palisade's is inherited.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Roots and other grants (bind mounts at the same path).
    pub grants: Vec<Grant>,
    /// Paths never readable even under a grant.
    pub deny_read: Vec<PathBuf>,
    /// Paths never writable, nor creatable, even under a read-write grant: srt renders them
    /// as `denyWrite`; the native sandbox re-binds them read-only (`sandbox::deny_write`).
    pub deny_write: Vec<PathBuf>,
    pub network: NetworkConfig,
    /// `false` when the user opted this server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub policy: SandboxPolicy,
    pub backend: Backend,
    pub profile: Option<String>,
    /// Directory of profiles overriding the built-in ones (`palisade.profilesDir`).
    pub profiles_dir: Option<PathBuf>,
    /// Where per-server state directories live (`<state_root>/<name>`); default
    /// `$HOME/.local/state/palisade/servers`. Only created for profiles that keep state.
    pub state_root: Option<PathBuf>,
    /// Run bwrap under `strace -f` writing this log (`palisade run --trace-denials`).
    pub trace_log: Option<PathBuf>,
    /// Permit read-write grants of `/` or a home directory (and read-only grants of `/`).
    pub allow_broad: bool,
    /// Resource limits for the process tree.
    pub limits: ResourceLimits,
    /// The egress proxy's socket for this server (only meaningful with an allowlist).
    pub egress: EgressSocket,
    /// The egress proxy's loopback endpoint for this server, opened when it runs under the
    /// Landlock tier (no network namespace to bridge the socket into). Its secret is never
    /// logged (`Debug` redacts it).
    pub egress_loopback: Option<LoopbackEndpoint>,
    /// Where the Landlock tier's connect checks report what they refuse (the proxy's own
    /// refusal channel, so a refusal reaches the call in flight and its audit record).
    pub egress_refusals: Option<crate::egress::events::RefusalReporter>,
    /// Re-bind `WRITE_PROTECTED` paths found in read-write grants read-only (default on;
    /// `sandbox.filesystem.protectDangerousFiles: false` turns it off).
    pub write_protect: bool,
    /// The session sandbox dir when it is among the grants: a profile's `rootsAs` delivers it
    /// after the server's own roots and never as its only root (see
    /// `profiles::apply::roots_delivery`). `None` for `palisade run`, whose grants are all
    /// the command's own.
    pub session_dir: Option<PathBuf>,
    /// Accepts, under the Landlock tier, an allowlist held by port only (see
    /// `resolve::landlock_gaps`). Only Palisade's package fetch sandbox sets it: what it runs
    /// is the user's own npm or uv, and the registry token it may read is one that code can
    /// already use at the registry; a server's allowlist never accepts it.
    pub allowlist_by_port: bool,
    /// The grants are the gateway's recorded roots, canonical when they were granted: one
    /// that no longer resolves to itself had a directory on its way replaced by a symlink
    /// since (a server can do that inside its writable roots, and bwrap would mount the
    /// link's target), so the launch is refused. `palisade run`'s grants are the user's
    /// paths as typed, which may be links.
    pub grants_canonical: bool,
}

/// Where a server with a domain allowlist reaches the egress proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EgressSocket {
    /// No proxy was asked for yet. `check` resolves with this (it starts nothing); `prepare`
    /// treats it as a proxy that is not running.
    #[default]
    NotStarted,
    /// The host path of this server's socket (`EgressProxy::add_server`).
    Ready(PathBuf),
    /// The proxy could not serve this server; why.
    Failed(String),
}

impl Default for LaunchRequest {
    /// An empty request with the restrictive defaults; callers fill in name and command.
    fn default() -> Self {
        LaunchRequest {
            name: String::new(),
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            grants: Vec::new(),
            deny_read: Vec::new(),
            deny_write: Vec::new(),
            network: NetworkConfig::None,
            sandboxed: true,
            policy: SandboxPolicy::Enforce,
            backend: Backend::Auto,
            profile: None,
            profiles_dir: None,
            state_root: None,
            trace_log: None,
            allow_broad: false,
            limits: ResourceLimits::default(),
            egress: EgressSocket::NotStarted,
            egress_loopback: None,
            egress_refusals: None,
            write_protect: true,
            session_dir: None,
            allowlist_by_port: false,
            grants_canonical: false,
        }
    }
}

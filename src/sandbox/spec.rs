//! `SandboxSpec`: the one input of the argv builders. Plain data, no I/O. Every path in a
//! spec is absolute and canonical; producing such paths is the caller's job (`roots`,
//! `sandbox::closure`), so that rendering can stay pure.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// Read-only or read-write.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Ro,
    Rw,
}

/// Why a path is visible in the sandbox; shown by `check` and `profiles show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountOrigin {
    /// The curated system base (`/usr`, selected `/etc` entries, ...).
    SystemBase,
    /// The command's runtime closure (interpreter, package directory, venv).
    Runtime,
    /// A root derived from the policy or granted by the user.
    Root,
    /// From a sandbox profile.
    Profile,
    /// Private per-server state that persists across restarts in the session.
    State,
    /// The egress proxy socket.
    Network,
}

/// A bind mount at the same absolute path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    pub path: PathBuf,
    pub access: Access,
    pub origin: MountOrigin,
}

/// A symlink created inside the sandbox (`/bin -> usr/bin` on merged-/usr systems).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symlink {
    /// Where the link appears inside the sandbox.
    pub path: PathBuf,
    /// What it points to (as written in the link, usually relative).
    pub target: PathBuf,
}

/// Network isolation for one server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum NetworkSpec {
    /// A private network namespace with loopback only.
    #[default]
    None,
    /// A private namespace whose only way out is the egress proxy's unix socket, bridged to
    /// 127.0.0.1 ports inside by socat.
    Proxied {
        /// Host path of the proxy's unix socket for this server.
        socket: PathBuf,
        http_port: u16,
        socks_port: u16,
        /// socat as visible inside the sandbox (the launcher makes sure it is).
        socat: PathBuf,
    },
    /// The host network, shared: only ever the result of a warn-mode degradation.
    Host,
}

/// Resource limits applied to the sandboxed process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    /// Address-space limit (RLIMIT_AS), bytes.
    pub address_space: Option<u64>,
    /// Processes for the sandbox's user (RLIMIT_NPROC).
    pub processes: Option<u64>,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: Option<u64>,
    /// Memory of the whole process tree (cgroup `memory.max`), bytes, where a cgroup can be
    /// made; otherwise only an explicit `address_space` applies.
    pub memory: Option<u64>,
    /// Tasks of the whole process tree (cgroup `pids.max`), where a cgroup can be made.
    pub pids: Option<u64>,
}

impl Default for ResourceLimits {
    /// Defaults that stop a fork bomb or a runaway allocation without hurting real servers
    /// (Node reserves a lot of address space, hence the generous AS limit).
    fn default() -> Self {
        ResourceLimits {
            address_space: None,
            processes: None,
            open_files: Some(4096),
            cpu_seconds: None,
            // Through a cgroup only: a fork bomb stops at 1024 tasks (threads count: Node
            // runs about 11) and a memory hog at 4 GiB, far above what real servers use.
            memory: Some(4096 * 1024 * 1024),
            pids: Some(1024),
        }
    }
}

impl ResourceLimits {
    /// The config's `sandbox.limits`, each field falling back to the default. `memoryMb`
    /// and `processes` set both the cgroup limit and the rlimit fallback (RLIMIT_AS,
    /// RLIMIT_NPROC), which `launch` drops when the cgroup enforces the same thing.
    pub fn from_config(limits: &crate::config::Limits) -> Self {
        let d = ResourceLimits::default();
        ResourceLimits {
            memory: limits
                .memory_mb
                .map(|mb| mb.saturating_mul(1024 * 1024))
                .or(d.memory),
            pids: limits.processes.or(d.pids),
            address_space: limits
                .memory_mb
                .map(|mb| mb.saturating_mul(1024 * 1024))
                .or(d.address_space),
            processes: limits.processes.or(d.processes),
            open_files: limits.open_files.or(d.open_files),
            cpu_seconds: limits.cpu_seconds.or(d.cpu_seconds),
        }
    }
}

/// Everything the sandbox of one process contains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxSpec {
    /// Absolute path of the executable (resolved with `which` before the spec is built).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The complete environment of the command; nothing else is inherited.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (same absolute path as on the host).
    pub cwd: PathBuf,
    /// Bind mounts, in the order given; the renderer sorts them (see `bwrap`).
    pub mounts: Vec<Mount>,
    /// Symlinks of the system base (`/bin`, `/lib*`, `/sbin` when the host has them as links).
    pub links: Vec<Symlink>,
    /// Paths made unreadable even when below a mount (srt's `denyRead`).
    pub deny: Vec<PathBuf>,
    /// Private HOME (a tmpfs inside the sandbox, unless a mount already covers it).
    pub home: PathBuf,
    pub network: NetworkSpec,
    pub limits: ResourceLimits,
    /// Keep the PID namespace shared with the host (a profile relaxation for Chromium).
    pub share_pid: bool,
    /// Apply palisade's seccomp filter (see `sandbox::seccomp`); only a machine without
    /// seccomp support turns this off, and `resolve` reports that as a degradation.
    pub seccomp: bool,
}

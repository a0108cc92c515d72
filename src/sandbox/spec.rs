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
    /// No namespace (the Landlock tier): TCP connect to one loopback port only, the egress
    /// proxy's endpoint for this server (its secret travels in the request, never here).
    Loopback { port: u16 },
    /// The host network, shared: only ever the result of a warn-mode degradation.
    Host,
}

/// Resource limits applied to the sandboxed process tree.
///
/// Memory and tasks are limited per server tree by a cgroup where palisade can make one
/// (`memory`, `pids`). Where it cannot, the rlimit fallbacks apply instead (`data`,
/// `processes`), so that the defaults still stop a memory hog and a fork bomb: `launch`
/// drops each fallback that a cgroup enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    /// Writable private memory per process (RLIMIT_DATA), bytes: the fallback for `memory`.
    /// Not RLIMIT_AS: that counts address space reserved and never touched, and Node's
    /// undici reserves over 16 GiB for WebAssembly (measured: `fetch` fails under
    /// RLIMIT_AS = 16 GiB, works under RLIMIT_DATA = 256 MiB).
    pub data: Option<u64>,
    /// Tasks (RLIMIT_NPROC): the fallback for `pids`. The kernel counts them per user
    /// namespace, so in the sandbox's own namespace this is the sandbox's count (see
    /// `sys::nproc_fallback` for the host-wide count that also applies to other users).
    pub processes: Option<u64>,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: Option<u64>,
    /// Memory of the whole process tree (cgroup `memory.max`), bytes.
    pub memory: Option<u64>,
    /// Tasks of the whole process tree (cgroup `pids.max`).
    pub pids: Option<u64>,
    /// Whether to try a cgroup at all (`sandbox.limits.cgroup: false` keeps palisade out of
    /// the cgroup tree, leaving the rlimit fallbacks).
    pub cgroup: bool,
}

/// 4 GiB: far above what real servers use (Node servers peak near 75 MB resident).
const DEFAULT_MEMORY: u64 = 4096 * 1024 * 1024;
/// 1024 tasks (threads count: Node runs about 11): a fork bomb stops there.
const DEFAULT_TASKS: u64 = 1024;

impl Default for ResourceLimits {
    /// Defaults that stop a fork bomb or a runaway allocation without hurting real servers,
    /// with a cgroup or without.
    fn default() -> Self {
        ResourceLimits {
            data: Some(DEFAULT_MEMORY),
            processes: Some(DEFAULT_TASKS),
            open_files: Some(4096),
            cpu_seconds: None,
            memory: Some(DEFAULT_MEMORY),
            pids: Some(DEFAULT_TASKS),
            cgroup: true,
        }
    }
}

impl ResourceLimits {
    /// The config's `sandbox.limits`, each field falling back to the default. `memoryMb`
    /// and `processes` set both the cgroup limit and its rlimit fallback.
    pub fn from_config(limits: &crate::config::Limits) -> Self {
        let d = ResourceLimits::default();
        let memory = limits
            .memory_mb
            .map(|mb| mb.saturating_mul(1024 * 1024))
            .or(d.memory);
        let tasks = limits.processes.or(d.pids);
        ResourceLimits {
            memory,
            data: memory,
            pids: tasks,
            processes: tasks,
            open_files: limits.open_files.or(d.open_files),
            cpu_seconds: limits.cpu_seconds.or(d.cpu_seconds),
            cgroup: limits.cgroup.unwrap_or(d.cgroup),
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

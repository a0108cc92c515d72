//! The only part of `sandbox` that starts processes. The gateway and `palisade run` both
//! call `prepare`, which resolves enforce/warn against the machine, builds the spec, renders
//! it, and returns a command ready to spawn plus the record of what is enforced.
//!
//! STUB (skeleton commit): runs the command directly. The launcher issue replaces the body
//! of `prepare`; the types below are the contract the gateway codes against.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::{Backend, NetworkConfig, SandboxPolicy};
use crate::sandbox::Access;

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
    pub network: NetworkConfig,
    /// `false` when the user opted this server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub policy: SandboxPolicy,
    pub backend: Backend,
    pub profile: Option<String>,
}

/// What is actually enforced for a launched process: logged, shown by `check`, audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Enforcement {
    /// Fully contained by the named backend.
    Sandboxed { backend: Backend },
    /// Running with less containment than configured (warn mode); the reasons say what is
    /// missing and how to fix it.
    Degraded {
        backend: Option<Backend>,
        reasons: Vec<String>,
    },
    /// The user opted this server out of the sandbox.
    OptedOut,
}

impl Enforcement {
    /// True only when the process really runs in a sandbox with nothing degraded.
    pub fn is_sandboxed(&self) -> bool {
        matches!(self, Enforcement::Sandboxed { .. })
    }
}

/// Why a launch cannot happen.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// enforce mode and the machine cannot contain the command.
    #[error("refusing to run `{name}` unsandboxed (sandbox policy is enforce): {}", reasons.join("; "))]
    Refused { name: String, reasons: Vec<String> },
    /// Bad request: missing command, bad grant, ...
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// A command ready to spawn. Keep it alive until the child is spawned: it may own file
/// descriptors (e.g. the seccomp program) the child inherits.
#[derive(Debug)]
pub struct Prepared {
    pub command: tokio::process::Command,
    pub enforcement: Enforcement,
}

/// Resolves, builds and renders the sandbox for `req`.
pub fn prepare(req: &LaunchRequest) -> Result<Prepared, LaunchError> {
    if req.command.is_empty() {
        return Err(LaunchError::Invalid("no command given".into()));
    }
    let mut command = tokio::process::Command::new(&req.command);
    command.args(&req.args).env_clear().envs(&req.env);
    if let Some(cwd) = &req.cwd {
        command.current_dir(cwd);
    }
    Ok(Prepared {
        command,
        enforcement: Enforcement::Degraded {
            backend: None,
            reasons: vec!["the native launcher is not built yet".into()],
        },
    })
}

//! Facts gathered into the `SandboxSpec` of one contained launch, the one set all tiers
//! render: the curated system base, the command's runtime closure, the grants and the
//! profile's mounts, the working directory, the network and the denyRead paths.
//!
//! Reads the filesystem (the host root, the command's closure, canonical paths); starts
//! nothing and creates nothing. Never: a working directory outside what the sandbox shows,
//! or a private network whose proxy or socat is missing (refused instead).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::prepared::LaunchError;
use super::request::{EgressSocket, LaunchRequest};
use crate::config::NetworkConfig;
use crate::sandbox::base;
use crate::sandbox::capabilities::Capabilities;
use crate::sandbox::closure::{self, Lookup};
use crate::sandbox::resolve::Plan;
use crate::sandbox::{Access, Mount, MountOrigin, NetworkSpec, SandboxSpec};

/// What one launch contributes to its spec, beyond the request and the machine.
pub(super) struct SpecInputs<'a> {
    /// The resolved executable.
    pub(super) program: &'a Path,
    /// The request's grants, as mounts.
    pub(super) grants: Vec<Mount>,
    /// Mounts the profile adds (state dir, extra reads).
    pub(super) profile_mounts: Vec<Mount>,
    /// The command's complete environment.
    pub(super) env: BTreeMap<String, String>,
    pub(super) lookup: &'a Lookup<'a>,
}

/// The spec for a sandboxed launch: base, runtime closure, grants, masks, cwd.
pub(super) fn build_spec(
    req: &LaunchRequest,
    inputs: SpecInputs<'_>,
    plan: &Plan,
    caps: &Capabilities,
) -> Result<SandboxSpec, LaunchError> {
    let SpecInputs {
        program,
        mut grants,
        profile_mounts,
        mut env,
        lookup,
    } = inputs;
    let system = base::discover();
    let home = PathBuf::from(&env["HOME"]);
    // Profile mounts are shown like grants (after the closure, so a state dir inside an
    // install directory stays writable), but a user grant of the same path wins.
    for m in profile_mounts {
        if !grants.iter().any(|g| g.path == m.path) {
            grants.push(m);
        }
    }
    let covered_by = |p: &Path, ms: &[Mount]| ms.iter().any(|m| p.starts_with(&m.path));
    let runtime: Vec<Mount> = closure::closure(program, &req.args, lookup)
        .into_iter()
        .filter(|p| !covered_by(p, &grants))
        .map(|path| Mount {
            path,
            access: Access::Ro,
            origin: MountOrigin::Runtime,
        })
        .collect();
    let cwd = match &req.cwd {
        None => home.clone(),
        Some(c) => {
            let real = std::fs::canonicalize(c).map_err(|e| {
                LaunchError::Invalid(format!(
                    "working directory {} cannot be used ({e}); fix --cwd",
                    c.display()
                ))
            })?;
            let visible = covered_by(&real, &grants)
                || covered_by(&real, &runtime)
                || real.starts_with(&home)
                || real.starts_with("/tmp");
            if !visible {
                return Err(LaunchError::Invalid(format!(
                    "working directory {} is not inside any grant; add --ro {0} or --rw {0}, or choose a --cwd inside a grant",
                    real.display()
                )));
            }
            real
        }
    };
    let mut mounts = system.mounts;
    mounts.extend(runtime);
    mounts.extend(grants);
    let network = network_spec(req, plan, caps)?;
    if let NetworkSpec::Proxied { socat, .. } = &network {
        // The bridges run inside: socat must be visible (it usually is, under /usr).
        if !covered_by(socat, &mounts) {
            mounts.push(Mount {
                path: socat.clone(),
                access: Access::Ro,
                origin: MountOrigin::Network,
            });
        }
        if let Some(opts) = crate::egress::wiring::WiringOptions::from_spec(&network) {
            env.extend(crate::egress::wiring::wiring(&opts).env);
        }
    }
    let deny = req
        .deny_read
        .iter()
        .filter_map(|p| match std::fs::canonicalize(p) {
            Ok(real) => Some(real),
            Err(e) => {
                // Neither tier can mask a name that does not exist without making it on the
                // host; said at every launch rather than dropped silently.
                tracing::warn!(
                    server = %req.name,
                    path = %p.display(),
                    "denyRead path cannot be masked ({e}): a file made there after this launch \
                     is readable by the server until its next launch; create it (even empty) \
                     before the server starts"
                );
                None
            }
        })
        .collect();
    Ok(SandboxSpec {
        program: program.to_path_buf(),
        args: req.args.clone(),
        env,
        cwd,
        mounts,
        links: system.links,
        deny,
        home,
        network,
        limits: req.limits,
        share_pid: false,
        seccomp: plan.seccomp,
    })
}

/// The network a planned launch gets: the host's (warn-mode degradation), the proxy's
/// (an allowlist, its socket ready, socat found; under Landlock its loopback endpoint), or
/// loopback only.
fn network_spec(
    req: &LaunchRequest,
    plan: &Plan,
    caps: &Capabilities,
) -> Result<NetworkSpec, LaunchError> {
    if plan.host_network {
        return Ok(NetworkSpec::Host);
    }
    if plan.srt || !matches!(req.network, NetworkConfig::Allowlist(_)) {
        // srt renders the lists itself (see `sandbox::srt`).
        return Ok(NetworkSpec::None);
    }
    if plan.landlock {
        // No namespace to bridge a socket into: the proxy's loopback endpoint, which the
        // caller opened for a Landlock launch; fail closed if it did not.
        return match &req.egress_loopback {
            Some(ep) => Ok(NetworkSpec::Loopback { port: ep.port }),
            None => Err(LaunchError::Refused {
                name: req.name.clone(),
                reasons: vec![
                    "the egress proxy has no loopback endpoint for this server (needed under backend landlock)".into(),
                ],
            }),
        };
    }
    match (&req.egress, &caps.socat) {
        (EgressSocket::Ready(socket), Some(socat)) => Ok(NetworkSpec::Proxied {
            socket: socket.clone(),
            http_port: crate::egress::wiring::HTTP_PORT,
            socks_port: crate::egress::wiring::SOCKS_PORT,
            socat: std::fs::canonicalize(socat).unwrap_or_else(|_| socat.clone()),
        }),
        // resolve only plans a private network with an allowlist when both are there; fail
        // closed if that ever changes.
        _ => Err(LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec!["the egress proxy or socat is not available".into()],
        }),
    }
}

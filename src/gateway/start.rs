//! A gateway's start, step by step: the sandbox directory the servers live in, each server's
//! plan (its launch request and root set, worked out while the machine is probed), and its
//! slot in the shared state. `Gateway::start_until` runs them in that order and then waits
//! for the servers to settle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::GatewayConfig;
use crate::sandbox::launch::LaunchRequest;

use super::{registry, server, state, GatewayError, GatewayOptions, NotStarted, Status};

/// Each configured server's launch request (or why it is not started), in config order.
pub(super) type Requests = Vec<(String, Result<LaunchRequest, NotStarted>)>;

/// Per server: its launch request and its derived root set, in config order; either failing
/// refuses that server alone (its root cell is then `None`).
pub(super) fn plan_servers(
    opts: &GatewayOptions,
    home: Option<&Path>,
) -> (Requests, Vec<Option<server::roots::RootsCell>>) {
    let no_rules = crate::policy::Policy::builtin_default();
    let roots_policy = opts.roots_policy.as_deref().unwrap_or(&no_rules);
    let mut requests: Requests = Vec::with_capacity(opts.config.servers.len());
    let mut cells: Vec<Option<server::roots::RootsCell>> = Vec::with_capacity(requests.capacity());
    for (name, server) in &opts.config.servers {
        if let Some((_, reason)) = opts.refused.iter().find(|(n, _)| n == name) {
            cells.push(None);
            requests.push((name.clone(), Err(NotStarted::Configured(reason.clone()))));
            continue;
        }
        let derived = server::spawn::launch_request(
            name,
            server,
            &opts.config.settings,
            &opts.sandbox_dir,
            home,
        )
        .map_err(NotStarted::Grant)
        .and_then(|req| {
            crate::roots::derive::derive_for_server(
                roots_policy,
                name,
                Some(server),
                Some(&opts.sandbox_dir),
                home,
            )
            .map(|d| (req, d))
            .map_err(NotStarted::Roots)
        });
        match derived {
            Ok((mut req, derived)) => {
                // Palisade's own files are hidden wherever a grant would show them (a
                // mask is rendered only where a mount shows the path).
                for p in &opts.protected {
                    if let Ok(c) = std::fs::canonicalize(p) {
                        if !req.deny_read.contains(&c) {
                            req.deny_read.push(c);
                        }
                    }
                }
                for s in &derived.skipped {
                    tracing::warn!(server = %name, "root {} skipped: {}", s.root.path.display(), s.reason);
                }
                tracing::info!(
                    server = %name,
                    "roots: {}",
                    derived
                        .roots
                        .iter()
                        .map(|r| format!("{} ({:?})", r.path.display(), r.access))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                cells.push(Some(server::roots::RootsCell::new(
                    derived.roots,
                    crate::roots::guard::GuardOptions {
                        cwd: server.cwd.clone(),
                        home: home.map(Path::to_path_buf),
                        // The proxy refuses these before the sandbox would (EROFS).
                        deny_write: req.deny_write.clone(),
                    },
                )));
                requests.push((name.clone(), Ok(req)));
            }
            Err(reason) => {
                cells.push(None);
                requests.push((name.clone(), Err(reason)));
            }
        }
    }
    (requests, cells)
}

/// Each server's slot, from its plan: refused servers get a slot that says why.
pub(super) fn slots(
    requests: Requests,
    cells: Vec<Option<server::roots::RootsCell>>,
    config: &GatewayConfig,
) -> Vec<Arc<state::Slot>> {
    // Relaying is resolved from the config (and profile) now: servers start, and declare
    // their client capabilities, before the agent connects.
    let relays: Vec<server::relay::RelayPolicy> = config
        .servers
        .iter()
        .map(|(name, server)| {
            let p = server::relay::RelayPolicy::for_server(name, server, &config.settings);
            if p.sampling || p.elicitation {
                tracing::info!(server = %name, "relaying to the agent: sampling {}, elicitation {} (at most {} in flight, {} per minute)", p.sampling, p.elicitation, p.max_concurrent, p.per_minute);
            }
            p
        })
        .collect();
    requests
        .into_iter()
        .zip(cells)
        .zip(relays)
        .map(|(((name, req), cell), relay)| (name, req, cell, relay))
        .map(|(name, req, cell, relay)| match (req, cell) {
            (Ok(req), Some(cell)) => {
                let mut slot = state::Slot::with_roots(name, Some(req), cell, Status::Starting)
                    .with_relay(relay);
                if let Some(rate) = output_rate(config, &slot.name) {
                    slot.output_rate = rate;
                }
                if let Some(server) = config.server(&slot.name) {
                    slot.filters = registry::ListFilters::of(server);
                    slot.protocol = server.protocol.unwrap_or_default();
                }
                Arc::new(slot)
            }
            (Err(why), _) => {
                let reason = why.to_string();
                tracing::error!(server = %name, "not started: {reason}");
                Arc::new(state::Slot::new(name, None, Status::Refused { reason }))
            }
            (Ok(_), None) => {
                let reason = "its roots were not derived".to_string();
                tracing::error!(server = %name, "not started: {reason}");
                Arc::new(state::Slot::new(name, None, Status::Refused { reason }))
            }
        })
        .collect()
}

/// A server's configured output-rate limit (`sandbox.limits.outputBytesPerSecond`).
fn output_rate(config: &GatewayConfig, name: &str) -> Option<u64> {
    let (_, server) = config.servers.iter().find(|(n, _)| n == name)?;
    match &server.sandbox {
        crate::config::SandboxSetting::Enabled(sb) => sb.limits.as_ref()?.output_bytes_per_second,
        crate::config::SandboxSetting::Disabled => None,
    }
}

/// Creates `path` (mode 0700) when missing; an existing directory is left as the user made it.
/// Returns the canonical path (grants and roots use canonical paths).
pub(super) fn create_private_dir(path: &Path) -> Result<PathBuf, GatewayError> {
    let err = |source| GatewayError::SandboxDir {
        path: path.to_path_buf(),
        cause: source,
    };
    if !path.is_dir() {
        crate::private_dir::create(path).map_err(err)?;
    }
    std::fs::canonicalize(path).map_err(err)
}

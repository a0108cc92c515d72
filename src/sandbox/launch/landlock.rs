//! The Landlock tier rendered and made a command: the private HOME and TMPDIR, the paths that
//! stay read-only, the Landlock rules (`sandbox::landlock::plan`, pure) and their gaps, the
//! ruleset built before fork, the seccomp filter, and the command with its limits attached;
//! the child only calls restrict-self and installs the filter right before exec (`sys`). The
//! same command is also prepared for `sys::spawn` (`Prepared::spawn_unforked`: no copy of this
//! process's memory), which `palisade run` uses.
//!
//! Effects: the scratch directory, the ruleset descriptor, the cgroup (`limits`), the search
//! for write-protected files; nothing is spawned. `scratch_env`, `scratch_cwd` and `sockets`
//! are pure. Never: drop a deny silently (a gap refuses under enforce and is a stated
//! degradation under warn), or run a command this tier cannot restrict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decide::with_gaps;
use super::limits;
use super::prepared::{argv_of, io, Enforcement, LaunchError, Prepared, Unforked};
use super::protect::write_protected;
use super::request::LaunchRequest;
use super::scratch::Scratch;
use crate::config::Backend;
use crate::sandbox::capabilities::Capabilities;
use crate::sandbox::landlock::{self as ll, Net};
use crate::sandbox::{connect_gate, seccomp, sys, NetworkSpec, SandboxSpec};

/// What the Landlock tier never enforces, whatever the configuration (launch log, `check`,
/// docs/security.md).
pub const LANDLOCK_NOT_ENFORCED: &[&str] = &[
    "no PID namespace: host processes are visible in /proc (their command lines; not their \
     environment, memory or descriptors)",
    "no private hostname or IPC namespace",
    "no private /tmp: TMPDIR and HOME are private scratch directories, /tmp itself is closed",
    "the server's child processes are not killed with it when palisade dies abruptly",
];

/// What the Landlock tier does not enforce for a server with a domain allowlist where
/// palisade cannot decide its connects itself (launch log, `check`, docs/security.md).
pub const LANDLOCK_PROXY_NOT_ENFORCED: &str = "network rules name ports, not addresses, and \
     palisade cannot check each connect here: the server may also connect to the egress \
     proxy's port number on any other host (refused under enforce; under warn the allowlist \
     holds by port only)";

/// The Landlock command for `spec`: ruleset built here, restrict-self and seccomp in the
/// child right before exec. `why` says why this tier was chosen (for the launch log).
pub(super) fn prepare(
    spec: &SandboxSpec,
    req: &LaunchRequest,
    enforcement: Enforcement,
    caps: &Capabilities,
    why: &str,
) -> Result<Prepared, LaunchError> {
    let refuse = |reasons: Vec<String>| LaunchError::Refused {
        name: req.name.clone(),
        reasons,
    };
    let Some(abi) = caps.landlock.abi() else {
        // resolve only plans Landlock when the kernel has it; fail closed if that changes.
        return Err(refuse(vec!["Landlock is not available".into()]));
    };
    if req.trace_log.is_some() {
        return Err(LaunchError::Invalid(
            "--trace-denials works under the bwrap backend only; run with --backend bwrap".into(),
        ));
    }
    let scratch = Scratch::create(&req.name)?;
    let (home, tmp) = (scratch.home(), scratch.tmp());
    let mut env = scratch_env(&spec.env, &req.env, &home, &tmp);
    let cwd = scratch_cwd(spec, &req.env, &home);
    let mut read_only = if req.write_protect {
        write_protected(&req.name, spec)
    } else {
        Vec::new()
    };
    read_only.extend(req.deny_write.iter().map(|p| {
        std::fs::canonicalize(p).unwrap_or_else(|_| crate::roots::canon::resolve_existing_prefix(p))
    }));
    let net = net_of(&spec.network);
    // Where palisade decides each connect (`connect_gate`): the channel the child's
    // listener comes back on (palisade's end, the child's).
    let mut gate = None;
    if let Net::Proxy { port } = net {
        // The proxy's endpoint and secret, in the server's environment only.
        match &req.egress_loopback {
            Some(ep) if ep.port == port => env.extend(ep.env()),
            _ => {
                return Err(refuse(vec![
                    "the egress proxy's loopback endpoint is missing for this server".into(),
                ]))
            }
        }
        if caps.connect_mediation && spec.seccomp {
            gate = Some(sys::channel().map_err(|e| io("connect gate channel", e))?);
        }
    }
    let mut plan = ll::plan(
        &ll::Inputs {
            spec,
            read_only: &read_only,
            scratch: &[home.clone(), tmp.clone()],
            net,
        },
        &ll::list_dir,
        &|p: &Path| p.is_dir(),
    );
    for note in &plan.notes {
        tracing::info!(server = %req.name, "landlock: {note}");
    }
    let gaps = plan.gaps.iter().map(ToString::to_string).collect();
    let enforcement = with_gaps(&req.name, req.policy, Backend::Landlock, enforcement, gaps)?;
    // warn: the grants that could not be carved are granted whole, as the reasons say.
    let uncarved = std::mem::take(&mut plan.uncarved);
    plan.rules.extend(uncarved);
    let ruleset = ll::build(&plan, abi).map_err(|e| refuse(vec![e.to_string()]))?;
    let filter = if spec.seccomp {
        Some(
            seccomp::program_with(std::env::consts::ARCH, sockets(net, gate.is_some()))
                .map_err(|e| refuse(vec![e.to_string()]))?,
        )
    } else {
        None
    };
    let mut not_enforced = LANDLOCK_NOT_ENFORCED.to_vec();
    if let Net::Proxy { port } = net {
        if gate.is_some() {
            tracing::info!(server = %req.name, port, "landlock: TCP connect to the egress proxy's loopback endpoint only, each connect checked by palisade");
        } else {
            tracing::info!(server = %req.name, port, "landlock: TCP connect to the egress proxy's loopback port only");
            not_enforced.push(LANDLOCK_PROXY_NOT_ENFORCED);
        }
    }
    tracing::info!(
        server = %req.name,
        abi,
        why,
        "sandboxed by landlock; not enforced by this tier: {}",
        not_enforced.join("; ")
    );
    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(&env)
        .current_dir(&cwd);
    let (attached, limits) = limits::plan(&req.name, &spec.limits);
    let mut held = vec![ruleset];
    let mut notify_to = None;
    if let (Some((ours, theirs)), Net::Proxy { port }) = (gate, net) {
        // The thread waits for the listener from now on; it returns at once when `theirs`
        // closes unsent (the child failed, or is never spawned and this value dropped).
        let endpoint = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
        connect_gate::start(&req.name, ours, endpoint, req.egress_refusals.clone())
            .map_err(|e| io("connect gate thread", e))?;
        notify_to = Some(sys::raw(&theirs));
        held.push(theirs);
    }
    let child = Arc::new(sys::LandlockChild {
        cgroup_joins: limits.cgroup_joins,
        rlimits: limits.rlimits,
        ruleset: sys::raw(&held[0]),
        filter,
        notify_to,
        root: nix::unistd::geteuid().is_root(),
    });
    sys::install_landlock(&mut cmd, child.clone());
    // The same command for `spawn` (`palisade run`): the same program, arguments,
    // environment, directory and child steps.
    let unforked =
        sys::Exec::new(&spec.program, &spec.args, &env, &cwd).map(|exec| Unforked { exec, child });
    Ok(Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv: argv_of(&spec.program, &spec.args),
        held,
        files: Vec::new(),
        cgroup: attached.cgroup,
        task_watch: attached.task_watch,
        unforked,
        scratch: Some(scratch),
    })
}

/// The spec's environment with HOME and TMPDIR moved to the scratch directories, unless the
/// user set them (`asked`: the request's own variables).
fn scratch_env(
    env: &BTreeMap<String, String>,
    asked: &BTreeMap<String, String>,
    home: &Path,
    tmp: &Path,
) -> BTreeMap<String, String> {
    let mut env = env.clone();
    if !asked.contains_key("HOME") {
        env.insert("HOME".into(), home.display().to_string());
    }
    if !asked.contains_key("TMPDIR") {
        env.insert("TMPDIR".into(), tmp.display().to_string());
    }
    env
}

/// The working directory: the scratch HOME where the spec would start in a HOME the user did
/// not set, else the spec's.
fn scratch_cwd(spec: &SandboxSpec, asked: &BTreeMap<String, String>, home: &Path) -> PathBuf {
    if spec.cwd == spec.home && !asked.contains_key("HOME") {
        home.to_path_buf()
    } else {
        spec.cwd.clone()
    }
}

/// The Landlock network of a spec's network: the host's, the proxy's one port, or none.
fn net_of(network: &NetworkSpec) -> Net {
    match network {
        NetworkSpec::Host => Net::Host,
        NetworkSpec::Loopback { port } => Net::Proxy { port: *port },
        // A socket bridge needs a namespace: this tier never gets one (launch refuses first).
        NetworkSpec::None | NetworkSpec::Proxied { .. } => Net::Closed,
    }
}

/// The sockets seccomp allows under Landlock: no internet socket with a closed network,
/// plain TCP with the proxy's (each connect decided by palisade when `mediated`, else by
/// Landlock's port rule alone), any with the host's.
fn sockets(net: Net, mediated: bool) -> seccomp::Sockets {
    let inet = match net {
        Net::Closed => seccomp::Inet::None,
        Net::Proxy { .. } if mediated => seccomp::Inet::Mediated,
        Net::Proxy { .. } => seccomp::Inet::Tcp,
        Net::Host => seccomp::Inet::Any,
    };
    seccomp::Sockets::Landlock { inet }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_tmpdir_move_to_scratch_unless_the_user_set_them() {
        let spec_env: BTreeMap<String, String> =
            [("HOME", "/root"), ("TMPDIR", "/tmp"), ("PATH", "/usr/bin")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let (home, tmp) = (Path::new("/s/home"), Path::new("/s/tmp"));
        let env = scratch_env(&spec_env, &BTreeMap::new(), home, tmp);
        assert_eq!(env["HOME"], "/s/home");
        assert_eq!(env["TMPDIR"], "/s/tmp");
        assert_eq!(env["PATH"], "/usr/bin");
        let asked: BTreeMap<String, String> = [("HOME".to_string(), "/root".to_string())].into();
        let env = scratch_env(&spec_env, &asked, home, tmp);
        assert_eq!(env["HOME"], "/root", "the user's HOME stays");
        assert_eq!(env["TMPDIR"], "/s/tmp");
    }

    #[test]
    fn a_closed_network_allows_no_internet_socket() {
        assert_eq!(
            sockets(Net::Closed, true),
            seccomp::Sockets::Landlock {
                inet: seccomp::Inet::None
            }
        );
        assert_eq!(
            sockets(Net::Host, true),
            seccomp::Sockets::Landlock {
                inet: seccomp::Inet::Any
            }
        );
    }

    #[test]
    fn the_proxy_endpoint_allows_plain_tcp_to_its_port() {
        assert_eq!(
            net_of(&NetworkSpec::Loopback { port: 40000 }),
            Net::Proxy { port: 40000 }
        );
        assert_eq!(
            sockets(Net::Proxy { port: 40000 }, false),
            seccomp::Sockets::Landlock {
                inet: seccomp::Inet::Tcp
            }
        );
        // Where palisade can decide each connect, it does.
        assert_eq!(
            sockets(Net::Proxy { port: 40000 }, true),
            seccomp::Sockets::Landlock {
                inet: seccomp::Inet::Mediated
            }
        );
        assert_eq!(net_of(&NetworkSpec::None), Net::Closed);
        assert_eq!(net_of(&NetworkSpec::Host), Net::Host);
    }
}

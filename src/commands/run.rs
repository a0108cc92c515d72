//! `palisade run`: one command in a sandbox, stdio passed through untouched.
//!
//! Builds a `LaunchRequest` from the flags, lets `sandbox::launch` validate, resolve and
//! render it, then replaces this process with bwrap (or, in warn mode without a usable
//! bwrap, with the command itself): stdin, stdout and stderr are the caller's own, the exit
//! status is the command's, and `--die-with-parent` plus the PID namespace take the whole
//! tree down if bwrap dies. Never writes to stdout.
//!
//! With `--allow-domain` the command needs palisade's egress proxy alive for as long as it
//! runs, so instead of exec'ing, `run` starts bwrap as a child (stdio inherited), serves the
//! proxy in-process, forwards SIGINT/SIGTERM/SIGHUP to the child, exits with the child's
//! status (128+N for a signal), and removes the proxy's socket directory.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::ExitWith;
use crate::config::{Backend, SandboxPolicy};
use crate::sandbox::capabilities::{self, Depth};
use crate::sandbox::launch::{self, Enforcement, Grant, LaunchError, LaunchRequest};
use crate::sandbox::Access;

/// Exit code for bad input (flags, grants, cwd).
pub const EXIT_USAGE: u8 = 2;
/// Exit code when enforce mode refuses to run the command unsandboxed.
pub const EXIT_REFUSED: u8 = 3;
/// Exit code when the command (or bwrap) exists but cannot be executed.
pub const EXIT_CANNOT_EXEC: u8 = 126;
/// Exit code when the command is not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// Run one command (an MCP server or anything else) in a sandbox.
///
/// Exit status: the command's own; 2 for bad input, 3 when enforce mode refuses (no usable
/// bubblewrap), 126 when the command cannot be executed, 127 when it is not found.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Sandbox profile to apply (see `palisade profiles list`); default: matched from the
    /// command, `none` for no profile.
    #[arg(long)]
    pub profile: Option<String>,
    /// Directory of profiles that override the built-in ones.
    #[arg(long, value_name = "DIR")]
    pub profiles_dir: Option<PathBuf>,
    /// Where a profile that keeps state gets its directory (`DIR/<command name>`; default
    /// `$HOME/.local/state/palisade/servers`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Grant read-write access to DIR (repeatable).
    #[arg(long = "rw", value_name = "DIR")]
    pub rw: Vec<std::path::PathBuf>,
    /// Grant read-only access to DIR (repeatable).
    #[arg(long = "ro", value_name = "DIR")]
    pub ro: Vec<std::path::PathBuf>,
    /// Never let the command write or create PATH, even inside a --rw grant (repeatable;
    /// a missing PATH gets an empty read-only placeholder on the host, see docs/security.md).
    #[arg(long = "deny-write", value_name = "PATH")]
    pub deny_write: Vec<std::path::PathBuf>,
    /// Pass NAME (from this environment) or set NAME=VALUE in the sandbox (repeatable).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Working directory inside the sandbox (default: the current directory if granted).
    #[arg(long)]
    pub cwd: Option<std::path::PathBuf>,
    /// Allow HTTP(S) to this domain through the egress proxy (repeatable; `*.example.com`
    /// for subdomains, `host:port` for another port than 80/443).
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// Refuse this domain even when an --allow-domain entry matches (repeatable).
    #[arg(long = "deny-domain", value_name = "DOMAIN")]
    pub deny_domain: Vec<String>,
    /// Test knob: an /etc/hosts-style file the egress proxy resolves names from (see
    /// docs/network.md).
    #[arg(long, hide = true, value_name = "FILE")]
    pub egress_hosts_file: Option<std::path::PathBuf>,
    /// enforce: refuse when the sandbox cannot be set up; warn: run unsandboxed, loudly.
    #[arg(long, value_enum, default_value = "enforce")]
    pub sandbox_policy: crate::config::SandboxPolicy,
    /// Sandbox backend: auto (bubblewrap where it can create its namespaces, else Landlock),
    /// bwrap, landlock or srt.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: crate::config::Backend,
    /// Learn aid: run the command under strace and, when it ends, report on stderr the paths
    /// and addresses the sandbox refused it (to write a profile for an unknown server).
    #[arg(long)]
    pub trace_denials: bool,
    /// Permit read-write grants of / or a home directory.
    #[arg(long)]
    pub allow_broad: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    // Package runners (`npx -y`, `uvx`) become their cached entry point; `docker run` is
    // refused (enforce) or runs uncontained (warn). See crate::packages.
    let profile = crate::packages::hooks::RunProfile {
        name: args.profile.as_deref(),
        dir: args.profiles_dir.as_deref(),
    };
    let decision = crate::packages::hooks::for_run(&mut args.command, args.sandbox_policy, profile)
        .map_err(package_exit)?;
    let mut req = request(&args)?;
    if let crate::packages::hooks::RunDecision::Uncontained(_) = decision {
        req.sandboxed = false;
    }
    // The strace log lives only as long as this run (removed on drop).
    let trace_file = if args.trace_denials {
        let f = tempfile::Builder::new()
            .prefix("palisade-trace-")
            .tempfile()
            .map_err(|e| ExitWith::new(1, format!("cannot create the trace log: {e}")))?;
        req.trace_log = Some(f.path().to_path_buf());
        Some(f)
    } else {
        None
    };
    // A trial sandbox (a few ms) wherever bubblewrap may be used: whether namespaces work is
    // known only by trying. Where they do not (a container, a nested sandbox) `auto` picks
    // Landlock, and enforce with `--backend bwrap` refuses with the cause and fix rather than
    // leave bubblewrap's raw error and exit 1; warn falls back to running unsandboxed only
    // when the sandbox really cannot start. In enforce mode a pass recorded minutes ago in
    // this same context stands in for the trial (`sandbox::trial_record`); warn mode, which
    // may run the command unsandboxed on a failure, always tries. Landlock needs no trial,
    // and an explicit Landlock backend nothing of bubblewrap, socat, ripgrep or srt: none is
    // looked up.
    let depth = match (req.policy, req.backend) {
        (_, Backend::Landlock) => Depth::LandlockOnly,
        (SandboxPolicy::Enforce, _) => Depth::Trial,
        (SandboxPolicy::Warn, _) => Depth::Full,
    };
    let mut caps = capabilities::probe(depth);
    if crate::gateway::network::wants_proxy(&req) {
        if depth == Depth::LandlockOnly {
            caps.connect_mediation = capabilities::probe_connect_mediation();
        }
        return run_proxied(req, &caps, args.egress_hosts_file.as_deref());
    }
    let prepared = launch::prepare_with(&req, &caps).map_err(exit_for)?;
    warn_degraded(&req, &prepared.enforcement);
    tracing::debug!(argv = ?prepared.argv, enforcement = ?prepared.enforcement, "exec");
    if let Some(log) = trace_file {
        if !prepared.enforcement.is_sandboxed() {
            return Err(ExitWith::new(
                EXIT_USAGE,
                "--trace-denials reports what the sandbox refuses; this run would not be fully sandboxed",
            )
            .into());
        }
        return traced(&req, prepared, log.path());
    }
    if prepared.owns_files() {
        // The Landlock tier's private HOME/TMPDIR must be removed afterwards: spawn and
        // wait instead of exec'ing. One child to wait for and three signals to forward need
        // no async runtime (building one was part of the Landlock tier's launch cost,
        // docs/benchmarks.md): `sigwait` and `waitpid`.
        return Ok(ExitCode::from(super::supervise::spawn_and_wait(prepared)?));
    }
    let (mut cmd, _, held) = prepared.into_std();
    let err = cmd.exec();
    drop(held);
    Err(ExitWith::new(
        EXIT_CANNOT_EXEC,
        format!(
            "cannot execute {}: {err}",
            cmd.get_program().to_string_lossy()
        ),
    )
    .into())
}

fn package_exit(e: crate::packages::hooks::RunHookError) -> ExitWith {
    match e {
        crate::packages::hooks::RunHookError::Refused { .. } => {
            ExitWith::new(EXIT_REFUSED, e.to_string())
        }
        crate::packages::hooks::RunHookError::Package(_) => ExitWith::new(1, e.to_string()),
        crate::packages::hooks::RunHookError::NoPackage(_) => {
            ExitWith::new(EXIT_USAGE, e.to_string())
        }
    }
}

fn exit_for(e: LaunchError) -> ExitWith {
    match e {
        LaunchError::Refused { .. } => ExitWith::new(EXIT_REFUSED, e.to_string()),
        LaunchError::Invalid(_) => ExitWith::new(EXIT_USAGE, e.to_string()),
        LaunchError::Command(
            crate::sandbox::closure::ClosureError::NotFound { .. }
            | crate::sandbox::closure::ClosureError::Missing(_),
        ) => ExitWith::new(EXIT_NOT_FOUND, e.to_string()),
        LaunchError::Command(_) => ExitWith::new(EXIT_CANNOT_EXEC, e.to_string()),
        LaunchError::Io { .. } => ExitWith::new(1, e.to_string()),
    }
}

fn warn_degraded(req: &LaunchRequest, enforcement: &Enforcement) {
    if let Enforcement::Degraded { backend, reasons } = enforcement {
        let how = if backend.is_some() {
            "in a WEAKER sandbox"
        } else {
            "WITHOUT ANY SANDBOX"
        };
        // Printed unconditionally (not only through the log filter): the user chose warn
        // mode and must see what it cost, whatever the log level.
        eprintln!(
            "palisade: WARNING: running `{}` {how} (sandbox policy is warn):",
            req.command
        );
        for r in reasons {
            eprintln!("palisade:   - {r}");
        }
    }
}

/// `run` with an allowlist: the proxy lives in this process, the sandbox is its child.
fn run_proxied(
    mut req: LaunchRequest,
    caps: &crate::sandbox::capabilities::Capabilities,
    hosts_file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    use crate::egress::{EgressError, Resolver};
    use crate::sandbox::launch::EgressSocket;
    let rt = super::runtime()?;
    let outcome = rt.block_on(async {
        let resolver = match hosts_file {
            None => Resolver::system(),
            Some(p) => {
                crate::egress::hosts::resolver_from_file(p)
                    .map_err(|e| ExitWith::new(EXIT_USAGE, e.to_string()))?
                    .0
            }
        };
        let mut egress = match crate::gateway::network::start_in_temp(resolver) {
            Ok(e) => Some(e),
            Err(why) => {
                req.egress = EgressSocket::Failed(why.to_string());
                None
            }
        };
        if let (Some(e), crate::config::NetworkConfig::Allowlist(lists)) = (&egress, &req.network) {
            req.egress = match e.proxy.add_server(&req.name, lists) {
                Ok(socket) => EgressSocket::Ready(socket),
                Err(err @ EgressError::Config { .. }) => {
                    return Err(ExitWith::new(EXIT_USAGE, err.to_string()))
                }
                Err(err) => EgressSocket::Failed(err.to_string()),
            };
            crate::gateway::network::open_loopback(&e.proxy, &req.name.clone(), &mut req, caps);
        }
        let prepared = launch::prepare_with(&req, caps).map_err(exit_for)?;
        warn_degraded(&req, &prepared.enforcement);
        tracing::debug!(argv = ?prepared.argv, enforcement = ?prepared.enforcement, "spawn");
        let code = supervise(prepared).await;
        if let Some(e) = egress.as_mut() {
            e.shutdown();
        }
        code
    });
    // Tokio may hold stdin on a blocking thread; do not wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(ExitCode::from(outcome?))
}

/// Spawns the prepared command with inherited stdio, forwards termination signals to it,
/// and returns its exit code (128+N when a signal ended it).
async fn supervise(mut prepared: launch::Prepared) -> Result<u8, ExitWith> {
    use nix::sys::signal::{kill, Signal};
    use std::os::unix::process::ExitStatusExt;
    use tokio::signal::unix::{signal, SignalKind};
    let mut child =
        prepared.command.kill_on_drop(true).spawn().map_err(|e| {
            ExitWith::new(EXIT_CANNOT_EXEC, format!("cannot start the sandbox: {e}"))
        })?;
    let pid = child.id().map(|p| nix::unistd::Pid::from_raw(p as i32));
    let mk = |k: SignalKind| {
        signal(k).map_err(|e| ExitWith::new(1, format!("cannot install signal handlers: {e}")))
    };
    let (mut int, mut term, mut hup) = (
        mk(SignalKind::interrupt())?,
        mk(SignalKind::terminate())?,
        mk(SignalKind::hangup())?,
    );
    let status = loop {
        let sig = tokio::select! {
            s = child.wait() => break s,
            _ = int.recv() => Signal::SIGINT,
            _ = term.recv() => Signal::SIGTERM,
            _ = hup.recv() => Signal::SIGHUP,
        };
        if let Some(pid) = pid {
            // bwrap passes it on to the sandbox's PID 1 and ends with it.
            let _ = kill(pid, sig);
        }
    };
    drop(prepared);
    let status =
        status.map_err(|e| ExitWith::new(1, format!("waiting for the sandbox failed: {e}")))?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(s)) => 128u8.saturating_add(u8::try_from(s).unwrap_or(0)),
        _ => 1,
    })
}

/// Runs the traced command as a child (stdio inherited), then reports its denials on stderr.
fn traced(req: &LaunchRequest, prepared: launch::Prepared, log: &Path) -> anyhow::Result<ExitCode> {
    let program = crate::sandbox::closure::resolve_program(
        &req.command,
        &crate::sandbox::closure::Lookup {
            path_var: &std::env::var("PATH").unwrap_or_default(),
            cwd: &std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            home: None,
            grants: None,
        },
    )
    .map_err(|e| ExitWith::new(EXIT_NOT_FOUND, e.to_string()))?;
    // Supervised rather than waited for: a signal to palisade must reach strace (which
    // then detaches; bwrap, whose parent it is, dies with it and takes the sandbox along),
    // and this process must live on to report and remove the trace log.
    let code = super::supervise::spawn_and_wait(prepared)?;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let found = crate::sandbox::trace::denials(&text, &program, |p| p.exists());
    eprintln!(
        "palisade: trace-denials: {} refused by the sandbox during this run of `{}`:",
        found.len(),
        req.command
    );
    for d in &found {
        eprintln!(
            "palisade:   {:<8} {}  ({}, x{})",
            d.kind, d.target, d.how, d.count
        );
    }
    eprintln!(
        "palisade: grant what the server really needs with --ro/--rw or a profile's \"read\"/\"state\"; \
         connects list addresses only (DNS cannot leave the sandbox): give the domains in sandbox.network.allowedDomains"
    );
    Ok(ExitCode::from(code))
}

/// Turns the flags into a launch request; every problem is a one-line usage error.
fn request(args: &RunArgs) -> Result<LaunchRequest, ExitWith> {
    let usage = |m: String| ExitWith::new(EXIT_USAGE, m);
    if args.allow_domain.is_empty() && !args.deny_domain.is_empty() {
        return Err(usage(
            "--deny-domain without --allow-domain: the command has no network to restrict".into(),
        ));
    }
    let network = if args.allow_domain.is_empty() {
        crate::config::NetworkConfig::None
    } else {
        crate::config::NetworkConfig::Allowlist(crate::config::DomainLists {
            allowed_domains: args.allow_domain.clone(),
            denied_domains: args.deny_domain.clone(),
        })
    };
    let Some((command, rest)) = args.command.split_first() else {
        return Err(usage("no command given: put it after `--`".into()));
    };
    let here = std::env::current_dir()
        .map_err(|e| ExitWith::new(1, format!("cannot read the current directory: {e}")))?;
    let abs = |p: &Path| -> PathBuf { crate::roots::canon::lexical_normalize(&here.join(p)) };
    let mut grants = Vec::new();
    for (paths, access) in [(&args.ro, Access::Ro), (&args.rw, Access::Rw)] {
        grants.extend(paths.iter().map(|p| Grant {
            path: abs(p),
            access,
        }));
    }
    let mut env = BTreeMap::new();
    for item in &args.env {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => {
                let v = std::env::var(item).map_err(|_| {
                    usage(format!(
                        "--env {item}: {item} is not set in palisade's environment; give --env {item}=VALUE"
                    ))
                })?;
                (item.clone(), v)
            }
        };
        if k.is_empty() {
            return Err(usage(format!("--env {item}: empty variable name")));
        }
        env.insert(k, v);
    }
    // The working directory: the one given, or the current one when a grant shows it
    // (otherwise the sandbox's private HOME).
    let cwd = match &args.cwd {
        Some(c) => Some(abs(c)),
        // Resolved only when a grant could show it (one `readlink` per component saved on
        // every grant-less launch).
        None if grants.is_empty() => None,
        None => {
            let real = std::fs::canonicalize(&here).unwrap_or(here.clone());
            grants
                .iter()
                .any(|g| std::fs::canonicalize(&g.path).is_ok_and(|gp| real.starts_with(gp)))
                .then_some(real)
        }
    };
    // The name keys the state directory: the profile's name when one applies (`node` or
    // `uvx` would make every server share one), else the command's file name. A bad
    // profile or directory is reported by the launcher, with its fix.
    let profile_name = crate::profiles::Catalog::load_for(
        args.profiles_dir.as_deref(),
        args.profile.as_deref(),
        command,
        rest,
    )
    .ok()
    .and_then(|c| {
        crate::profiles::select(&c, args.profile.as_deref(), command, rest)
            .ok()
            .flatten()
    })
    .map(|s| s.profile.name);
    Ok(LaunchRequest {
        name: profile_name.unwrap_or_else(|| {
            Path::new(command)
                .file_name()
                .map_or_else(|| command.clone(), |n| n.to_string_lossy().into_owned())
        }),
        command: command.clone(),
        args: rest.to_vec(),
        env,
        cwd,
        grants,
        deny_write: args
            .deny_write
            .iter()
            .map(|p| crate::roots::canon::resolve_existing_prefix(&abs(p)))
            .collect(),
        policy: args.sandbox_policy,
        backend: args.backend,
        profile: args.profile.clone(),
        profiles_dir: args.profiles_dir.as_deref().map(abs),
        state_root: args.state_dir.as_deref().map(abs),
        allow_broad: args.allow_broad,
        network,
        // `run` execs bwrap in its own place, so nothing would remain to remove a per-server
        // cgroup afterwards: the rlimit fallbacks only (see sandbox::spec).
        limits: crate::sandbox::ResourceLimits {
            cgroup: false,
            ..Default::default()
        },
        ..LaunchRequest::default()
    })
}

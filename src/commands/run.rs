//! `palisade run`: one command in a sandbox, stdio passed through untouched.
//!
//! Builds a `LaunchRequest` from the flags, lets `sandbox::launch` validate, resolve and
//! render it, then replaces this process with bwrap (or, in warn mode without a usable
//! bwrap, with the command itself): stdin, stdout and stderr are the caller's own, the exit
//! status is the command's, and `--die-with-parent` plus the PID namespace take the whole
//! tree down if bwrap dies. Never writes to stdout.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::ExitWith;
use crate::config::SandboxPolicy;
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
    /// Pass NAME (from this environment) or set NAME=VALUE in the sandbox (repeatable).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Working directory inside the sandbox (default: the current directory if granted).
    #[arg(long)]
    pub cwd: Option<std::path::PathBuf>,
    /// Allow HTTP(S) to this domain through the egress proxy (repeatable).
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// enforce: refuse when the sandbox cannot be set up; warn: run unsandboxed, loudly.
    #[arg(long, value_enum, default_value = "enforce")]
    pub sandbox_policy: crate::config::SandboxPolicy,
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

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut req = request(&args)?;
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
    // enforce: a quick probe (files and `bwrap --version`); if namespaces fail anyway, bwrap
    // itself refuses before the command starts. warn: a full probe, because falling back
    // to running unsandboxed must only happen when the sandbox really cannot start.
    let depth = match req.policy {
        SandboxPolicy::Enforce => Depth::Quick,
        SandboxPolicy::Warn => Depth::Full,
    };
    let caps = capabilities::probe(depth);
    let prepared = launch::prepare_with(&req, &caps).map_err(|e| match e {
        LaunchError::Refused { .. } => ExitWith::new(EXIT_REFUSED, e.to_string()),
        LaunchError::Invalid(_) => ExitWith::new(EXIT_USAGE, e.to_string()),
        LaunchError::Command(crate::sandbox::closure::ClosureError::NotFound { .. }) => {
            ExitWith::new(EXIT_NOT_FOUND, e.to_string())
        }
        LaunchError::Command(_) => ExitWith::new(EXIT_CANNOT_EXEC, e.to_string()),
        LaunchError::Io { .. } => ExitWith::new(1, e.to_string()),
    })?;
    if let Enforcement::Degraded { backend, reasons } = &prepared.enforcement {
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

/// Runs the traced command as a child (stdio inherited), then reports its denials on stderr.
fn traced(req: &LaunchRequest, prepared: launch::Prepared, log: &Path) -> anyhow::Result<ExitCode> {
    let program = crate::sandbox::closure::resolve_program(
        &req.command,
        &crate::sandbox::closure::Lookup {
            path_var: &std::env::var("PATH").unwrap_or_default(),
            cwd: &std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            home: None,
        },
    )
    .map_err(|e| ExitWith::new(EXIT_NOT_FOUND, e.to_string()))?;
    let (mut cmd, _, held) = prepared.into_std();
    let status = cmd
        .status()
        .map_err(|e| ExitWith::new(EXIT_CANNOT_EXEC, format!("cannot run strace: {e}")))?;
    drop(held);
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
    Ok(status
        .code()
        .map_or(ExitCode::from(1), |c| ExitCode::from(c as u8)))
}

/// Turns the flags into a launch request; every problem is a one-line usage error.
fn request(args: &RunArgs) -> Result<LaunchRequest, ExitWith> {
    let usage = |m: String| ExitWith::new(EXIT_USAGE, m);
    if !args.allow_domain.is_empty() {
        return Err(usage(
            "--allow-domain is not supported yet (the egress proxy comes with the network work); \
             without it the command gets loopback only"
                .into(),
        ));
    }
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
    let profile_name = crate::profiles::Catalog::load(args.profiles_dir.as_deref())
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
        policy: args.sandbox_policy,
        profile: args.profile.clone(),
        profiles_dir: args.profiles_dir.as_deref().map(abs),
        state_root: args.state_dir.as_deref().map(abs),
        allow_broad: args.allow_broad,
        ..LaunchRequest::default()
    })
}

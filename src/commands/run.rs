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
    /// Sandbox profile to apply (see `palisade profiles list`).
    #[arg(long)]
    pub profile: Option<String>,
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
    /// Permit read-write grants of / or a home directory.
    #[arg(long)]
    pub allow_broad: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let req = request(&args)?;
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
    if let Some(p) = &args.profile {
        return Err(usage(format!(
            "--profile {p}: profiles are not supported by `run` yet; grant directories with --ro/--rw"
        )));
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
    Ok(LaunchRequest {
        name: Path::new(command)
            .file_name()
            .map_or_else(|| command.clone(), |n| n.to_string_lossy().into_owned()),
        command: command.clone(),
        args: rest.to_vec(),
        env,
        cwd,
        grants,
        policy: args.sandbox_policy,
        allow_broad: args.allow_broad,
        // `run` execs bwrap in its own place, so nothing would remain to remove a per-server
        // cgroup afterwards: rlimits only (see sandbox::cgroup).
        limits: crate::sandbox::ResourceLimits {
            memory: None,
            pids: None,
            ..Default::default()
        },
        ..LaunchRequest::default()
    })
}

//! `palisade run`: one command in a sandbox, stdio passed through untouched.

use std::process::ExitCode;

use clap::Args;

/// Run one command (an MCP server or anything else) in a sandbox.
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

pub fn run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade run` is not implemented yet")
}

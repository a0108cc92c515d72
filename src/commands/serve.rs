//! `palisade serve`: the gateway: one MCP server on stdio in front of every configured server.

use std::process::ExitCode;

use clap::Args;

/// Serve MCP on stdio, aggregating every configured server, each in its own sandbox.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Server configuration (`{"mcpServers": {...}}`).
    #[arg(long)]
    pub config: std::path::PathBuf,
    /// compiled-policy.json (default: the built-in safe policy).
    #[arg(long)]
    pub policy: Option<std::path::PathBuf>,
    /// tool-annotations.json.
    #[arg(long)]
    pub annotations: Option<std::path::PathBuf>,
    /// dynamic-lists.json.
    #[arg(long)]
    pub lists: Option<std::path::PathBuf>,
    /// The session sandbox directory (writable by every server).
    #[arg(long)]
    pub sandbox_dir: Option<std::path::PathBuf>,
    /// enforce: refuse servers that cannot be contained; warn: run them anyway, loudly.
    #[arg(long, value_enum)]
    pub sandbox_policy: Option<crate::config::SandboxPolicy>,
    /// Sandbox backend for every server without its own.
    #[arg(long, value_enum)]
    pub backend: Option<crate::config::Backend>,
    /// Append-only JSONL audit log.
    #[arg(long)]
    pub audit_log: Option<std::path::PathBuf>,
    /// Who decides escalations: deny, dir:PATH, tty, elicit, exec:CMD, auto (comma-chained).
    #[arg(long)]
    pub escalation: Option<String>,
    /// Seconds to wait for an approver (5-3600).
    #[arg(long)]
    pub escalation_timeout: Option<u64>,
}

pub fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade serve` is not implemented yet")
}

//! `palisade audit`: verify an audit log.

use std::process::ExitCode;

use clap::Args;

/// Work with audit logs.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain of an audit log: detects edited, removed or reordered records.
    Verify {
        /// The JSONL audit log.
        file: std::path::PathBuf,
    },
}

pub fn run(_args: AuditArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade audit` is not implemented yet")
}

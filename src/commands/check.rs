//! `palisade check`: what this machine can enforce, and what would happen to each server.

use std::process::ExitCode;

use clap::Args;

/// Probe the machine and report what it can enforce.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also report what would happen to each server of this configuration.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade check` is not implemented yet")
}

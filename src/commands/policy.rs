//! `palisade policy`: evaluate one call, print derived roots, run a scenario file.

use std::process::ExitCode;

use clap::Args;

/// Inspect and test policies.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Decide one call and explain the decision.
    Explain,
    /// Print the roots a policy grants each server.
    Roots,
    /// Run an IronCurtain test-scenarios.json and report agreement.
    Test,
}

pub fn run(_args: PolicyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade policy` is not implemented yet")
}

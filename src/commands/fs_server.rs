//! `palisade fs-server`: the built-in filesystem MCP server.

use std::process::ExitCode;

use clap::Args;

/// Serve the built-in filesystem MCP server on stdio.
#[derive(Debug, Args)]
pub struct FsServerArgs {
    /// A directory the server may operate in (used when the client offers no roots).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<std::path::PathBuf>,
}

pub fn run(_args: FsServerArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade fs-server` is not implemented yet")
}

//! `palisade demo`: the main job end to end on an embedded default, printed for a person.

use std::process::ExitCode;

use clap::Args;

/// Run the gateway on an embedded default and drive it with a real MCP client.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// enforce (default when bubblewrap works) or warn.
    #[arg(long, value_enum)]
    pub sandbox_policy: Option<crate::config::SandboxPolicy>,
}

pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`palisade demo` is not implemented yet")
}

//! `palisade demo`: the main job end to end on an embedded default, printed for a person.
//! The transcript goes to stdout (this command is not an MCP channel); logs to stderr.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::demo::{DemoOptions, StepResult};

/// Run the gateway on an embedded default and drive it with a real MCP client.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// enforce (default when bubblewrap works) or warn.
    #[arg(long, value_enum)]
    pub sandbox_policy: Option<crate::config::SandboxPolicy>,
    /// Seconds allowed for each request (the gateway's start-up included).
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let palisade = std::env::current_exe().context("cannot find the palisade executable")?;
    let opts = DemoOptions {
        palisade,
        sandbox_policy: args.sandbox_policy,
        timeout: Duration::from_secs(args.timeout_secs),
    };
    let report = super::runtime()?.block_on(async move {
        tokio::select! {
            r = crate::demo::run(opts) => r,
            // Dropping the demo's future kills the gateway (kill_on_drop) and removes the
            // workspace (TempDir), so an interrupted demo leaves nothing behind.
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    })?;
    let warnings = report
        .steps
        .iter()
        .filter(|(_, r)| matches!(r, StepResult::Warn(_)))
        .count();
    if report.passed() {
        if warnings == 0 {
            println!("\nResult: everything behaved as designed.");
        } else {
            println!("\nResult: behaved as designed, with {warnings} warning(s) above.");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        let failed: Vec<&str> = report
            .steps
            .iter()
            .filter(|(_, r)| matches!(r, StepResult::Fail(_)))
            .map(|(t, _)| t.as_str())
            .collect();
        println!("\nResult: NOT as designed; failed: {}.", failed.join("; "));
        Ok(ExitCode::from(1))
    }
}

//! `palisade audit`: verify an audit log's hash chain.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::audit::verify;

/// Work with audit logs.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain of an audit log: detects edited, removed or reordered records.
    /// Exits 1 and names each bad line when the chain is broken.
    Verify {
        /// The JSONL audit log.
        file: std::path::PathBuf,
    },
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AuditCommand::Verify { file } => {
            let f = std::fs::File::open(&file)
                .with_context(|| format!("opening {}", file.display()))?;
            let report = verify::verify(std::io::BufReader::new(f))
                .with_context(|| format!("reading {}", file.display()))?;
            for p in &report.problems {
                println!("{}:{}: {}", file.display(), p.line, p.message);
            }
            if report.problems.is_empty() {
                println!(
                    "{}: {} records, chain intact; last seq {} hash {}",
                    file.display(),
                    report.records,
                    report.last.seq,
                    report.last.hash
                );
                Ok(ExitCode::SUCCESS)
            } else {
                println!(
                    "{}: chain BROKEN ({} problem(s) in {} records)",
                    file.display(),
                    report.problems.len(),
                    report.records
                );
                Ok(ExitCode::from(1))
            }
        }
    }
}

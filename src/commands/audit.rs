//! `palisade audit`: verify an audit log's hash chain.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::audit::{anchor, verify};

/// Work with audit logs.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain of an audit log: detects edited, removed or reordered records,
    /// and, against the head file next to the log (`<log>.head`), records dropped and the
    /// rest re-sealed or cut off the end. Exits 1 and names each problem.
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
            let head = anchor::head_path(&file);
            let anchored = anchor::read(&head)
                .with_context(|| format!("reading the head file {}", head.display()))?;
            let unanchored = match &anchored {
                Some(a) => anchor::disagreement(&report.last, a),
                None => {
                    println!(
                        "{}: no head file ({}): records cut off the end or re-sealed cannot \
                         be detected",
                        file.display(),
                        head.display()
                    );
                    None
                }
            };
            if let Some(detail) = &unanchored {
                println!("{}: {detail}", file.display());
            }
            if report.problems.is_empty() && unanchored.is_none() {
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
                    report.problems.len() + usize::from(unanchored.is_some()),
                    report.records
                );
                Ok(ExitCode::from(1))
            }
        }
    }
}

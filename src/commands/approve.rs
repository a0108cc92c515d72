//! `palisade approve --dir PATH`: the human side of file-IPC escalations, for a second
//! terminal. Lists pending requests and asks about each, or answers all at once; `a` (or
//! `--remember`) approves and remembers the scope a request offers. This command talks to a
//! person, so it prints on stdout.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::approval::{
    describe_request, terminal_safe, write_response_remembering, PendingRequest,
};

/// Answer pending escalations written by `palisade serve --escalation dir:PATH`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The approval directory given to `--escalation dir:PATH`.
    #[arg(long)]
    pub dir: PathBuf,
    /// Approve every pending request without asking.
    #[arg(long, conflicts_with = "deny_all")]
    pub all: bool,
    /// Deny every pending request without asking.
    #[arg(long)]
    pub deny_all: bool,
    /// Only list pending requests.
    #[arg(long, conflicts_with_all = ["all", "deny_all"])]
    pub list: bool,
    /// With each approval, also remember the scope the request offers (`rememberScope`: same
    /// server and tool, same directories or domains) for the rest of the gateway's session.
    /// Interactively, answering `a` does the same for one request.
    #[arg(long, conflicts_with_all = ["deny_all", "list"])]
    pub remember: bool,
}

pub fn run(args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let pending = PendingRequest::list(&args.dir)
        .with_context(|| format!("cannot read approval directory {}", args.dir.display()))?;
    if pending.is_empty() {
        println!("no pending requests in {}", args.dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    for item in pending {
        let p = match item {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "palisade: skipping unreadable request {}",
                    terminal_safe(&e.to_string())
                );
                continue;
            }
        };
        let r = &p.request;
        // Everything in a request file was written by the gateway from what an agent and a
        // server chose: shown with every terminal-active character escaped.
        print!(
            "\n{}\n{}",
            terminal_safe(&r.escalation_id),
            describe_request(r)
        );
        let offered = r.remember_scope.as_ref();
        let (approved, remember) = if args.list {
            continue;
        } else if args.all {
            (true, args.remember)
        } else if args.deny_all {
            (false, false)
        } else {
            if offered.is_some() {
                print!("Approve? (y once, a remember) [y/N] ");
            } else {
                print!("Approve? [y/N] ");
            }
            out.flush()?;
            let answer = lines.next().transpose()?.unwrap_or_default();
            match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => (true, args.remember),
                "a" | "always" if offered.is_some() => (true, true),
                _ => (false, false),
            }
        };
        // Remembering needs a scope the gateway offered; without one the approval covers
        // this call only, and the person is told so.
        let remember = remember && offered.is_some();
        if args.remember && approved && offered.is_none() {
            println!("  (nothing to remember: this request offers no scope)");
        }
        write_response_remembering(&args.dir, &r.escalation_id, approved, remember).with_context(
            || {
                format!(
                    "cannot write the response for {}",
                    terminal_safe(&r.escalation_id)
                )
            },
        )?;
        println!(
            "  -> {}",
            match (approved, remember) {
                (true, true) => "approved and remembered for this session",
                (true, false) => "approved",
                _ => "denied",
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

//! `palisade pins`: review and accept the tool changes a gateway held back (`--pins`).
//!
//! `diff` shows every pending change as a diff against the approved definition, with flags on
//! what looks addressed to the model; `approve` accepts one tool, a server's, or all. A
//! running gateway reads the file again at its next catalog rebuild or call to a held tool.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::pins::{self, diff};

/// Review and accept tool definitions held back by pinning.
#[derive(Debug, Args)]
pub struct PinsArgs {
    #[command(subcommand)]
    pub command: PinsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PinsCommand {
    /// Show each held-back change: what changed in the description and the schema, and what
    /// looks suspicious. Exits 1 when changes are pending.
    Diff {
        /// The pins file.
        file: PathBuf,
    },
    /// Accept the pending definition of SERVER's TOOL (or, with --all, every pending one,
    /// of SERVER when given).
    Approve {
        /// The pins file.
        file: PathBuf,
        server: Option<String>,
        tool: Option<String>,
        #[arg(long)]
        all: bool,
    },
}

pub fn run(args: PinsArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PinsCommand::Diff { file } => show(&file),
        PinsCommand::Approve {
            file,
            server,
            tool,
            all,
        } => approve(&file, server, tool, all),
    }
}

fn show(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let file = pins::file::load(path)?;
    let pending = file.pending();
    if pending.is_empty() {
        println!("{}: no pending changes", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    for (server, tool) in &pending {
        let Some(sp) = file.servers.get(server) else {
            continue;
        };
        let Some(p) = sp.pending.get(tool) else {
            continue;
        };
        let old = sp.tools.get(tool).map(|t| &t.definition);
        let kind = match p.kind {
            pins::ChangeKind::Changed => "CHANGED since it was approved",
            pins::ChangeKind::Added => "ADDED after the server was pinned",
            pins::ChangeKind::New => "NEW server, not yet approved",
        };
        println!(
            "== {} / {}: {kind} (seen {})",
            diff::printable(server),
            diff::printable(tool),
            p.seen_at
        );
        for line in diff::render(old, &p.definition) {
            println!("{}", diff::printable(&line));
        }
        let others: Vec<String> = file
            .servers
            .values()
            .flat_map(|s| s.tools.keys().cloned())
            .filter(|t| t != tool)
            .collect();
        let text = p.definition["description"].as_str().unwrap_or_default();
        for flag in diff::suspicious(text, &others) {
            println!("   FLAG: {}", diff::printable(&flag));
        }
        println!(
            "   accept: palisade pins approve {} {} {}\n",
            path.display(),
            diff::printable(server),
            diff::printable(tool)
        );
    }
    println!("{} pending change(s)", pending.len());
    Ok(ExitCode::from(1))
}

fn approve(
    path: &std::path::Path,
    server: Option<String>,
    tool: Option<String>,
    all: bool,
) -> anyhow::Result<ExitCode> {
    let at = crate::audit::now_rfc3339();
    let who = format!("pins approve (uid {})", nix::unistd::getuid());
    let accepted = pins::file::update(path, |f| {
        let chosen: Vec<(String, String)> = f
            .pending()
            .into_iter()
            .filter(|(s, t)| match (&server, &tool, all) {
                (Some(sv), Some(tl), _) => s == sv && t == tl,
                (Some(sv), None, true) => s == sv,
                (None, None, true) => true,
                _ => false,
            })
            .collect();
        for (s, t) in &chosen {
            f.approve(s, t, &who, &at);
        }
        (!chosen.is_empty(), chosen)
    })
    .with_context(|| format!("approving in {}", path.display()))?;
    if accepted.is_empty() {
        let what = match (&server, &tool, all) {
            (Some(s), Some(t), _) => format!("{s} / {t}"),
            (_, _, true) => "anything".into(),
            _ => anyhow::bail!("name SERVER TOOL, or use --all (optionally with SERVER)"),
        };
        eprintln!("palisade: nothing pending for {what} in {}", path.display());
        return Ok(ExitCode::from(1));
    }
    for (s, t) in accepted {
        println!("approved {} / {}", diff::printable(&s), diff::printable(&t));
    }
    Ok(ExitCode::SUCCESS)
}

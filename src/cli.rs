//! The command line: clap definitions and dispatch. Thin: each command's work lives in its
//! module; this file parses flags, sets up logging and maps outcomes to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

const ABOUT: &str = "Put every MCP server in its own OS sandbox, behind one policy proxy";
/// `run`'s one-line help (in both command trees below).
const RUN_ABOUT: &str =
    "Run one command in a sandbox: the drop-in wrapper for an existing client config";

#[derive(Debug, Parser)]
#[command(name = "palisade", version, about = ABOUT, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub globals: Globals,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command takes.
#[derive(Debug, clap::Args)]
pub struct Globals {
    /// Log level for stderr (overridden by RUST_LOG). At the default, a normal start and a
    /// normal call print nothing; what needs attention (warn mode, a degraded sandbox, a
    /// restart) still does.
    #[arg(
        long,
        global = true,
        default_value = "warn",
        env = "PALISADE_LOG_LEVEL"
    )]
    pub log_level: String,
    /// Write logs to this file instead of stderr.
    #[arg(long, global = true)]
    pub log_file: Option<std::path::PathBuf>,
}

/// The command line of `palisade run ...` alone: the same `palisade` with `run` as its only
/// command. Building clap's tree for every command costs more than anything else `run`
/// does before its sandbox work (docs/benchmarks.md, issue 15); `run`'s own options, help
/// and errors are the same (a unit test compares them with the whole tree's).
#[derive(Debug, Parser)]
#[command(name = "palisade", version, about = ABOUT, long_about = None)]
struct RunCli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: RunOnly,
}

#[derive(Debug, Subcommand)]
enum RunOnly {
    #[command(about = RUN_ABOUT, long_about = None)]
    Run(commands::run::RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway on an embedded default and show what it does (start here).
    Demo(commands::demo::DemoArgs),
    /// Serve MCP on stdio in front of every configured server, each in its own sandbox.
    Serve(Box<commands::serve::ServeArgs>),
    #[command(about = RUN_ABOUT, long_about = None)]
    Run(commands::run::RunArgs),
    /// Fetch the packages `npx -y`/`uvx` servers run into palisade's cache (and lock them).
    Prefetch(commands::prefetch::PrefetchArgs),
    /// Show what this machine can enforce and what would happen to each configured server.
    Check(commands::check::CheckArgs),
    /// Evaluate calls against a policy, print its roots, run scenario files.
    Policy(commands::policy::PolicyArgs),
    /// List sandbox profiles, or show what one yields on this machine.
    Profiles(commands::profiles::ProfilesArgs),
    /// Draft tool-annotations.json from the configured servers' live tools (review it).
    Annotate(commands::annotate::AnnotateArgs),
    /// Answer pending escalations from a second terminal (file IPC).
    Approve(commands::approve::ApproveArgs),
    /// Verify audit logs.
    Audit(commands::audit::AuditArgs),
    /// Review and accept tool changes held back by pinning (`serve --pins`).
    Pins(commands::pins::PinsArgs),
    /// The built-in filesystem MCP server.
    FsServer(commands::fs_server::FsServerArgs),
    /// Measure an MCP server's call latency and throughput (for scripts/bench.sh).
    #[command(hide = true)]
    BenchClient(commands::bench_client::BenchClientArgs),
    /// Load the HTTP front with many principals (for scripts/load-http.sh).
    #[command(hide = true)]
    BenchHttp(commands::bench_http::BenchHttpArgs),
}

pub fn main() -> ExitCode {
    let cli = parse(std::env::args_os().collect());
    let globals = &cli.globals;
    if let Err(e) = crate::logging::init(&globals.log_level, globals.log_file.as_deref()) {
        eprintln!("palisade: {e:#}");
        return ExitCode::from(2);
    }
    commands::finish(match cli.command {
        Command::Demo(a) => commands::demo::run(a),
        Command::Serve(a) => commands::serve::run(*a),
        Command::Run(a) => commands::run::run(a),
        Command::Check(a) => commands::check::run(a),
        Command::Prefetch(a) => commands::prefetch::run(a),
        Command::Policy(a) => commands::policy::run(a),
        Command::Audit(a) => commands::audit::run(a),
        Command::Pins(a) => commands::pins::run(a),
        Command::Profiles(a) => commands::profiles::run(a),
        Command::Approve(a) => commands::approve::run(a),
        Command::Annotate(a) => commands::annotate::run(a),
        Command::FsServer(a) => commands::fs_server::run(a),
        Command::BenchClient(a) => commands::bench_client::run(a),
        Command::BenchHttp(a) => commands::bench_http::run(a),
    })
}

/// The command line parsed: `palisade run ...` against `run` alone, anything else (options
/// before `run` included) against every command. Exits as clap does on an error or
/// `--help`.
fn parse(args: Vec<std::ffi::OsString>) -> Cli {
    if args.get(1).is_some_and(|a| a == "run") {
        let RunCli { globals, command } = RunCli::parse_from(args);
        let RunOnly::Run(a) = command;
        return Cli {
            globals,
            command: Command::Run(a),
        };
    }
    Cli::parse_from(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(argv: &[&str]) -> (String, String) {
        let show = |r: Result<String, clap::Error>| match r {
            Ok(parsed) => parsed,
            Err(e) => format!("{:?}: {}", e.kind(), e.render()),
        };
        let whole = Cli::try_parse_from(argv).map(|c| format!("{c:?}"));
        let alone = RunCli::try_parse_from(argv).map(|c| {
            let RunOnly::Run(a) = c.command;
            format!(
                "{:?}",
                Cli {
                    globals: c.globals,
                    command: Command::Run(a)
                }
            )
        });
        (show(whole), show(alone))
    }

    #[test]
    fn run_alone_parses_helps_and_refuses_as_the_whole_tree() {
        for argv in [
            &["palisade", "run", "--", "true"][..],
            &[
                "palisade",
                "run",
                "--backend",
                "landlock",
                "--",
                "/usr/bin/true",
                "-x",
            ],
            &[
                "palisade",
                "run",
                "--log-level",
                "debug",
                "--",
                "sh",
                "-c",
                "echo",
            ],
            &["palisade", "run", "--help"],
            &["palisade", "run", "-h"],
            &["palisade", "run", "--backend", "nonsense", "--", "true"],
            &["palisade", "run", "--no-such-flag"],
            &["palisade", "run"],
            &["palisade", "run", "--version"],
        ] {
            let (whole, alone) = both(argv);
            assert_eq!(alone, whole, "{argv:?}");
        }
        let (help, _) = both(&["palisade", "run", "-h"]);
        assert!(help.starts_with("DisplayHelp"), "{help}");
        assert!(help.contains(RUN_ABOUT), "{help}");
        assert!(help.contains("--log-level"), "the global options: {help}");
        let (help, _) = both(&["palisade", "run", "--help"]);
        assert!(
            help.starts_with(&format!("DisplayHelp: {RUN_ABOUT}\n")),
            "the long help opens with the same line as the short one: {help}"
        );
    }
}

//! The command line: clap definitions and dispatch. Thin: each command's work lives in its
//! module; this file parses flags, sets up logging and maps outcomes to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

#[derive(Debug, Parser)]
#[command(
    name = "palisade",
    version,
    about = "Put every MCP server in its own OS sandbox, behind one policy proxy",
    long_about = None
)]
pub struct Cli {
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
    /// Also write logs to this file instead of stderr.
    #[arg(long, global = true)]
    pub log_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway on an embedded default and show what it does (start here).
    Demo(commands::demo::DemoArgs),
    /// Serve MCP on stdio in front of every configured server, each in its own sandbox.
    Serve(commands::serve::ServeArgs),
    /// Run one command in a sandbox: the drop-in wrapper for an existing client config.
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
    let cli = Cli::parse();
    if let Err(e) = crate::logging::init(&cli.log_level, cli.log_file.as_deref()) {
        eprintln!("palisade: {e:#}");
        return ExitCode::from(2);
    }
    commands::finish(match cli.command {
        Command::Demo(a) => commands::demo::run(a),
        Command::Serve(a) => commands::serve::run(a),
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

//! The command line: clap definitions and dispatch. Thin: each command's work lives in its
//! module; this file parses flags, sets up logging and maps outcomes to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "palisade",
    version,
    about = "Put every MCP server in its own OS sandbox, behind one policy proxy",
    long_about = None
)]
pub struct Cli {
    /// Log level for stderr (overridden by RUST_LOG).
    #[arg(long, global = true, default_value = "info", env = "PALISADE_LOG_LEVEL")]
    pub log_level: String,
    /// Also write logs to this file instead of stderr.
    #[arg(long, global = true)]
    pub log_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the end-to-end demo on an embedded default configuration.
    Demo,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = crate::logging::init(&cli.log_level, cli.log_file.as_deref()) {
        eprintln!("palisade: {e:#}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Demo => {
            eprintln!("palisade demo: not yet");
            ExitCode::SUCCESS
        }
    }
}

//! Tracing setup. Logs always go to stderr (or a file): stdout of `serve`, `run` and
//! `fs-server` is the MCP channel and must carry nothing but JSON-RPC.

use std::path::Path;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` wins over `level` when set.
pub fn init(level: &str, log_file: Option<&Path>) -> anyhow::Result<()> {
    // rmcp logs every message at info: keep it to warnings unless RUST_LOG asks for more.
    // Audit records logged for want of an audit file (`gateway::stages::LogAudit`) are the
    // audit trail itself, so they stay on whatever the level.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},palisade::audit=info,rmcp=warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .try_init()
        }
        // No colour codes when stderr is a pipe or file (a gateway capturing a server's log).
        None => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot install logger: {e}"))
}

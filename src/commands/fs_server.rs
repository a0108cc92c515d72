//! `palisade fs-server`: the built-in filesystem MCP server on stdio.
//!
//! stdout is the MCP channel: nothing but rmcp writes there; logs go to stderr.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use rmcp::ServiceExt;

use crate::fsserver::{FsServer, FsServerOptions};
use crate::sandbox::Access;

/// Serve the built-in filesystem MCP server on stdio.
#[derive(Debug, Args)]
pub struct FsServerArgs {
    /// A read-write directory the server may operate in (used until the client offers roots).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<std::path::PathBuf>,
    /// A read-only directory (used until the client offers roots).
    #[arg(long = "ro-root", value_name = "DIR")]
    pub ro_roots: Vec<std::path::PathBuf>,
    /// Largest file `read` returns, in bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024)]
    pub max_read_bytes: u64,
}

pub fn run(args: FsServerArgs) -> anyhow::Result<ExitCode> {
    let mut roots: Vec<_> = args.roots.into_iter().map(|p| (p, Access::Rw)).collect();
    roots.extend(args.ro_roots.into_iter().map(|p| (p, Access::Ro)));
    let limits = crate::fsserver::ops::Limits {
        max_read_bytes: args.max_read_bytes,
        ..Default::default()
    };
    let server = FsServer::new(FsServerOptions {
        roots,
        limits,
        home: std::env::var_os("HOME").map(Into::into),
    })
    .context("cannot start fs-server")?;
    let set = server.roots();
    if set.guard.is_empty() {
        tracing::warn!(
            "fs-server has no --root: it refuses every path unless the client offers roots"
        );
    } else {
        tracing::info!("fs-server roots: {}", set.guard.describe_roots());
    }
    super::runtime()?.block_on(async move {
        let service = server
            .serve((tokio::io::stdin(), tokio::io::stdout()))
            .await
            .context("MCP handshake on stdio failed")?;
        service.waiting().await.context("fs-server stopped")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

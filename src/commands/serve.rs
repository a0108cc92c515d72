//! `palisade serve`: the gateway: one MCP server on stdio in front of every configured server.
//! The edge: flags and config are merged here (flags win), errors get context, and the
//! gateway runs until stdin closes or SIGINT/SIGTERM. stdout is the MCP channel.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use std::sync::Arc;
use std::time::Duration;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::audit::AuditLog;
use crate::gateway::approval::UpstreamElicitor;
use crate::gateway::engine::{AuditLogSink, EngineStage};
use crate::gateway::{Gateway, GatewayOptions};
use crate::policy::{Policy, PolicyOptions, PolicyPaths, Scope};

/// Serve MCP on stdio, aggregating every configured server, each in its own sandbox.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Server configuration (`{"mcpServers": {...}}`).
    #[arg(long)]
    pub config: std::path::PathBuf,
    /// compiled-policy.json (default: the built-in safe policy).
    #[arg(long)]
    pub policy: Option<std::path::PathBuf>,
    /// tool-annotations.json.
    #[arg(long)]
    pub annotations: Option<std::path::PathBuf>,
    /// dynamic-lists.json.
    #[arg(long)]
    pub lists: Option<std::path::PathBuf>,
    /// The session sandbox directory (writable by every server).
    #[arg(long)]
    pub sandbox_dir: Option<std::path::PathBuf>,
    /// enforce: refuse servers that cannot be contained; warn: run them anyway, loudly.
    #[arg(long, value_enum)]
    pub sandbox_policy: Option<crate::config::SandboxPolicy>,
    /// Sandbox backend for every server without its own.
    #[arg(long, value_enum)]
    pub backend: Option<crate::config::Backend>,
    /// Append-only JSONL audit log.
    #[arg(long)]
    pub audit_log: Option<std::path::PathBuf>,
    /// Who decides escalations: deny, dir:PATH, tty, elicit, exec:CMD, auto (comma-chained).
    #[arg(long)]
    pub escalation: Option<String>,
    /// Seconds to wait for an approver (5-3600).
    #[arg(long)]
    pub escalation_timeout: Option<u64>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let opts = options(args)?;
    let rt = super::runtime()?;
    let outcome = rt.block_on(async {
        let gateway = Gateway::start(opts)
            .await
            .context("cannot start the gateway")?;
        for s in gateway.status() {
            tracing::info!(server = %s.name, "status: {:?}, {} tools", s.status, s.tools);
        }
        gateway.serve_stdio().await.context("gateway failed")
    });
    // Every child is reaped by now. Tokio reads stdin on a blocking thread that a signal does
    // not interrupt; do not let dropping the runtime wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// Merges the config file's `palisade` block with the flags (flags win).
pub fn options(args: ServeArgs) -> anyhow::Result<GatewayOptions> {
    let mut config = crate::config::load_file(&args.config)?;
    let s = &mut config.settings;
    macro_rules! flag {
        ($field:ident) => {
            if args.$field.is_some() {
                s.$field = args.$field;
            }
        };
    }
    flag!(policy);
    flag!(annotations);
    flag!(lists);
    flag!(sandbox_dir);
    flag!(sandbox_policy);
    flag!(backend);
    flag!(audit_log);
    flag!(escalation);
    flag!(escalation_timeout);
    let escalation = s.escalation.clone();
    let timeout_s = s.escalation_timeout.unwrap_or(DEFAULT_ESCALATION_TIMEOUT);
    let protected = protected_paths(&args.config, s);
    let policy_paths = PolicyPaths {
        policy: s.policy.clone(),
        annotations: s.annotations.clone(),
        lists: s.lists.clone(),
    };
    let audit_log = s.audit_log.clone();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let policy = Policy::load(
        &policy_paths,
        PolicyOptions {
            home: home.clone(),
            server_domains: PolicyOptions::server_domains_from(&config),
        },
    )?;
    for w in policy.warnings() {
        tracing::warn!("policy: {w}");
    }
    let mut opts = GatewayOptions::new(config)?;
    // The scope canonicalises the sandbox dir, so it must exist first (0700, as the gateway
    // would create it).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&opts.sandbox_dir)
        .with_context(|| format!("cannot create sandbox dir {}", opts.sandbox_dir.display()))?;
    let scope = Scope::new(Some(&opts.sandbox_dir), &protected, home.as_deref())
        .map_err(|e| anyhow::anyhow!("sandbox dir or protected paths: {e}"))?;
    // Roots are derived from the policy as loaded, before any server's tools are known:
    // exactly what `palisade policy roots` prints for the same files.
    opts.roots_policy = Some(Arc::new(policy.clone()));
    opts.stages.policy = Arc::new(EngineStage::new(policy, scope, home));
    opts.protected = protected.clone();
    if let Some(path) = audit_log {
        let log = AuditLog::open(&path)
            .with_context(|| format!("cannot open audit log {}", path.display()))?;
        opts.stages.audit = Arc::new(AuditLogSink::new(log));
    }
    if let Some(spec) = escalation {
        opts.stages.approver = Arc::new(approval_chain(&spec, timeout_s, &opts)?);
    }
    Ok(opts)
}

/// Palisade's own files, which no call may touch and no sandbox shows: the config, policy,
/// annotations, lists, audit log and the head file anchoring its chain, plus the configured
/// `protectedPaths`.
fn protected_paths(config_file: &Path, s: &crate::config::Settings) -> Vec<PathBuf> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out: Vec<PathBuf> = [
        Some(config_file),
        s.policy.as_deref(),
        s.annotations.as_deref(),
        s.lists.as_deref(),
        s.audit_log.as_deref(),
    ]
    .into_iter()
    .flatten()
    .map(absolute)
    .collect();
    if let Some(log) = s.audit_log.as_deref() {
        out.push(crate::audit::anchor::head_path(&absolute(log)));
    }
    out.extend(s.protected_paths.iter().cloned());
    out
}

/// IronCurtain's approval timeout.
const DEFAULT_ESCALATION_TIMEOUT: u64 = 300;

/// `--escalation` as an approval chain; `elicit` asks the agent's MCP client.
fn approval_chain(
    spec: &str,
    timeout_s: u64,
    opts: &GatewayOptions,
) -> anyhow::Result<crate::approval::ApprovalChain> {
    use crate::approval::{build_chain, parse_escalation, TIMEOUT_RANGE};
    anyhow::ensure!(
        TIMEOUT_RANGE.contains(&timeout_s),
        "--escalation-timeout {timeout_s}: must be within {}-{} seconds",
        TIMEOUT_RANGE.start(),
        TIMEOUT_RANGE.end()
    );
    let specs = parse_escalation(spec).context("--escalation")?;
    let elicitor: Arc<dyn crate::approval::Elicitor> =
        Arc::new(UpstreamElicitor::new(opts.upstream.clone()));
    build_chain(&specs, Some(elicitor), Duration::from_secs(timeout_s))
        .map_err(|e| anyhow::anyhow!("--escalation: {e}"))
}

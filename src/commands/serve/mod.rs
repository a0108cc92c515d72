//! `palisade serve`: the gateway: one MCP server on stdio in front of every configured server.
//! The edge: flags and config are merged here (flags win), errors get context, and the
//! gateway runs until stdin closes or SIGINT/SIGTERM. stdout is the MCP channel.
//!
//! Split by job: `http` builds the HTTP front's options (flags over the `http` block, the
//! tokens file, the JWT verifier and its JWKS fetch); this module the rest of the options
//! and the run.

mod http;

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use std::sync::Arc;
use std::time::Duration;

use std::path::{Path, PathBuf};

use crate::audit::AuditLog;
use crate::gateway::stages::approval::UpstreamElicitor;
use crate::gateway::stages::engine::{AuditLogSink, EngineStage};
use crate::gateway::{Gateway, GatewayOptions};
use crate::policy::{Policy, PolicyOptions, PolicyPaths, Scope};

/// Serve MCP on stdio, aggregating every configured server, each in its own sandbox.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Server configuration (`{"mcpServers": {...}}`). Or give one server's command after
    /// `--` instead: `palisade serve [FLAGS] -- CMD ARGS...` serves it alone, its tools and
    /// prompts under their own names (transparent one-server mode).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
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
    /// Pins file: tools whose definition changed since they were approved are held back.
    #[arg(long)]
    pub pins: Option<std::path::PathBuf>,
    /// off, warn or enforce (the default with a pins file).
    #[arg(long, value_enum)]
    pub pinning: Option<crate::pins::Mode>,
    /// With an agent on stdio: microseconds the gateway spins watching its pipes before it
    /// sleeps (default 200; 0 turns it off). Lower latency per call for some CPU.
    #[arg(long, value_name = "MICROS")]
    pub busy_poll_micros: Option<u64>,
    /// Serve MCP Streamable HTTP on HOST:PORT (at /mcp) instead of stdio.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// With --http: bearer tokens, one `PRINCIPAL SHA256HEX` per line (mode 600).
    #[arg(long)]
    pub tokens: Option<std::path::PathBuf>,
    /// With --http on a loopback address: serve without authentication.
    #[arg(long)]
    pub no_auth: bool,
    /// With --http: a browser origin to allow (repeatable).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// With --http: seconds without a request before a principal's servers stop.
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// With --http: accept JWT access tokens signed by a key of this JWKS file (OAuth 2.1
    /// resource server); needs --jwt-issuer and --jwt-audience.
    #[arg(long)]
    pub jwks: Option<std::path::PathBuf>,
    /// With --http: like --jwks, from an https:// URL (or http:// on loopback), fetched at
    /// start and again when a token names an unknown key id (at most every `jwksRefetch`
    /// seconds).
    #[arg(long, value_name = "URL")]
    pub jwks_url: Option<String>,
    /// With an https:// --jwks-url: a PEM file of CA certificates to trust besides the
    /// system's (a private issuer's CA).
    #[arg(long, value_name = "FILE")]
    pub jwks_ca: Option<std::path::PathBuf>,
    /// The `iss` a JWT access token must carry.
    #[arg(long)]
    pub jwt_issuer: Option<String>,
    /// The `aud` a JWT access token must carry: this resource (e.g. https://mcp.example/mcp).
    #[arg(long)]
    pub jwt_audience: Option<String>,
    /// A scope a JWT access token must grant (repeatable).
    #[arg(long = "jwt-scope")]
    pub jwt_scopes: Vec<String>,
    /// With `-- CMD`: grant the server read-write access to DIR (repeatable): its sandbox's
    /// `allowWrite`, and so a root it is told of.
    #[arg(long = "rw", value_name = "DIR")]
    pub rw: Vec<std::path::PathBuf>,
    /// With `-- CMD`: grant the server read-only access to DIR (repeatable): `allowRead`.
    #[arg(long = "ro", value_name = "DIR")]
    pub ro: Vec<std::path::PathBuf>,
    /// The one server to serve (after `--`), instead of --config.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The config to serve: the file, or one server from the command after `--`.
fn load_config(args: &ServeArgs) -> anyhow::Result<crate::config::GatewayConfig> {
    match (&args.config, args.command.split_first()) {
        (Some(_), Some(_)) => anyhow::bail!(
            "give either --config FILE or `-- COMMAND ARGS...` (one server), not both"
        ),
        (Some(path), None) if !args.rw.is_empty() || !args.ro.is_empty() => anyhow::bail!(
            "--rw and --ro grant directories to the one server of `serve -- COMMAND`; in {} \
             give each server its own under sandbox.filesystem.allowWrite / allowRead",
            path.display()
        ),
        (Some(path), None) => Ok(crate::config::load_file(path)?),
        (None, Some((command, rest))) => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let grants = OneServerGrants {
                rw: args.rw.iter().map(|p| cwd.join(p)).collect(),
                ro: args.ro.iter().map(|p| cwd.join(p)).collect(),
            };
            let config = one_server_config(command, rest, &grants);
            Ok(crate::config::parse_str(
                &config.to_string(),
                "(the command after --)",
            )?)
        }
        (None, None) => anyhow::bail!(
            "nothing to serve: give --config FILE (servers under mcpServers) or \
             `-- COMMAND ARGS...` for one server"
        ),
    }
}

/// The directories `serve --rw/--ro -- CMD` grants its one server (absolute).
#[derive(Debug, Default)]
pub struct OneServerGrants {
    pub rw: Vec<PathBuf>,
    pub ro: Vec<PathBuf>,
}

/// `{"mcpServers": {NAME: {command, args, "prefix": false, sandbox}}}` for
/// `serve [--rw DIR] [--ro DIR] -- CMD ARGS`.
pub fn one_server_config(
    command: &str,
    args: &[String],
    grants: &OneServerGrants,
) -> serde_json::Value {
    let mut server = serde_json::json!({"command": command, "args": args, "prefix": false});
    if !grants.rw.is_empty() || !grants.ro.is_empty() {
        server["sandbox"] = serde_json::json!({"filesystem": {
            "allowWrite": grants.rw, "allowRead": grants.ro,
        }});
    }
    let mut servers = serde_json::Map::new();
    servers.insert(one_server_name(command, args), server);
    serde_json::json!({ "mcpServers": servers })
}

/// The name audit records and logs give a server started from a command line: the package
/// or script it runs (past launchers such as `npx -y` or `python3 -m`), as a valid server
/// name.
pub fn one_server_name(command: &str, args: &[String]) -> String {
    const LAUNCHERS: &[&str] = &[
        "npx", "npm", "exec", "uvx", "uv", "tool", "run", "pipx", "node", "deno", "bun", "python",
        "python3", "env",
    ];
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let candidate = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .find(|a| !a.starts_with('-') && !LAUNCHERS.contains(&base(a).as_str()))
        .unwrap_or(command);
    // `@scope/pkg@1.2` -> `pkg`; `server.py` -> `server`; `pkg/dist/index.js` -> `pkg` (an
    // entry point named like every other package's says less than its package directory).
    const GENERIC_FILES: &[&str] = &["index", "main", "cli", "__main__"];
    const BUILD_DIRS: &[&str] = &["dist", "build", "lib", "src", "bin", "out"];
    let stem = |s: &str| {
        let s = s.split('@').next().unwrap_or_default();
        let s = s.strip_suffix(".py").or(s.strip_suffix(".js")).unwrap_or(s);
        s.strip_suffix(".mjs").unwrap_or(s).to_string()
    };
    let parts: Vec<&str> = candidate
        .trim_start_matches('@')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let file = parts.last().map(|f| stem(f)).unwrap_or_default();
    let name = if GENERIC_FILES.contains(&file.as_str()) {
        parts
            .iter()
            .rev()
            .skip(1)
            .find(|d| !BUILD_DIRS.contains(d))
            .map(|d| d.to_string())
            .unwrap_or(file)
    } else {
        file
    };
    let name = name.as_str();
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .replace("__", "_")
        .chars()
        .take(48)
        .collect();
    if clean.trim_matches('-').is_empty() {
        "server".into()
    } else {
        clean
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let settings = load_config(&args)?.settings;
    let http = http::http_options(&args, &settings)?;
    let spin =
        crate::gateway::busy_poll::from_setting(args.busy_poll_micros, settings.busy_poll_micros);
    let mut opts = options(args)?;
    if let Some(http) = http {
        // A spin the user chose (one past the cap too) is worth saying it is ignored.
        if spin
            .as_ref()
            .map_or(true, |s| s.chosen && !s.budget.is_zero())
        {
            tracing::warn!(
                "busy polling is for an agent on stdio; the HTTP front does not spin \
                 (--busy-poll-micros and busyPollMicros are ignored)"
            );
        }
        let rt = super::runtime()?;
        let outcome = rt.block_on(crate::gateway::agent::http::serve_http(opts, http));
        rt.shutdown_timeout(std::time::Duration::from_millis(20));
        outcome?;
        return Ok(ExitCode::SUCCESS);
    }
    // One agent on stdio: every task on this thread. With tokio's worker pool the call's
    // stages hopped between threads (futex wake-ups) and competed with the agent and the
    // servers for the cores; on two cores 16 concurrent calls ran 1-20 points
    // of direct's throughput faster on one thread, at 8-30% less CPU per call
    // (docs/benchmarks.md, "One thread for an agent on stdio"). Blocking work still goes to
    // tokio's blocking pool; the HTTP front, with many agents, keeps the pool.
    // Busy polling (crate::gateway::busy_poll): the thread watches stdin and the servers'
    // stdouts for a moment before it sleeps.
    let spin = spin.map_err(|e| anyhow::anyhow!(e))?.budget;
    let busy = if spin.is_zero() {
        None
    } else {
        match crate::gateway::busy_poll::BusyPoll::new(spin) {
            Ok(busy) => {
                opts.spin_with(busy.clone());
                Some(busy)
            }
            // Only latency is lost: the gateway sleeps and wakes as without it.
            Err(e) => {
                tracing::warn!("busy polling is off: cannot create its epoll set ({e})");
                None
            }
        }
    };
    let rt = super::runtime_on_one_thread(busy.as_ref())?;
    let outcome = rt.block_on(async {
        // Installed before the servers start: SIGTERM while they start stops them politely
        // (and leaves nothing behind) instead of killing palisade where it stands.
        let stop = crate::gateway::termination();
        tokio::pin!(stop);
        let (gateway, stopped) = Gateway::start_until(opts, stop.as_mut())
            .await
            .context("cannot start the gateway")?;
        if stopped {
            gateway.shutdown().await;
            return Ok(());
        }
        for s in gateway.status() {
            tracing::info!(server = %s.name, "status: {:?}, {} tools", s.status, s.tools);
        }
        gateway
            .serve_stdio_until(stop)
            .await
            .context("gateway failed")
    });
    // Every child is reaped by now. A terminal or file stdin is read on a blocking thread that
    // a signal does not interrupt; do not let dropping the runtime wait for it (pipes and
    // sockets are on the reactor and leave nothing behind).
    rt.shutdown_timeout(std::time::Duration::from_millis(20));
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// Merges the config file's `palisade` block with the flags (flags win).
pub fn options(args: ServeArgs) -> anyhow::Result<GatewayOptions> {
    let mut config = load_config(&args)?;
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
    flag!(pins);
    flag!(pinning);
    let default_policy = s.sandbox_policy;
    let escalation = s.escalation.clone();
    let timeout_s = s.escalation_timeout.unwrap_or(DEFAULT_ESCALATION_TIMEOUT);
    // Checked whether or not an approver is named: a bad value is a mistake either way
    // (it was accepted silently without --escalation).
    anyhow::ensure!(
        crate::approval::TIMEOUT_RANGE.contains(&timeout_s),
        "escalation timeout {timeout_s} (--escalation-timeout, or escalationTimeout in the \
         palisade block): must be within {}-{} seconds",
        crate::approval::TIMEOUT_RANGE.start(),
        crate::approval::TIMEOUT_RANGE.end()
    );
    let protected = protected_paths(args.config.as_deref(), s);
    let policy_paths = PolicyPaths {
        policy: s.policy.clone(),
        annotations: s.annotations.clone(),
        lists: s.lists.clone(),
    };
    let audit_log = s.audit_log.clone();
    let pins = pin_gate(s)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let policy = Policy::load(
        &policy_paths,
        PolicyOptions {
            home: home.clone(),
            server_domains: PolicyOptions::server_domains_from(&config),
        },
    )
    .with_context(|| {
        let from = match &args.config {
            Some(c) => format!(" of {}", c.display()),
            None => String::new(),
        };
        format!(
            "cannot load the policy (--policy, --annotations, --lists, or the palisade \
             block's policy, annotations, lists{from}; leave them out for the built-in policy)"
        )
    })?;
    for w in policy.warnings() {
        tracing::warn!("policy: {w}");
    }
    // Package runners (`npx -y`, `uvx`) become their cached entry point before anything
    // looks at the command; `docker run` is refused or opted out. See crate::packages.
    // A server whose package cannot be fetched is refused alone, the others start.
    let refused = crate::packages::hooks::for_config(&mut config, default_policy);
    let mut opts = GatewayOptions::new(config)?;
    opts.refused = refused;
    // The scope canonicalises the sandbox dir, so it must exist first (0700, as the gateway
    // would create it).
    crate::private_dir::create(&opts.sandbox_dir)
        .with_context(|| format!("cannot create sandbox dir {}", opts.sandbox_dir.display()))?;
    let scope = Scope::new(Some(&opts.sandbox_dir), &protected, home.as_deref())
        .map_err(|e| anyhow::anyhow!("sandbox dir or protected paths: {e}"))?;
    // Roots are derived from the policy as loaded, before any server's tools are known:
    // exactly what `palisade policy roots` prints for the same files.
    opts.roots_policy = Some(Arc::new(policy.clone()));
    opts.stages.policy = Arc::new(EngineStage::new(policy, scope, home));
    opts.protected = protected.clone();
    if let Some(path) = audit_log {
        let log = AuditLog::open(&path).context("cannot open the audit log")?;
        opts.stages.audit = Arc::new(AuditLogSink::new(log));
    } else {
        tracing::warn!(
            "no audit log (--audit-log, or \"auditLog\" in the palisade block): each call's \
             record goes to stderr instead, unchained"
        );
    }
    opts.pins = pins;
    if let Some(spec) = escalation {
        opts.stages.approver = Arc::new(approval_chain(&spec, timeout_s, &opts)?);
    }
    Ok(opts)
}

/// Palisade's own files, which no call may touch and no sandbox shows: the config, policy,
/// annotations, lists, audit log and the head file anchoring its chain, plus the configured
/// `protectedPaths`.
fn protected_paths(config_file: Option<&Path>, s: &crate::config::Settings) -> Vec<PathBuf> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out: Vec<PathBuf> = [
        config_file,
        s.policy.as_deref(),
        s.annotations.as_deref(),
        s.lists.as_deref(),
        s.audit_log.as_deref(),
        s.pins.as_deref(),
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

/// The pins gate the settings ask for; `pinning` without a pins file is a mistake, named.
fn pin_gate(
    s: &crate::config::Settings,
) -> anyhow::Result<Option<Arc<crate::gateway::stages::pinning::PinGate>>> {
    let Some(path) = &s.pins else {
        if s.pinning.is_some_and(|m| m != crate::pins::Mode::Off) || s.pin_new.is_some() {
            anyhow::bail!(
                "\"pinning\" / \"pinNew\" are set but there is no pins file: give --pins FILE \
                 (or \"pins\" in the palisade block)"
            );
        }
        return Ok(None);
    };
    let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
    let gate = crate::gateway::stages::pinning::PinGate::open(
        path,
        s.pinning.unwrap_or_default(),
        s.pin_new.unwrap_or_default(),
    )?;
    Ok(Some(Arc::new(gate)))
}

/// IronCurtain's approval timeout.
const DEFAULT_ESCALATION_TIMEOUT: u64 = 300;

/// `--escalation` as an approval chain; `elicit` asks the agent's MCP client.
fn approval_chain(
    spec: &str,
    timeout_s: u64,
    opts: &GatewayOptions,
) -> anyhow::Result<crate::approval::ApprovalChain> {
    use crate::approval::TIMEOUT_RANGE;
    anyhow::ensure!(
        TIMEOUT_RANGE.contains(&timeout_s),
        "--escalation-timeout {timeout_s}: must be within {}-{} seconds",
        TIMEOUT_RANGE.start(),
        TIMEOUT_RANGE.end()
    );
    approval_chain_with(spec, timeout_s, opts.upstream.clone())
}

/// `approval_chain`, with `elicit` asking the agent at the end of `link`.
fn approval_chain_with(
    spec: &str,
    timeout_s: u64,
    link: crate::gateway::agent::link::UpstreamLink,
) -> anyhow::Result<crate::approval::ApprovalChain> {
    use crate::approval::{build_chain, parse_escalation};
    let specs = parse_escalation(spec).context("--escalation")?;
    let elicitor: Arc<dyn crate::approval::Elicitor> = Arc::new(UpstreamElicitor::new(link));
    build_chain(&specs, Some(elicitor), Duration::from_secs(timeout_s))
        .map_err(|e| anyhow::anyhow!("--escalation: {e}"))
}

#[cfg(test)]
mod one_server_tests;

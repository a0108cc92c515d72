//! The gateway: one MCP server (to the agent) in front of every configured server, each
//! launched by `crate::sandbox::launch` in its own sandbox.
//!
//! Where a call goes, folder by folder:
//! - `agent/`: the agent's side. `front` reads the agent's stdio (tools/call and tasks from
//!   the raw line), `service` is the rmcp session for the rest, `http/` the Streamable HTTP
//!   front, `versions` the bridge between protocol revisions, `link` the way back to the agent.
//! - `call/`: one tool call's stages (`pipeline`: route → agent roots → policy → approval →
//!   widen → forward → annotate → audit), with what the stages need (`blocked`, `widen`,
//!   `applied`, `remembered`) and tasks (`tasks`, `task_relay`).
//! - `server/`: one downstream server: `supervisor` (start, watch, restart, stop),
//!   `launcher` (the seam: a sandboxed process in production, a task in unit tests), `spawn`,
//!   `peer` (its JSON-RPC wire), `handler` (what it sends us), `tap`, `fault`, `roots`,
//!   `relay/` (its sampling and elicitation).
//! - `stages/`: the injected stages (policy, approval, audit) and their implementations.
//! - here: `Gateway` (start, serve, shutdown), `start` (each server's plan and slot),
//!   `state` (slots and the shared state), `registry` (the merged catalog), `network` (the
//!   shared egress proxy).
//!
//! stdout carries only the MCP channel: logs go to stderr.
//!
//! Entry points: [`Gateway::start`] (or [`Gateway::start_until`], cut short by a signal: the
//! CLI), then [`Gateway::serve_stdio`] (or [`Gateway::serve_stdio_until`]: the CLI) or
//! [`Gateway::serve`] over any byte stream (in-process tests, the demo), then
//! [`Gateway::shutdown`].

pub mod agent;
pub mod busy_poll;
pub mod call;
pub mod json_scan;
pub mod line_out;
pub mod network;
pub mod pipe_size;
pub mod raw_json;
pub mod registry;
pub mod server;
pub mod stages;
mod start;
pub mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::service::serve_server;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::GatewayConfig;
use crate::sandbox::launch::Enforcement;

pub use agent::link::UpstreamLink;
pub use stages::{
    AllowAll, Approval, ApprovalOutcome, ApprovalStage, AuditError, AuditSink, CallInfo,
    CallOutcome, CallPolicy, CallRecord, Decision, LogAudit, NoApprover, PolicyVerdict, Stages,
};
pub use state::{Limits, Status};

/// Everything `Gateway::start` needs. Build with [`GatewayOptions::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub config: GatewayConfig,
    /// The session sandbox directory (every server's first root, read-write). Created 0700.
    pub sandbox_dir: PathBuf,
    pub limits: Limits,
    /// Policy, approval and audit stages (defaults: allow all, no approver, log audit).
    pub stages: Stages,
    /// The agent's side of the connection, once it connects; give a clone to stages that
    /// talk to the agent (the `elicit` approver: `stages::approval::UpstreamElicitor`).
    pub upstream: UpstreamLink,
    /// The policy each server's roots are derived from at start
    /// (`crate::roots::derive::derive_for_server`, as `palisade policy roots` prints them).
    /// `None`: the session sandbox dir and the `sandbox.filesystem` grants only.
    pub roots_policy: Option<Arc<crate::policy::Policy>>,
    /// Tool pinning (`--pins`): `None` offers every tool as listed.
    pub pins: Option<Arc<stages::pinning::PinGate>>,
    /// Servers refused before the start, by name, with the reason (a package runner whose
    /// package cannot be fetched, a container runtime under enforce): each is `Refused`
    /// alone, the others start.
    pub refused: Vec<(String, String)>,
    /// Palisade's own files (config, policy, annotations, lists, audit log and its head file,
    /// `protectedPaths`): masked in every server's sandbox that would show them (a writable
    /// root holding the audit log must not let a server truncate it), whatever the policy.
    pub protected: Vec<PathBuf>,
    /// How servers are started. [`GatewayOptions::new`] sets the process launcher (each server
    /// a sandboxed child); the CLI keeps it (`spin_with` makes it watch the servers' stdouts);
    /// unit tests of the call pipeline set `server::launcher::InProcessLauncher` (servers as
    /// tasks, reported as not sandboxed).
    pub launcher: Arc<dyn server::launcher::Launcher>,
    /// The busy polling of the runtime the gateway runs on (`busy_poll`), installed there by
    /// whoever built that runtime; set with [`GatewayOptions::spin_with`]. It watches the
    /// agent's stdin and every server's stdout, and counts the requests the front relays.
    pub busy_poll: Option<Arc<busy_poll::BusyPoll>>,
}

impl GatewayOptions {
    /// Options from a parsed config: timeouts from its settings, sandbox dir from its
    /// settings or the default `$HOME/.local/state/palisade/sandbox`.
    pub fn new(config: GatewayConfig) -> Result<GatewayOptions, GatewayError> {
        let mut limits = Limits::default();
        if let Some(s) = config.settings.call_timeout {
            limits.call_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(s) = config.settings.startup_timeout {
            limits.startup_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(s) = config.settings.ready_timeout {
            limits.ready_timeout = Some(Duration::from_secs(s));
        }
        let sandbox_dir = match &config.settings.sandbox_dir {
            Some(d) => d.clone(),
            None => default_sandbox_dir()?,
        };
        Ok(GatewayOptions {
            config,
            sandbox_dir,
            limits,
            stages: Stages::default(),
            upstream: UpstreamLink::default(),
            roots_policy: None,
            pins: None,
            refused: Vec::new(),
            protected: Vec::new(),
            launcher: Arc::new(server::launcher::ProcessLauncher::default()),
            busy_poll: None,
        })
    }

    /// Has `busy`, installed on the runtime the gateway runs on, watch every server's
    /// stdout and the agent's stdin, and count the requests in flight. Replaces the launcher
    /// with a watched process launcher: for the CLI, not for an in-process launcher.
    pub fn spin_with(&mut self, busy: Arc<busy_poll::BusyPoll>) {
        self.launcher = Arc::new(server::launcher::ProcessLauncher::watched_by(busy.clone()));
        self.busy_poll = Some(busy);
    }
}

/// `$HOME/.local/state/palisade/sandbox`.
pub fn default_sandbox_dir() -> Result<PathBuf, GatewayError> {
    let home = std::env::var_os("HOME").ok_or(GatewayError::NoHome)?;
    Ok(PathBuf::from(home).join(".local/state/palisade/sandbox"))
}

/// Errors of the gateway as a whole (a single server's failures never become one).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("HOME is not set: give --sandbox-dir or settings.sandboxDir")]
    NoHome,
    #[error("cannot create the session sandbox directory {path}: {cause}")]
    SandboxDir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("the MCP session with the client failed to start: {0}")]
    Upstream(String),
    #[error("probing what this machine can enforce failed: {0}")]
    Probe(String),
}

/// Why a configured server is not started at all (its slot shows `Status::Refused` with this
/// text).
#[derive(Debug, thiserror::Error)]
pub enum NotStarted {
    /// Refused before the gateway started (the reason given in `GatewayOptions::refused`).
    #[error("{0}")]
    Configured(String),
    #[error(transparent)]
    Grant(#[from] server::spawn::GrantError),
    #[error("its roots cannot be derived: {0}")]
    Roots(crate::roots::canon::PathError),
    /// Its domain lists are invalid (a typo must not widen anything).
    #[error(transparent)]
    Egress(crate::egress::EgressError),
}

/// One server's state, for `check`, the demo and tests.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub status: Status,
    pub enforcement: Option<Enforcement>,
    pub tools: usize,
}

/// A started gateway. Serve it, then shut it down (dropping it also stops the supervisors,
/// but only `shutdown` waits until every child is reaped).
pub struct Gateway {
    shared: Arc<state::Shared>,
    supervisors: Vec<JoinHandle<()>>,
    /// The egress proxy, when some server has an allowlist; closed after the servers stop.
    egress: Option<network::GatewayEgress>,
    /// The runtime's busy polling (`GatewayOptions::busy_poll`).
    busy_poll: Option<Arc<busy_poll::BusyPoll>>,
}

impl Gateway {
    /// Creates the sandbox dir, launches every server concurrently and waits until each
    /// has settled its first start (running, refused, or failed within the startup timeout).
    /// A server that fails does not fail the gateway.
    pub async fn start(opts: GatewayOptions) -> Result<Gateway, GatewayError> {
        let (gateway, _) = Gateway::start_until(opts, std::future::pending()).await?;
        Ok(gateway)
    }

    /// As `start`, its wait for the servers cut short when `stop` resolves (SIGTERM while
    /// servers start): the gateway is returned with its servers still starting, for the
    /// caller to `shutdown`, which stops them politely and reaps them. The flag says whether
    /// `stop` came first.
    pub async fn start_until(
        mut opts: GatewayOptions,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(Gateway, bool), GatewayError> {
        opts.sandbox_dir = start::create_private_dir(&opts.sandbox_dir)?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        // Probed once, off the runtime's threads (it runs a trial sandbox); every start and
        // relaunch of every server is resolved against it.
        // srt is asked whether it runs (a Node start) only when some server may use it.
        // A launcher that never sandboxes (in-process tests) needs no trial sandbox.
        let depth = opts.launcher.probe_depth();
        let srt_probe = if opts.config.uses_backend(crate::config::Backend::Srt) {
            crate::sandbox::capabilities::SrtProbe::Run
        } else {
            crate::sandbox::capabilities::SrtProbe::Locate
        };
        // Each server's launch request and roots do not depend on the probe: they are
        // worked out while it runs.
        let probe = tokio::task::spawn_blocking(move || {
            crate::sandbox::capabilities::probe_for(depth, srt_probe)
        });
        let (mut requests, cells) = start::plan_servers(&opts, home.as_deref());
        let caps = probe
            .await
            .map_err(|e| GatewayError::Probe(e.to_string()))?;
        // One shared egress proxy for every server with a domain allowlist.
        let egress = network::attach(&mut requests, &opts.config.settings, &caps);
        let slots = start::slots(requests, cells, &opts.config);
        let busy_poll = opts.busy_poll;
        let shared = Arc::new(
            state::Shared::new(slots, opts.stages, opts.limits, opts.upstream, caps)
                .with_egress(egress.as_ref().map(|e| e.proxy.clone()))
                .with_pins(opts.pins)
                .with_launcher(opts.launcher),
        );
        // A start given up before it returns (an HTTP principal's first request whose client
        // went away) leaves no Gateway to drop: its servers are stopped here instead, as a
        // dropped Gateway stops them.
        // A signal that came while the sandbox was probed: no server is launched at all.
        tokio::pin!(stop);
        if futures::FutureExt::now_or_never(stop.as_mut()).is_some() {
            tracing::info!("shutdown requested before the servers started");
            let gateway = Gateway {
                shared,
                supervisors: Vec::new(),
                egress,
                busy_poll,
            };
            return Ok((gateway, true));
        }
        let stop_if_abandoned = shared.shutdown.clone().drop_guard();
        let mut supervisors = Vec::new();
        let mut settled = Vec::new();
        for idx in 0..shared.slots.len() {
            let (tx, rx) = oneshot::channel();
            supervisors.push(tokio::spawn(server::supervisor::supervise(
                shared.clone(),
                idx,
                tx,
            )));
            settled.push(rx);
        }
        // A dropped sender means the supervisor ended; either way the start has settled.
        // Past the ready timeout the agent is answered with the servers that are up; the
        // others join when they are (the catalog's change is announced with list_changed,
        // and a call to a server still starting waits for it).
        let ready = shared
            .limits
            .ready_timeout
            .unwrap_or(shared.limits.startup_timeout);
        let all_settled = tokio::time::timeout(ready, futures::future::join_all(settled));
        let waited = tokio::select! {
            w = all_settled => Some(w),
            () = stop => None,
        };
        let Some(waited) = waited else {
            let _ = stop_if_abandoned.disarm();
            tracing::info!("shutdown requested while the servers were starting");
            let gateway = Gateway {
                shared,
                supervisors,
                egress,
                busy_poll,
            };
            return Ok((gateway, true));
        };
        if waited.is_err() {
            let late: Vec<String> = shared
                .slots
                .iter()
                .filter(|s| matches!(s.snapshot().status, Status::Starting))
                .map(|s| s.name.clone())
                .collect();
            tracing::info!(
                "ready after {}s without {}: they join when started (readyTimeout)",
                ready.as_secs(),
                late.join(", ")
            );
        }
        let _ = stop_if_abandoned.disarm();
        let gateway = Gateway {
            shared,
            supervisors,
            egress,
            busy_poll,
        };
        Ok((gateway, false))
    }

    /// The state of every configured server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.shared
            .slots
            .iter()
            .map(|slot| {
                let s = slot.snapshot();
                ServerStatus {
                    name: slot.name.clone(),
                    status: s.status,
                    enforcement: s.enforcement,
                    tools: s.live.map_or(0, |l| l.lists.tools.len()),
                }
            })
            .collect()
    }

    /// Serves MCP over `transport` until the client disconnects or `shutdown_signal`
    /// completes; then stops every server. Use `tokio::io::duplex` halves for in-process use.
    pub async fn serve<R, W>(
        self,
        (reader, writer): (R, W),
        shutdown_signal: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), GatewayError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        // The agent's messages are capped like rmcp caps them, but an over-long request is
        // answered with an error instead of being dropped unanswered.
        let reader = agent::frame::LineCap::new(reader, server::MAX_LINE);
        // The busy polling counts the requests the front relays: it spins only while one at
        // most is in flight.
        let transport =
            agent::front::start(reader, writer, self.shared.clone(), self.busy_poll.clone());
        let handler = agent::relaying::RelayingService(agent::service::Upstream {
            shared: self.shared.clone(),
            sessions: None,
        });
        // A stop during the handshake counts too: a client may give up before it completes.
        tokio::pin!(shutdown_signal);
        let started = tokio::select! {
            r = serve_server(handler, transport) => Some(r),
            _ = &mut shutdown_signal => None,
        };
        let outcome = match started {
            Some(Ok(service)) => {
                tokio::select! {
                    r = service.waiting() => {
                        tracing::info!("client disconnected ({r:?}); shutting down");
                    }
                    _ = &mut shutdown_signal => {
                        tracing::info!("shutdown requested");
                    }
                }
                Ok(())
            }
            Some(Err(e)) => Err(GatewayError::Upstream(e.to_string())),
            None => {
                tracing::info!("shutdown requested before the client finished initializing");
                Ok(())
            }
        };
        self.shutdown().await;
        outcome
    }

    /// Serves MCP on stdin/stdout until stdin reaches EOF or SIGINT/SIGTERM arrives.
    pub async fn serve_stdio(self) -> Result<(), GatewayError> {
        self.serve_stdio_until(termination()).await
    }

    /// Serves MCP on stdin/stdout until stdin reaches EOF or `stop` resolves; the busy
    /// polling, if any, watches stdin.
    pub async fn serve_stdio_until(
        self,
        stop: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), GatewayError> {
        let (reader, writer) = agent::stdio::upstream_stdio(self.busy_poll.as_deref());
        self.serve((reader, writer), stop).await
    }

    /// Stops every server (close stdin, wait, SIGTERM, wait, SIGKILL) and waits until each
    /// child is reaped.
    pub async fn shutdown(mut self) {
        // Calls in flight were cancelled with the session (rmcp cancels its handlers when
        // the client goes); give them a moment to write their audit records before their
        // servers stop.
        // Calls suspended in a 2026-07-28 round wait for a retry that cannot come now.
        let abandoned = self.shared.mrtr.abandon_all();
        if abandoned > 0 {
            tracing::info!("{abandoned} call(s) suspended in a round cancelled at shutdown");
        }
        self.shared.calls.close();
        if tokio::time::timeout(CALLS_DRAIN, self.shared.calls.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} call(s) still in flight after {}s at shutdown; they end unanswered and unaudited",
                self.shared.calls.len(),
                CALLS_DRAIN.as_secs()
            );
        }
        self.shared.shutdown.cancel();
        // A supervisor's stop is bounded (two grace periods, then SIGKILL); one that overruns
        // is aborted, and dropping its server's process kills it (`kill_on_drop`), so one
        // stuck server cannot hold the gateway's exit. The supervisors stop their servers
        // side by side: one deadline for them all, then one wait for those aborted.
        let bound = supervisors_bound(&self.shared.limits);
        let deadline = tokio::time::Instant::now() + bound;
        let mut overran = Vec::new();
        for (idx, mut handle) in self.supervisors.drain(..).enumerate() {
            if tokio::time::timeout_at(deadline, &mut handle)
                .await
                .is_err()
            {
                let name = self.shared.slots.get(idx).map(|s| s.name.as_str());
                tracing::warn!(
                    server = name.unwrap_or("?"),
                    "its supervisor had not stopped it {bound:?} after shutdown; aborted"
                );
                handle.abort();
                overran.push(handle);
            }
        }
        // A task inside synchronous code yields only when that code returns.
        let _ = tokio::time::timeout(ABORT_BOUND, futures::future::join_all(overran)).await;
        tracing::info!("every server of this gateway stopped");
        if let Some(mut egress) = self.egress.take() {
            egress.shutdown();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // Supervisors see the token and stop their children; `kill_on_drop` is the backstop.
        self.shared.shutdown.cancel();
    }
}

/// How long shutdown waits for calls in flight to finish (they have been cancelled).
const CALLS_DRAIN: Duration = Duration::from_secs(5);

/// How long a gateway's supervisors get to stop their servers at shutdown.
fn supervisors_bound(limits: &Limits) -> Duration {
    limits.shutdown_grace * 2 + SUPERVISOR_SLACK
}

/// The longest [`Gateway::shutdown`] waits for what it can bound: calls, supervisors, aborts.
pub(crate) fn shutdown_bound(limits: &Limits) -> Duration {
    CALLS_DRAIN + supervisors_bound(limits) + ABORT_BOUND
}
/// Beyond its two grace periods, what a supervisor's stop gets (SIGKILL, reaping, releasing
/// the sandbox) before shutdown aborts it.
const SUPERVISOR_SLACK: Duration = Duration::from_secs(5);
/// How long an aborted supervisor gets to unwind.
const ABORT_BOUND: Duration = Duration::from_secs(1);

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled: until then the default action would kill the gateway without
/// stopping its servers.
pub(crate) fn termination() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move { wait_termination(term, int).await }
}

async fn wait_termination(
    term: std::io::Result<tokio::signal::unix::Signal>,
    int: std::io::Result<tokio::signal::unix::Signal>,
) {
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; only stdin EOF stops the gateway");
            std::future::pending::<()>().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_a_config_start_servers_as_processes() {
        let config =
            crate::config::parse_str(r#"{"mcpServers": {"a": {"command": "x"}}}"#, "t.json")
                .unwrap();
        let opts = GatewayOptions::new(config).unwrap();
        assert_eq!(format!("{:?}", opts.launcher), "ProcessLauncher");
        assert_eq!(
            opts.launcher.probe_depth(),
            crate::sandbox::capabilities::Depth::Full
        );
    }
}

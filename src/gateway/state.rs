//! The gateway's shared state: one slot per configured server (its status, live connection
//! and last lists) and the catalog snapshot built from them.
//!
//! Locks here are std locks around plain data and `Arc` clones; none is ever held across an
//! await, so the call path never waits on another call or on a server's lifecycle.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::link::UpstreamLink;
use crate::gateway::registry::{Catalog, ServerLists};
use crate::gateway::server::request::Connection;
use crate::gateway::server::roots::{RootSet, RootsCell};
use crate::gateway::stages::Stages;
use crate::sandbox::launch::{Enforcement, LaunchRequest};

/// Timeouts and limits of the gateway (from settings, with defaults).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Every forwarded request (tools/call, prompts/get, resources/read, ...).
    pub call_timeout: Duration,
    /// A server's initialize handshake (and its first list requests).
    pub startup_timeout: Duration,
    /// How long `Gateway::start` waits for every server's first start before it returns;
    /// `None`: `startup_timeout`.
    pub ready_timeout: Option<Duration>,
    /// Restarts after a crash or failed start before the server is given up.
    pub max_restarts: u32,
    /// First restart delay; doubles per attempt.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long a child gets after its stdin closes, and again after SIGTERM.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(30),
            ready_timeout: None,
            max_restarts: 5,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// Where a server is in its life; reported by `Gateway::status` and in errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum Status {
    Starting,
    Running,
    /// Its process ended (or a fault ended it): the supervisor is stopping what is left and
    /// will say whether it restarts. Set in the same update that clears `live`, so no one
    /// sees a running server without a process.
    Stopping,
    /// Down, another start is scheduled.
    Restarting {
        reason: String,
        attempt: u32,
    },
    /// Down for good: too many failures.
    Failed {
        reason: String,
    },
    /// The launcher refused to run it (enforce mode and no sandbox) or its config is invalid.
    Refused {
        reason: String,
    },
    Stopped,
}

/// The live part of a running server.
#[derive(Clone)]
pub struct Live {
    pub conn: Connection,
    pub lists: Arc<ServerLists>,
}

#[derive(Clone)]
pub struct SlotState {
    pub status: Status,
    pub live: Option<Live>,
    pub enforcement: Option<Enforcement>,
}

/// Asks a server's supervisor to relaunch it with its current (wider) root set; the answer
/// comes once the new process runs and has applied its roots, or with the reason it failed.
pub struct Relaunch {
    pub reply: oneshot::Sender<Result<(), RelaunchFailed>>,
}

/// Why a relaunch did not bring the server back (the supervisor's reason, shown to the agent
/// and logged; nobody branches on it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RelaunchFailed(pub String);

/// One configured server.
pub struct Slot {
    pub name: String,
    /// The request built from the config (`None` when it could not be built; the reason is
    /// in `Status::Refused`). Its grants, args and env are re-derived from `roots` at every
    /// launch: see [`Slot::launch_request`].
    pub req: Option<LaunchRequest>,
    /// The server's current roots: mounts, `roots/list`, policy roots and guard agree on it.
    pub roots: Arc<RootsCell>,
    /// Orders calls against a roots change: every forward holds a read permit; a widening
    /// takes the write permit, so it waits for in-flight calls and calls that follow it wait
    /// for the relaunched server (tokio's lock is fair: no reader overtakes a waiting writer).
    pub gate: tokio::sync::RwLock<()>,
    /// What of the server's sampling and elicitation requests reaches the agent, and its
    /// in-flight and rate budget (kept across restarts). Nothing by default.
    pub relay: Arc<crate::gateway::server::relay::RelayGate>,
    /// The server's output-rate limit (stdout + stderr, bytes/s; `sandbox.limits.
    /// outputBytesPerSecond`, else the default in `fault.rs`).
    pub output_rate: u64,
    /// The config's `tools` / `prompts` filters: what the agent never sees of this server.
    pub filters: crate::gateway::registry::ListFilters,
    /// The protocol era to speak to it (config `protocol`; see `server::era`).
    pub protocol: crate::config::ServerProtocol,
    relaunch_tx: mpsc::UnboundedSender<Relaunch>,
    relaunch_rx: Mutex<Option<mpsc::UnboundedReceiver<Relaunch>>>,
    state: RwLock<SlotState>,
}

impl Slot {
    /// This server as its audit records name it, with what it runs under now.
    pub fn record_server(&self) -> crate::gateway::stages::RecordServer<'_> {
        crate::gateway::stages::RecordServer::running(&self.name, self.snapshot().enforcement)
    }

    /// A slot whose roots are the request's grants (no policy roots).
    pub fn new(name: String, req: Option<LaunchRequest>, status: Status) -> Slot {
        let roots = req
            .as_ref()
            .map(|r| {
                r.grants
                    .iter()
                    .map(|g| crate::roots::derive::DerivedRoot {
                        path: g.path.clone(),
                        access: g.access,
                        source: crate::roots::derive::RootSource::AllowWrite,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Slot::with_roots(name, req, RootsCell::new(roots, Default::default()), status)
    }

    pub fn with_roots(
        name: String,
        req: Option<LaunchRequest>,
        roots: RootsCell,
        status: Status,
    ) -> Slot {
        let (relaunch_tx, relaunch_rx) = mpsc::unbounded_channel();
        Slot {
            relay: Arc::new(crate::gateway::server::relay::RelayGate::new(
                &name,
                Default::default(),
            )),
            name,
            req,
            roots: Arc::new(roots),
            gate: tokio::sync::RwLock::new(()),
            output_rate: crate::gateway::server::fault::DEFAULT_OUTPUT_BYTES_PER_SECOND,
            filters: Default::default(),
            protocol: Default::default(),
            relaunch_tx,
            relaunch_rx: Mutex::new(Some(relaunch_rx)),
            state: RwLock::new(SlotState {
                status,
                live: None,
                enforcement: None,
            }),
        }
    }

    /// Sets what of the server's sampling and elicitation requests is relayed to the agent.
    pub fn with_relay(mut self, policy: crate::gateway::server::relay::RelayPolicy) -> Slot {
        self.relay = Arc::new(crate::gateway::server::relay::RelayGate::new(
            &self.name, policy,
        ));
        self
    }

    /// The request for the next launch: the config's, with one grant per current root and
    /// `{roots}` placeholders in args and env expanded from the same set (returned too).
    pub fn launch_request(&self) -> Option<(LaunchRequest, Arc<RootSet>)> {
        let mut req = self.req.clone()?;
        let set = self.roots.current();
        req.grants = set.grants();
        req.grants_canonical = true;
        // The set's own record of which root is the session sandbox dir wins over the
        // config-time guess (a set without one keeps the request's).
        if let Some(r) = set
            .roots
            .iter()
            .find(|r| r.source == crate::roots::derive::RootSource::SandboxDir)
        {
            req.session_dir = Some(r.path.clone());
        }
        req.args = crate::roots::args::expand_args(&req.args, &set.paths);
        for v in req.env.values_mut() {
            *v = crate::roots::args::expand_text(v, &set.paths);
        }
        Some((req, set))
    }

    /// Sends a relaunch request to the supervisor.
    pub fn request_relaunch(&self) -> oneshot::Receiver<Result<(), RelaunchFailed>> {
        let (reply, rx) = oneshot::channel();
        // A closed channel means the supervisor ended: the dropped reply says so.
        let _ = self.relaunch_tx.send(Relaunch { reply });
        rx
    }

    /// The supervisor's end of the relaunch channel (taken once).
    pub fn take_relaunch_rx(&self) -> Option<mpsc::UnboundedReceiver<Relaunch>> {
        self.relaunch_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub fn snapshot(&self) -> SlotState {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut SlotState)) {
        f(&mut self.state.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// True when egress is allowed for this server (for the blocked classifier).
    pub fn egress_allowed(&self) -> bool {
        matches!(
            self.req.as_ref().map(|r| &r.network),
            Some(crate::config::NetworkConfig::Allowlist(_))
        )
    }
}

/// Everything the upstream handler, the pipeline and the supervisors share.
pub struct Shared {
    pub slots: Vec<Arc<Slot>>,
    catalog: RwLock<Arc<Catalog>>,
    pub upstream: UpstreamLink,
    pub stages: Stages,
    pub limits: Limits,
    pub shutdown: CancellationToken,
    /// The agent's own roots (narrow path arguments when its client declared them).
    pub upstream_roots: crate::gateway::agent::agent_roots::UpstreamRoots,
    /// The shared egress proxy, when some server has a domain allowlist (its refusal events
    /// are attributed to calls by the pipeline).
    pub egress: Option<crate::egress::EgressProxy>,
    /// What this machine can enforce, probed once when the gateway starts: a probe runs a
    /// trial sandbox, which every server start and relaunch would otherwise repeat.
    pub caps: Arc<crate::sandbox::capabilities::Capabilities>,
    /// How every server is started: `launcher::ProcessLauncher` outside tests.
    pub launcher: Arc<dyn crate::gateway::server::launcher::Launcher>,
    /// Approvals remembered in this session ("approve and remember"); never persisted.
    pub remembered: crate::gateway::call::remembered::Remembered,
    /// Every `tools/call` in progress: shutdown waits (bounded) for them, so that a call cut
    /// short by the client's disconnect still writes its audit record.
    pub calls: tokio_util::task::TaskTracker,
    /// The pins file's gate, when one is configured (`--pins`).
    pub pins: Option<Arc<crate::gateway::stages::pinning::PinGate>>,
    /// Tasks created through this gateway, by the id the agent knows (`tasks.rs`).
    pub tasks: Arc<crate::gateway::call::tasks::TaskTable>,
    /// Questions asked of 2026-07-28 agents, waiting for their retry (`agent/mrtr.rs`).
    pub mrtr: Arc<crate::gateway::agent::mrtr::Pending>,
    /// The calls forwarded and not yet answered that can carry their server's requests to
    /// their agent, by server (`agent/open_calls.rs`).
    pub open_calls: Arc<crate::gateway::agent::open_calls::OpenCalls>,
    /// Every catalog change, for the agent's `subscriptions/listen` streams (`agent/listen.rs`).
    pub list_events: tokio::sync::broadcast::Sender<Changed>,
    /// Serialises catalog rebuilds: each reviews pins (file I/O) outside the catalog lock,
    /// and an older view must never be installed over a newer one.
    refresh: tokio::sync::Mutex<()>,
}

/// Which upstream list notifications a catalog change calls for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Changed {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Shared {
    pub fn new(
        slots: Vec<Arc<Slot>>,
        stages: Stages,
        limits: Limits,
        upstream: UpstreamLink,
        caps: crate::sandbox::capabilities::Capabilities,
    ) -> Shared {
        Shared {
            slots,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            upstream,
            stages,
            limits,
            shutdown: CancellationToken::new(),
            upstream_roots: Default::default(),
            egress: None,
            caps: Arc::new(caps),
            launcher: Arc::new(crate::gateway::server::launcher::ProcessLauncher::default()),
            remembered: Default::default(),
            calls: tokio_util::task::TaskTracker::new(),
            pins: None,
            tasks: Arc::default(),
            mrtr: Arc::default(),
            open_calls: Arc::default(),
            list_events: tokio::sync::broadcast::channel(16).0,
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// Sets the pins gate every catalog rebuild reviews tools against.
    pub fn with_pins(
        mut self,
        pins: Option<Arc<crate::gateway::stages::pinning::PinGate>>,
    ) -> Shared {
        self.pins = pins;
        self
    }

    /// Sets how servers are started (`GatewayOptions::launcher`).
    pub fn with_launcher(
        mut self,
        launcher: Arc<dyn crate::gateway::server::launcher::Launcher>,
    ) -> Shared {
        self.launcher = launcher;
        self
    }

    /// Sets the egress proxy whose refusals calls are attributed from.
    pub fn with_egress(mut self, egress: Option<crate::egress::EgressProxy>) -> Shared {
        self.egress = egress;
        self
    }

    /// The current catalog snapshot (an `Arc` clone; the lock is released at once).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Rebuilds the catalog from every slot and tells the agent what changed.
    pub async fn refresh_catalog(&self) {
        let serial = self.refresh.lock().await;
        let states: Vec<SlotState> = self.slots.iter().map(|s| s.snapshot()).collect();
        let mut lists: Vec<Option<ServerLists>> = self
            .slots
            .iter()
            .zip(&states)
            .map(|(slot, st)| st.live.as_ref().map(|l| slot.filters.apply(&l.lists)))
            .collect();
        let mut records = Vec::new();
        if let Some(pins) = &self.pins {
            // The pins file is read (and maybe written) on the blocking pool, off the runtime.
            let pins = Arc::clone(pins);
            let names: Vec<String> = self.slots.iter().map(|s| s.name.clone()).collect();
            let taken = std::mem::take(&mut lists);
            let reviewed = tokio::task::spawn_blocking(move || {
                let mut recs = Vec::new();
                let out: Vec<Option<ServerLists>> = names
                    .iter()
                    .zip(taken)
                    .map(|(name, l)| match l {
                        Some(l) => {
                            let (kept, r) = pins.review(name, &l);
                            recs.extend(r);
                            Some(kept)
                        }
                        None => {
                            pins.clear(name);
                            None
                        }
                    })
                    .collect();
                (out, recs)
            })
            .await;
            match reviewed {
                Ok((out, recs)) => {
                    lists = out;
                    records = recs;
                }
                Err(e) => {
                    // Fail closed: no catalog change rather than unreviewed tools.
                    tracing::error!("pins review failed: {e}; the catalog is left as it was");
                    return;
                }
            }
        }
        let (old, new) = {
            let mut guard = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            let servers: Vec<(String, Option<&ServerLists>)> = self
                .slots
                .iter()
                .zip(&lists)
                .map(|(slot, l)| (slot.name.clone(), l.as_ref()))
                .collect();
            let unprefixed: Vec<bool> = self.slots.iter().map(|s| s.filters.unprefixed).collect();
            let new = Arc::new(Catalog::build_with(&servers, &unprefixed));
            (std::mem::replace(&mut *guard, new.clone()), new)
        };
        drop(serial);
        for r in records {
            // Stamped with what its server runs under, as a call's record is (they said
            // `sandboxed: false` for every server).
            let enforcement = self
                .slots
                .iter()
                .find(|s| s.name == r.server_name)
                .and_then(|s| s.snapshot().enforcement);
            let r = r.enforced(enforcement);
            if let Err(e) = self.stages.audit.record(&r) {
                tracing::error!(server = %r.server_name, tool = %r.tool_name, "audit write failed for a pin record: {e}");
            }
        }
        let changed = Changed {
            tools: old.tools != new.tools,
            prompts: old.prompts != new.prompts,
            resources: old.resources != new.resources || old.templates != new.templates,
        };
        self.notify(changed).await;
    }

    /// The `tasks` capability the running servers declare together (`None`: none has tasks).
    pub fn tasks_capability(&self) -> Option<serde_json::Value> {
        let live: Vec<serde_json::Value> = self
            .slots
            .iter()
            .filter_map(|s| s.snapshot().live.and_then(|l| l.conn.tasks.clone()))
            .collect();
        crate::gateway::call::tasks::aggregate_capability(&live)
    }

    async fn notify(&self, changed: Changed) {
        // Listen streams (2026-07-28 agents) first; nobody listening is no error.
        let _ = self.list_events.send(changed);
        // Servers leaving as the gateway stops are not news to the agent, and a session
        // that no longer reads must not hold the stop.
        if self.shutdown.is_cancelled() {
            return;
        }
        let Some(peer) = self.upstream.get() else {
            return;
        };
        // A 2026-07-28 agent hears of changes only on the streams it opened.
        if self.upstream.is_sessionless() {
            return;
        }
        let sent = tokio::time::timeout(NOTIFY_BOUND, async {
            if changed.tools {
                let _ = peer.notify_tool_list_changed().await;
            }
            if changed.prompts {
                let _ = peer.notify_prompt_list_changed().await;
            }
            if changed.resources {
                let _ = peer.notify_resource_list_changed().await;
            }
        });
        if sent.await.is_err() {
            tracing::warn!("the agent did not take a list_changed notification within {NOTIFY_BOUND:?}; dropped");
        }
    }
}

/// How long the supervisor waits for the agent to take a `list_changed` notification (rmcp
/// hands it to the session's stream; a stalled session must not hold a server's supervisor).
const NOTIFY_BOUND: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::server::roots::Needed;
    use crate::roots::derive::{DerivedRoot, RootSource};
    use crate::sandbox::Access;

    /// A relaunch after a widening launches with the wider set, and the launcher still knows
    /// which grant is the session sandbox dir (rootsAs delivers it last, never alone).
    #[test]
    fn the_next_launch_request_follows_the_widened_set() {
        let t = tempfile::tempdir().unwrap();
        let (sb, a, b) = (t.path().join("sb"), t.path().join("a"), t.path().join("b"));
        let root = |path: &std::path::Path, access, source| DerivedRoot {
            path: path.to_path_buf(),
            access,
            source,
        };
        let cell = RootsCell::new(
            vec![
                root(&sb, Access::Rw, RootSource::SandboxDir),
                root(&a, Access::Ro, RootSource::AllowRead),
            ],
            Default::default(),
        );
        let req = LaunchRequest {
            name: "fs".into(),
            command: "node".into(),
            ..LaunchRequest::default()
        };
        let slot = Slot::with_roots("fs".into(), Some(req), cell, Status::Starting);
        let (first, _) = slot.launch_request().unwrap();
        assert_eq!(first.session_dir.as_deref(), Some(sb.as_path()));
        assert_eq!(first.grants.len(), 2);
        slot.roots.widen(&[Needed {
            path: b.clone(),
            access: Access::Rw,
        }]);
        let (next, set) = slot.launch_request().unwrap();
        assert_eq!(set.version, 2);
        let paths: Vec<_> = next.grants.iter().map(|g| g.path.clone()).collect();
        assert_eq!(paths, [sb.clone(), a, b]);
        assert_eq!(next.session_dir.as_deref(), Some(sb.as_path()));
    }
}

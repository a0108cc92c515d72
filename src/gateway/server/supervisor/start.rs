//! One start of a server: launch it through the gateway's launcher, log its enforcement,
//! connect (`server/discover` and/or the `initialize` handshake, by its `protocol`), take its
//! first lists and wait until it works in its roots. A failed start says why
//! (`StartError`), with the server's last words on stderr when the handshake failed, and
//! never leaves its child unreaped.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::InitializeResult;
use tokio::sync::mpsc;

use crate::gateway::server::era::Era;
use crate::gateway::server::fault::ProcessFaults;
use crate::gateway::server::handler::DownstreamHandler;
use crate::gateway::server::listing::fetch_lists;
use crate::gateway::server::peer::{NoReply, Reply, ServerPeer};
use crate::gateway::server::progress::ProgressMap;
use crate::gateway::server::request::Connection;
use crate::gateway::server::spawn::SpawnError;
use crate::gateway::state::{Live, Shared, Slot};
use crate::sandbox::launch::LaunchError;

use super::stop::{abandon, stop, stop_process};
use super::Running;

/// Why one start attempt failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("no answer to initialize within {}s", .0.as_secs_f64())]
    InitTimeout(Duration),
    /// The first request of `protocol: auto` went unanswered.
    #[error(
        "no answer to server/discover (its first request) within {}s; a server that ignores \
         requests it does not know can be set to \"protocol\": \"2025-11-25\"",
        .0.as_secs_f64()
    )]
    DiscoverTimeout(Duration),
    #[error("initialize failed: {0}")]
    Init(String),
    #[error(transparent)]
    List(#[from] crate::gateway::server::listing::ListError),
    #[error("shutting down")]
    Shutdown,
    /// A failed handshake, with what the server said on stderr.
    #[error("{error}; the server's last words on stderr: {tail}")]
    Said {
        error: Box<StartError>,
        tail: String,
    },
}

/// How long a failed start waits for the server's stderr to be read to its end.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

pub(super) async fn start(shared: &Shared, slot: &Slot) -> Result<Running, StartError> {
    let Some((req, roots)) = slot.launch_request() else {
        return Err(StartError::Refused("no launch request".into()));
    };
    let req = &req;
    slot.roots.reset_fetched();
    let spawned = match shared.launcher.launch(
        req,
        &shared.caps,
        Arc::new(
            ProcessFaults::new(&slot.name, slot.output_rate)
                .with_stall_limit(shared.limits.call_timeout),
        ),
    ) {
        Ok(s) => s,
        Err(SpawnError::Launch(LaunchError::Refused { name, reasons })) => {
            let e = LaunchError::Refused { name, reasons };
            return Err(StartError::Refused(e.to_string()));
        }
        Err(SpawnError::Launch(LaunchError::Invalid(m))) => return Err(StartError::Refused(m)),
        Err(e) => return Err(e.into()),
    };
    let enforcement = spawned.enforcement.clone();
    match &enforcement {
        crate::sandbox::launch::Enforcement::Sandboxed { backend } => {
            tracing::info!(server = %slot.name, "started (enforcement: sandboxed by {backend:?})")
        }
        crate::sandbox::launch::Enforcement::Degraded { reasons, .. } => tracing::warn!(
            server = %slot.name,
            "started (enforcement: degraded, NOT sandboxed: {})",
            reasons.join("; ")
        ),
        crate::sandbox::launch::Enforcement::OptedOut => tracing::warn!(
            server = %slot.name,
            "started (enforcement: opted-out, \"sandbox\": false in the config)"
        ),
        crate::sandbox::launch::Enforcement::InProcess => tracing::warn!(
            server = %slot.name,
            "started (enforcement: in-process test server, NOT sandboxed)"
        ),
    }
    slot.update(|s| s.enforcement = Some(enforcement));

    let process = spawned.process;
    let faults = spawned.faults;
    let (list_tx, list_rx) = mpsc::unbounded_channel();
    let progress = Arc::new(ProgressMap::default());
    let handler = DownstreamHandler {
        server: slot.name.clone(),
        roots: slot.roots.clone(),
        progress: progress.clone(),
        upstream: shared.upstream.clone(),
        list_changed: list_tx,
        tasks: shared.tasks.clone(),
        unprefixed: slot.filters.unprefixed,
        relay: crate::gateway::server::relay::Relayer {
            gate: slot.relay.clone(),
            upstream: shared.upstream.clone(),
            audit: shared.stages.audit.clone(),
            timeout: shared.limits.call_timeout,
            enforcement: slot.snapshot().enforcement,
            open_calls: shared.open_calls.clone(),
        },
    };
    let timeout = shared.limits.startup_timeout;
    let init_params = handler.initialize_params();
    let envelope = handler.envelope();
    let inbound: Arc<dyn crate::gateway::server::peer::Inbound> = Arc::new(handler);
    let peer = ServerPeer::start(
        &slot.name,
        spawned.stdout,
        spawned.stdin,
        faults.clone(),
        inbound.clone(),
    );
    let init = tokio::select! {
        r = handshake(&peer, slot, &init_params, envelope, timeout) => r,
        _ = shared.shutdown.cancelled() => {
            let how = stop_process(process, &peer, &shared.limits, &slot.name).await;
            tracing::debug!(server = %slot.name, "stopped while starting ({how})");
            return Err(StartError::Shutdown);
        }
    };
    let (info, tasks, era) = match init {
        Ok(init) => init,
        Err(
            e @ (StartError::Init(_) | StartError::InitTimeout(_) | StartError::DiscoverTimeout(_)),
        ) => {
            peer.close();
            abandon(process, &slot.name).await;
            return Err(match faults.stderr_tail(STDERR_SETTLE).await {
                Some(tail) => StartError::Said {
                    error: Box::new(e),
                    tail,
                },
                None => e,
            });
        }
        Err(e) => {
            peer.close();
            abandon(process, &slot.name).await;
            return Err(e);
        }
    };
    let conn = Connection {
        server: slot.name.clone(),
        peer,
        info: Arc::new(info),
        tasks,
        progress,
        faults: faults.clone(),
        era: Arc::new(era),
        inbound,
        open_calls: shared.open_calls.clone(),
    };
    // A 2026-07-28 server's list changes come only on a listen stream: opened before the
    // first listing, so a change racing it is heard.
    crate::gateway::server::listen::spawn(&conn);
    let mut running = Running {
        process,
        conn,
        list_rx,
        roots_version: roots.version,
        faults,
    };
    // Shutdown does not wait for a slow first listing: the server is stopped politely.
    let fetched = tokio::select! {
        l = fetch_lists(&running.conn, timeout) => Some(l),
        _ = shared.shutdown.cancelled() => None,
    };
    let lists = match fetched {
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            let _ = stop(running, &shared.limits, &slot.name).await;
            return Err(e.into());
        }
        None => {
            let _ = stop(running, &shared.limits, &slot.name).await;
            return Err(StartError::Shutdown);
        }
    };
    // The server must work in its roots before any call reaches it (NOTES: re-fetched is
    // not applied).
    let want: Vec<std::path::PathBuf> = roots
        .roots
        .iter()
        .filter(|r| r.path.is_dir())
        .map(|r| r.path.clone())
        .collect();
    let applied = tokio::select! {
        a = crate::gateway::call::applied::announce_and_wait(&running.conn, &lists.tools, &slot.roots, roots.version, &want) => a,
        _ = shared.shutdown.cancelled() => {
            let _ = stop(running, &shared.limits, &slot.name).await;
            return Err(StartError::Shutdown);
        }
    };
    match &applied {
        crate::gateway::call::applied::Applied::NotReported { missing } => tracing::warn!(
            server = %slot.name,
            "roots v{} not reported by the server (missing {:?}); its mounts still confine it",
            roots.version,
            missing
        ),
        a => tracing::debug!(server = %slot.name, "roots v{} applied: {a:?}", roots.version),
    }
    // Notifications that raced the first listing are covered by it.
    while running.list_rx.try_recv().is_ok() {}
    shared.stages.policy.tools_listed(&slot.name, &lists.tools);
    slot.update(|s| {
        s.live = Some(Live {
            conn: running.conn.clone(),
            lists: Arc::new(lists),
        })
    });
    Ok(running)
}

/// How the connection starts, by the server's `protocol` (see `era.rs`): `server/discover`
/// first unless the handshake is pinned, then `initialize` unless the server spoke 2026-07-28.
async fn handshake(
    peer: &ServerPeer,
    slot: &Slot,
    init_params: &serde_json::Value,
    envelope: serde_json::Map<String, serde_json::Value>,
    timeout: Duration,
) -> Result<(InitializeResult, Option<serde_json::Value>, Era), StartError> {
    use crate::config::ServerProtocol;
    use crate::gateway::server::era::{verdict, Verdict};
    if slot.protocol != ServerProtocol::Handshake {
        let params = serde_json::json!({ "_meta": envelope });
        let id = peer.next_id();
        let reply = peer
            .request(id, "server/discover", Some(&params), timeout, None)
            .await;
        let said = match &reply {
            Ok(Reply::Result(raw)) => verdict(Ok(raw.get()), &slot.name),
            Ok(Reply::Error(e)) => verdict(Err(&e.message), &slot.name),
            Err(NoReply::Timeout) => return Err(StartError::DiscoverTimeout(timeout)),
            Err(_) => {
                return Err(StartError::Init(
                    "the server closed its connection before answering server/discover".into(),
                ))
            }
        };
        match said {
            Verdict::Sessionless(view) => {
                let info: InitializeResult = serde_json::from_value(view.clone()).map_err(|e| {
                    StartError::Init(format!("its server/discover answer is unusable ({e})"))
                })?;
                let tasks = view.pointer("/capabilities/tasks").cloned();
                tracing::debug!(server = %slot.name, "speaks 2026-07-28 (no handshake)");
                return Ok((info, tasks, Era::Sessionless { envelope }));
            }
            Verdict::Handshake(why) if slot.protocol == ServerProtocol::Sessionless => {
                return Err(StartError::Init(format!(
                    "its config says \"protocol\": \"2026-07-28\", but {why}; \
                     set \"protocol\": \"auto\" to let it use the initialize handshake"
                )));
            }
            Verdict::Handshake(why) => {
                tracing::debug!(server = %slot.name, "initialize handshake ({why})");
            }
        }
    }
    let (info, tasks) = initialize(peer, init_params, timeout).await?;
    Ok((info, tasks, Era::Handshake))
}

/// The handshake: `initialize` within `timeout`, then `notifications/initialized`.
async fn initialize(
    peer: &ServerPeer,
    params: &serde_json::Value,
    timeout: Duration,
) -> Result<(InitializeResult, Option<serde_json::Value>), StartError> {
    let id = peer.next_id();
    let reply = peer
        .request(id, "initialize", Some(params), timeout, None)
        .await;
    let raw = match reply {
        Ok(Reply::Result(raw)) => raw,
        Ok(crate::gateway::server::peer::Reply::Error(e)) => {
            return Err(StartError::Init(e.message.to_string()))
        }
        Err(crate::gateway::server::peer::NoReply::Timeout) => {
            return Err(StartError::InitTimeout(timeout))
        }
        Err(_) => {
            return Err(StartError::Init(
                "the server closed its connection before answering".into(),
            ))
        }
    };
    let info: InitializeResult = serde_json::from_str(raw.get())
        .map_err(|e| StartError::Init(format!("its answer is not an initialize result ({e})")))?;
    // rmcp's typed capabilities have no `tasks` (2025-11-25): read it from the raw answer.
    let tasks = serde_json::from_str::<serde_json::Value>(raw.get())
        .ok()
        .and_then(|v| v.pointer("/capabilities/tasks").cloned());
    peer.notify("notifications/initialized", None).await;
    Ok((info, tasks))
}

//! One supervisor task per configured server: start (launch through the gateway's
//! `launcher::Launcher`: a sandboxed child in production, a task in the pipeline's unit tests;
//! initialize within the startup timeout, first lists), watch (child exit, transport closed, list changes), restart with
//! exponential backoff up to a limit, and stop (close stdin, wait, SIGTERM, wait, SIGKILL,
//! always reap).
//!
//! A server's failure never reaches beyond its slot: its tools leave the catalog (the agent
//! gets `list_changed`), calls to it get an error naming the reason, and the other servers
//! keep running. Never: kill from `Drop` via a spawned task, or leave a child unreaped.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::InitializeResult;
use tokio::sync::{mpsc, oneshot};

use crate::gateway::server::era::Era;
use crate::gateway::server::fault::ProcessFaults;
use crate::gateway::server::handler::{Connection, DownstreamHandler, ListKind};
use crate::gateway::server::launcher::{Exit, ServerProcess};
use crate::gateway::server::peer::{NoReply, Reply, ServerPeer};
use crate::gateway::server::progress::ProgressMap;
use crate::gateway::server::spawn::SpawnError;
use crate::gateway::state::{Live, Relaunch, RelaunchFailed, Shared, Slot, Status};

use super::listing::{fetch_lists, spawn_relist};
use crate::sandbox::launch::LaunchError;

/// A server that ran this long without failing gets its restart budget back.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How often the supervisor double-checks that rmcp's transport is still open.
const LIVENESS_TICK: Duration = Duration::from_millis(500);

/// Why one start attempt failed.
#[derive(Debug, thiserror::Error)]
enum StartError {
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
    List(#[from] super::listing::ListError),
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

/// A started server, owned by its supervisor.
struct Running {
    /// The child process (or in-process task) and what its launch attached.
    process: ServerProcess,
    conn: Connection,
    list_rx: mpsc::UnboundedReceiver<ListKind>,
    /// The root-set version this process was launched with (its mounts).
    roots_version: u64,
    /// Its output budget and protocol faults (charged by the pipe readers).
    faults: Arc<ProcessFaults>,
}

/// Why a running server stopped.
enum End {
    Exited(String),
    /// A protocol or output-rate fault (see `fault.rs`): killed at once, then restarted.
    Fault(String),
    Shutdown,
    /// Its roots grew: relaunch with the wider mounts, then answer the request.
    Relaunch(Relaunch),
}

/// Supervises slot `idx` until shutdown or until it is given up. `first` fires once the
/// first start attempt has settled (running, refused or failed).
pub async fn supervise(shared: Arc<Shared>, idx: usize, first: oneshot::Sender<()>) {
    let slot = shared.slots[idx].clone();
    let mut first = Some(first);
    let settle = |first: &mut Option<oneshot::Sender<()>>| {
        if let Some(tx) = first.take() {
            let _ = tx.send(());
        }
    };
    if slot.req.is_none() {
        settle(&mut first);
        return;
    }
    let Some(mut relaunch_rx) = slot.take_relaunch_rx() else {
        tracing::error!(server = %slot.name, "supervised twice; the second supervisor ends");
        settle(&mut first);
        return;
    };
    let mut failures: u32 = 0;
    // A relaunch in progress: answered once the new process runs (or failed to start).
    let mut relaunching: Option<Relaunch> = None;
    // The process a relaunch replaces: stopped on its own task while the new one starts
    // (calls are held at the slot's gate meanwhile), and always awaited, so it is reaped.
    let mut retiring: Option<tokio::task::JoinHandle<String>> = None;
    loop {
        if shared.shutdown.is_cancelled() {
            break;
        }
        slot.update(|s| {
            if !matches!(s.status, Status::Restarting { .. }) {
                s.status = Status::Starting;
            }
        });
        let attempt = start(&shared, &slot).await;
        if let Some(old) = retiring.take() {
            let exit = old
                .await
                .unwrap_or_else(|e| format!("stop task failed: {e}"));
            tracing::info!(server = %slot.name, "replaced process ended ({exit})");
        }
        let reason = match attempt {
            Ok(mut running) => {
                slot.update(|s| {
                    s.status = Status::Running;
                });
                shared.refresh_catalog().await;
                settle(&mut first);
                if let Some(r) = relaunching.take() {
                    let _ = r.reply.send(Ok(()));
                }
                let started = Instant::now();
                let end = watch(&shared, &slot, &mut running, &mut relaunch_rx).await;
                if !matches!(end, End::Relaunch(_)) {
                    // A relaunch keeps the old lists in the catalog: calls wait on the
                    // slot's gate meanwhile, and the agent hears of a change only if the
                    // new process lists different tools.
                    slot.update(|s| s.live = None);
                    shared.refresh_catalog().await;
                }
                match end {
                    End::Shutdown => {
                        stop(running, &shared.limits, &slot.name).await;
                        break;
                    }
                    End::Relaunch(r) => {
                        tracing::info!(server = %slot.name, "relaunching with wider roots");
                        let limits = shared.limits.clone();
                        let name = slot.name.clone();
                        retiring =
                            Some(tokio::spawn(
                                async move { stop(running, &limits, &name).await },
                            ));
                        relaunching = Some(r);
                        continue;
                    }
                    End::Exited(why) => {
                        // Why a limit killed it, for the agent: the calls it left unanswered
                        // are told at once (they wait briefly for this), later calls by the
                        // slot's status.
                        let guard_hits = running.process.limits_hit();
                        let why = if guard_hits.is_empty() {
                            why
                        } else {
                            format!("{why}: {}", guard_hits.join("; "))
                        };
                        let faults = running.faults.clone();
                        faults.set_ended(why.clone());
                        let exit = stop(running, &shared.limits, &slot.name).await;
                        if started.elapsed() >= STABLE_AFTER {
                            failures = 0;
                        }
                        // An exit already names its status; a closed connection does not.
                        if why.contains(&exit) {
                            why
                        } else {
                            format!("{why} ({exit})")
                        }
                    }
                    End::Fault(why) => {
                        running.faults.set_ended(why.clone());
                        kill(running, &shared.limits, &slot.name).await;
                        format!("{why} (killed)")
                    }
                }
            }
            Err(StartError::Shutdown) => break,
            Err(StartError::Refused(reason)) => {
                if let Some(r) = relaunching.take() {
                    let _ = r.reply.send(Err(RelaunchFailed(reason.clone())));
                }
                slot.update(|s| s.live = None);
                shared.refresh_catalog().await;
                tracing::error!(server = %slot.name, "not started: {reason}");
                slot.update(|s| s.status = Status::Refused { reason });
                settle(&mut first);
                return;
            }
            Err(e) => {
                if let Some(r) = relaunching.take() {
                    let _ = r.reply.send(Err(RelaunchFailed(e.to_string())));
                    slot.update(|s| s.live = None);
                    shared.refresh_catalog().await;
                }
                e.to_string()
            }
        };
        failures += 1;
        if failures > shared.limits.max_restarts {
            tracing::error!(
                server = %slot.name,
                "giving up after {} failed starts: {reason}",
                failures
            );
            slot.update(|s| {
                s.status = Status::Failed {
                    reason: format!("gave up after {failures} failures; last: {reason}"),
                }
            });
            settle(&mut first);
            return;
        }
        let delay = backoff(&shared.limits, failures);
        tracing::warn!(
            server = %slot.name,
            "down: {reason}; restart {failures}/{} in {:.1}s",
            shared.limits.max_restarts,
            delay.as_secs_f64()
        );
        slot.update(|s| {
            s.status = Status::Restarting {
                reason: reason.clone(),
                attempt: failures,
            }
        });
        // The first start has settled (as "restarting") once its failure is recorded.
        settle(&mut first);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shared.shutdown.cancelled() => break,
        }
    }
    slot.update(|s| {
        s.status = Status::Stopped;
        s.live = None;
    });
}

/// Exponential backoff: base * 2^(n-1), capped.
pub fn backoff(limits: &crate::gateway::state::Limits, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    limits
        .backoff_base
        .saturating_mul(factor)
        .min(limits.backoff_max)
}

async fn start(shared: &Shared, slot: &Slot) -> Result<Running, StartError> {
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

    let mut process = spawned.process;
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
            open_calls: shared.mrtr_open.clone(),
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
            peer.close();
            reap_now(&mut process, &slot.name).await;
            return Err(StartError::Shutdown);
        }
    };
    let (info, tasks, era) = match init {
        Ok(init) => init,
        Err(
            e @ (StartError::Init(_) | StartError::InitTimeout(_) | StartError::DiscoverTimeout(_)),
        ) => {
            peer.close();
            reap_now(&mut process, &slot.name).await;
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
            reap_now(&mut process, &slot.name).await;
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
    let lists = match fetch_lists(&running.conn, timeout).await {
        Ok(l) => l,
        Err(e) => {
            let _ = stop(running, &shared.limits, &slot.name).await;
            return Err(e.into());
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
            Ok(Reply::Result(raw)) => verdict(Ok(raw), &slot.name),
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

/// Waits until the server ends, the gateway shuts down or its roots outgrow its mounts;
/// refreshes lists on `list_changed`.
async fn watch(
    shared: &Shared,
    slot: &Slot,
    running: &mut Running,
    relaunch_rx: &mut mpsc::UnboundedReceiver<Relaunch>,
) -> End {
    let mut tick = tokio::time::interval(LIVENESS_TICK);
    // Re-lists in flight (aborted when this process's watch ends), by kind.
    let mut relists = tokio::task::JoinSet::new();
    let mut in_flight = std::collections::HashSet::new();
    let mut again = std::collections::HashSet::new();
    loop {
        tokio::select! {
            Some(r) = relaunch_rx.recv() => {
                // Already launched with this set (a request queued behind an earlier
                // relaunch): nothing to do.
                if slot.roots.current().version <= running.roots_version {
                    let _ = r.reply.send(Ok(()));
                } else {
                    return End::Relaunch(r);
                }
            }
            exit = running.process.wait() => return End::Exited(exit_reason(exit, slot)),
            why = running.faults.tripped() => return End::Fault(why),
            _ = shared.shutdown.cancelled() => return End::Shutdown,
            Some(kind) = running.list_rx.recv() => {
                // Re-listed on its own task, so the supervisor keeps watching exits and
                // shutdown meanwhile; a change announced during a re-list of the same kind
                // is listed once more after it.
                if in_flight.contains(&kind) {
                    again.insert(kind);
                } else {
                    in_flight.insert(kind);
                    spawn_relist(&mut relists, running.conn.clone(), kind, shared.limits.call_timeout);
                }
            }
            Some(joined) = relists.join_next(), if !relists.is_empty() => {
                let Ok((kind, listed)) = joined else { continue };
                in_flight.remove(&kind);
                if again.remove(&kind) {
                    in_flight.insert(kind);
                    spawn_relist(&mut relists, running.conn.clone(), kind, shared.limits.call_timeout);
                }
                match listed {
                    Ok(fresh) => {
                        if kind == ListKind::Tools {
                            shared.stages.policy.tools_listed(&slot.name, &fresh.tools);
                        }
                        slot.update(|s| {
                            if let Some(live) = &mut s.live {
                                let mut lists = (*live.lists).clone();
                                lists.take_kind(kind, fresh);
                                live.lists = Arc::new(lists);
                            }
                        });
                        shared.refresh_catalog().await;
                    }
                    Err(e) => tracing::warn!(server = %slot.name, "re-listing after list_changed failed: {e}"),
                }
            }
            _ = tick.tick() => {
                if let Some(why) = running.faults.fault() {
                    return End::Fault(why.to_string());
                }
                // A fork bomb held at pids.max keeps the server alive but useless: treat
                // the limit like a memory kill, restart it and say why.
                // (As root without a pids cgroup, the tree is counted.)
                if let Some(why) = running.process.over_task_limit() {
                    return End::Fault(why);
                }
                if running.conn.peer.is_closed() {
                    return End::Exited("the server closed its MCP connection".into());
                }
            }
        }
    }
}

/// Stops a started server: close its stdin (by closing rmcp's transport), wait, SIGTERM,
/// wait, SIGKILL; always reaps. Returns how it ended, for the log.
async fn stop(running: Running, limits: &crate::gateway::state::Limits, name: &str) -> String {
    let Running {
        mut process, conn, ..
    } = running;
    // Closing the connection closes the child's stdin: a well-behaved server exits.
    conn.peer.close();
    if let Ok(exit) = tokio::time::timeout(limits.shutdown_grace, process.wait()).await {
        return exit.to_string();
    }
    if process.terminate() {
        tracing::info!(server = %name, "did not exit after stdin closed; sent SIGTERM");
        if let Ok(exit) = tokio::time::timeout(limits.shutdown_grace, process.wait()).await {
            return format!("{exit} after SIGTERM");
        }
    }
    tracing::warn!(server = %name, "did not exit after SIGTERM; killing");
    reap_now(&mut process, name).await;
    "killed".into()
}

/// How a server's exit reads to the agent; a signal that a configured limit sends is named.
fn exit_reason(exit: Exit, slot: &Slot) -> String {
    use std::os::unix::process::ExitStatusExt;
    let status = match exit {
        Exit::Status(s) => s,
        Exit::Task(how) => return format!("the in-process server ended ({how})"),
        Exit::Unknown(e) => return format!("waiting for the server failed: {e}"),
    };
    let base = format!("the server exited ({status})");
    let cpu = slot.req.as_ref().and_then(|r| r.limits.cpu_seconds);
    // Killed by SIGXCPU: as a signal when palisade runs the server directly, as exit code
    // 128 + 24 when bwrap's init reports the death of the process it ran.
    let xcpu = nix::sys::signal::Signal::SIGXCPU as i32;
    let by_xcpu = status.signal() == Some(xcpu) || status.code() == Some(128 + xcpu);
    match cpu {
        Some(secs) if by_xcpu => {
            format!("{base}: CPU time limit reached ({secs} s, sandbox.limits.cpuSeconds)")
        }
        _ => base,
    }
}

/// Stops a faulting server at once: it is not trusted to exit when asked (it may be
/// flooding its pipes). Closes its connection, SIGKILLs it and reaps it.
async fn kill(running: Running, limits: &crate::gateway::state::Limits, name: &str) {
    let Running {
        mut process, conn, ..
    } = running;
    reap_now(&mut process, name).await;
    conn.peer.close();
    let _ = tokio::time::timeout(limits.shutdown_grace, conn.peer.closed()).await;
}

/// SIGKILL and reap (a child that never got as far as a connection).
async fn reap_now(process: &mut ServerProcess, name: &str) {
    if let Err(e) = process.kill().await {
        tracing::debug!(server = %name, "kill: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::state::Limits;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let l = Limits {
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(4),
            ..Limits::default()
        };
        let got: Vec<_> = (1..=6).map(|n| backoff(&l, n).as_millis()).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 4000, 4000]);
    }
}

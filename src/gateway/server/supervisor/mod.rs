//! One supervisor task per configured server: start (launch through the gateway's
//! `launcher::Launcher`: a sandboxed child in production, a task in the pipeline's unit tests;
//! initialize within the startup timeout, first lists), watch (child exit, transport closed, list
//! changes), restart with exponential backoff up to a limit, and stop (close stdin, wait, SIGTERM,
//! wait, SIGKILL, always reap).
//!
//! A server's failure never reaches beyond its slot: its tools leave the catalog (the agent
//! gets `list_changed`), calls to it get an error naming the reason, and the other servers
//! keep running. Never: kill from `Drop` via a spawned task, or leave a child unreaped.
//!
//! This file is the loop (`supervise`); one start is `start.rs`, watching a running server
//! `watch.rs`, ending one `stop.rs`, and the restart budget and backoff, pure, `restart.rs`.
#![allow(deprecated)]

mod restart;
mod start;
mod stop;
mod watch;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::gateway::state::{Relaunch, RelaunchFailed, Shared, Status};

use restart::{Next, Restarts};
use start::{start, StartError};
use stop::{kill, stop};
use watch::{watch, End};

/// A started server, owned by its supervisor: made by `start`, ended by `stop`.
struct Running {
    /// The child process (or in-process task) and what its launch attached.
    process: crate::gateway::server::launcher::ServerProcess,
    conn: crate::gateway::server::request::Connection,
    list_rx: tokio::sync::mpsc::UnboundedReceiver<crate::gateway::server::handler::ListKind>,
    /// The root-set version this process was launched with (its mounts).
    roots_version: u64,
    /// Its output budget and protocol faults (charged by the pipe readers).
    faults: Arc<crate::gateway::server::fault::ProcessFaults>,
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
    let mut restarts = Restarts::default();
    // A relaunch in progress: answered once the new process runs (or failed to start).
    let mut relaunching: Option<Relaunch> = None;
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
                // Its tasks end with this process; each one not yet audited gets its record.
                let ended = match &end {
                    End::Shutdown => {
                        "its servers were stopped (palisade stopping, or its principal idle)"
                            .to_string()
                    }
                    End::Relaunch(_) => "relaunched with wider roots".to_string(),
                    End::Exited(why) | End::Fault(why) => why.clone(),
                };
                crate::gateway::call::task_relay::end_with_server(&shared, idx, &ended);
                if !matches!(end, End::Relaunch(_)) {
                    // A relaunch keeps the old lists in the catalog: calls wait on the
                    // slot's gate meanwhile, and the agent hears of a change only if the
                    // new process lists different tools.
                    slot.update(|s| {
                        s.live = None;
                        s.status = Status::Stopping;
                    });
                    // At shutdown no one lists again: the server is stopped first, not
                    // after a catalog refresh (pins file, serialised) that could hold it.
                    if !shared.shutdown.is_cancelled() {
                        shared.refresh_catalog().await;
                    }
                }
                match end {
                    End::Shutdown => {
                        stop(running, &shared.limits, &slot.name).await;
                        break;
                    }
                    End::Relaunch(r) => {
                        tracing::info!(server = %slot.name, "relaunching with wider roots");
                        // Stopped before the new sandbox is prepared: a process still running
                        // could swap a directory between the launch's checks (recorded roots,
                        // pins) and bwrap's own resolution of its mounts. Calls wait at the
                        // slot's gate meanwhile.
                        let exit = stop(running, &shared.limits, &slot.name).await;
                        tracing::info!(server = %slot.name, "replaced process ended ({exit})");
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
                        restarts.ran_for(started.elapsed());
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
        let (failures, delay) = match restarts.failed(&shared.limits) {
            Next::Retry { attempt, delay } => (attempt, delay),
            Next::GiveUp { failures } => {
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
        };
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

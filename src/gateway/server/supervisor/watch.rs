//! Watching a running server until it ends (exit, a closed connection, a fault, a task
//! count over its limit), the gateway shuts down, or its roots outgrow its mounts; meanwhile
//! its lists are re-read on `list_changed`, each re-list on its own task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::gateway::server::handler::ListKind;
use crate::gateway::server::listing::spawn_relist;
use crate::gateway::state::{Relaunch, Shared, Slot};

use super::stop::exit_reason;
use super::Running;

/// How often the supervisor double-checks that rmcp's transport is still open.
const LIVENESS_TICK: Duration = Duration::from_millis(500);

/// How long a server whose connection closed is given to exit, so that its exit status, not
/// the closed pipe, is the reason the calls it left unanswered are told. Less than the wait of
/// those calls (`request.rs`, END_REASON_WAIT) minus a tick.
const EXIT_AFTER_CLOSE: Duration = Duration::from_secs(1);

/// Why a running server stopped.
pub(super) enum End {
    Exited(String),
    /// A protocol or output-rate fault (see `fault.rs`): killed at once, then restarted.
    Fault(String),
    Shutdown,
    /// Its roots grew: relaunch with the wider mounts, then answer the request.
    Relaunch(Relaunch),
}

/// Waits until the server ends, the gateway shuts down or its roots outgrow its mounts;
/// refreshes lists on `list_changed`.
pub(super) async fn watch(
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
                    // A server whose pipe closed is usually exiting: its status says why (a
                    // limit's signal), which "closed its connection" would hide from the
                    // calls it left unanswered. Found by this tick before the exit was
                    // reaped, it is given a moment to end (shutdown waits as long, at most).
                    let exit = tokio::time::timeout(EXIT_AFTER_CLOSE, running.process.wait());
                    return match exit.await {
                        Ok(exit) => End::Exited(exit_reason(exit, slot)),
                        Err(_) => End::Exited("the server closed its MCP connection".into()),
                    };
                }
            }
        }
    }
}

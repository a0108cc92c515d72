//! Ending a server's process: politely (close its stdin, wait, SIGTERM, wait, SIGKILL), at
//! once for a faulting one, or a bare kill for a child that never got a connection; always
//! reaped. Also how an exit reads to the agent. Never: kill from `Drop`.

use crate::gateway::server::launcher::{Exit, ServerProcess};
use crate::gateway::state::Slot;

use super::Running;

/// Stops a started server: close its stdin (by closing its connection), wait, SIGTERM,
/// wait, SIGKILL; always reaps. Returns how it ended, for the log.
pub(super) async fn stop(
    running: Running,
    limits: &crate::gateway::state::Limits,
    name: &str,
) -> String {
    let Running { process, conn, .. } = running;
    stop_process(process, &conn.peer, limits, name).await
}

/// `stop` for a server with or without a finished handshake: its connection closed (its
/// stdin with it: a well-behaved server exits), then asked harder each grace period. Also
/// used at shutdown during a start: the server may be fetching its package or writing a
/// cache, and a kill out of the blue could leave that half done.
pub(super) async fn stop_process(
    mut process: ServerProcess,
    peer: &crate::gateway::server::peer::ServerPeer,
    limits: &crate::gateway::state::Limits,
    name: &str,
) -> String {
    peer.close();
    let how = ended(&mut process, limits, name).await;
    release(process, name).await;
    how
}

/// Waits for the server to end, asking harder each grace period; how it ended.
async fn ended(
    process: &mut ServerProcess,
    limits: &crate::gateway::state::Limits,
    name: &str,
) -> String {
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
    reap_now(process, name).await;
    "killed".into()
}

/// Lets go of a reaped server's process and what its launch attached, on tokio's blocking
/// pool: removing its cgroup waits for the kernel to tear the server's namespace down (up to
/// about 200 ms per cgroup directory), and `serve` on stdio runs every task on one thread,
/// which must not wait with it. Awaited, so a stop still leaves nothing behind.
async fn release(process: ServerProcess, name: &str) {
    if let Err(e) = tokio::task::spawn_blocking(move || drop(process)).await {
        tracing::warn!(server = %name, "releasing the stopped server failed: {e}");
    }
}

/// How a server's exit reads to the agent; a signal that a configured limit sends is named.
pub(super) fn exit_reason(exit: Exit, slot: &Slot) -> String {
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
pub(super) async fn kill(running: Running, limits: &crate::gateway::state::Limits, name: &str) {
    let Running {
        mut process, conn, ..
    } = running;
    reap_now(&mut process, name).await;
    conn.peer.close();
    let _ = tokio::time::timeout(limits.shutdown_grace, conn.peer.closed()).await;
    release(process, name).await;
}

/// Ends a child that never got as far as a connection: SIGKILL, reap, release.
pub(super) async fn abandon(mut process: ServerProcess, name: &str) {
    reap_now(&mut process, name).await;
    release(process, name).await;
}

/// SIGKILL and reap.
async fn reap_now(process: &mut ServerProcess, name: &str) {
    if let Err(e) = process.kill().await {
        tracing::debug!(server = %name, "kill: {e}");
    }
}

//! Connect mediation: how the Landlock tier holds a server with a domain allowlist to its
//! egress proxy's address, not only its port.
//!
//! Landlock's network rules name TCP ports, not addresses, so with them alone a server could
//! also reach the proxy's port number on any host (one listening on every port). The
//! server's seccomp filter therefore hands every `connect()` to palisade (user
//! notification); the child sends its listener here before it execs (`sys::notify`). For
//! each call a thread of palisade's reads the address from the caller's memory, judges it
//! (`verdict`: the proxy's loopback endpoint only), and either refuses it with EACCES, as
//! Landlock refuses a port, or connects the caller's socket itself: on a copy of the
//! descriptor (`pidfd_getfd`), to the address it checked, so a caller that rewrites its
//! memory after the check gains nothing. Landlock's port rule stays in place beneath.
//!
//! One thread per such server, blocked in `poll` (never on the runtime), ending when the
//! server's last process does. If it cannot read or answer, every connect of that server
//! fails (the kernel fails a notification nobody answers once the listener is closed): fail
//! closed.

mod verdict;

use std::net::SocketAddrV4;
use std::os::fd::OwnedFd;

use crate::sandbox::sys;

pub use verdict::{verdict, Verdict, SOCKADDR_MAX_LEN};

/// Starts the gate of server `name`: a thread that waits for the listener the child sends
/// on `from_child` (returns at once when the child's end closes without one), then answers
/// its connects. `endpoint`: the server's egress proxy.
pub fn start(name: &str, from_child: OwnedFd, endpoint: SocketAddrV4) -> std::io::Result<()> {
    let server = name.to_string();
    std::thread::Builder::new()
        .name(format!("connect-gate-{name}"))
        .spawn(move || serve(&server, &from_child, endpoint))?;
    Ok(())
}

fn serve(server: &str, from_child: &OwnedFd, endpoint: SocketAddrV4) {
    let listener = match sys::recv_fd(from_child) {
        Ok(Some(fd)) => sys::Listener::new(fd),
        // The child ended (or was never spawned) before installing its filter.
        Ok(None) => return,
        Err(e) => {
            tracing::error!(
                server,
                "connect gate: no listener from the sandboxed child: {e}; its connects fail"
            );
            return;
        }
    };
    loop {
        match listener.wait() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::error!(
                    server,
                    "connect gate: waiting failed: {e}; the server's connects fail from now on"
                );
                return;
            }
        }
        let call = match listener.recv() {
            Ok(call) => call,
            // The caller was killed between the wakeup and the read.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => {
                tracing::error!(server, "connect gate: reading a notification failed: {e}; the server's connects fail from now on");
                return;
            }
        };
        let Some(result) = answer(server, &listener, &call, endpoint) else {
            continue;
        };
        if let Err(e) = listener.answer(call.id, result) {
            tracing::error!(
                server,
                "connect gate: answering failed: {e}; the server's connects fail from now on"
            );
            return;
        }
    }
}

/// The answer to one intercepted connect: its result, or `None` when the caller left the
/// call meanwhile (nothing to answer).
fn answer(
    server: &str,
    listener: &sys::Listener,
    call: &sys::Notification,
    endpoint: SocketAddrV4,
) -> Option<Result<i64, i32>> {
    let [fd, addr, len, ..] = call.args;
    // socklen_t is 32 bits wide; the upper half of the register is not the caller's.
    let len = (len as u32) as usize;
    if len > SOCKADDR_MAX_LEN {
        return Some(Err(libc::EINVAL));
    }
    let bytes = match sys::read_memory(call.pid, addr, len) {
        Ok(b) => b,
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return Some(Err(libc::EFAULT)),
        Err(e) => {
            tracing::warn!(
                server,
                "connect gate: cannot read the address of a connect: {e}; refused"
            );
            return Some(Err(libc::EACCES));
        }
    };
    // The pid named the caller when the notification was read; still pending means it
    // still does (the caller is blocked in the call, so its pid cannot be reused).
    if !listener.pending(call.id) {
        return None;
    }
    match verdict(&bytes, endpoint) {
        Verdict::Invalid(errno) => Some(Err(errno)),
        Verdict::Refuse(asked) => {
            tracing::warn!(
                server,
                "connect to {asked} refused: under Landlock this server may connect only to its egress proxy ({endpoint})"
            );
            Some(Err(libc::EACCES))
        }
        Verdict::Connect(to) => Some(connect_for(server, listener, call, fd as i32, &to)),
    }
}

/// Connects the caller's descriptor `fd` to `to` on palisade's copy of it: the caller's
/// socket is then connected (or in progress) exactly as its own connect would have left it.
fn connect_for(
    server: &str,
    listener: &sys::Listener,
    call: &sys::Notification,
    fd: i32,
    to: &std::net::SocketAddr,
) -> Result<i64, i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EACCES);
    let process = thread_group_of(call.pid).ok_or(libc::EACCES)?;
    let pidfd = sys::pidfd(process).map_err(|e| {
        tracing::warn!(
            server,
            "connect gate: no pidfd for process {process}: {e}; connect refused"
        );
        libc::EACCES
    })?;
    // Still pending: the pidfd was opened on the caller's process, not a successor's.
    if !listener.pending(call.id) {
        return Err(libc::EINTR);
    }
    let sock = sys::copy_fd(&pidfd, fd).map_err(|e| match e.raw_os_error() {
        Some(libc::EBADF) => libc::EBADF,
        _ => {
            tracing::warn!(
                server,
                "connect gate: cannot take the socket of process {process}: {e}; connect refused"
            );
            libc::EACCES
        }
    })?;
    sys::connect(&sock, to).map(|()| 0).map_err(errno)
}

/// The process (thread group) of thread `tid`, from `/proc/TID/status`.
fn thread_group_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

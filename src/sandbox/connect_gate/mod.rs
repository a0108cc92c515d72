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
//! memory after the check gains nothing. The server's own connect never runs, so this
//! verdict is the one check on `connect()` (Landlock's port rule applies to the server's
//! calls, and palisade's connect is not one); Landlock still refuses every `bind`.
//!
//! One thread per such server, blocked in `poll` (never on the runtime), ending when the
//! server's last process does; whatever fails meanwhile, the listener stays open and the
//! connect is refused. Once it is closed (palisade killed) a connect nobody answers fails
//! (ENOSYS), and the server cannot install a listener of its own to take over (its filter
//! refuses one: `seccomp::Inet::Mediated`). Where palisade cannot read the caller (Yama,
//! a server that made itself non-dumpable under an unprivileged palisade) the connect is
//! refused: fail closed.

mod verdict;

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::time::Instant;

use crate::egress::events::{Protocol, RefusalEvent, RefusalReporter};
use crate::egress::policy::RefusalReason;
use crate::sandbox::sys;

pub use verdict::{verdict, Refused, Verdict, SOCKADDR_MAX_LEN};

/// Starts the gate of server `name`: a thread that waits for the listener the child sends
/// on `from_child` (returns at once when the child's end closes without one), then answers
/// its connects. `endpoint`: the server's egress proxy; `reporter`: where a refused address
/// is published, as the proxy publishes its refusals (the call in flight, the audit).
pub fn start(
    name: &str,
    from_child: OwnedFd,
    endpoint: SocketAddrV4,
    reporter: Option<RefusalReporter>,
) -> std::io::Result<()> {
    let server = name.to_string();
    std::thread::Builder::new()
        .name(format!("connect-gate-{name}"))
        .spawn(move || serve(&server, &from_child, endpoint, reporter))?;
    Ok(())
}

fn serve(
    server: &str,
    from_child: &OwnedFd,
    endpoint: SocketAddrV4,
    reporter: Option<RefusalReporter>,
) {
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
    let mut refusals = Refusals {
        reporter,
        ..Refusals::default()
    };
    // Until every process under the filter has ended: the listener stays open whatever
    // fails here, so a connect is refused, never left to anyone else to decide.
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
                tracing::error!(server, "connect gate: reading a notification failed: {e}");
                // Not a spin: a failing read is not a pending call; wait for the next.
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let Some(result) = answer(server, &listener, &call, endpoint, &mut refusals) else {
            continue;
        };
        if let Err(e) = listener.answer(call.id, result) {
            tracing::error!(server, "connect gate: answering a connect failed: {e}");
        }
    }
}

/// How many connects of one server were refused: the first few are logged one by one, then
/// one line per thousand (a server retrying in a loop must not fill the log). Every refusal
/// is logged through here. A refused address is also published (`reporter`) for the call in
/// flight, every time, within a budget per server (`Budget`): a server scanning addresses
/// must not crowd other servers' refusals out of the proxy's shared channel.
#[derive(Default)]
struct Refusals {
    count: u64,
    reporter: Option<RefusalReporter>,
    budget: Budget,
}

/// A token bucket: `BURST` events at once, `PER_SECOND` a second after that.
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            tokens: Budget::BURST,
            at: Instant::now(),
        }
    }
}

impl Budget {
    const BURST: f64 = 20.0;
    const PER_SECOND: f64 = 50.0;

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * Self::PER_SECOND;
        self.tokens = (self.tokens + refill).min(Self::BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Refusals {
    const LOGGED_EACH: u64 = 10;

    /// Publishes the refusal of a connect to `to` for the call in flight.
    fn publish(&mut self, server: &str, to: SocketAddr) {
        let Some(reporter) = &self.reporter else {
            return;
        };
        if !self.budget.take() {
            return;
        }
        reporter.report(RefusalEvent {
            server: server.to_string(),
            host: host_text(to.ip()),
            port: to.port(),
            protocol: Protocol::Connect,
            reason: RefusalReason::NotThroughProxy,
            hint: None,
        });
    }

    /// Counts one refusal; `why` says what was refused and why.
    fn note(&mut self, server: &str, why: std::fmt::Arguments<'_>) {
        self.count += 1;
        let n = self.count;
        if n <= Self::LOGGED_EACH {
            tracing::warn!(server, "{why}");
        } else if n.is_multiple_of(1000) {
            tracing::warn!(server, "{n} connects refused so far; the last: {why}");
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
    refusals: &mut Refusals,
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
            refusals.note(
                server,
                format_args!("connect refused: cannot read its address: {e}"),
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
            if let Refused::Address(to) = &asked {
                refusals.publish(server, *to);
            }
            refusals.note(
                server,
                format_args!(
                    "connect to {asked} refused: under Landlock this server may connect only to its egress proxy ({endpoint})"
                ),
            );
            Some(Err(libc::EACCES))
        }
        Verdict::Connect(to) => Some(connect_for(listener, call, fd as i32, &to).map_err(
            |(errno, why)| {
                if let Some(why) = why {
                    refusals.note(server, format_args!("connect refused: {why}"));
                }
                errno
            },
        )),
    }
}

/// Connects the caller's descriptor `fd` to `to` on palisade's copy of it: the caller's
/// socket is then connected (or in progress) exactly as its own connect would have left it.
/// A failure is its errno, with why palisade refused where it was palisade's refusal.
fn connect_for(
    listener: &sys::Listener,
    call: &sys::Notification,
    fd: i32,
    to: &std::net::SocketAddr,
) -> Result<i64, (i32, Option<String>)> {
    let refused = |why: String| (libc::EACCES, Some(why));
    let tid = call.pid;
    // The calling thread's own descriptor table (a thread may have unshared it): a pidfd of
    // the thread itself where the kernel has them (6.9); before, of its process, whose
    // table must then be the thread's (`kcmp`).
    let pidfd = match sys::thread_pidfd(tid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let process = thread_group_of(tid)
                .ok_or_else(|| refused(format!("thread {tid} has no process")))?;
            // kcmp refused (a seccomp profile): the leader's table, as before 6.9 always;
            // whichever socket that connects, it connects to the checked endpoint.
            if process != tid && sys::same_fd_table(process, tid) == Some(false) {
                return Err(refused(format!(
                    "thread {tid} has a descriptor table of its own, which this kernel's pidfds cannot reach (Linux 6.9 can)"
                )));
            }
            sys::pidfd(process)
                .map_err(|e| refused(format!("no pidfd for process {process}: {e}")))?
        }
        Err(e) => return Err(refused(format!("no pidfd for thread {tid}: {e}"))),
    };
    // Still pending: the pidfd was opened on the caller, not a successor under its pid.
    if !listener.pending(call.id) {
        return Err((libc::EINTR, None));
    }
    let sock = sys::copy_fd(&pidfd, fd).map_err(|e| match e.raw_os_error() {
        Some(libc::EBADF) => (libc::EBADF, None),
        _ => refused(format!("cannot take the socket of thread {tid}: {e}")),
    })?;
    sys::connect(&sock, to)
        .map(|()| 0)
        .map_err(|e| (e.raw_os_error().unwrap_or(libc::EACCES), None))
}

/// A refused address as the proxy's refusals write hosts: an IPv4-mapped address as the IPv4
/// one it is, other IPv6 addresses in brackets (`HOST:PORT` stays readable).
fn host_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("[{v6}]"),
        },
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// The process (thread group) of thread `tid`, from `/proc/TID/status`.
fn thread_group_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_written_as_the_proxy_writes_them() {
        assert_eq!(host_text("127.0.0.2".parse().unwrap()), "127.0.0.2");
        assert_eq!(host_text("::ffff:127.0.0.2".parse().unwrap()), "127.0.0.2");
        assert_eq!(host_text("::1".parse().unwrap()), "[::1]");
    }

    #[test]
    fn the_budget_allows_a_burst_then_a_rate() {
        let mut b = Budget::default();
        let burst = (0..100).filter(|_| b.take()).count();
        assert_eq!(burst, Budget::BURST as usize);
        b.at -= std::time::Duration::from_millis(100);
        assert!(b.take(), "refilled after a tenth of a second");
    }
}

//! Spawn-and-wait without an async runtime, for `palisade run` when it must outlive its child
//! (the Landlock tier's private HOME/TMPDIR to remove, strace's log to read): one child, three
//! termination signals to pass on, one exit status to return.
//!
//! SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked before the child is spawned and taken with
//! `sigwait`, so none is lost between the spawn and the wait; the child gets back the mask
//! palisade inherited right before it execs. Never: return before the child is reaped, or
//! leave the child running when this process gives up waiting (it is killed and reaped).

use std::os::unix::process::CommandExt;

use nix::sys::signal::{kill, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::run::EXIT_CANNOT_EXEC;
use super::ExitWith;
use crate::sandbox::launch::Prepared;

/// The signals palisade passes on to the child.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Spawns the prepared command with inherited stdio, forwards SIGINT/SIGTERM/SIGHUP to it,
/// and returns its exit code (128+N when signal N ended it). `prepared` (its descriptors and
/// scratch directories) is dropped only once the child is reaped. The signals stay blocked
/// in this process afterwards: it is about to exit.
pub(super) fn spawn_and_wait(mut prepared: Prepared) -> Result<u8, ExitWith> {
    let mut set = SigSet::empty();
    for s in FORWARDED.iter().chain([&Signal::SIGCHLD]) {
        set.add(*s);
    }
    let inherited = set
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| ExitWith::new(1, format!("cannot block signals: {e}")))?;
    for s in FORWARDED.iter().chain([&Signal::SIGCHLD]) {
        // Inherited dispositions must not decide: an ignored SIGCHLD would reap the child
        // behind our back, and the child should start with default termination signals (as
        // it did when a handler caught them here). Blocked, a default signal stays pending
        // for `sigwait` instead of acting on this process.
        // SAFETY: installs the default disposition, no handler code; the process is
        // single-threaded at this point (`run` starts no runtime on this path).
        unsafe { nix::sys::signal::signal(*s, SigHandler::SigDfl) }
            .map_err(|e| ExitWith::new(1, format!("cannot reset signal {s}: {e}")))?;
    }
    let cmd = prepared.command.as_std_mut();
    // The child starts with the mask palisade inherited, not the one blocked here: the
    // standard library passes the parent's mask on, and a command with SIGTERM blocked would
    // not end when palisade forwards it. Runs after the tier's own pre-exec steps (Landlock,
    // seccomp), which allow rt_sigprocmask.
    // SAFETY: pthread_sigmask is async-signal-safe; the closure touches no other state.
    unsafe {
        cmd.pre_exec(move || inherited.thread_set_mask().map_err(std::io::Error::from));
    }
    let child = cmd
        .spawn()
        .map_err(|e| ExitWith::new(EXIT_CANNOT_EXEC, format!("cannot start the sandbox: {e}")))?;
    let pid = Pid::from_raw(child.id() as i32);
    let status = wait_forwarding(pid, &set);
    drop(prepared);
    status
}

/// Waits for `pid` to end, passing each forwarded signal on to it.
fn wait_forwarding(pid: Pid, set: &SigSet) -> Result<u8, ExitWith> {
    loop {
        let sig = match set.wait() {
            Ok(sig) => sig,
            Err(e) => {
                // Giving up on the wait: the child must not outlive palisade unwatched.
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                return Err(ExitWith::new(1, format!("waiting for signals failed: {e}")));
            }
        };
        if sig != Signal::SIGCHLD {
            // bwrap passes it on to the sandbox's PID 1 and ends with it; a Landlock child
            // gets it directly.
            let _ = kill(pid, sig);
            continue;
        }
        // One SIGCHLD may stand for several changes (coalesced), or a stop/continue.
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(u8::try_from(code).unwrap_or(1)),
            Ok(WaitStatus::Signaled(_, s, _)) => {
                return Ok(128u8.saturating_add(u8::try_from(s as i32).unwrap_or(0)))
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(ExitWith::new(
                    1,
                    format!("waiting for the sandbox failed: {e}"),
                ))
            }
        }
    }
}

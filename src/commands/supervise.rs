//! Spawn-and-wait without an async runtime, for `palisade run` when it must outlive its child
//! (the Landlock tier's private HOME/TMPDIR to remove, strace's log to read): one child, three
//! termination signals to pass on, one exit status to return.
//!
//! SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked before the child is spawned and taken with
//! `sigwait`, so none is lost between the spawn and the wait; the child gets back the mask
//! palisade inherited right before it execs. Never: return before the child is reaped, or
//! leave the child running when this process gives up waiting (it is killed and reaped).
//!
//! The child's own children: without a PID namespace nothing kills them when the child
//! ends, so palisade makes itself their subreaper (orphans are reparented to it, not to
//! init) and, once the child has ended, SIGKILLs and reaps every process left beneath it,
//! whether it stayed in the child's process group or left it (bwrap's tier gets the same
//! from its PID namespace). Signals are still forwarded to the child alone, as bwrap
//! forwards them to its sandbox's first process; the child stays in palisade's process group
//! so it keeps the terminal (Ctrl-C, reads from a tty).

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
    // Orphans of the child's tree come to palisade (and are ended with it), not to init.
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| ExitWith::new(1, format!("cannot become the subreaper: {e}")))?;
    // The child starts with the mask palisade inherited, not the one blocked here: the
    // standard library passes the parent's mask on, and a command with SIGTERM blocked would
    // not end when palisade forwards it. Set after the tier's own pre-exec steps (Landlock,
    // seccomp), which allow rt_sigprocmask.
    let pid = match prepared.spawn_unforked(inherited.as_ref()) {
        // The Landlock tier: started without a fork of this process's memory.
        Some(spawned) => spawned,
        None => {
            let cmd = prepared.command.as_std_mut();
            // SAFETY: pthread_sigmask is async-signal-safe; the closure touches no other state.
            unsafe {
                cmd.pre_exec(move || inherited.thread_set_mask().map_err(std::io::Error::from));
            }
            cmd.spawn().map(|child| child.id())
        }
    }
    .map_err(|e| ExitWith::new(EXIT_CANNOT_EXEC, format!("cannot start the sandbox: {e}")))?;
    let pid = Pid::from_raw(pid as i32);
    let status = wait_forwarding(pid, &set);
    end_descendants();
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
        // One SIGCHLD may stand for several changes (coalesced), or an orphan of the child's
        // tree that ended (reaped here too: palisade is its subreaper).
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == pid => {
                    return Ok(u8::try_from(code).unwrap_or(1))
                }
                Ok(WaitStatus::Signaled(p, s, _)) if p == pid => {
                    return Ok(128u8.saturating_add(u8::try_from(s as i32).unwrap_or(0)))
                }
                Ok(WaitStatus::StillAlive) => break,
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
}

/// SIGKILLs and reaps every process still beneath palisade (the ended child's orphans, which
/// the kernel reparented here, and theirs as they are orphaned in turn). Waits only for
/// processes it has just killed: where the children cannot be listed it reaps what has
/// already ended and says what may be left.
fn end_descendants() {
    if !has_children() {
        return;
    }
    loop {
        let Some(kids) = children() else {
            tracing::warn!(
                "cannot list this process's children: the command's child processes may outlive it"
            );
            while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
                waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG))
            {}
            return;
        };
        if kids.is_empty() {
            return;
        }
        for k in &kids {
            let _ = kill(*k, Signal::SIGKILL);
        }
        // Each listed child is dead or dying (a zombie is listed until reaped): reap one,
        // then list again (its own children are now ours).
        match waitpid(Pid::from_raw(-1), None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

/// Whether anything is left beneath palisade, asked with one `waitpid` (the common case, a
/// command that left nothing, then costs no `/proc` reads). The kernel hands an exiting
/// process's children to its subreaper before the process can be reaped, so once the child
/// is reaped every survivor of its tree is a child of palisade, or beneath one: no child at
/// all (ECHILD) means no descendant. Orphans that have already ended are reaped here.
fn has_children() -> bool {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::ECHILD) => return false,
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
            | Err(nix::errno::Errno::EINTR) => continue,
            // A live child (or an answer not foreseen): list and end them.
            _ => return true,
        }
    }
}

/// The children of this process, from `/proc/self/task/*/children` (every thread's: an
/// orphan goes to one of the subreaper's threads), or `None` when they cannot be read.
fn children() -> Option<Vec<Pid>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let list = std::fs::read_to_string(task.ok()?.path().join("children")).ok()?;
        out.extend(parse_children(&list));
    }
    Some(out)
}

/// The PIDs of a `/proc/PID/task/TID/children` file (space-separated).
fn parse_children(list: &str) -> impl Iterator<Item = Pid> + '_ {
    list.split_ascii_whitespace()
        .filter_map(|w| w.parse::<i32>().ok())
        .filter(|p| *p > 0)
        .map(Pid::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_read_from_the_proc_list() {
        let pids: Vec<i32> = parse_children("12 345 \n").map(Pid::as_raw).collect();
        assert_eq!(pids, [12, 345]);
        assert_eq!(parse_children("").count(), 0);
        assert_eq!(
            parse_children("0 x -3").count(),
            0,
            "never a group or every process"
        );
    }
}

//! Larger kernel buffers for the pipes a call's bytes cross (the agent's stdout, a server's
//! stdin and stdout). Linux gives a pipe 64 KiB; a 1 MiB result then crosses each pipe in
//! sixteen writes, each waking the reader on the other side to drain it, and the gateway adds
//! two such pipes to the direct path. A buffer the size of the largest common result lets the
//! writer finish in one go and the reader wake once.
//!
//! Best effort: a pipe that cannot grow keeps its size and works as before. The kernel
//! allocates pages only for bytes in flight, but it charges a pipe's whole buffer to its
//! user: once a user without `CAP_SYS_RESOURCE` holds `/proc/sys/fs/pipe-user-pages-soft`
//! pages of pipe buffers (64 MiB by default), every new pipe of that user gets two pages. So
//! a server's pipes are widened only where that limit does not apply (`servers`); without
//! the capability (a non-root user, or root in a container's default capability set) only
//! the agent's stdout is, one pipe per process, and the HTTP front's many principals never
//! spend the user's allowance.

use std::os::fd::AsRawFd;

/// The buffer asked for: the kernel's default ceiling for unprivileged users
/// (`/proc/sys/fs/pipe-max-size`).
pub const WANTED: i32 = 1 << 20;

/// Whether the pipes to servers may be widened: the process is exempt from the per-user
/// pipe allowance (`CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN`). Read once per server start.
pub fn servers() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|status| exempt_from_pipe_allowance(&status))
        .unwrap_or(false)
}

/// Pure part of [`servers`]: the effective capability set of a `/proc/PID/status` text.
pub fn exempt_from_pipe_allowance(status: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_SYS_RESOURCE: u32 = 24;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0)
}

/// Grows the pipe behind `fd` to [`WANTED`] bytes, or leaves it as it is.
pub fn widen(fd: &impl AsRawFd, what: &str) {
    use nix::fcntl::{fcntl, FcntlArg};
    match fcntl(fd.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(WANTED)) {
        Ok(_) => {}
        Err(e) => tracing::debug!("{what}: pipe buffer left at its size ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_grows_and_anything_else_is_left_alone() {
        use nix::fcntl::{fcntl, FcntlArg};
        let (r, w) = nix::unistd::pipe().unwrap();
        let before = fcntl(r.as_raw_fd(), FcntlArg::F_GETPIPE_SZ).unwrap();
        widen(&r, "test pipe");
        let after = fcntl(w.as_raw_fd(), FcntlArg::F_GETPIPE_SZ).unwrap();
        assert!(after > before, "{before} -> {after}");
        // A regular file is not a pipe: nothing happens and nothing panics.
        let file = std::fs::File::open("/proc/self/status").unwrap();
        widen(&file, "a file");
    }

    #[test]
    fn only_the_capabilities_that_lift_the_pipe_allowance_count() {
        let status = |eff: &str| format!("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t{eff}\n");
        assert!(exempt_from_pipe_allowance(&status("000001ffffffffff")));
        assert!(exempt_from_pipe_allowance(&status("0000000001000000")));
        assert!(exempt_from_pipe_allowance(&status("0000000000200000")));
        // Docker's default set for root: no CAP_SYS_RESOURCE, no CAP_SYS_ADMIN.
        assert!(!exempt_from_pipe_allowance(&status("00000000a80425fb")));
        assert!(!exempt_from_pipe_allowance(&status("0000000000000000")));
        assert!(!exempt_from_pipe_allowance("no such line"));
    }
}

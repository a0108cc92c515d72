//! Larger kernel buffers for the pipes a call's bytes cross (the agent's stdout, a server's
//! stdin and stdout). Linux gives a pipe 64 KiB; a 1 MiB result then crosses each pipe in
//! sixteen writes, each waking the reader on the other side to drain it, and the gateway adds
//! two such pipes to the direct path. A buffer the size of the largest common result lets the
//! writer finish in one go and the reader wake once.
//!
//! Best effort: a pipe that cannot grow (an unprivileged user over
//! `/proc/sys/fs/pipe-user-pages-soft`, or not a pipe at all) keeps its size and works as
//! before. The kernel allocates pages only for bytes in flight, so an idle pipe costs nothing
//! more.

use std::os::fd::AsRawFd;

/// The buffer asked for: the kernel's default ceiling for unprivileged users
/// (`/proc/sys/fs/pipe-max-size`).
pub const WANTED: i32 = 1 << 20;

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
}

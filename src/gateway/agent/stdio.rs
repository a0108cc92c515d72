//! The gateway's upstream stdio: stdin and stdout as non-blocking pipes on tokio's reactor
//! when they are pipes (what every MCP client that spawns a server gives), else tokio's
//! thread-backed `stdin()`/`stdout()`.
//!
//! Why: tokio's `Stdin`/`Stdout` run each read and write on the blocking thread pool, so every
//! message crossed threads twice (a futex wake-up each way); profiling the per-call path of
//! `palisade serve` showed that hand-off, not JSON or policy, as its largest avoidable cost.
//! A pipe registered with the reactor is read and written by the runtime thread that runs
//! the session. It only changes how bytes are moved, never what is read or written.
//!
//! A socket (Node, and so Claude Code, connects a child's stdio with a socket pair) goes on
//! the reactor too: read on a blocking thread, stdin cannot be abandoned at shutdown, and the
//! runtime's shutdown waited on that thread, so a stop took 215 ms instead of a few.
//!
//! Setting O_NONBLOCK affects the open file description, which is ours alone when a client
//! spawned us with fresh pipes or a fresh socket pair; a terminal or file keeps the
//! thread-backed path.

use std::os::fd::AsFd;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::gateway::busy_poll::{watch_with, BusyPoll};

pub type UpstreamReader = Box<dyn AsyncRead + Send + Unpin>;
pub type UpstreamWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// The process's stdin and stdout for the upstream MCP session. Must be called inside the
/// runtime (the pipes register with its reactor). `busy` watches stdin when it is on the
/// reactor (a stdin read on a blocking thread wakes the runtime from there).
pub fn upstream_stdio(busy: Option<&BusyPoll>) -> (UpstreamReader, UpstreamWriter) {
    let reader: UpstreamReader = match on_reactor(std::io::stdin().as_fd()) {
        Ok(Reactor::Pipe(fd)) => match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
            Ok(pipe) => {
                watch_with(busy, &pipe);
                Box::new(pipe)
            }
            Err(e) => thread_backed_stdin(&e),
        },
        Ok(Reactor::Socket(s)) => {
            watch_with(busy, &s);
            Box::new(s)
        }
        Err(e) => thread_backed_stdin(&e),
    };
    let writer: UpstreamWriter = match on_reactor(std::io::stdout().as_fd()) {
        Ok(Reactor::Pipe(fd)) => {
            // Answers go out through this pipe: a large result in one write (pipe_size).
            crate::gateway::pipe_size::widen(&fd, "stdout");
            match tokio::net::unix::pipe::Sender::from_owned_fd(fd) {
                Ok(pipe) => Box::new(pipe),
                Err(e) => thread_backed_stdout(&e),
            }
        }
        Ok(Reactor::Socket(s)) => Box::new(s),
        Err(e) => thread_backed_stdout(&e),
    };
    (reader, writer)
}

fn thread_backed_stdin(why: &std::io::Error) -> UpstreamReader {
    tracing::debug!(
        "stdin is neither a pipe nor a socket ({why}); reading it on a blocking thread"
    );
    Box::new(tokio::io::stdin())
}

fn thread_backed_stdout(why: &std::io::Error) -> UpstreamWriter {
    tracing::debug!(
        "stdout is neither a pipe nor a socket ({why}); writing it on a blocking thread"
    );
    Box::new(tokio::io::stdout())
}

/// A standard stream that the reactor can drive.
enum Reactor {
    Pipe(std::os::fd::OwnedFd),
    Socket(tokio::net::UnixStream),
}

/// A duplicate of `fd` ready for the reactor, when it is a pipe or a stream socket.
fn on_reactor(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Reactor> {
    use nix::sys::stat::{fstat, SFlag};
    use std::os::fd::AsRawFd;
    let kind = fstat(fd.as_raw_fd()).map_err(std::io::Error::from)?.st_mode & SFlag::S_IFMT.bits();
    let owned = fd.try_clone_to_owned()?;
    if kind == SFlag::S_IFIFO.bits() {
        Ok(Reactor::Pipe(owned))
    } else if kind == SFlag::S_IFSOCK.bits() {
        let std_stream = std::os::unix::net::UnixStream::from(owned);
        std_stream.set_nonblocking(true)?;
        Ok(Reactor::Socket(tokio::net::UnixStream::from_std(
            std_stream,
        )?))
    } else {
        Err(std::io::Error::other("not a pipe or a socket"))
    }
}

//! The gateway's upstream stdio: stdin and stdout as non-blocking pipes on tokio's reactor
//! when they are pipes (what every MCP client that spawns a server gives), else tokio's
//! thread-backed `stdin()`/`stdout()`.
//!
//! Why: tokio's `Stdin`/`Stdout` run each read and write on the blocking thread pool, so every
//! message crossed threads twice (a futex wake-up each way); profiling the per-call path of
//! `palisade serve` showed that hand-off, not JSON or policy, as its largest avoidable cost.
//! A pipe registered with the reactor is read and written by the worker that runs the
//! session. It only changes how bytes are moved, never what is read or written.
//!
//! Setting O_NONBLOCK affects the open pipe description, which is ours alone when a client
//! spawned us with fresh pipes; a terminal, file or socket keeps the thread-backed path.

use std::os::fd::AsFd;

use tokio::io::{AsyncRead, AsyncWrite};

pub type UpstreamReader = Box<dyn AsyncRead + Send + Unpin>;
pub type UpstreamWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// The process's stdin and stdout for the upstream MCP session. Must be called inside the
/// runtime (the pipes register with its reactor).
pub fn upstream_stdio() -> (UpstreamReader, UpstreamWriter) {
    let reader: UpstreamReader = match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(e) => {
            tracing::debug!("stdin is not a pipe ({e}); reading it on a blocking thread");
            Box::new(tokio::io::stdin())
        }
    };
    let writer: UpstreamWriter = match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Sender::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(e) => {
            tracing::debug!("stdout is not a pipe ({e}); writing it on a blocking thread");
            Box::new(tokio::io::stdout())
        }
    };
    (reader, writer)
}

//! Bulk relaying between a client connection and its checked upstream, once the handshake is
//! done. `copy_bidirectional_with_sizes` with large buffers: each direction is closed
//! (half-close) when its source ends, and the relay ends when both have. No idle timeout: a
//! long-lived stream (a download, a websocket) is legitimate; the proxy cuts relays only when
//! the server is removed. This module must never inspect or alter the bytes.

use tokio::io::{AsyncRead, AsyncWrite};

use super::dial::ServerCtx;

pub(crate) async fn relay<A, B>(
    ctx: &ServerCtx,
    client: &mut A,
    upstream: &mut B,
    host: &str,
    port: u16,
) where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let size = ctx.limits.relay_buffer;
    match tokio::io::copy_bidirectional_with_sizes(client, upstream, size, size).await {
        Ok((up, down)) => {
            tracing::debug!(server = %ctx.name, host, port, up, down, "egress relay finished")
        }
        Err(e) => {
            tracing::debug!(server = %ctx.name, host, port, error = %e, "egress relay ended with an error")
        }
    }
}

/// After an error reply: half-close, then read and discard what the client still sends (at
/// most 64 KiB, at most 1 s). Closing a unix socket with unread input makes the kernel reset
/// the peer, which would discard the reply before the client reads it.
pub(crate) async fn close_after_reply<S>(stream: &mut S)
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut sink = tokio::io::sink();
    let mut rest = (&mut *stream).take(64 * 1024);
    let drain = tokio::io::copy(&mut rest, &mut sink);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

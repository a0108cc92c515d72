//! Backpressure for requests a server sends the gateway: the server's stdin writer reports
//! when it is stalled (the server is not reading), and the stdout tap holds the server's next
//! request until the writer moves again.
//!
//! Why: rmcp answers every request a server sends on its own task and queues each answer for
//! the writer without bound. A server that floods `roots/list` and never reads its stdin made
//! the gateway hold every answer (1 GB in tests/faults/). Holding the server's requests
//! while its stdin is full bounds that queue by what is already in the pipe; a server that
//! stays stalled for the stall limit is a protocol fault (killed and restarted).
//! Never: alter, reorder or buffer the bytes written; block (the state is an atomic flag and
//! a `Notify`).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::sync::Notify;

/// Whether a server's stdin is currently refusing bytes.
#[derive(Debug, Default)]
pub struct StdinState {
    stalled: AtomicBool,
    moved: Notify,
}

impl StdinState {
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }

    fn set(&self, stalled: bool) {
        let was = self.stalled.swap(stalled, Ordering::AcqRel);
        if was && !stalled {
            self.moved.notify_waiters();
        }
    }

    /// Waits until the writer is not stalled; false when it stayed stalled for `limit`.
    pub async fn wait_flowing(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let moved = self.moved.notified();
            if !self.is_stalled() {
                return true;
            }
            if tokio::time::timeout_at(deadline, moved).await.is_err() {
                return !self.is_stalled();
            }
        }
    }
}

/// The server's stdin as rmcp writes it, reporting stalls to `state`.
pub struct Watched<W> {
    inner: W,
    state: Arc<StdinState>,
}

impl<W> Watched<W> {
    pub fn new(inner: W, state: Arc<StdinState>) -> Watched<W> {
        Watched { inner, state }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Watched<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.state.set(r.is_pending());
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.state.set(r.is_pending());
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        // A closing stdin never holds requests back.
        this.state.set(false);
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_full_pipe_is_reported_until_the_reader_drains_it() {
        let (w, mut r) = tokio::io::duplex(16);
        let state = Arc::new(StdinState::default());
        let mut watched = Watched::new(w, state.clone());
        let writer = tokio::spawn(async move {
            watched.write_all(&[7u8; 64]).await.unwrap();
            watched
        });
        // The writer fills the 16-byte pipe and stalls.
        while !state.is_stalled() {
            tokio::task::yield_now().await;
        }
        assert!(!state.wait_flowing(Duration::from_millis(20)).await);
        let mut got = vec![0u8; 64];
        r.read_exact(&mut got).await.unwrap();
        let _ = writer.await.unwrap();
        assert!(state.wait_flowing(Duration::from_millis(20)).await);
        assert_eq!(got, vec![7u8; 64]);
    }
}

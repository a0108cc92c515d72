//! One outgoing stream of JSON-RPC lines shared by many tasks (a server's stdin, the agent's
//! stdout): each caller writes its own line under an async lock, on its own task.
//!
//! Why: a writer task fed by a queue costs a task wake-up (often a futex call to another
//! worker thread) for every message; on the gateway's per-call path there were two of them,
//! the line to the server and the answer to the agent, and the profile of a small call is
//! mostly such hand-offs. Writing from the task that made the line removes both.
//!
//! Never: interleave two lines or leave one half written while others follow. A caller
//! abandoned mid-line (its request timed out or was cancelled while the pipe was full) hands
//! the rest of the line, and the lock with it, to a task that finishes it; a caller abandoned
//! before its first byte sends nothing, as if it had never asked. `stop` abandons everything:
//! the stream is being closed.

use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;

pub type BoxedWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// The stream is gone: closed, stopped, or a write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream is closed")]
pub struct Closed;

/// A shared writer of whole lines. Cheap to clone; the stream is shut down when the last
/// clone goes (or at `shutdown`).
#[derive(Clone)]
pub struct LineOut {
    sink: Arc<Mutex<Sink>>,
    /// Fires to abandon every write and close the stream.
    stop: CancellationToken,
    /// Cancelled when a write fails (the reader of the stream has gone).
    broken: CancellationToken,
}

struct Sink {
    writer: Option<BoxedWriter>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        // The last sender has gone: the stream's reader gets its end of file, as a writer
        // task did when its queue closed.
        if let (Some(mut w), Ok(rt)) = (self.writer.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(async move {
                let _ = w.shutdown().await;
            });
        }
    }
}

impl LineOut {
    /// `broken` is cancelled when a write fails.
    pub fn new(writer: BoxedWriter, broken: CancellationToken) -> LineOut {
        LineOut {
            sink: Arc::new(Mutex::new(Sink {
                writer: Some(writer),
            })),
            stop: CancellationToken::new(),
            broken,
        }
    }

    /// Writes `line` (a whole message ending in `\n`) and flushes it.
    pub async fn send(&self, line: Vec<u8>) -> Result<(), Closed> {
        let guard = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return Err(Closed),
            g = self.sink.clone().lock_owned() => g,
        };
        let mut pending = PendingLine {
            guard: Some(guard),
            line,
            written: 0,
            stop: self.stop.clone(),
            broken: self.broken.clone(),
        };
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => Err(Closed),
            r = pending.finish() => r,
        }
    }

    /// Abandons every write and shuts the stream down (its reader sees the end).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let mut sink = self.sink.lock().await;
        if let Some(mut w) = sink.writer.take() {
            let _ = w.shutdown().await;
        }
    }
}

/// A line being written under the lock.
struct PendingLine {
    guard: Option<OwnedMutexGuard<Sink>>,
    line: Vec<u8>,
    written: usize,
    stop: CancellationToken,
    broken: CancellationToken,
}

impl PendingLine {
    async fn finish(&mut self) -> Result<(), Closed> {
        let Some(sink) = self.guard.as_mut() else {
            return Err(Closed);
        };
        let Some(w) = sink.writer.as_mut() else {
            return Err(Closed);
        };
        let mut outcome = Ok(());
        while self.written < self.line.len() {
            match w.write(&self.line[self.written..]).await {
                Ok(0) | Err(_) => {
                    outcome = Err(Closed);
                    break;
                }
                Ok(n) => self.written += n,
            }
        }
        if outcome.is_ok() && w.flush().await.is_err() {
            outcome = Err(Closed);
        }
        if outcome.is_err() {
            // Nothing more can go on this stream.
            sink.writer = None;
            self.broken.cancel();
        }
        // Whole (or the stream is gone): nothing for `Drop` to finish.
        self.written = self.line.len();
        outcome
    }
}

impl Drop for PendingLine {
    fn drop(&mut self) {
        if self.written == 0 || self.written >= self.line.len() || self.stop.is_cancelled() {
            return;
        }
        // Abandoned mid-line: the rest goes out on its own task, still under the lock, so
        // the next line starts on a line boundary.
        let rest = PendingLine {
            guard: self.guard.take(),
            line: std::mem::take(&mut self.line),
            written: self.written,
            stop: self.stop.clone(),
            broken: self.broken.clone(),
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut rest = rest;
                let stop = rest.stop.clone();
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => {}
                    _ = rest.finish() => {}
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn lines_from_many_tasks_arrive_whole() {
        let (w, mut r) = tokio::io::duplex(64);
        let out = LineOut::new(Box::new(w), CancellationToken::new());
        let mut tasks = Vec::new();
        for i in 0..20u8 {
            let out = out.clone();
            tasks.push(tokio::spawn(async move {
                let mut line = vec![b'a' + i; 100];
                line.push(b'\n');
                out.send(line).await
            }));
        }
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            r.read_to_end(&mut all).await.unwrap();
            all
        });
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        drop(out);
        let all = reader.await.unwrap();
        let lines: Vec<&[u8]> = all
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 20);
        for l in lines {
            assert_eq!(l.len(), 100);
            assert!(l.iter().all(|b| *b == l[0]), "a line was interleaved");
        }
    }

    #[tokio::test]
    async fn a_caller_abandoned_mid_line_still_leaves_a_whole_line() {
        let (w, mut r) = tokio::io::duplex(16);
        let out = LineOut::new(Box::new(w), CancellationToken::new());
        let mut first = vec![b'x'; 64];
        first.push(b'\n');
        // The pipe takes 16 bytes, then the write waits: the caller gives up.
        let gave_up = tokio::time::timeout(Duration::from_millis(20), out.send(first)).await;
        assert!(gave_up.is_err());
        let second = out.clone();
        let next = tokio::spawn(async move { second.send(b"{}\n".to_vec()).await });
        let mut got = vec![0u8; 68];
        r.read_exact(&mut got).await.unwrap();
        next.await.unwrap().unwrap();
        let mut line = vec![b'x'; 64];
        line.extend_from_slice(b"\n{}\n");
        assert_eq!(got, line);
    }

    #[tokio::test]
    async fn a_failed_write_marks_the_stream_broken() {
        let (w, r) = tokio::io::duplex(16);
        drop(r);
        let broken = CancellationToken::new();
        let out = LineOut::new(Box::new(w), broken.clone());
        assert_eq!(out.send(b"{}\n".to_vec()).await, Err(Closed));
        assert!(broken.is_cancelled());
        assert_eq!(out.send(b"{}\n".to_vec()).await, Err(Closed));
    }

    #[tokio::test]
    async fn shutdown_ends_the_stream_for_its_reader() {
        let (w, mut r) = tokio::io::duplex(64);
        let out = LineOut::new(Box::new(w), CancellationToken::new());
        out.send(b"{}\n".to_vec()).await.unwrap();
        out.shutdown().await;
        let mut all = Vec::new();
        r.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"{}\n");
        assert_eq!(out.send(b"{}\n".to_vec()).await, Err(Closed));
    }
}

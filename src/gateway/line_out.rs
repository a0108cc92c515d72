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
//!
//! A line may be written in parts (`OutLine::framed`): a relayed result goes out as the
//! agent's id prefix, the result's bytes where the server's line left them, and the closing
//! brace, in one vectored write, so a large result is never copied into a new line.

use std::io::IoSlice;
use std::ops::Range;
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

/// One whole line to write: `head`, then `body[span]`, then `tail`.
pub struct OutLine {
    head: Vec<u8>,
    body: Vec<u8>,
    span: Range<usize>,
    tail: &'static [u8],
}

impl OutLine {
    /// A line made of a prefix, a span of a buffer (kept where it is) and a suffix.
    pub fn framed(head: Vec<u8>, body: Vec<u8>, span: Range<usize>, tail: &'static [u8]) -> Self {
        // A span outside the buffer would be a bug upstream: write none of it rather than panic.
        let span = if body.get(span.clone()).is_some() {
            span
        } else {
            0..0
        };
        OutLine {
            head,
            body,
            span,
            tail,
        }
    }

    fn len(&self) -> usize {
        self.head.len() + self.span.len() + self.tail.len()
    }

    /// The parts still to write after the first `written` bytes.
    fn rest(&self, written: usize) -> [IoSlice<'_>; 3] {
        let body = &self.body[self.span.clone()];
        let mut skip = written;
        let mut cut = |b: &[u8]| -> usize {
            let n = skip.min(b.len());
            skip -= n;
            n
        };
        let (h, m, t) = (cut(&self.head), cut(body), cut(self.tail));
        [
            IoSlice::new(&self.head[h..]),
            IoSlice::new(&body[m..]),
            IoSlice::new(&self.tail[t..]),
        ]
    }
}

impl From<Vec<u8>> for OutLine {
    fn from(line: Vec<u8>) -> OutLine {
        OutLine {
            head: line,
            body: Vec::new(),
            span: 0..0,
            tail: b"",
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
    pub async fn send(&self, line: impl Into<OutLine>) -> Result<(), Closed> {
        let line = line.into();
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

    /// Resolves once nothing more can be written: the stream was stopped or a write failed.
    pub async fn closed(&self) {
        tokio::select! {
            _ = self.stop.cancelled() => {}
            _ = self.broken.cancelled() => {}
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
    line: OutLine,
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
        let len = self.line.len();
        while self.written < len {
            // One system call for the whole line where the writer takes vectors (a pipe does).
            match w.write_vectored(&self.line.rest(self.written)).await {
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
            line: std::mem::replace(&mut self.line, OutLine::from(Vec::new())),
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

    /// A framed line (prefix, a span of a buffer, suffix) arrives whole and in order, also
    /// when its caller gives up mid-line with only part of the span written.
    #[tokio::test]
    async fn a_framed_line_is_written_whole_around_its_span() {
        let (w, mut r) = tokio::io::duplex(16);
        let out = LineOut::new(Box::new(w), CancellationToken::new());
        let body = b"xx{\"big\":\"0123456789abcdefghij\"}yy".to_vec();
        let span = 2..body.len() - 2;
        let line = OutLine::framed(b"{\"id\":1,\"result\":".to_vec(), body, span, b"}\n");
        let gave_up = tokio::time::timeout(Duration::from_millis(20), out.send(line)).await;
        assert!(
            gave_up.is_err(),
            "the 16-byte pipe cannot take the line at once"
        );
        let next = out.clone();
        let next = tokio::spawn(async move { next.send(b"{}\n".to_vec()).await });
        let want = b"{\"id\":1,\"result\":{\"big\":\"0123456789abcdefghij\"}}\n{}\n";
        let mut got = vec![0u8; want.len()];
        r.read_exact(&mut got).await.unwrap();
        next.await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
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

//! A request's own stream of lines to the agent: the SSE body of an HTTP POST that the fast
//! path (`http/fast/`) answers, carrying the notifications about that request (its
//! progress) and then its answer. The same stream, with no answer to end it, carries a
//! session's notifications outside any call on its GET (`Standalone`, `http/standalone.rs`).
//!
//! Why: rmcp's session routes a notification to the POST it belongs to by the requests it
//! knows; a call the fast path takes never passed through it, so its progress went nowhere
//! and such calls had to stay on rmcp's slower, re-encoding path.
//!
//! The owner of the stream puts the sending end in the request's extensions
//! (`RequestContext::extensions`); the progress target of the call (`UpTarget::of`) picks it
//! up. Never: let an agent that does not read hold a server's reader (notifications beyond
//! `BACKLOG` are dropped; only the answer and questions wait for room), or keep the body
//! open once the request has ended (a sender still held elsewhere does not matter: the
//! stream ends at the answer, or at `end` when the request ends without one).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, watch};

/// How many notifications a stream holds for an agent not reading; beyond, they are dropped
/// (progress, log messages and resource updates are advisory).
pub const BACKLOG: usize = 64;

/// What goes on the stream.
enum Item {
    /// A notification or a question: more may follow.
    Line(Vec<u8>),
    /// A notification holding its share of a budget until the body takes it.
    Held {
        line: Vec<u8>,
        _share: tokio::sync::OwnedSemaphorePermit,
    },
    /// A question whose asker learns when the body has taken it (`ask_tracked`).
    Tracked {
        line: Vec<u8>,
        taken: tokio::sync::oneshot::Sender<()>,
    },
    /// The request's answer: the stream ends after it.
    Last(Vec<u8>),
    /// The request ended with no answer (the agent cancelled it).
    End,
}

/// How long a stream ended without an answer waits for its open questions to be withdrawn
/// (their askers give up as the request ends, and tell the agent) before it ends.
const WITHDRAWAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The sending end, cheap to clone.
#[derive(Clone)]
pub struct RequestStream {
    tx: mpsc::Sender<Item>,
    /// How many questions sent on this stream still wait for their answer.
    open_questions: Arc<watch::Sender<usize>>,
    /// Notifications dropped so far on this stream, told in the log at the first and every
    /// 10,000th (as the agent link's relay budget does), not once per drop.
    dropped: Arc<AtomicU64>,
}

/// The receiving end: the lines in order, ending after the answer, at `end`, or when every
/// sender has gone.
pub struct Lines {
    rx: mpsc::Receiver<Item>,
    ended: bool,
}

impl RequestStream {
    pub fn new() -> (RequestStream, Lines) {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let stream = RequestStream {
            tx,
            open_questions: Arc::new(watch::Sender::new(0)),
            dropped: Arc::default(),
        };
        (stream, Lines { rx, ended: false })
    }

    /// Queues a notification's line; dropped when the agent is not keeping up or has gone.
    pub fn offer(&self, line: Vec<u8>) {
        match self.tx.try_send(Item::Line(line)) {
            Ok(()) => {}
            // The body is gone: the call is being cancelled; nothing to tell.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.count_drop(),
        }
    }

    /// As `offer`, the line holding `share` (of the agent link's relay budget) until the
    /// body takes it: a stream the agent holds open without reading keeps at most the
    /// budget's bytes, however large the lines.
    pub fn offer_held(&self, line: Vec<u8>, share: tokio::sync::OwnedSemaphorePermit) {
        match self.tx.try_send(Item::Held {
            line,
            _share: share,
        }) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.count_drop(),
        }
    }

    fn count_drop(&self) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n.is_multiple_of(10_000) {
            tracing::warn!(
                "the client is not reading its stream: {n} notification(s) for it dropped so far"
            );
        }
    }

    /// How many notifications this stream has dropped.
    #[cfg(test)]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues a request to the agent (a question, `agent/asking.rs`), waiting for room: a
    /// question, unlike a notification, is never dropped. False when the client has gone.
    pub async fn ask(&self, line: Vec<u8>) -> bool {
        self.tx.send(Item::Line(line)).await.is_ok()
    }

    /// As `ask`, and the receiver resolves once the body has taken the line (it is then the
    /// HTTP server's to write); an error there means the body was dropped with the line still
    /// queued: the agent never saw it. `None` when the client had gone already.
    pub async fn ask_tracked(&self, line: Vec<u8>) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (taken, rx) = tokio::sync::oneshot::channel();
        self.tx.send(Item::Tracked { line, taken }).await.ok()?;
        Some(rx)
    }

    /// Queues a line that must not be dropped (a question's withdrawal) without waiting for
    /// it, keeping `held` until it is queued: when the backlog is full, it waits for room on
    /// a task of its own. (Not dropped while the stream lasts: once it has ended, nobody
    /// reads it.)
    pub fn tell(&self, line: Vec<u8>, held: impl Send + 'static) {
        let Err(mpsc::error::TrySendError::Full(item)) = self.tx.try_send(Item::Line(line)) else {
            return;
        };
        // Outside a runtime (a drop at shutdown) there is no one left to tell.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let tx = self.tx.clone();
            runtime.spawn(async move {
                let _ = tx.send(item).await;
                drop(held);
            });
        }
    }

    /// Whether the client has gone (the body was dropped).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves when the client has gone (the body was dropped): a question waiting for
    /// its answer stops waiting then.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Queues the request's answer, waiting for room; the stream ends after it.
    pub async fn finish(self, line: Vec<u8>) {
        let _ = self.tx.send(Item::Last(line)).await;
    }

    /// Counts a question sent on this stream as open until the guard is dropped (once it is
    /// answered or withdrawn).
    pub fn question_open(&self) -> OpenQuestion {
        self.open_questions.send_modify(|n| *n += 1);
        OpenQuestion(Arc::clone(&self.open_questions))
    }

    /// Ends the stream with no answer (JSON-RPC gives a cancelled request none), though a
    /// sender may still be held elsewhere: a question of the request's, given up meanwhile,
    /// whose withdrawal goes first.
    pub async fn end(self) {
        let mut open = self.open_questions.subscribe();
        let _ = tokio::time::timeout(WITHDRAWAL_WAIT, open.wait_for(|n| *n == 0)).await;
        let _ = self.tx.send(Item::End).await;
    }
}

/// An HTTP session's standalone stream (the agent's GET), for what a server sends the agent
/// outside any call: its notifications go there as the server's own text, and its requests
/// as Palisade's questions, added to the events rmcp writes on the same response
/// (`http::standalone`). rmcp gives a session one
/// such stream at a time (a second GET while one is open gets a stream that stays idle), and
/// so does this: the stream opened while none is live is the one written to.
#[derive(Default)]
pub struct Standalone(std::sync::Mutex<Option<RequestStream>>);

impl Standalone {
    /// The open stream, if the agent holds one.
    pub fn live(&self) -> Option<RequestStream> {
        self.slot().as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// A new stream to add to a GET's response, unless one is open already.
    pub fn open(&self) -> Option<Lines> {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|s| !s.is_closed()) {
            return None;
        }
        let (stream, lines) = RequestStream::new();
        *slot = Some(stream);
        Some(lines)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<RequestStream>> {
        // Each change is one assignment: a panic elsewhere cannot leave it half-done.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A question open on a stream (`RequestStream::question_open`).
pub struct OpenQuestion(Arc<watch::Sender<usize>>);

impl Drop for OpenQuestion {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl futures::Stream for Lines {
    type Item = Vec<u8>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Item::Line(line) | Item::Held { line, .. })) => {
                Poll::Ready(Some(line))
            }
            Poll::Ready(Some(Item::Tracked { line, taken })) => {
                let _ = taken.send(());
                Poll::Ready(Some(line))
            }
            Poll::Ready(Some(Item::Last(line))) => {
                self.ended = true;
                Poll::Ready(Some(line))
            }
            Poll::Ready(Some(Item::End) | None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_session_has_one_standalone_stream_at_a_time_and_a_new_one_once_it_is_gone() {
        let standalone = Standalone::default();
        assert!(standalone.live().is_none());
        let mut first = standalone.open().expect("the first GET gets the stream");
        assert!(
            standalone.open().is_none(),
            "a second GET while one is open gets none"
        );
        standalone.live().unwrap().offer(b"note".to_vec());
        assert_eq!(first.next().await.as_deref(), Some(&b"note"[..]));
        drop(first);
        assert!(standalone.live().is_none(), "the agent's GET has gone");
        let mut again = standalone.open().expect("a GET after it gets one");
        standalone.live().unwrap().offer(b"later".to_vec());
        assert_eq!(again.next().await.as_deref(), Some(&b"later"[..]));
    }

    #[tokio::test]
    async fn a_tracked_line_says_whether_the_body_took_it_or_dropped_it() {
        let (tx, mut lines) = RequestStream::new();
        let taken = tx.ask_tracked(b"q1".to_vec()).await.unwrap();
        assert_eq!(lines.next().await.as_deref(), Some(&b"q1"[..]));
        assert!(taken.await.is_ok(), "taken by the body");
        let lost = tx.ask_tracked(b"q2".to_vec()).await.unwrap();
        drop(lines);
        assert!(lost.await.is_err(), "dropped with the body, never taken");
        assert!(
            tx.ask_tracked(b"q3".to_vec()).await.is_none(),
            "the client has gone"
        );
    }

    #[tokio::test]
    async fn a_held_line_keeps_its_share_of_the_budget_until_the_body_takes_it() {
        let budget = Arc::new(tokio::sync::Semaphore::new(1));
        let (tx, mut lines) = RequestStream::new();
        tx.offer_held(
            b"note".to_vec(),
            budget.clone().try_acquire_owned().unwrap(),
        );
        assert_eq!(budget.available_permits(), 0, "held while queued");
        assert_eq!(lines.next().await.as_deref(), Some(&b"note"[..]));
        assert_eq!(budget.available_permits(), 1, "released once taken");
    }

    #[tokio::test]
    async fn the_stream_ends_at_the_answer_though_a_sender_is_still_held() {
        let (tx, mut lines) = RequestStream::new();
        let held = tx.clone();
        tx.offer(b"note".to_vec());
        tx.finish(b"answer".to_vec()).await;
        held.offer(b"late".to_vec());
        assert_eq!(lines.next().await.as_deref(), Some(&b"note"[..]));
        assert_eq!(lines.next().await.as_deref(), Some(&b"answer"[..]));
        assert_eq!(lines.next().await, None);
    }

    #[tokio::test]
    async fn notifications_past_the_backlog_are_dropped_and_the_answer_still_goes() {
        let (tx, mut lines) = RequestStream::new();
        for i in 0..BACKLOG + 10 {
            tx.offer(i.to_string().into_bytes());
        }
        assert_eq!(tx.dropped(), 10, "the drops are counted");
        let answer = tokio::spawn(tx.finish(b"answer".to_vec()));
        let mut got = Vec::new();
        while let Some(line) = lines.next().await {
            got.push(line);
        }
        answer.await.unwrap();
        assert_eq!(got.len(), BACKLOG + 1);
        assert_eq!(got.last().map(Vec::as_slice), Some(&b"answer"[..]));
    }

    #[tokio::test]
    async fn a_request_ended_without_an_answer_ends_its_stream_though_a_sender_is_held() {
        let (tx, mut lines) = RequestStream::new();
        let held = tx.clone();
        tx.offer(b"note".to_vec());
        tx.end().await;
        held.tell(b"late".to_vec(), ());
        assert_eq!(lines.next().await.as_deref(), Some(&b"note"[..]));
        assert_eq!(lines.next().await, None);
    }

    #[tokio::test]
    async fn a_line_told_past_the_backlog_waits_for_room_instead_of_being_dropped() {
        let (tx, mut lines) = RequestStream::new();
        for _ in 0..BACKLOG {
            tx.offer(b"note".to_vec());
        }
        tx.tell(b"withdrawn".to_vec(), ());
        tx.offer(b"dropped".to_vec());
        assert_eq!(tx.dropped(), 1);
        drop(tx);
        let mut got = Vec::new();
        while let Some(line) = lines.next().await {
            got.push(line);
        }
        assert_eq!(got.len(), BACKLOG + 1);
        assert_eq!(got.last().map(Vec::as_slice), Some(&b"withdrawn"[..]));
    }

    #[tokio::test]
    async fn every_sender_gone_without_an_answer_ends_the_stream() {
        let (tx, mut lines) = RequestStream::new();
        tx.offer(b"note".to_vec());
        drop(tx);
        assert_eq!(lines.next().await.as_deref(), Some(&b"note"[..]));
        assert_eq!(lines.next().await, None);
    }
}

//! A call's questions to its own agent, on the call's own stream: the HTTP fast path answers
//! a session's `tools/call` with an SSE body of its own, and a question the call's approval
//! puts to the agent (`elicitation/create`, the `elicit` approver) goes on that body as a
//! JSON-RPC request, as rmcp puts one on the stream of a POST it serves. The agent answers
//! with a POST of a JSON-RPC response on the same session; the front hands it here
//! (`Questions::answer`), and the call goes on.
//!
//! Why: rmcp routes a question to the stream of a request it is serving itself, so a session's
//! call under `elicit` had to go through rmcp's typed `ServerHandler`, whose models re-typed
//! its result (`"priority": 1` became `1.0`) and dropped what they do not know. Asked here,
//! the call keeps the fast path (the server's own bytes), and the question goes to the client
//! that made the call, on the stream it is reading.
//!
//! The asker is the call task's (`scope`, `current`), as a 2026-07-28 call's round is
//! (`mrtr`): the approval stage runs in the call's task and finds it there.
//!
//! An agent on a stream of lines (stdio) is asked the same way on that stream
//! (`Asker::on_lines`): the front's reader hands back the answer to a question of Palisade's
//! before rmcp's session sees it, so a server's relayed sampling or elicitation gets the
//! agent's answer as the agent wrote it, where rmcp's `ClientResult` dropped what its
//! models do not know and re-spelt numbers.
//!
//! Never: hand an answer to a question of another session (a question is found by its
//! session and its id, which only Palisade makes), wait past the approver's timeout, or keep
//! a question once its call has stopped waiting for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::ClientCapabilities;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::request_stream::{OpenQuestion, RequestStream, Standalone};
use crate::gateway::line_out::LineOut;

/// The prefix of the ids Palisade gives its questions (rmcp's own are numbers).
const ID_PREFIX: &str = "palisade-question-";

/// The session key of the one agent on a stream of lines (stdio): it has no session id.
pub const LINES_SESSION: &str = "";

tokio::task_local! {
    static ASKER: Arc<Asker>;
}

/// What the agent sent back for a question: its result as it wrote it, or its error.
#[derive(Debug)]
pub enum Answered {
    Result(Box<RawValue>),
    Error(Value),
}

/// Why a question got no result.
#[derive(Debug, thiserror::Error)]
pub enum AskFailed {
    #[error("the client's stream for this call has closed")]
    Closed,
    #[error("the client did not answer within {}s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("the client answered with an error: {0}")]
    Refused(Value),
    #[error("the request was cancelled before the client answered")]
    Cancelled,
    /// A question for a session's standalone stream found no GET open to take it: the agent
    /// never saw it (the caller may ask another way).
    #[error("the client's stream closed before the question could be sent")]
    Unsent,
}

/// The questions waiting for their answers, one table per principal's front; keyed by the
/// session the question went to and its id.
#[derive(Default)]
pub struct Questions {
    waiting: Mutex<HashMap<(String, String), oneshot::Sender<Answered>>>,
    next: AtomicU64,
}

impl Questions {
    /// Hands the agent's answer to the question `id` of `session`; false when no question of
    /// that session waits under that id (the POST then goes where it would have gone).
    pub fn answer(&self, session: &str, id: &str, answered: Answered) -> bool {
        if !is_question_id(id) {
            return false;
        }
        let key = (session.to_string(), id.to_string());
        match lock(&self.waiting).remove(&key) {
            Some(waiter) => {
                // The call may have stopped waiting in between: nothing to hand then.
                let _ = waiter.send(answered);
                true
            }
            None => false,
        }
    }

    /// How many questions wait (for tests and the log).
    pub fn waiting(&self) -> usize {
        lock(&self.waiting).len()
    }

    /// Ends the wait of every question of `session`: its agent has gone, so none will be
    /// answered (each asker sees its stream closed).
    pub fn forget_session(&self, session: &str) {
        lock(&self.waiting).retain(|(s, _), _| s != session);
    }
}

/// Where a call's questions go: the SSE body of the call's own POST, the agent's one
/// stream of lines, or an HTTP session's standalone stream.
enum Way {
    Stream(RequestStream),
    /// The agent's stream of lines, and the token that fires when its reader has ended.
    Lines(LineOut, CancellationToken),
    /// The session's standalone stream (its GET: the one open when a line is sent, which a
    /// reconnecting agent replaces), for a server's request no call carries, and whether
    /// the session has ended (deleted, expired, its principal stopped). The answer comes by
    /// a POST of the session's, which may outlive a GET; the session's end is what ends the
    /// wait.
    Standalone {
        slot: Arc<Standalone>,
        ended: SessionEnded,
    },
}

impl Way {
    /// Sends a question, waiting for room. On a session's standalone stream, waits until
    /// the response body has taken it: a GET dropped with the question still queued never
    /// showed it, and the question goes on the GET open then, or is unsent (`Unsent`: the
    /// caller may ask another way) when none is.
    async fn ask(&self, line: Vec<u8>) -> Result<(), AskFailed> {
        match self {
            Way::Stream(stream) => match stream.ask(line).await {
                true => Ok(()),
                false => Err(AskFailed::Closed),
            },
            Way::Lines(out, ended) => match !ended.is_cancelled() && out.send(line).await.is_ok() {
                true => Ok(()),
                false => Err(AskFailed::Closed),
            },
            Way::Standalone { slot, .. } => loop {
                // A stream that is closed is not live: each turn takes a newer GET's, or ends.
                let stream = slot.live().ok_or(AskFailed::Unsent)?;
                if let Some(taken) = stream.ask_tracked(line.clone()).await {
                    if taken.await.is_ok() {
                        return Ok(());
                    }
                }
            },
        }
    }

    /// Sends a line that must not be dropped (a withdrawal) without waiting for it.
    fn tell(&self, line: Vec<u8>, held: Option<OpenQuestion>) {
        match self {
            Way::Stream(stream) => stream.tell(line, held),
            Way::Lines(out, _) => {
                let out = out.clone();
                spawn_bounded(async move {
                    let _ = out.send(line).await;
                });
            }
            // On the GET open now (the one asked on may have been replaced); none open:
            // nobody to tell.
            Way::Standalone { slot, .. } => {
                if let Some(stream) = slot.live() {
                    spawn_bounded(async move {
                        stream.ask(line).await;
                    });
                }
            }
        }
    }

    /// Resolves when the agent has gone.
    async fn closed(&self) {
        match self {
            Way::Stream(stream) => stream.closed().await,
            Way::Lines(out, ended) => {
                tokio::select! {
                    () = out.closed() => {}
                    () = ended.cancelled() => {}
                }
            }
            // rmcp's peer offers no wait for its transport's end: looked at every
            // `SESSION_LOOK`, which is what a session ended costs a question at most.
            Way::Standalone { ended, .. } => {
                while !ended() {
                    tokio::time::sleep(SESSION_LOOK).await;
                }
            }
        }
    }

    /// Counts a question as open on a request's stream, which waits for its withdrawal
    /// before it ends; the agent's stream of lines and a session's outlive every question.
    fn question_open(&self) -> Option<OpenQuestion> {
        match self {
            Way::Stream(stream) => Some(stream.question_open()),
            Way::Lines(..) | Way::Standalone { .. } => None,
        }
    }

    /// Whether a question whose send was abandoned may still reach the agent: a line half
    /// written to a stream of lines is finished by another task (`LineOut`), and one queued
    /// on a standalone stream stays queued; a request's stream takes a line whole or not at
    /// all, and ends with its call.
    fn abandoned_may_arrive(&self) -> bool {
        matches!(self, Way::Lines(..) | Way::Standalone { .. })
    }

    /// What the agent is told when a question is dropped unanswered.
    fn dropped_reason(&self) -> &'static str {
        match self {
            Way::Stream(_) => GaveUp::CallEnded.reason(),
            Way::Lines(..) | Way::Standalone { .. } => "palisade no longer needs the answer",
        }
    }
}

/// Runs `fut` (a withdrawal's send) on a task of its own, for at most `TELL_BOUND`: an agent
/// that holds its stream open without reading it must not keep the task. Outside a runtime
/// (a drop at shutdown) there is no one left to tell.
fn spawn_bounded(fut: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(TELL_BOUND, fut).await;
        });
    }
}

/// Whether an HTTP session has ended (for rmcp's peer: its transport has closed).
pub type SessionEnded = Arc<dyn Fn() -> bool + Send + Sync>;

/// How often a question on a session's standalone stream looks whether its session ended.
const SESSION_LOOK: Duration = Duration::from_millis(500);

/// How long a withdrawal waits for an agent's stream of lines, or a session's standalone
/// stream, that does not read (behind a question still being written, which it must
/// follow).
const TELL_BOUND: Duration = Duration::from_secs(30);

/// A call's way to its own agent: the session it came on, its stream, what the agent's
/// client declared, and the call's own cancellation (a question ends with its call).
pub struct Asker {
    questions: Arc<Questions>,
    session: String,
    way: Way,
    caps: Option<ClientCapabilities>,
    call: CancellationToken,
}

/// Why a question stopped waiting before its answer, and what the agent is told then.
enum GaveUp {
    Timeout,
    /// The server that asked withdrew its request.
    Withdrawn,
    /// The call the question serves was cancelled (by its agent, or its client going).
    CallEnded,
}

impl Asker {
    pub fn new(
        questions: Arc<Questions>,
        session: String,
        stream: RequestStream,
        caps: Option<ClientCapabilities>,
        call: CancellationToken,
    ) -> Asker {
        Asker {
            questions,
            session,
            way: Way::Stream(stream),
            caps,
            call,
        }
    }

    /// The way to the agent of HTTP session `session` on its standalone stream (its GET),
    /// for a server's request that no call carries. Its answer is a POST of the session's,
    /// which may come after that GET has gone: the wait ends with the answer, the timeout,
    /// the server's withdrawal or the session's end (`ended`), not with the stream. A
    /// question no GET took is unsent (`AskFailed::Unsent`).
    pub fn standalone(
        questions: Arc<Questions>,
        session: String,
        slot: Arc<Standalone>,
        ended: SessionEnded,
        caps: Option<ClientCapabilities>,
    ) -> Asker {
        Asker {
            questions,
            session,
            way: Way::Standalone { slot, ended },
            caps,
            call: CancellationToken::new(),
        }
    }

    /// The way to the one agent on a stream of lines (stdio). Its questions end when the
    /// agent goes (`Questions::forget_session`), not with a call: the server's request they
    /// relay has its own cancellation.
    pub fn on_lines(
        questions: Arc<Questions>,
        out: LineOut,
        ended: CancellationToken,
        caps: Option<ClientCapabilities>,
    ) -> Asker {
        Asker {
            questions,
            session: LINES_SESSION.to_string(),
            way: Way::Lines(out, ended),
            caps,
            call: CancellationToken::new(),
        }
    }

    /// Whether the call's client declared elicitation.
    pub fn elicits(&self) -> bool {
        self.caps.as_ref().is_some_and(|c| c.elicitation.is_some())
    }

    /// What the call's client declared in its `initialize`.
    pub fn caps(&self) -> Option<ClientCapabilities> {
        self.caps.clone()
    }

    /// Puts `method` with `params` to the agent on the call's stream and waits for its
    /// answer, at most `timeout`, and no longer than the call.
    pub async fn ask(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Box<RawValue>, AskFailed> {
        self.ask_until(method, params, timeout, &CancellationToken::new())
            .await
    }

    /// `ask`, given up as well when `cancel` fires first (the server that asked withdrew
    /// its request). A question given up once it was sent is withdrawn from the agent with
    /// `notifications/cancelled` on the same stream.
    pub async fn ask_until(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, AskFailed> {
        self.ask_text_until(method, &params.to_string(), timeout, cancel)
            .await
    }

    /// `ask_until` with params the caller holds as JSON text, put to the agent as written
    /// (a server's sampling request relayed in its own words).
    pub async fn ask_raw_until(
        &self,
        method: &str,
        params: &RawValue,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, AskFailed> {
        self.ask_text_until(method, params.get(), timeout, cancel)
            .await
    }

    /// `params`: one JSON value's text, with no raw line break (a question is one line).
    async fn ask_text_until(
        &self,
        method: &str,
        params: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, AskFailed> {
        let n = self.questions.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{ID_PREFIX}{n}");
        let (tx, rx) = oneshot::channel();
        let key = (self.session.clone(), id.clone());
        lock(&self.questions.waiting).insert(key.clone(), tx);
        // Removed however the wait ends: answered, timed out, or the call dropped.
        let _waiting = Waiting {
            questions: &self.questions,
            key,
        };
        // The timeout covers the whole exchange: a client that keeps its stream open but
        // does not read it leaves the question unsent, and that wait ends too.
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let give_up = async {
            tokio::select! {
                () = &mut deadline => GaveUp::Timeout,
                () = cancel.cancelled() => GaveUp::Withdrawn,
                () = self.call.cancelled() => GaveUp::CallEnded,
            }
        };
        tokio::pin!(give_up);
        let question = question_line(&id, method, params);
        tokio::select! {
            sent = self.way.ask(question) => sent?,
            why = &mut give_up => {
                if self.way.abandoned_may_arrive() {
                    // A cancellation of an id the agent never saw is harmless.
                    self.way.tell(withdrawal(&id, why.reason()), None);
                }
                return Err(why.failed(timeout));
            }
        };
        // Withdrawn however the wait ends without an answer, this future dropped included
        // (an approval raced against the call's cancellation). Counted open until answered or
        // its withdrawal is queued: a stream ending with its call waits for that.
        let mut withdraw = Withdrawal {
            way: &self.way,
            id: &id,
            reason: Some(self.way.dropped_reason()),
            open: self.way.question_open(),
        };
        let answered = tokio::select! {
            answered = rx => answered.map_err(|_| AskFailed::Closed),
            // A client gone cannot answer: the wait ends with it, not at the timeout.
            () = self.way.closed() => Err(AskFailed::Closed),
            why = &mut give_up => {
                withdraw.reason = Some(why.reason());
                return Err(why.failed(timeout));
            }
        };
        // Answered, or nobody left to tell.
        withdraw.reason = None;
        match answered? {
            Answered::Result(v) => Ok(v),
            Answered::Error(e) => Err(AskFailed::Refused(e)),
        }
    }
}

/// A sent question's withdrawal, told the agent when dropped with a reason; the question
/// counts as open until then.
struct Withdrawal<'a> {
    way: &'a Way,
    id: &'a str,
    reason: Option<&'static str>,
    open: Option<OpenQuestion>,
}

impl Drop for Withdrawal<'_> {
    fn drop(&mut self) {
        let open = self.open.take();
        if let Some(reason) = self.reason {
            self.way.tell(withdrawal(self.id, reason), open);
        }
    }
}

impl GaveUp {
    fn failed(&self, timeout: Duration) -> AskFailed {
        match self {
            GaveUp::Timeout => AskFailed::Timeout(timeout),
            GaveUp::Withdrawn | GaveUp::CallEnded => AskFailed::Cancelled,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            GaveUp::Timeout => "palisade stopped waiting for the answer (its time ran out)",
            GaveUp::Withdrawn => "cancelled by the server that asked",
            GaveUp::CallEnded => "the call this question served has ended",
        }
    }
}

/// The agent told that question `id` is withdrawn, as one line.
fn withdrawal(id: &str, reason: &str) -> Vec<u8> {
    line(&serde_json::json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason},
    }))
}

/// The question `id` of `method` with `params` (JSON text, kept as it is) as one line.
fn question_line(id: &str, method: &str, params: &str) -> Vec<u8> {
    let quoted = |s: &str| Value::String(s.to_string()).to_string();
    let mut line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":{},\"params\":{params}}}",
        quoted(id),
        quoted(method)
    )
    .into_bytes();
    line.push(b'\n');
    line
}

/// A JSON-RPC message as one line of the stream.
fn line(message: &Value) -> Vec<u8> {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// A question's entry in the table, removed when its wait ends.
struct Waiting<'a> {
    questions: &'a Questions,
    key: (String, String),
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.questions.waiting).remove(&self.key);
    }
}

/// Whether `id` can be a question's (rmcp's own requests to the agent have number ids).
pub fn is_question_id(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// Runs `fut` (a call) with `asker` as the way to its agent.
pub async fn scope<F: std::future::Future>(asker: Arc<Asker>, fut: F) -> F::Output {
    ASKER.scope(asker, fut).await
}

/// The asker of the call this task runs, if its agent can be asked on its own stream.
pub fn current() -> Option<Arc<Asker>> {
    ASKER.try_with(Arc::clone).ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one insert or remove: a panic elsewhere cannot leave it half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;

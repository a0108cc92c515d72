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
mod tests {
    use super::*;
    use futures::StreamExt;

    fn eliciting() -> Option<ClientCapabilities> {
        serde_json::from_value(serde_json::json!({"elicitation": {}})).ok()
    }

    #[tokio::test]
    async fn a_question_goes_on_the_stream_and_its_answer_comes_back_by_session_and_id() {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        let asker = asker_on(&questions, stream, CancellationToken::new());
        let asked = asker.ask(
            "elicitation/create",
            serde_json::json!({"message": "m"}),
            Duration::from_secs(5),
        );
        let answer = async {
            let line = lines.next().await.expect("the question");
            let q: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(q["method"], "elicitation/create");
            let id = q["id"].as_str().unwrap().to_string();
            // Another session's answer, or an id Palisade did not give, is not taken.
            assert!(!questions.answer("s2", &id, Answered::Result(raw("null"))));
            assert!(!questions.answer("s1", "7", Answered::Result(raw("null"))));
            let ok = raw(r#"{"action":"accept","n":1e3}"#);
            assert!(questions.answer("s1", &id, Answered::Result(ok)));
        };
        let (got, ()) = tokio::join!(asked, answer);
        // As the agent wrote it: `1e3` not re-spelt.
        assert_eq!(got.unwrap().get(), r#"{"action":"accept","n":1e3}"#);
        assert_eq!(questions.waiting(), 0);
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    /// An asker for session `s1` on `stream`, ending with `call`.
    fn asker_on(
        questions: &Arc<Questions>,
        stream: RequestStream,
        call: CancellationToken,
    ) -> Asker {
        Asker::new(
            Arc::clone(questions),
            "s1".into(),
            stream,
            eliciting(),
            call,
        )
    }

    /// One question of session `s1` on `stream`, waited for at most `timeout`.
    async fn ask(
        questions: &Arc<Questions>,
        stream: RequestStream,
        timeout: Duration,
    ) -> Result<Box<RawValue>, AskFailed> {
        let asker = asker_on(questions, stream, CancellationToken::new());
        asker.ask("elicitation/create", Value::Null, timeout).await
    }

    #[tokio::test]
    async fn an_unanswered_question_times_out_and_leaves_nothing_behind() {
        let questions = Arc::new(Questions::default());
        let (stream, _lines) = RequestStream::new();
        let got = ask(&questions, stream, Duration::from_millis(20)).await;
        assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
        assert_eq!(questions.waiting(), 0);
        // A client that keeps its stream open and never reads: once the backlog is full the
        // question cannot even be sent, and the timeout still ends the wait.
        let (stream, _unread) = RequestStream::new();
        for _ in 0..crate::gateway::agent::request_stream::BACKLOG {
            stream.offer(b"note".to_vec());
        }
        let got = ask(&questions, stream, Duration::from_millis(20)).await;
        assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
        assert_eq!(questions.waiting(), 0);
        // A stream whose client has gone: refused at once.
        let (stream, lines) = RequestStream::new();
        drop(lines);
        let got = ask(&questions, stream, Duration::from_secs(5)).await;
        assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
        assert_eq!(questions.waiting(), 0);
        // A client that goes away while the question waits: the wait ends then.
        let (stream, mut lines) = RequestStream::new();
        let asker = asker_on(&questions, stream, CancellationToken::new());
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let leave = async move {
            let _question = lines.next().await;
            drop(lines);
        };
        let (got, ()) = tokio::join!(asked, leave);
        assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
        assert_eq!(questions.waiting(), 0);
    }

    /// Gives a question up: given the server's token and the call's.
    type GiveUp = fn(&CancellationToken, &CancellationToken);

    /// An asker for session `s1` on the standalone streams of `slot`, its session ended once
    /// `ended` is set.
    fn standalone_on(
        questions: &Arc<Questions>,
        slot: &Arc<Standalone>,
        ended: &Arc<std::sync::atomic::AtomicBool>,
    ) -> Asker {
        let ended = Arc::clone(ended);
        Asker::standalone(
            Arc::clone(questions),
            "s1".into(),
            Arc::clone(slot),
            Arc::new(move || ended.load(Ordering::Relaxed)),
            eliciting(),
        )
    }

    fn question_id(line: &[u8]) -> String {
        let q: Value = serde_json::from_slice(line).unwrap();
        q["id"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn a_standalone_question_dropped_with_its_get_goes_on_the_next_get() {
        let questions = Arc::new(Questions::default());
        let slot = Arc::new(Standalone::default());
        let ended = Arc::default();
        let asker = standalone_on(&questions, &slot, &ended);
        // The first GET goes away with the question queued on it, never taken.
        let first = slot.open().unwrap();
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let agent = async {
            tokio::task::yield_now().await;
            drop(first);
            let mut second = slot.open().expect("a new GET");
            let line = second.next().await.expect("the question, on the new GET");
            let id = question_id(&line);
            // The new GET closes too: the answer comes by a POST all the same.
            drop(second);
            assert!(questions.answer("s1", &id, Answered::Result(raw("{}"))));
        };
        let (got, ()) = tokio::join!(asked, agent);
        assert_eq!(got.unwrap().get(), "{}");
        assert_eq!(questions.waiting(), 0);
    }

    #[tokio::test]
    async fn a_standalone_question_no_get_took_is_unsent() {
        let questions = Arc::new(Questions::default());
        let slot = Arc::new(Standalone::default());
        let ended = Arc::default();
        let asker = standalone_on(&questions, &slot, &ended);
        let got = asker
            .ask("elicitation/create", Value::Null, Duration::from_secs(600))
            .await;
        assert!(matches!(got, Err(AskFailed::Unsent)), "no GET: {got:?}");
        // A GET that goes away with the question queued, and none after it.
        let first = slot.open().unwrap();
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let leave = async {
            tokio::task::yield_now().await;
            drop(first);
        };
        let (got, ()) = tokio::join!(asked, leave);
        assert!(matches!(got, Err(AskFailed::Unsent)), "{got:?}");
        assert_eq!(questions.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standalone_question_ends_with_its_session_and_its_withdrawal_goes_on_the_live_get() {
        let questions = Arc::new(Questions::default());
        let slot = Arc::new(Standalone::default());
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let asker = standalone_on(&questions, &slot, &ended);
        let mut first = slot.open().unwrap();
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let agent = async {
            let line = first.next().await.expect("the question");
            drop(first);
            // The GET closing does not end the wait; the session's end does.
            tokio::time::sleep(SESSION_LOOK * 4).await;
            assert_eq!(questions.waiting(), 1, "still waiting for a POST");
            ended.store(true, Ordering::Relaxed);
            question_id(&line)
        };
        let started = tokio::time::Instant::now();
        let (got, id) = tokio::join!(asked, agent);
        assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not at the timeout"
        );
        assert_eq!(questions.waiting(), 0);
        // A question withdrawn (here: timed out) is withdrawn on the GET open then, not on
        // the one it was asked on.
        ended.store(false, Ordering::Relaxed);
        let mut asked_on = slot.open().unwrap();
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(5));
        let agent = async {
            let line = asked_on.next().await.expect("the question");
            drop(asked_on);
            let mut live = slot.open().unwrap();
            let told = live.next().await.expect("the withdrawal");
            (question_id(&line), told)
        };
        let (got, (id2, told)) = tokio::join!(asked, agent);
        assert!(matches!(got, Err(AskFailed::Timeout(_))), "{got:?}");
        assert_ne!(id, id2);
        let told: Value = serde_json::from_slice(&told).unwrap();
        assert_eq!(told["method"], "notifications/cancelled");
        assert_eq!(told["params"]["requestId"], id2.as_str());
    }

    /// Asks one question on a fresh stream, gives it up with `give_up` once the agent has
    /// read it, and returns how the question ended and what the agent was told next.
    async fn given_up(
        timeout: Duration,
        give_up: impl FnOnce(&CancellationToken, &CancellationToken),
    ) -> (Result<Box<RawValue>, AskFailed>, Value, Option<Value>) {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        let call = CancellationToken::new();
        let asker = asker_on(&questions, stream, call.clone());
        let server = CancellationToken::new();
        let asked = asker.ask_until("sampling/createMessage", Value::Null, timeout, &server);
        let read = async {
            let line = lines.next().await.expect("the question");
            let q: Value = serde_json::from_slice(&line).unwrap();
            give_up(&server, &call);
            q["id"].clone()
        };
        let (got, id) = tokio::join!(asked, read);
        assert_eq!(questions.waiting(), 0);
        drop(asker);
        let told = lines
            .next()
            .await
            .map(|l| serde_json::from_slice::<Value>(&l).unwrap());
        (got, id, told)
    }

    #[tokio::test]
    async fn a_question_given_up_after_it_was_sent_is_withdrawn_from_the_agent() {
        let long = Duration::from_secs(600);
        // The server that asked withdrew its request; the call the question serves was
        // cancelled; no answer came in time: each ends the wait, and the agent is told.
        let cases: [(&str, Duration, GiveUp); 3] = [
            ("withdrawn", long, |server, _| server.cancel()),
            ("call cancelled", long, |_, call| call.cancel()),
            ("timed out", Duration::from_millis(20), |_, _| {}),
        ];
        for (case, timeout, give_up) in cases {
            let (got, id, told) = given_up(timeout, give_up).await;
            let expected = if case == "timed out" {
                matches!(got, Err(AskFailed::Timeout(_)))
            } else {
                matches!(got, Err(AskFailed::Cancelled))
            };
            assert!(expected, "{case}: {got:?}");
            let told = told.unwrap_or_else(|| panic!("{case}: the agent was told nothing"));
            assert_eq!(told["method"], "notifications/cancelled", "{case}");
            assert_eq!(told["params"]["requestId"], id, "{case}");
        }
    }

    #[tokio::test]
    async fn a_call_ended_without_an_answer_withdraws_its_question_before_its_stream_ends() {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        let call = CancellationToken::new();
        let asker = asker_on(&questions, stream.clone(), call.clone());
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let end_the_call = async {
            let _question = lines.next().await;
            // The call is cancelled, and its stream ended as the fast path ends it.
            call.cancel();
            stream.end().await;
            let mut rest = Vec::new();
            while let Some(line) = lines.next().await {
                rest.push(serde_json::from_slice::<Value>(&line).unwrap());
            }
            rest
        };
        let (got, rest) = tokio::join!(asked, end_the_call);
        assert!(matches!(got, Err(AskFailed::Cancelled)), "{got:?}");
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(rest[0]["method"], "notifications/cancelled", "{rest:?}");
    }

    #[tokio::test]
    async fn a_question_dropped_unanswered_is_withdrawn() {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        let asker = asker_on(&questions, stream, CancellationToken::new());
        {
            let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
            tokio::pin!(asked);
            // Sent, then the asking future is dropped (an approval raced against its call).
            tokio::select! {
                biased;
                _ = &mut asked => panic!("answered with nobody answering"),
                line = lines.next() => assert!(line.is_some()),
            }
        }
        drop(asker);
        let told: Value = serde_json::from_slice(&lines.next().await.unwrap()).unwrap();
        assert_eq!(told["method"], "notifications/cancelled", "{told}");
        assert_eq!(questions.waiting(), 0);
    }

    #[tokio::test]
    async fn a_question_never_sent_is_not_withdrawn() {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        for _ in 0..crate::gateway::agent::request_stream::BACKLOG {
            stream.offer(b"{}".to_vec());
        }
        let call = CancellationToken::new();
        let asker = asker_on(&questions, stream, call.clone());
        call.cancel();
        let got = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        assert!(matches!(got.await, Err(AskFailed::Cancelled)));
        drop(asker);
        let mut told = 0;
        while let Some(line) = lines.next().await {
            assert_eq!(line, b"{}", "only the notes queued before");
            told += 1;
        }
        assert_eq!(told, crate::gateway::agent::request_stream::BACKLOG);
    }

    /// An agent on a stream of lines (stdio): the question is written as a line, its answer
    /// comes back as the agent wrote it; a question the server withdraws is withdrawn from
    /// the agent on the same stream; and once the agent has gone (`forget_session`) a
    /// waiting question ends at once, not at its timeout.
    #[tokio::test]
    async fn an_agent_on_lines_is_asked_on_its_stream_and_its_going_ends_the_wait() {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let questions = Arc::new(Questions::default());
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let out = LineOut::new(Box::new(ours), CancellationToken::new());
        let mut read = BufReader::new(theirs).lines();
        let ended = CancellationToken::new();
        let asker = Asker::on_lines(Arc::clone(&questions), out, ended.clone(), eliciting());
        let next =
            |line: Option<String>| -> Value { serde_json::from_str(&line.unwrap()).unwrap() };

        let asked = asker.ask(
            "sampling/createMessage",
            Value::Null,
            Duration::from_secs(600),
        );
        let answer = async {
            let q = next(read.next_line().await.unwrap());
            assert_eq!(q["method"], "sampling/createMessage");
            let id = q["id"].as_str().unwrap().to_string();
            assert!(!questions.answer("s1", &id, Answered::Result(raw("null"))));
            assert!(questions.answer(LINES_SESSION, &id, Answered::Result(raw(r#"{"n":1e3}"#))));
        };
        let (got, ()) = tokio::join!(asked, answer);
        assert_eq!(got.unwrap().get(), r#"{"n":1e3}"#);

        let server = CancellationToken::new();
        let asked = asker.ask_until(
            "sampling/createMessage",
            Value::Null,
            Duration::from_secs(600),
            &server,
        );
        let withdraw = async {
            let q = next(read.next_line().await.unwrap());
            server.cancel();
            let told = next(read.next_line().await.unwrap());
            assert_eq!(told["method"], "notifications/cancelled", "{told}");
            assert_eq!(told["params"]["requestId"], q["id"], "{told}");
        };
        let (got, ()) = tokio::join!(asked, withdraw);
        assert!(matches!(got, Err(AskFailed::Cancelled)), "{got:?}");

        let asked = asker.ask(
            "sampling/createMessage",
            Value::Null,
            Duration::from_secs(600),
        );
        let leave = async {
            let _question = read.next_line().await.unwrap();
            assert_eq!(questions.waiting(), 1);
            questions.forget_session(LINES_SESSION);
        };
        let (got, ()) = tokio::join!(asked, leave);
        assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
        assert_eq!(questions.waiting(), 0);

        // Once the agent's reader has ended, a new question is not even sent.
        ended.cancel();
        let got = asker.ask(
            "sampling/createMessage",
            Value::Null,
            Duration::from_secs(600),
        );
        assert!(matches!(got.await, Err(AskFailed::Closed)));
        assert_eq!(questions.waiting(), 0);
    }
}

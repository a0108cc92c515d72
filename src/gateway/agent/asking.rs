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
//! Never: hand an answer to a question of another session (a question is found by its
//! session and its id, which only Palisade makes), wait past the approver's timeout, or keep
//! a question once its call has stopped waiting for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::ClientCapabilities;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::request_stream::RequestStream;

/// The prefix of the ids Palisade gives its questions (rmcp's own are numbers).
const ID_PREFIX: &str = "palisade-question-";

tokio::task_local! {
    static ASKER: Arc<Asker>;
}

/// What the agent sent back for a question.
#[derive(Debug)]
pub enum Answered {
    Result(Value),
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
}

/// A call's way to its own agent: the session it came on, its stream, and what the agent's
/// client declared.
pub struct Asker {
    questions: Arc<Questions>,
    session: String,
    stream: RequestStream,
    caps: Option<ClientCapabilities>,
}

impl Asker {
    pub fn new(
        questions: Arc<Questions>,
        session: String,
        stream: RequestStream,
        caps: Option<ClientCapabilities>,
    ) -> Asker {
        Asker {
            questions,
            session,
            stream,
            caps,
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
    /// answer, at most `timeout`.
    pub async fn ask(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, AskFailed> {
        self.ask_until(method, params, timeout, &CancellationToken::new())
            .await
    }

    /// `ask`, given up when `cancel` fires first (the server that asked cancelled its
    /// request): the agent is told with `notifications/cancelled` on the same stream.
    pub async fn ask_until(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Value, AskFailed> {
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
        let request = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params,
        });
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        // The timeout covers the whole exchange: a client that keeps its stream open but
        // does not read it leaves the question unsent, and that wait ends too.
        let exchange = async {
            if !self.stream.ask(line).await {
                return Err(AskFailed::Closed);
            }
            // A client gone cannot answer: the wait ends with it, not at the timeout.
            tokio::select! {
                answered = rx => answered.map_err(|_| AskFailed::Closed),
                () = self.stream.closed() => Err(AskFailed::Closed),
            }
        };
        let answered = tokio::select! {
            answered = tokio::time::timeout(timeout, exchange) => answered,
            () = cancel.cancelled() => {
                let note = serde_json::json!({
                    "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "cancelled by the server that asked"},
                });
                let mut line = note.to_string().into_bytes();
                line.push(b'\n');
                self.stream.offer(line);
                return Err(AskFailed::Cancelled);
            }
        };
        match answered {
            Err(_) => Err(AskFailed::Timeout(timeout)),
            Ok(Err(failed)) => Err(failed),
            Ok(Ok(Answered::Result(v))) => Ok(v),
            Ok(Ok(Answered::Error(e))) => Err(AskFailed::Refused(e)),
        }
    }
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
        let asker = Asker::new(Arc::clone(&questions), "s1".into(), stream, eliciting());
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
            assert!(!questions.answer("s2", &id, Answered::Result(Value::Null)));
            assert!(!questions.answer("s1", "7", Answered::Result(Value::Null)));
            let ok = serde_json::json!({"action": "accept"});
            assert!(questions.answer("s1", &id, Answered::Result(ok)));
        };
        let (got, ()) = tokio::join!(asked, answer);
        assert_eq!(got.unwrap()["action"], "accept");
        assert_eq!(questions.waiting(), 0);
    }

    /// One question of session `s1` on `stream`, waited for at most `timeout`.
    async fn ask(
        questions: &Arc<Questions>,
        stream: RequestStream,
        timeout: Duration,
    ) -> Result<Value, AskFailed> {
        let asker = Asker::new(Arc::clone(questions), "s1".into(), stream, eliciting());
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
        let asker = Asker::new(Arc::clone(&questions), "s1".into(), stream, eliciting());
        let asked = asker.ask("elicitation/create", Value::Null, Duration::from_secs(600));
        let leave = async move {
            let _question = lines.next().await;
            drop(lines);
        };
        let (got, ()) = tokio::join!(asked, leave);
        assert!(matches!(got, Err(AskFailed::Closed)), "{got:?}");
        assert_eq!(questions.waiting(), 0);
    }

    #[tokio::test]
    async fn a_question_its_asker_cancels_is_given_up_and_the_agent_told() {
        let questions = Arc::new(Questions::default());
        let (stream, mut lines) = RequestStream::new();
        let asker = Asker::new(Arc::clone(&questions), "s1".into(), stream, eliciting());
        let cancel = CancellationToken::new();
        let asked = asker.ask_until(
            "sampling/createMessage",
            Value::Null,
            Duration::from_secs(600),
            &cancel,
        );
        let server_gives_up = async {
            let line = lines.next().await.expect("the question");
            let q: Value = serde_json::from_slice(&line).unwrap();
            cancel.cancel();
            q["id"].clone()
        };
        let (got, id) = tokio::join!(asked, server_gives_up);
        assert!(matches!(got, Err(AskFailed::Cancelled)), "{got:?}");
        assert_eq!(questions.waiting(), 0);
        let note: Value = serde_json::from_slice(&lines.next().await.unwrap()).unwrap();
        assert_eq!(note["method"], "notifications/cancelled");
        assert_eq!(note["params"]["requestId"], id);
    }
}

//! Asking a 2026-07-28 agent during a call: multi round-trip requests (MRTR).
//!
//! A 2026-07-28 session has no channel for a request from the server, so the `elicit`
//! approver cannot send `elicitation/create` mid-call. Instead the call answers
//! `resultType: "input_required"` with the question as an input request and a
//! `requestState`; the agent asks its person and retries the same call with the answer in
//! `inputResponses`. The question is asked once per round: the first round records it (and
//! forwards nothing, writes no audit record: nothing was decided), the retry hands the answer
//! to the approver as if the agent had answered the request, and the call goes on from there
//! (audited once, as any escalation).
//!
//! `requestState` is an opaque handle to a pending entry kept here, never data the agent
//! could forge: the entry binds the answer to the call that asked (server, tool and
//! arguments), expires, and is used once. A retry with an unknown, expired or mismatched
//! handle is refused.
//!
//! A server's own request during a 2026-07-28 call (sampling, elicitation, relayed as its
//! `relay` allows) takes the same road: the call runs on its own task, the relay hands the
//! request to the call's round (found by server: the one 2026-07-28 call in flight there),
//! and the agent's call is answered `input_required` with it while the server's call stays
//! open; the retry's answer goes to the server and the call is driven on from where it was.
//!
//! The round travels with the call as a task-local (set around the pipeline), so the approval
//! chain needs no new parameter; outside a round nothing changes.
//!
//! Here: the rounds, the pending calls, the `input_required` results (the open calls a
//! server's request finds its round by are `agent/open_calls.rs`); what the
//! gateway's state and the pipeline's stages use. `drive.rs` runs a call through its rounds
//! (it uses the pipeline, which uses this module, never the reverse).

pub mod drive;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ClientCapabilities, ErrorData};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The key of the approver's question in `inputRequests` / `inputResponses`.
pub const APPROVAL_KEY: &str = "palisade-approval";
/// The key of a server's relayed request in `inputRequests` / `inputResponses`.
pub const RELAY_KEY: &str = "palisade-relay";
/// How long a pending question waits for its retry.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// At most this many questions wait at once (the oldest expire first).
pub const MAX_PENDING: usize = 1024;

tokio::task_local! {
    static ROUND: Arc<Round>;
}

/// Why a server's request put to the agent in the next round got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    #[error("this call cannot be suspended")]
    NotSuspendable,
    #[error("the call is no longer waiting")]
    NotWaiting,
    #[error("the client did not retry the call in time; the question expired")]
    Expired,
    #[error("the client did not answer within {}s", .0.as_secs())]
    Timeout(Duration),
    #[error("the server withdrew the request")]
    Withdrawn,
}

/// One round of a 2026-07-28 call: the agent's answer, when it is a retry, and the question
/// the approver would ask, when it has none.
#[derive(Debug)]
pub struct Round {
    /// The agent's capabilities, from this request's envelope.
    pub caps: Option<ClientCapabilities>,
    answer: Mutex<Option<Value>>,
    question: Mutex<Option<Question>>,
    /// On a retry that answers an approver's question: the grants that question showed.
    shown: Option<Shown>,
    /// To the task driving the call: a server's request for the agent.
    suspend: Option<mpsc::Sender<Suspension>>,
}

/// A server's request waiting for the agent's answer in the next round.
#[derive(Debug)]
pub struct Suspension {
    /// `{"method", "params"}`, as the input request the agent is sent.
    pub request: Value,
    pub answer: oneshot::Sender<Value>,
}

/// What the approver asks (an `elicitation/create` form).
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub message: String,
    pub schema: Value,
}

impl Round {
    pub fn new(caps: Option<ClientCapabilities>, answer: Option<Value>) -> Round {
        Round {
            caps,
            answer: Mutex::new(answer),
            question: Mutex::default(),
            shown: None,
            suspend: None,
        }
    }

    /// A retry answering an approver's question that showed `shown` as its grants.
    pub fn answering(mut self, shown: Shown) -> Round {
        self.shown = Some(shown);
        self
    }

    /// The grants the question this round answers showed (`None` on a first round).
    pub fn shown(&self) -> Option<&Shown> {
        self.shown.as_ref()
    }

    fn with_suspend(mut self, tx: mpsc::Sender<Suspension>) -> Round {
        self.suspend = Some(tx);
        self
    }

    /// The agent declared elicitation.
    pub fn elicits(&self) -> bool {
        self.caps.as_ref().is_some_and(|c| c.elicitation.is_some())
    }

    /// Puts a server's request to the agent in the next round and waits for its answer, at
    /// most `timeout`, or until `cancel` (the server withdrew it).
    pub async fn ask_agent(
        &self,
        request: Value,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Value, AskError> {
        let tx = self.suspend.as_ref().ok_or(AskError::NotSuspendable)?;
        let (answer, rx) = oneshot::channel();
        tx.send(Suspension { request, answer })
            .await
            .map_err(|_| AskError::NotWaiting)?;
        tokio::select! {
            got = tokio::time::timeout(timeout, rx) => match got {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(_)) => Err(AskError::Expired),
                Err(_) => Err(AskError::Timeout(timeout)),
            },
            _ = cancel.cancelled() => Err(AskError::Withdrawn),
        }
    }

    /// The agent's answer, once.
    pub fn take_answer(&self) -> Option<Value> {
        lock(&self.answer).take()
    }

    pub fn ask(&self, q: Question) {
        *lock(&self.question) = Some(q);
    }

    pub fn question(&self) -> Option<Question> {
        lock(&self.question).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one assignment: a panic elsewhere cannot leave it half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `fut` inside `round`.
pub async fn scope<F: std::future::Future>(round: Arc<Round>, fut: F) -> F::Output {
    ROUND.scope(round, fut).await
}

/// The round of the call this task runs, if it is a 2026-07-28 call.
pub fn current() -> Option<Arc<Round>> {
    ROUND.try_with(Arc::clone).ok()
}

/// What binds an answer to the call that asked: the tool's name as the agent called it
/// (which names the server) and its arguments.
pub fn fingerprint(tool: &str, arguments: &serde_json::Map<String, Value>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(arguments).unwrap_or_default());
    format!("{:x}", h.finalize())
}

/// A call suspended on a server's request: its task, the way its next requests come, and
/// the way the agent's answer goes back.
pub struct Driver {
    call: JoinHandle<Result<Value, ErrorData>>,
    /// The call's own cancellation: it outlives each round's request.
    cancel: CancellationToken,
    suspensions: mpsc::Receiver<Suspension>,
    answer: oneshot::Sender<Value>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

/// A round waiting for its retry: the fingerprint of the call that left it, when, the
/// suspended call (`None`: an approver's question) and the grants that question showed.
type Waiting = (String, Instant, Option<Driver>, Shown);

/// The directories an approver's question showed the person as the approval's grants: the
/// retry's approval grants these, not what the call's paths resolve to by then.
pub type Shown = Vec<crate::approval::RememberedDir>;

/// What a retry resumes.
#[derive(Debug)]
pub enum Resumed {
    /// A call suspended on a server's request.
    Suspended(Driver),
    /// An approver's question, which showed these grants.
    Asked(Shown),
}

/// Rounds waiting for their retry, by handle: an approver's question (`None`) or a call
/// suspended on a server's request.
#[derive(Debug, Default)]
pub struct Pending {
    map: Mutex<HashMap<String, Waiting>>,
}

/// Why a retry's `requestState` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState is unknown or expired (a question is answered once, within {}s); call again without it", PENDING_TTL.as_secs())]
    Unknown,
    #[error("requestState belongs to another call (tool or arguments differ); retry the call that asked, unchanged")]
    Mismatch,
}

impl Pending {
    /// Remembers an approver's question for the call `fingerprint`, which showed `shown` as
    /// the approval's grants; returns its handle.
    pub fn insert(&self, fingerprint: String, now: Instant, shown: Shown) -> String {
        self.insert_with(fingerprint, now, None, shown)
    }

    fn insert_with(
        &self,
        fingerprint: String,
        now: Instant,
        driver: Option<Driver>,
        shown: Shown,
    ) -> String {
        let mut map = lock(&self.map);
        // Expired entries go (a suspended call's server then gets "expired" for its request).
        map.retain(|_, (_, at, _, _)| now.duration_since(*at) < PENDING_TTL);
        if map.len() >= MAX_PENDING {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, at, _, _))| *at)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let handle = uuid::Uuid::new_v4().simple().to_string();
        map.insert(handle.clone(), (fingerprint, now, driver, shown));
        handle
    }

    /// Takes the round `handle` names, if the call `fingerprint` left it; a handle is good
    /// once (a mismatch spends it too: it was guessed or replayed).
    pub fn take(
        &self,
        handle: &str,
        fingerprint: &str,
        now: Instant,
    ) -> Result<Resumed, StateError> {
        let (asked, at, driver, shown) =
            lock(&self.map).remove(handle).ok_or(StateError::Unknown)?;
        if now.duration_since(at) >= PENDING_TTL {
            return Err(StateError::Unknown);
        }
        if asked != fingerprint {
            return Err(StateError::Mismatch);
        }
        Ok(match driver {
            Some(driver) => Resumed::Suspended(driver),
            None => Resumed::Asked(shown),
        })
    }

    /// Forgets every waiting round and cancels the calls suspended in them (the gateway is
    /// stopping: no retry will come). Each such call then ends as a cancelled call, with its
    /// audit record, instead of holding the shutdown until its drain limit.
    pub fn abandon_all(&self) -> usize {
        let waiting: Vec<Waiting> = lock(&self.map).drain().map(|(_, w)| w).collect();
        let mut cancelled = 0;
        for (_, _, driver, _) in waiting {
            if let Some(d) = driver {
                d.cancel.cancel();
                cancelled += 1;
            }
        }
        cancelled
    }
}

/// An `input_required` result carrying one input request under `key`.
pub fn input_request(key: &str, request: Value, handle: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": { key: request },
        "requestState": handle
    })
}

/// The `input_required` result that asks `q`, with `handle` as the state to echo.
pub fn input_required(q: &Question, handle: &str) -> Value {
    let request = json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": q.message, "requestedSchema": q.schema}
    });
    input_request(APPROVAL_KEY, request, handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn abandoning_the_waiting_rounds_cancels_the_suspended_calls() {
        let pending = Pending::default();
        let cancel = CancellationToken::new();
        let seen = cancel.clone();
        // A suspended call: it ends only when cancelled, as a forwarded call does.
        let call = tokio::spawn(async move {
            seen.cancelled().await;
            Err(ErrorData::internal_error("cancelled", None))
        });
        let (_tx, suspensions) = mpsc::channel(1);
        let (answer, _rx) = oneshot::channel();
        let driver = Driver {
            call,
            cancel: cancel.clone(),
            suspensions,
            answer,
        };
        let handle = pending.insert_with("fp".into(), Instant::now(), Some(driver), Vec::new());
        pending.insert("other".into(), Instant::now(), Vec::new());
        assert_eq!(pending.abandon_all(), 1);
        assert!(cancel.is_cancelled());
        assert_eq!(
            pending.take(&handle, "fp", Instant::now()).unwrap_err(),
            StateError::Unknown
        );
    }

    fn args(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn an_answer_is_bound_to_the_call_that_asked_and_used_once() {
        let p = Pending::default();
        let now = Instant::now();
        let fp = fingerprint("fs__write", &args(json!({"path": "/w/a"})));
        let other = fingerprint("fs__write", &args(json!({"path": "/etc/passwd"})));
        let h = p.insert(fp.clone(), now, Vec::new());
        assert!(matches!(p.take(&h, &other, now), Err(StateError::Mismatch)));
        // A mismatch spends the handle: a guessed or replayed state gets one try.
        assert!(matches!(p.take(&h, &fp, now), Err(StateError::Unknown)));
        let h = p.insert(fp.clone(), now, Vec::new());
        assert!(matches!(p.take(&h, &fp, now), Ok(Resumed::Asked(_))));
        assert!(matches!(p.take(&h, &fp, now), Err(StateError::Unknown)));
        assert!(matches!(
            p.take("made-up", &fp, now),
            Err(StateError::Unknown)
        ));
    }

    #[test]
    fn a_question_expires() {
        let p = Pending::default();
        let now = Instant::now();
        let fp = fingerprint("fs__write", &args(json!({})));
        let h = p.insert(fp.clone(), now, Vec::new());
        assert!(matches!(
            p.take(&h, &fp, now + PENDING_TTL),
            Err(StateError::Unknown)
        ));
    }

    #[test]
    fn the_oldest_question_goes_when_too_many_wait() {
        let p = Pending::default();
        let now = Instant::now();
        let first = p.insert("f0".into(), now, Vec::new());
        for i in 1..MAX_PENDING {
            p.insert(
                format!("f{i}"),
                now + Duration::from_millis(i as u64),
                Vec::new(),
            );
        }
        let later = now + Duration::from_secs(1);
        let last = p.insert("new".into(), later, Vec::new());
        assert!(matches!(
            p.take(&first, "f0", later),
            Err(StateError::Unknown)
        ));
        assert!(matches!(p.take(&last, "new", later), Ok(Resumed::Asked(_))));
    }

    #[test]
    fn the_input_required_result_carries_the_form_and_the_handle() {
        let q = Question {
            message: "Approve?".into(),
            schema: json!({"type": "object", "properties": {}}),
        };
        let v = input_required(&q, "h1");
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(v["requestState"], "h1");
        let req = &v["inputRequests"][APPROVAL_KEY];
        assert_eq!(req["method"], "elicitation/create");
        assert_eq!(req["params"]["message"], "Approve?");
    }

    #[tokio::test]
    async fn the_round_is_seen_only_inside_its_scope() {
        assert!(current().is_none());
        let round = Arc::new(Round::new(None, Some(json!({"action": "accept"}))));
        let seen = scope(round, async {
            let r = current().expect("inside");
            (r.take_answer(), r.take_answer())
        })
        .await;
        assert_eq!(seen, (Some(json!({"action": "accept"})), None));
        assert!(current().is_none());
    }
}

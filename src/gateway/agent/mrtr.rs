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
//! The round travels with the call as a task-local (set by `front.rs` around the pipeline),
//! so the approval chain needs no new parameter; outside a round nothing changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The key of Palisade's one input request in `inputRequests` / `inputResponses`.
pub const APPROVAL_KEY: &str = "palisade-approval";
/// How long a pending question waits for its retry.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// At most this many questions wait at once (the oldest expire first).
pub const MAX_PENDING: usize = 1024;

tokio::task_local! {
    static ROUND: Arc<Round>;
}

/// One round of a 2026-07-28 call: the agent's answer, when it is a retry, and the question
/// the approver would ask, when it has none.
#[derive(Debug, Default)]
pub struct Round {
    /// The agent declared elicitation in this request's capabilities.
    pub elicits: bool,
    answer: Mutex<Option<Value>>,
    question: Mutex<Option<Question>>,
}

/// What the approver asks (an `elicitation/create` form).
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub message: String,
    pub schema: Value,
}

impl Round {
    pub fn new(elicits: bool, answer: Option<Value>) -> Round {
        Round {
            elicits,
            answer: Mutex::new(answer),
            question: Mutex::default(),
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

/// Questions waiting for their retry, by handle.
#[derive(Debug, Default)]
pub struct Pending {
    map: Mutex<HashMap<String, (String, Instant)>>,
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
    /// Remembers a question for the call `fingerprint`; returns its handle.
    pub fn insert(&self, fingerprint: String, now: Instant) -> String {
        let mut map = lock(&self.map);
        map.retain(|_, (_, at)| now.duration_since(*at) < PENDING_TTL);
        if map.len() >= MAX_PENDING {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let handle = uuid::Uuid::new_v4().simple().to_string();
        map.insert(handle.clone(), (fingerprint, now));
        handle
    }

    /// Takes the question `handle` names, if it was asked by the call `fingerprint`; a handle
    /// is good once (a mismatch spends it too: it was guessed or replayed).
    pub fn take(&self, handle: &str, fingerprint: &str, now: Instant) -> Result<(), StateError> {
        let (asked, at) = lock(&self.map).remove(handle).ok_or(StateError::Unknown)?;
        if now.duration_since(at) >= PENDING_TTL {
            return Err(StateError::Unknown);
        }
        if asked != fingerprint {
            return Err(StateError::Mismatch);
        }
        Ok(())
    }
}

/// The round of a 2026-07-28 `tools/call`: a retry's answer, checked against the question
/// its `requestState` names (and taken out of the params: the server never sees them).
pub fn round_for(
    shared: &crate::gateway::state::Shared,
    typed: &mut rmcp::model::CallToolRequestParams,
    meta: &rmcp::model::RequestMetaObject,
) -> Result<Round, rmcp::model::ErrorData> {
    let elicits = meta
        .get("io.modelcontextprotocol/clientCapabilities")
        .and_then(|c| c.get("elicitation"))
        .is_some();
    let responses = typed.input_responses.take();
    let Some(handle) = typed.request_state.take() else {
        return Ok(Round::new(elicits, None));
    };
    let fp = fingerprint(
        &typed.name,
        typed.arguments.as_ref().unwrap_or(&serde_json::Map::new()),
    );
    shared
        .mrtr
        .take(&handle, &fp, std::time::Instant::now())
        .map_err(|e| rmcp::model::ErrorData::invalid_params(e.to_string(), None))?;
    let answer = responses
        .and_then(|mut r| r.remove(APPROVAL_KEY))
        .ok_or_else(|| {
            rmcp::model::ErrorData::invalid_params(
                format!(
                    "inputResponses has no answer under `{}`, the question asked",
                    APPROVAL_KEY
                ),
                None,
            )
        })?;
    Ok(Round::new(elicits, Some(answer)))
}

/// The `input_required` result that asks `q`, with `handle` as the state to echo.
pub fn input_required(q: &Question, handle: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {
            APPROVAL_KEY: {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": q.message, "requestedSchema": q.schema}
            }
        },
        "requestState": handle
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn an_answer_is_bound_to_the_call_that_asked_and_used_once() {
        let p = Pending::default();
        let now = Instant::now();
        let fp = fingerprint("fs__write", &args(json!({"path": "/w/a"})));
        let other = fingerprint("fs__write", &args(json!({"path": "/etc/passwd"})));
        let h = p.insert(fp.clone(), now);
        assert_eq!(p.take(&h, &other, now), Err(StateError::Mismatch));
        // A mismatch spends the handle: a guessed or replayed state gets one try.
        assert_eq!(p.take(&h, &fp, now), Err(StateError::Unknown));
        let h = p.insert(fp.clone(), now);
        assert_eq!(p.take(&h, &fp, now), Ok(()));
        assert_eq!(p.take(&h, &fp, now), Err(StateError::Unknown));
        assert_eq!(p.take("made-up", &fp, now), Err(StateError::Unknown));
    }

    #[test]
    fn a_question_expires() {
        let p = Pending::default();
        let now = Instant::now();
        let fp = fingerprint("fs__write", &args(json!({})));
        let h = p.insert(fp.clone(), now);
        assert_eq!(p.take(&h, &fp, now + PENDING_TTL), Err(StateError::Unknown));
    }

    #[test]
    fn the_oldest_question_goes_when_too_many_wait() {
        let p = Pending::default();
        let now = Instant::now();
        let first = p.insert("f0".into(), now);
        for i in 1..MAX_PENDING {
            p.insert(format!("f{i}"), now + Duration::from_millis(i as u64));
        }
        let later = now + Duration::from_secs(1);
        let last = p.insert("new".into(), later);
        assert_eq!(p.take(&first, "f0", later), Err(StateError::Unknown));
        assert_eq!(p.take(&last, "new", later), Ok(()));
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
        let round = Arc::new(Round::new(true, Some(json!({"action": "accept"}))));
        let seen = scope(round, async {
            let r = current().expect("inside");
            (r.take_answer(), r.take_answer())
        })
        .await;
        assert_eq!(seen, (Some(json!({"action": "accept"})), None));
        assert!(current().is_none());
    }
}

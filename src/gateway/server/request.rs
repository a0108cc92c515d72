//! A live connection's request side (`Connection`): the helper every forward to a server
//! goes through. A timeout on every request; for a request on an agent's behalf
//! (`OnBehalf`), the agent's cancellation passed on, progress tokens mapped and the request
//! counted open while it runs (a server's request meanwhile finds its agent by it,
//! `agent/open_calls.rs`); params as Palisade built them or as the agent wrote them
//! (`call::as_sent`), a 2026-07-28 server's input requests answered and the request retried. The
//! wire is `peer/`: results come back as the bytes the server sent.
//!
//! Never: send a request without a timeout (a silent server would hang the call forever);
//! forward a server's progress under its own token (the agent only knows its own); send a
//! request on an agent's behalf without counting it open (a server's request during it could
//! then be taken for another agent's).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientRequest, InitializeResult, RequestId, RequestMetaObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::open_calls::{Caller, OpenCalls};
use crate::gateway::call::as_sent;
use crate::gateway::raw_json::RawJson;
use crate::gateway::server::era::{self, Era};
use crate::gateway::server::handler::{forward_progress, UpTarget};
use crate::gateway::server::peer::{Inbound, NoReply, Reply, ServerPeer};
use crate::gateway::server::progress::ProgressMap;

/// Why a forwarded request did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("server `{server}` did not answer within {}s (the request was cancelled)", timeout.as_secs_f64())]
    Timeout { server: String, timeout: Duration },
    #[error("server `{server}` exited or closed its connection before answering")]
    Closed { server: String },
    /// As `Closed`, with why the process ended (a fault, its exit status, a limit it hit).
    #[error("server `{server}` exited or closed its connection before answering: {reason}")]
    Stopped { server: String, reason: String },
    #[error("the call was cancelled by the client")]
    Cancelled,
    /// The server answered with a JSON-RPC error.
    #[error("{}", .0.message)]
    Server(ErrorData),
    #[error("server `{server}`: {message}")]
    Other { server: String, message: String },
}

/// A live connection's request side. Cheap to clone (`Arc`s).
#[derive(Clone)]
pub struct Connection {
    pub server: String,
    pub peer: Arc<ServerPeer>,
    /// The server's answer to `initialize` (typed view).
    pub info: Arc<InitializeResult>,
    /// The server's `capabilities.tasks`, as it sent it (rmcp's typed view has no field).
    pub tasks: Option<Value>,
    pub progress: Arc<ProgressMap<UpTarget>>,
    /// The process's faults and end: a call the process left unanswered says why.
    pub faults: Arc<crate::gateway::server::fault::ProcessFaults>,
    /// The protocol era of this connection (see `era.rs`).
    pub era: Arc<Era>,
    /// What answers the server's questions: its standalone requests (through the peer) and,
    /// on a 2026-07-28 connection, the input requests inside its results (here).
    pub inbound: Arc<dyn Inbound>,
    /// The requests in flight on agents' behalf, every server's (`agent/open_calls.rs`).
    pub open_calls: Arc<OpenCalls>,
}

/// Whom a request is sent for. An agent's request carried on: the request is cancelled
/// with it, the server's progress goes to it, and a request the server sends meanwhile goes
/// to its agent. Or Palisade's own (listings, probes, listen streams).
pub struct OnBehalf<'a> {
    cancel: Option<&'a CancellationToken>,
    progress_to: Option<UpTarget>,
    /// The agent, when it is an agent's request.
    caller: Option<Caller>,
    /// The server's task the request reads (`tasks/*`): that task's requests go to its maker.
    task: Option<&'a str>,
}

impl<'a> OnBehalf<'a> {
    /// The agent's request the current task serves with `ctx`.
    pub fn of(ctx: &'a RequestContext<RoleServer>) -> Self {
        OnBehalf {
            cancel: Some(&ctx.ct),
            progress_to: None,
            caller: Some(Caller::of(ctx)),
            task: None,
        }
    }

    /// Palisade's own request: no agent waits for it.
    pub fn palisade() -> Self {
        OnBehalf {
            cancel: None,
            progress_to: None,
            caller: None,
            task: None,
        }
    }

    /// Cancelled downstream when `token` fires.
    pub fn cancelled_by(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// With the server's progress sent to `target` (the agent's token), when given.
    pub fn progress_to(mut self, target: Option<UpTarget>) -> Self {
        self.progress_to = target;
        self
    }

    /// Reading the server's task `task`.
    pub fn reading_task(mut self, task: &'a str) -> Self {
        self.task = Some(task);
        self
    }
}

/// What a request to a server carries as its params.
enum Params<'a> {
    /// Built (or decoded and re-encoded) by Palisade.
    Fields(Map<String, Value>),
    /// A request's params as the agent wrote them (`as_sent::checked`), the target renamed
    /// the server's way (`rename`).
    AsSent {
        text: &'a str,
        rename: as_sent::Rename<'a>,
    },
}

/// How long a call cut short by its server's end waits for the supervisor to say why.
const END_REASON_WAIT: Duration = Duration::from_secs(2);

/// A typed view of a raw result; an error naming the server when it does not fit.
pub fn parse<T: DeserializeOwned>(
    server: &str,
    what: &str,
    raw: &RawValue,
) -> Result<T, ForwardError> {
    parse_text(server, what, raw.get())
}

/// As `parse`, over the JSON text.
pub fn parse_text<T: DeserializeOwned>(
    server: &str,
    what: &str,
    text: &str,
) -> Result<T, ForwardError> {
    serde_json::from_str(text).map_err(|e| ForwardError::Other {
        server: server.to_string(),
        message: format!("its answer to {what} is not a valid result ({e})"),
    })
}

impl Connection {
    /// Sends one request with `timeout`, for `by`. The result comes back as the server sent
    /// it.
    pub async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
        by: OnBehalf<'_>,
    ) -> Result<Box<RawValue>, ForwardError> {
        self.request_raw(request, timeout, by, None, &Map::new())
            .await
            .map(RawJson::into_raw_value)
    }

    /// As `request`, adding `meta` to the request's `_meta` and `extra` to its params
    /// (fields of the agent's request the typed view does not model, such as `task`,
    /// forwarded as sent; a typed field wins), the result kept as the bytes received (a slice
    /// of the server's line, not copied).
    pub async fn request_raw(
        &self,
        request: ClientRequest,
        timeout: Duration,
        by: OnBehalf<'_>,
        meta: Option<RequestMetaObject>,
        extra: &Map<String, Value>,
    ) -> Result<RawJson, ForwardError> {
        let method = request.method().to_string();
        let mut params = match serde_json::to_value(&request) {
            Ok(Value::Object(mut m)) => match m.remove("params") {
                Some(Value::Object(p)) => p,
                _ => Map::new(),
            },
            _ => Map::new(),
        };
        for (k, v) in extra {
            params.entry(k.clone()).or_insert_with(|| v.clone());
        }
        if let Some(meta) = meta {
            if let Ok(Value::Object(extra)) = serde_json::to_value(meta) {
                let entry = params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = entry {
                    m.extend(extra);
                }
            }
        }
        self.send(&method, params, timeout, by).await
    }

    /// Whether a call's params may go to this server as the agent wrote them: not to a
    /// 2026-07-28 server, whose requests carry Palisade's envelope and may be retried with
    /// answers added.
    fn takes_params_as_sent(&self) -> bool {
        !self.era.is_sessionless()
    }

    /// Sends `method` with params that are the agent's own text (`call::as_sent`), with only
    /// the target's name (`rename`) and the progress token made the server's.
    pub async fn request_as_sent(
        &self,
        method: &str,
        text: &str,
        rename: as_sent::Rename<'_>,
        timeout: Duration,
        by: OnBehalf<'_>,
    ) -> Result<RawJson, ForwardError> {
        let params = Params::AsSent { text, rename };
        self.send_params(method, params, timeout, by).await
    }

    /// Sends `method` with `params` (a `progressToken` is added to its `_meta` when the agent
    /// it is sent for wants progress).
    pub async fn send(
        &self,
        method: &str,
        params: Map<String, Value>,
        timeout: Duration,
        by: OnBehalf<'_>,
    ) -> Result<RawJson, ForwardError> {
        let params = Params::Fields(params);
        self.send_params(method, params, timeout, by).await
    }

    /// `send` for either kind of params: the agent's text goes on with its name and progress
    /// token rewritten (`as_sent::for_server`), fields get the era's envelope and our token.
    async fn send_params(
        &self,
        method: &str,
        params: Params<'_>,
        timeout: Duration,
        by: OnBehalf<'_>,
    ) -> Result<RawJson, ForwardError> {
        let OnBehalf {
            cancel,
            progress_to,
            caller,
            task,
        } = by;
        // Open until this returns: a request the server sends meanwhile is this agent's.
        let _open = caller.map(|caller| self.open_calls.open(&self.server, task, caller));
        if self.peer.is_closed() {
            return Err(self.stopped(self.server.clone()).await);
        }
        let id = self.peer.next_id();
        let token = ServerPeer::progress_token(id);
        let ours = progress_to.as_ref().map(|_| id);
        let (mut params, as_sent) = match params {
            Params::AsSent { text, rename } if self.takes_params_as_sent() => {
                let Some(text) = as_sent::for_server(text, rename, ours) else {
                    // `as_sent::checked` lets through only what `for_server` rewrites.
                    return Err(ForwardError::Other {
                        server: self.server.clone(),
                        message: "the request's params could not be rewritten".into(),
                    });
                };
                (Map::new(), Some(text))
            }
            Params::AsSent { text, rename } => (self.fields_of(text, rename)?, None),
            Params::Fields(fields) => (fields, None),
        };
        if as_sent.is_none() {
            self.era.stamp(&mut params);
            if ours.is_some() {
                let entry = params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = entry {
                    m.insert("progressToken".into(), Value::from(id));
                }
            }
        }
        if let Some(target) = &progress_to {
            // Registered before the request is sent: no notification can overtake it.
            for early in self.progress.register(token.clone(), target.clone()) {
                forward_progress(target, early).await;
            }
        }
        // Only a 2026-07-28 request may be retried, so only its params are kept (a copy of a
        // large write's arguments on every call would be work on the hot path for nothing).
        let original = self.era.is_sessionless().then(|| params.clone());
        let mut outcome = match &as_sent {
            Some(text) => {
                self.peer
                    .request_text(id, method, text, timeout, cancel)
                    .await
            }
            None => {
                let first = (!params.is_empty()).then_some(Value::Object(params));
                self.peer
                    .request(id, method, first.as_ref(), timeout, cancel)
                    .await
            }
        };
        // A 2026-07-28 server asks for what it needs inside its result: answer, retry.
        let mut rounds = 0;
        while let (true, Ok(Reply::Result(raw))) = (self.era.is_sessionless(), &outcome) {
            let Some(asked) = era::input_required(raw.get()) else {
                break;
            };
            rounds += 1;
            if rounds > era::MAX_INPUT_ROUNDS {
                outcome = Ok(Reply::Error(ErrorData::internal_error(
                    format!(
                        "server `{}` asked for input more than {} times for one request",
                        self.server,
                        era::MAX_INPUT_ROUNDS
                    ),
                    None,
                )));
                break;
            }
            let answers = match self.answer_inputs(id, asked.input_requests, cancel).await {
                Ok(a) => a,
                Err(e) => {
                    if progress_to.is_some() {
                        self.progress.unregister(&token);
                    }
                    return Err(e);
                }
            };
            let Some(original) = original.as_ref() else {
                break;
            };
            let retry = Value::Object(era::retry_params(original, answers, asked.request_state));
            let id = self.peer.next_id();
            outcome = self
                .peer
                .request(id, method, Some(&retry), timeout, cancel)
                .await;
        }
        if progress_to.is_some() {
            self.progress.unregister(&token);
        }
        match outcome {
            Ok(Reply::Result(raw)) => Ok(raw),
            Ok(Reply::Error(e)) => Err(ForwardError::Server(e)),
            Err(NoReply::Timeout) => Err(ForwardError::Timeout {
                server: self.server.clone(),
                timeout,
            }),
            Err(NoReply::Cancelled) => Err(ForwardError::Cancelled),
            Err(NoReply::Closed) => Err(self.stopped(self.server.clone()).await),
        }
    }

    /// The fields of params written as the agent sent them, made the server's: for a server
    /// that cannot take the text as it is (`takes_params_as_sent`).
    fn fields_of(
        &self,
        text: &str,
        rename: as_sent::Rename<'_>,
    ) -> Result<Map<String, Value>, ForwardError> {
        as_sent::for_server(text, rename, None)
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| ForwardError::Other {
                server: self.server.clone(),
                message: "the request's params could not be rewritten".into(),
            })
    }

    /// Answers the input requests of one `input_required` round, as the same requests sent
    /// standalone are answered (roots from the server's root set, sampling and elicitation
    /// through the relay). A refusal ends the call with the reason: the server cannot go on
    /// without the answer.
    async fn answer_inputs(
        &self,
        request: u64,
        asks: Map<String, Value>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Map<String, Value>, ForwardError> {
        let other = |message: String| ForwardError::Other {
            server: self.server.clone(),
            message,
        };
        let ct = self.peer.connection_token();
        let mut answers = Map::new();
        for (key, ask) in asks {
            let method = ask
                .get("method")
                .and_then(Value::as_str)
                .ok_or_else(|| other(format!("its input request `{key}` names no method")))?;
            let params = ask
                .get("params")
                .map(serde_json::value::to_raw_value)
                .transpose()
                .map_err(|e| other(format!("its input request `{key}` is unreadable ({e})")))?;
            let id = RequestId::String(format!("{request}/{key}").into());
            let asked = self
                .inbound
                .request(method, params.as_deref(), id, ct.clone());
            let never = CancellationToken::new();
            let answer = tokio::select! {
                a = asked => a,
                _ = cancel.unwrap_or(&never).cancelled() => {
                    ct.cancel();
                    return Err(ForwardError::Cancelled);
                }
            };
            match answer {
                Ok(v) => {
                    // The retry's params are re-encoded from values (a 2026-07-28 server's
                    // retry is built by Palisade): the answer's members kept, in order.
                    let v = serde_json::from_str(v.get()).map_err(|e| {
                        other(format!(
                            "the answer to its input request `{key}` is unreadable ({e})"
                        ))
                    })?;
                    answers.insert(key, v);
                }
                Err(e) => {
                    return Err(other(format!(
                        "it asked for {method} before answering, which was refused: {}",
                        e.message
                    )))
                }
            }
        }
        Ok(answers)
    }

    /// `Closed`, with the reason the process ended when the supervisor learns it in time.
    async fn stopped(&self, server: String) -> ForwardError {
        match self.faults.ended(END_REASON_WAIT).await {
            Some(reason) => ForwardError::Stopped { server, reason },
            None => ForwardError::Closed { server },
        }
    }
}

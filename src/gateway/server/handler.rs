//! One downstream server's client side: the handler for what the server sends us (answers
//! `roots/list` from the server's current root set, relays progress, logging and list
//! changes, hands sampling and elicitation requests to `relay/`) and the request helper every
//! forward goes through (timeout on every request, cancellation, progress-token mapping).
//! The wire is `peer.rs`: results come back as the bytes the server sent.
//!
//! Never: send a request without a timeout (a silent server would hang the call forever);
//! forward a server's progress under its own token (the agent only knows its own).
#![allow(deprecated)] // roots and logging are deprecated in rmcp (SEP-2577) but still used.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientRequest, CreateMessageRequestParams, ElicitRequestParams,
    ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation, InitializeResult,
    ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, RequestId, RequestMetaObject, ResourceUpdatedNotificationParam,
};
use rmcp::service::Peer;
use rmcp::{ErrorData, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::link::UpstreamLink;
use crate::gateway::call::as_sent;
use crate::gateway::raw_json::RawJson;
use crate::gateway::server::era::{self, Era};
use crate::gateway::server::note_line;
use crate::gateway::server::peer::{Inbound, NoReply, Reply, ServerPeer};
use crate::gateway::server::progress::ProgressMap;
use crate::gateway::server::roots::RootsCell;

/// The revision palisade offers in `initialize`: to a server that does not speak 2026-07-28
/// (see `era.rs`), and to an agent that starts with the handshake.
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Where a downstream progress notification goes: the agent's peer and its token.
#[derive(Clone)]
pub struct UpTarget {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// Which of a server's lists changed (it belongs to the lists, `registry`).
pub use crate::gateway::registry::ListKind;

/// What the gateway does with what one downstream server sends it.
pub struct DownstreamHandler {
    pub server: String,
    /// The server's current roots: `roots/list` always answers the newest version, whole
    /// (any cursor is ignored and no `nextCursor` is given: the set is small and a version
    /// change between pages would tear it).
    pub roots: Arc<RootsCell>,
    pub progress: Arc<ProgressMap<UpTarget>>,
    pub upstream: UpstreamLink,
    pub list_changed: mpsc::UnboundedSender<ListKind>,
    /// The session's tasks: a task's status is relayed only for tasks created through us.
    pub tasks: Arc<crate::gateway::call::tasks::TaskTable>,
    /// The server keeps its own names (and task ids) upstream.
    pub unprefixed: bool,
    /// Sampling and elicitation: declared and relayed only as the server's `relay` allows.
    pub relay: crate::gateway::server::relay::Relayer,
}

impl DownstreamHandler {
    /// The `initialize` params the gateway sends this server.
    pub fn initialize_params(&self) -> Value {
        serde_json::json!({
            "protocolVersion": PROTOCOL,
            "capabilities": self.capabilities(),
            "clientInfo": client_info(),
        })
    }

    /// The `_meta` envelope of the gateway's requests when this server speaks 2026-07-28:
    /// the same capabilities and client info as `initialize` carries.
    pub fn envelope(&self) -> Map<String, Value> {
        crate::gateway::server::era::envelope(&self.capabilities(), &client_info())
    }

    /// What the gateway offers this server: roots always (they are Palisade's own, not the
    /// agent's), sampling and elicitation only as its `relay` allows.
    fn capabilities(&self) -> Value {
        let mut caps = ClientCapabilities::builder()
            .enable_roots()
            .enable_roots_list_changed()
            .build();
        let (sampling, elicitation) = self.relay.declared();
        if sampling {
            // Plain sampling: no `tools` (the agent's model would drive the server's tools)
            // and no `context` (it would see what other servers returned).
            caps.sampling = Some(Default::default());
        }
        if elicitation {
            // Form mode only: a URL elicitation could send the user to any page.
            caps.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        }
        serde_json::to_value(caps).unwrap_or_default()
    }

    fn list_roots(&self) -> ListRootsResult {
        let set = self.roots.current();
        self.roots.mark_fetched(set.version);
        tracing::debug!(server = %self.server, "roots/list answered with v{}", set.version);
        ListRootsResult::new(set.mcp_roots())
    }

    /// A task's status, relayed under the id the agent knows; a status for a task not
    /// created through this gateway is not relayed.
    fn on_task_status(&self, params: Option<&RawValue>) {
        let Some(Ok(mut v)) = params.map(|p| serde_json::from_str::<Value>(p.get())) else {
            return;
        };
        let mut known = false;
        crate::gateway::call::tasks::rewrite_ids(&mut v, &mut |inner| {
            let outer = crate::gateway::call::tasks::outer_id(&self.server, self.unprefixed, inner);
            let found = self.tasks.contains(&outer);
            known |= found;
            found.then_some(outer)
        });
        if !known {
            tracing::debug!(server = %self.server, "status of a task not created here; not relayed");
            return;
        }
        let size = v.to_string().len();
        if let Some((peer, permit)) = self.upstream.for_relay(size) {
            tokio::spawn(async move {
                let note = rmcp::model::ServerNotification::CustomNotification(
                    rmcp::model::CustomNotification::new("notifications/tasks/status", Some(v)),
                );
                let _ = peer.send_notification(note).await;
                drop(permit);
            });
        }
    }

    /// `text`: the params as the server wrote them, for an agent on stdio.
    fn on_logging_message(
        &self,
        mut params: LoggingMessageNotificationParam,
        text: Option<&RawValue>,
    ) {
        // A 2026-07-28 agent gets log messages only for a request that set `logLevel`;
        // Palisade does not tie a server's log lines to a request, so it sends it none.
        if self.upstream.is_sessionless() {
            return;
        }
        let logger = note_line::logger_of(&self.server, params.logger.as_deref());
        // To an agent on stdio, as the server wrote it, with the logger made Palisade's.
        let own = text
            .filter(|_| self.upstream.lines().is_some())
            .and_then(|t| {
                let logger = serde_json::to_string(&logger).ok()?;
                note_line::with_member(t.get(), "logger", &logger)
            });
        match own {
            Some(own) => self.relay_line("notifications/message", &own),
            None => {
                params.logger = Some(logger);
                // Bounded: dropped when the agent is not keeping up (see
                // `UpstreamLink::for_relay`). Sent on its own task: an agent that does not
                // read must not stall this server's reader (the call results behind the
                // notification would wait with it).
                let size = serde_json::to_vec(&params.data).map_or(0, |v| v.len());
                if let Some((peer, permit)) = self.upstream.for_relay(size) {
                    tokio::spawn(async move {
                        let _ = peer.notify_logging_message(params).await;
                        drop(permit);
                    });
                }
            }
        }
    }

    fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        text: Option<&RawValue>,
    ) {
        if let Some(text) = text {
            if self.upstream.lines().is_some() {
                return self.relay_line("notifications/resources/updated", text.get());
            }
        }
        if let Some((peer, permit)) = self.upstream.for_relay(params.uri.len()) {
            tokio::spawn(async move {
                let _ = peer.notify_resource_updated(params).await;
                drop(permit);
            });
        }
    }

    /// A notification of a method Palisade does not know, for the agent as the server sent
    /// it: as its own line to an agent on stdio, else through rmcp (within the relay budget
    /// either way).
    fn on_extension_note(&self, method: &str, params: Option<&RawValue>) {
        if self.upstream.lines().is_some() {
            return self.relay_line(method, params.map_or("{}", RawValue::get));
        }
        let value = params.and_then(|p| serde_json::from_str::<Value>(p.get()).ok());
        let size = params.map_or(0, |p| p.get().len());
        if let Some((peer, permit)) = self.upstream.for_relay(size) {
            let note = rmcp::model::ServerNotification::CustomNotification(
                rmcp::model::CustomNotification::new(method, value),
            );
            tokio::spawn(async move {
                let _ = peer.send_notification(note).await;
                drop(permit);
            });
        }
    }

    /// Writes a notification to an agent on stdio as `params` say, on its own task and
    /// within the relay budget (as the typed path is bounded); does nothing for an agent on
    /// HTTP (the callers check first).
    fn relay_line(&self, method: &str, params: &str) {
        let Some(out) = self.upstream.lines().cloned() else {
            return;
        };
        let note = note_line::line(method, params);
        if let Some((_, permit)) = self.upstream.for_relay(note.len()) {
            tokio::spawn(async move {
                let _ = out.send(note).await;
                drop(permit);
            });
        }
    }
}

fn client_info() -> Value {
    serde_json::to_value(Implementation::new("palisade", env!("CARGO_PKG_VERSION")))
        .unwrap_or_default()
}

fn view<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ErrorData> {
    let text = params.map_or("{}", RawValue::get);
    serde_json::from_str(text).map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

fn to_value<T: serde::Serialize>(v: Result<T, ErrorData>) -> Result<Value, ErrorData> {
    v.and_then(|v| {
        serde_json::to_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    })
}

impl Inbound for DownstreamHandler {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        id: RequestId,
        cancel: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<Value, ErrorData>> + Send + 'a>> {
        Box::pin(async move {
            let ctx = crate::gateway::server::relay::FromServer { id, ct: cancel };
            match method {
                "roots/list" => to_value(Ok(self.list_roots())),
                "ping" => Ok(Value::Object(Map::new())),
                "sampling/createMessage" => {
                    let p: CreateMessageRequestParams = view(params)?;
                    to_value(self.relay.sampling(p, &ctx).await)
                }
                "elicitation/create" => {
                    let p: ElicitRequestParams = view(params)?;
                    to_value(self.relay.elicitation(p, &ctx).await)
                }
                other => Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    other.to_string(),
                    None,
                )),
            }
        })
    }

    fn notification<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            match method {
                "notifications/tools/list_changed" => {
                    let _ = self.list_changed.send(ListKind::Tools);
                }
                "notifications/prompts/list_changed" => {
                    let _ = self.list_changed.send(ListKind::Prompts);
                }
                "notifications/resources/list_changed" => {
                    let _ = self.list_changed.send(ListKind::Resources);
                }
                "notifications/message" => {
                    if let Ok(p) = view(params) {
                        self.on_logging_message(p, params);
                    }
                }
                "notifications/resources/updated" => {
                    if let Ok(p) = view(params) {
                        self.on_resource_updated(p, params);
                    }
                }
                "notifications/tasks/status" => self.on_task_status(params),
                // Of the methods MCP names, the ones a client sends, and the end of a URL
                // elicitation (never relayed) are not for the agent.
                "notifications/initialized"
                | "notifications/roots/list_changed"
                | "notifications/elicitation/complete" => {
                    tracing::debug!(server = %self.server, "notification {method} not relayed")
                }
                // An extension's: the agent sees the server that keeps its own names as
                // itself, so it gets them as sent; the others' have no name to go under.
                other if self.unprefixed => self.on_extension_note(other, params),
                other => {
                    tracing::debug!(server = %self.server, "notification {other} not relayed")
                }
            }
        })
    }

    fn progress<'a>(&'a self, line: &'a [u8]) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let Some((params, text)) = crate::gateway::server::tap::progress_note(line) else {
                return;
            };
            let Some(target) = self.progress.route(&params) else {
                return;
            };
            // To an agent on stdio, as the server wrote it, the agent's token put in.
            let own = self.upstream.lines().and_then(|out| {
                let token = serde_json::to_string(&target.token).ok()?;
                let params = note_line::with_member(text, "progressToken", &token)?;
                Some((out, note_line::line("notifications/progress", &params)))
            });
            match own {
                Some((out, note)) => {
                    let _ = out.send(note).await;
                }
                None => forward_progress(&target, params).await,
            }
        })
    }
}

/// Re-sends a downstream progress notification upstream under the agent's token.
pub async fn forward_progress(target: &UpTarget, mut params: ProgressNotificationParam) {
    params.progress_token = target.token.clone();
    let _ = target.peer.notify_progress(params).await;
}

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
    /// Sends one request with `timeout`; cancels it downstream when `cancel` fires; routes its
    /// progress to `progress_to` while it runs. The result comes back as the server sent it.
    pub async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
    ) -> Result<Box<RawValue>, ForwardError> {
        self.request_with(request, timeout, cancel, progress_to, None, &Map::new())
            .await
    }

    /// As `request`, adding `meta` to the request's `_meta` and `extra` to its params:
    /// fields of the agent's request the typed view does not model (`task`), forwarded as
    /// sent; a typed field wins.
    pub async fn request_with(
        &self,
        request: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
        meta: Option<RequestMetaObject>,
        extra: &Map<String, Value>,
    ) -> Result<Box<RawValue>, ForwardError> {
        self.request_raw(request, timeout, cancel, progress_to, meta, extra)
            .await
            .map(RawJson::into_raw_value)
    }

    /// As `request_with`, the result kept as the bytes received (a slice of the server's
    /// line, not copied): the relay's path for a tool call's result.
    pub async fn request_raw(
        &self,
        request: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
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
        self.send(&method, params, timeout, cancel, progress_to)
            .await
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
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
    ) -> Result<RawJson, ForwardError> {
        let params = Params::AsSent { text, rename };
        self.send_params(method, params, timeout, cancel, progress_to)
            .await
    }

    /// Sends `method` with `params` (a `progressToken` is added to its `_meta` when
    /// `progress_to` is given).
    pub async fn send(
        &self,
        method: &str,
        params: Map<String, Value>,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
    ) -> Result<RawJson, ForwardError> {
        let params = Params::Fields(params);
        self.send_params(method, params, timeout, cancel, progress_to)
            .await
    }

    /// `send` for either kind of params: the agent's text goes on with its name and progress
    /// token rewritten (`as_sent::for_server`), fields get the era's envelope and our token.
    async fn send_params(
        &self,
        method: &str,
        params: Params<'_>,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
    ) -> Result<RawJson, ForwardError> {
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

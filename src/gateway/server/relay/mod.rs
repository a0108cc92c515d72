//! Relay of a downstream server's `sampling/createMessage` and form `elicitation/create`
//! requests to the agent. Sits in the downstream client (`server/handler.rs`): what the server
//! asks comes in there, is admitted or refused here, goes to the agent of the request it
//! serves (`agent/open_calls.rs`: that request's 2026-07-28 round, its own stream, or its
//! session), with a timeout and cancellation, and comes back.
//!
//! Relaying is opt-in per server (`relay` in its config or profile): a compromised server
//! could otherwise spend the agent's model or put leading questions to the user. Each
//! request is checked in this order, every refusal answered at once with a JSON-RPC error
//! that says why and how to allow it: allowed for this server, agent connected and declared
//! the capability, nothing undeclared asked for (sampling tools, URL elicitation), a free
//! slot (`maxConcurrent`), a token (`perMinute`). Relayed requests are audited with their
//! outcome; refusals are audited within a per-server budget so that a flood stays cheap.
//!
//! `policy` decides (pure), `gate` bounds (slots and buckets), `fields` reads the request and
//! summarises it for the audit record (pure), this module does the I/O.
//!
//! Never: forward what was refused; let a server widen what the agent's model sees
//! (`includeContext` is always sent as absent); present an elicitation without the name of
//! the server that asks; hold a lock across an await.
#![allow(deprecated)] // sampling is deprecated in rmcp (SEP-2577) but servers still use it.

mod fields;
mod gate;
mod policy;

pub use fields::attribute;
use fields::{
    elicitation_summary, for_the_server, sampling_as_written, sampling_summary, typed, uses_tools,
    views, SAMPLING_FIELDS,
};
pub use gate::{RelayGate, TokenBucket, REFUSALS_AUDITED_PER_MINUTE};
pub use policy::{
    admit, declared, Kind, Refusal, RelayPolicy, DEFAULT_MAX_CONCURRENT, DEFAULT_PER_MINUTE,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, CustomRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorCode, RequestMetaObject, ServerRequest,
};
use rmcp::service::Peer;
use rmcp::{ErrorData, RoleServer};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::OwnedSemaphorePermit;

use crate::gateway::agent::asking::{AskFailed, Asker};
use crate::gateway::agent::link::{request_of, UpstreamError, UpstreamLink};
use crate::gateway::agent::open_calls::{Carrier, OpenCalls, Untold};
use crate::gateway::stages::{
    request_id_string, AuditSink, CallOutcome, CallRecord, Decision, PolicyVerdict, RecordServer,
};
use crate::sandbox::launch::Enforcement;

/// The `_meta` key with which a task's requests name their task (MCP tasks).
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The `_meta` key naming the server a relayed request comes from.
pub const META_SERVER: &str = "palisade/server";

/// A request a downstream server sent the gateway (sampling, elicitation): its id and its
/// cancellation.
pub struct FromServer {
    pub id: rmcp::model::RequestId,
    pub ct: tokio_util::sync::CancellationToken,
}

/// What a downstream handler needs to relay: built at each start of the server.
#[derive(Clone)]
pub struct Relayer {
    pub gate: Arc<RelayGate>,
    pub upstream: UpstreamLink,
    pub audit: Arc<dyn AuditSink>,
    /// How long the agent has to answer. The gateway passes `callTimeout`: a relayed request
    /// serves a call the gateway itself bounds by `callTimeout`, so a longer wait would only
    /// keep the agent's model or user busy for an answer nobody waits for.
    pub timeout: Duration,
    /// The server's enforcement in this start, for the audit record.
    pub enforcement: Option<Enforcement>,
    /// The requests in flight to each server, and how each reaches its agent: where a
    /// server's request finds the agent it serves (`agent/open_calls.rs`).
    pub open_calls: Arc<OpenCalls>,
}

/// A relayed request's params: as read (what rmcp's session and a round re-encode), and the
/// server's own text of the same members where it could be kept (`fields::sampling_as_written`).
struct Relayed {
    fields: Map<String, Value>,
    as_written: Option<Box<RawValue>>,
}

/// Where a relayed request goes: the next round of its 2026-07-28 call to this server, a
/// stream Palisade writes its own questions on (the HTTP fast path's call's own, the stdio
/// agent's lines, or, with no call in flight, an HTTP session's standalone stream), or, over
/// HTTP, rmcp's session of the request it serves.
enum Road {
    Session(Peer<RoleServer>),
    Round(Arc<crate::gateway::agent::mrtr::Round>),
    Stream(Arc<Asker>),
    /// An HTTP session's standalone stream, with no call in flight; its session's rmcp
    /// peer if that stream closed before the question could be sent on it.
    Standalone(Arc<Asker>, Peer<RoleServer>),
    /// Nowhere, and why: no agent can be told apart (`Several`), or the one there is can be
    /// asked only within a 2026-07-28 call (`sessionless`).
    None {
        why: &'static str,
        sessionless: bool,
    },
}

impl Road {
    fn sessionless() -> Road {
        Road::None {
            why: "it is asked only within a tool call's rounds, and no request in flight to \
                  this server is a tool call",
            sessionless: true,
        }
    }

    fn caps(&self) -> Option<rmcp::model::ClientCapabilities> {
        match self {
            Road::Session(peer) => peer.peer_info().map(|i| i.capabilities.clone()),
            Road::Round(r) => r.caps.clone(),
            Road::Stream(asker) | Road::Standalone(asker, _) => asker.caps(),
            Road::None { .. } => None,
        }
    }
}

impl Relayer {
    /// `(sampling, elicitation)` to declare to the server at its initialize.
    pub fn declared(&self) -> (bool, bool) {
        declared(
            self.gate.policy(),
            self.upstream.client_capabilities().as_ref(),
        )
    }

    fn server(&self) -> &str {
        &self.gate.server
    }

    /// A session's road, unless the session cannot be asked: a 2026-07-28 client's
    /// connection opened with no `initialize`, and is asked only in its calls' rounds. An
    /// agent on a stream of lines (stdio) is asked on it by Palisade itself, so that its
    /// answer reaches the server as it wrote it; over HTTP, rmcp's session asks.
    fn session_road(&self, peer: Peer<RoleServer>) -> Road {
        if peer.peer_info().is_none() {
            return Road::sessionless();
        }
        match self.upstream.line_asker() {
            Some(asker) => Road::Stream(asker),
            None => Road::Session(peer),
        }
    }

    /// With no request in flight to this server: the agent's session road, except that over
    /// HTTP a session holding its GET is asked on that stream by Palisade itself, so that
    /// its answer reaches the server as it wrote it (rmcp's session would type it as a
    /// `ClientResult`, dropping what its models do not know and re-spelling numbers).
    fn idle_road(&self, peer: Peer<RoleServer>) -> Road {
        match self.session_road(peer) {
            Road::Session(peer) => match self.upstream.standalone_asker() {
                // The session asked and the one that would ask instead are the same.
                Some((asker, its_peer)) => Road::Standalone(asker, its_peer),
                None => Road::Session(peer),
            },
            road => road,
        }
    }

    /// The request in flight to this server that the server's request `meta` serves takes
    /// it (`agent/open_calls.rs`): a 2026-07-28 call into its next round (stdio and HTTP
    /// alike: over HTTP a 2026-07-28 agent has no session to be asked in), a session's fast
    /// call onto its own stream (to the client that made the call, as the spec has a
    /// request's requests ride its stream), any other to its own session. With none in
    /// flight, the agent's session, if it has one (over HTTP, its GET when it holds one:
    /// `idle_road`); with several of different agents, none.
    fn road(&self, meta: Option<&RequestMetaObject>) -> Road {
        let task = meta
            .and_then(|m| m.0.get(RELATED_TASK))
            .and_then(|t| t.get("taskId"))
            .and_then(Value::as_str);
        match self.open_calls.only(self.server(), task) {
            Ok(Carrier::Round(round)) => Road::Round(round),
            Ok(Carrier::Stream(asker)) => Road::Stream(asker),
            Ok(Carrier::Session(peer)) => self.session_road(peer),
            Ok(Carrier::Sessionless) => Road::sessionless(),
            Err(Untold::NoCall) => match self.upstream.get() {
                Some(peer) => self.idle_road(peer),
                None => Road::None {
                    why: "no MCP client is connected to the gateway",
                    sessionless: false,
                },
            },
            Err(why @ (Untold::Several | Untold::UnknownTask)) => Road::None {
                why: why.text(),
                sessionless: false,
            },
        }
    }

    /// Sends `method` with `params` to the agent by `road`; the answer as the agent wrote it
    /// where the road carries its text (a stream of its own, or of lines), else as rmcp or the
    /// round read it.
    async fn ask(
        &self,
        road: &Road,
        kind: Kind,
        relayed: Relayed,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let method = kind.method();
        let Relayed {
            fields: params,
            as_written,
        } = relayed;
        // On a stream Palisade writes itself, the server's own text when it was kept.
        let ask_on = |asker: Arc<Asker>, params: Map<String, Value>| async move {
            match &as_written {
                Some(text) => {
                    asker
                        .ask_raw_until(method, text, self.timeout, cancel)
                        .await
                }
                None => {
                    asker
                        .ask_until(method, Value::Object(params), self.timeout, cancel)
                        .await
                }
            }
        };
        match road {
            Road::Session(peer) => {
                self.ask_session(peer, method, params, self.timeout, cancel)
                    .await
            }
            Road::Standalone(asker, peer) => {
                let asked_at = Instant::now();
                let asked = ask_on(Arc::clone(asker), params.clone()).await;
                match asked {
                    // No GET took it: rmcp's session keeps the request for the next one, as
                    // it would have without a stream of Palisade's, in the time left.
                    Err(AskFailed::Unsent) => {
                        let left = self.timeout.saturating_sub(asked_at.elapsed());
                        self.ask_session(peer, method, params, left, cancel).await
                    }
                    other => other.map_err(stream_error),
                }
            }
            Road::Round(round) => {
                let answer = round
                    .ask_agent(
                        json!({"method": method, "params": params}),
                        self.timeout,
                        cancel,
                    )
                    .await
                    .map_err(UpstreamError::Round)?;
                serde_json::value::to_raw_value(&answer)
                    .map_err(|e| UpstreamError::Other(e.to_string()))
            }
            Road::Stream(asker) => ask_on(Arc::clone(asker), params)
                .await
                .map_err(stream_error),
            Road::None { why, .. } => Err(UpstreamError::Other((*why).to_string())),
        }
    }

    /// Asks through rmcp's session of `peer`; the answer as rmcp typed it.
    async fn ask_session(
        &self,
        peer: &Peer<RoleServer>,
        method: &str,
        params: Map<String, Value>,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Box<RawValue>, UpstreamError> {
        // As an extension's request, so that rmcp passes the params as they are.
        let request =
            ServerRequest::CustomRequest(CustomRequest::new(method, Some(Value::Object(params))));
        let answer = request_of(peer, request, timeout, Some(cancel)).await?;
        serde_json::value::to_raw_value(&answer).map_err(|e| UpstreamError::Other(e.to_string()))
    }

    /// Relays a server's `sampling/createMessage`: the fields of a plain request as the
    /// server wrote them (`SAMPLING_FIELDS`), the name of the server in `_meta`; the agent's
    /// answer as it wrote it, once it reads as a sampling result.
    pub async fn sampling(
        &self,
        raw: Option<&RawValue>,
        ctx: &FromServer,
    ) -> Result<Box<RawValue>, ErrorData> {
        let started = Instant::now();
        let kind = Kind::Sampling;
        let (params, mut fields) = views::<CreateMessageRequestParams>(raw)?;
        let undeclared = uses_tools(&params).then_some(
            "sampling with tools (tools, toolChoice, or tool_use/tool_result in its messages)",
        );
        let road = self.road(params.meta.as_ref());
        let _permit = match self.check(kind, undeclared, &road) {
            Ok(p) => p,
            Err(refusal) => {
                return Err(self.refuse(kind, ctx, || sampling_summary(&params), refusal))
            }
        };
        let args = sampling_summary(&params);
        // Only the fields of a plain sampling request go on, as the server wrote them: not
        // `includeContext` (undeclared downstream: a server must not pull in what the agent's
        // model saw from other servers), not a `task`, not the server's own `_meta`.
        let as_written = raw.and_then(|r| sampling_as_written(r, &fields, &self.our_meta()));
        fields.retain(|k, _| SAMPLING_FIELDS.contains(&k.as_str()));
        self.name_the_server(&mut fields);
        let relayed = Relayed { fields, as_written };
        let answer = self.ask(&road, kind, relayed, &ctx.ct).await;
        let result = match answer {
            Ok(v) => serde_json::from_str::<CreateMessageResult>(v.get())
                .and_then(|_| for_the_server(v))
                .map_err(|e| unexpected(kind, &e)),
            Err(e) => Err(upstream_error(kind, e)),
        };
        let outcome = match &result {
            Ok(_) => CallOutcome::Success,
            Err(e) => CallOutcome::Error {
                error: e.message.to_string(),
            },
        };
        self.audit_relayed(kind, ctx, args, outcome, started)?;
        result
    }

    /// Relays a server's form `elicitation/create`, its message attributed to the server;
    /// the agent's answer as it wrote it.
    pub async fn elicitation(
        &self,
        raw: Option<&RawValue>,
        ctx: &FromServer,
    ) -> Result<Box<RawValue>, ErrorData> {
        let started = Instant::now();
        let kind = Kind::Elicitation;
        let params: ElicitRequestParams = typed(raw)?;
        let (message, requested_schema, meta) = match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                meta,
            } => (message, requested_schema, meta),
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                let args = || elicitation_summary(&message, Some(&url), None);
                let what = "URL elicitation (a server could send the user to any page)";
                return Err(self.refuse_mode(ctx, args, what));
            }
            _ => {
                let what = "an elicitation mode palisade does not know";
                return Err(self.refuse_mode(ctx, Map::new, what));
            }
        };
        let args = || {
            elicitation_summary(
                &message,
                None,
                serde_json::to_value(&requested_schema).ok().as_ref(),
            )
        };
        let road = self.road(meta.as_ref());
        let _permit = match self.check(kind, None, &road) {
            Ok(p) => p,
            Err(refusal) => return Err(self.refuse(kind, ctx, args, refusal)),
        };
        let args = args();
        // Built from the typed view, not passed on: the mode and fields it checked are the
        // ones the agent gets (a server's duplicate `mode` must not turn a form into a URL).
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: attribute(self.server(), &message),
            requested_schema,
        };
        let Ok(Value::Object(mut fields)) = serde_json::to_value(&params) else {
            return Err(ErrorData::internal_error(
                "palisade could not write the elicitation",
                None,
            ));
        };
        self.name_the_server(&mut fields);
        let relayed = Relayed {
            fields,
            as_written: None,
        };
        let answer = self.ask(&road, kind, relayed, &ctx.ct).await;
        let result = match answer {
            Ok(v) => serde_json::from_str::<ElicitResult>(v.get())
                .and_then(|r| Ok((r.action, for_the_server(v)?)))
                .map_err(|e| unexpected(kind, &e)),
            Err(e) => Err(upstream_error(kind, e)),
        };
        let outcome = match &result {
            Ok((action, _)) => match action {
                ElicitationAction::Accept => CallOutcome::Success,
                ElicitationAction::Decline => CallOutcome::Error {
                    error: "the user declined".into(),
                },
                _ => CallOutcome::Error {
                    error: "the user cancelled".into(),
                },
            },
            Err(e) => CallOutcome::Error {
                error: e.message.to_string(),
            },
        };
        self.audit_relayed(kind, ctx, args, outcome, started)?;
        result.map(|(_, v)| v)
    }

    /// Every check, cheapest first; a slot held for the request's lifetime when admitted.
    /// `undeclared` names a feature of the request that palisade never declares downstream.
    fn check(
        &self,
        kind: Kind,
        undeclared: Option<&'static str>,
        road: &Road,
    ) -> Result<OwnedSemaphorePermit, Refusal> {
        admit(
            kind,
            self.gate.policy(),
            self.server(),
            road.caps().as_ref(),
        )
        .map_err(|r| {
            match (r, road) {
                // The agent's capabilities are unknown because there is no telling the agent.
                (Refusal::NoAgent { kind }, &Road::None { why, sessionless }) => {
                    match sessionless {
                        true => Refusal::NoRound { kind, why },
                        false => Refusal::Untold { kind, why },
                    }
                }
                (r, _) => r,
            }
        })?;
        if let Some(what) = undeclared {
            return Err(Refusal::Unsupported { what });
        }
        self.gate.start(kind)
    }

    /// Refuses an elicitation mode that is never relayed (saying that relaying is off
    /// first, when it is).
    fn refuse_mode(
        &self,
        ctx: &FromServer,
        args: impl FnOnce() -> Map<String, Value>,
        what: &'static str,
    ) -> ErrorData {
        let kind = Kind::Elicitation;
        let agent = self.road(None).caps();
        let refusal = match admit(kind, self.gate.policy(), self.server(), agent.as_ref()) {
            Err(r @ Refusal::NotAllowed { .. }) => r,
            _ => Refusal::Unsupported { what },
        };
        self.refuse(kind, ctx, args, refusal)
    }

    /// Gives the request a `_meta` of palisade's own, naming the server that asks
    /// (`META_SERVER`): the server's own keys (a progress token, an envelope) are not the
    /// agent's business.
    fn name_the_server(&self, fields: &mut Map<String, Value>) {
        fields.insert("_meta".into(), json!({ META_SERVER: self.server() }));
    }

    /// That `_meta` as JSON text.
    fn our_meta(&self) -> String {
        json!({ META_SERVER: self.server() }).to_string()
    }

    /// The error for a refused request; audited and logged within the refusal budget
    /// (`args` summarises the request for the record).
    fn refuse(
        &self,
        kind: Kind,
        ctx: &FromServer,
        args: impl FnOnce() -> Map<String, Value>,
        refusal: Refusal,
    ) -> ErrorData {
        let reason = refusal.to_string();
        if let Some(suppressed) = self.gate.refusal_audited() {
            tracing::warn!(server = %self.server(), "{reason}");
            // Summarised only here: a refusal over budget costs no serialisation.
            let mut args = args();
            if suppressed > 0 {
                args.insert("suppressedRefusals".into(), json!(suppressed));
            }
            let verdict = PolicyVerdict {
                decision: Decision::Deny,
                rule: Some(format!("relay.{}", kind.key())),
                reason: reason.clone(),
            };
            let outcome = CallOutcome::Denied {
                reason: reason.clone(),
            };
            let record = self.record(kind, ctx, args, verdict, outcome, 0);
            if let Err(e) = self.audit.record(&record) {
                // Nothing was relayed, so there is nothing to fail closed on beyond the
                // refusal itself.
                tracing::error!(server = %self.server(), "audit write failed: {e}");
            }
        }
        ErrorData::new(ErrorCode::INVALID_REQUEST, reason, None)
    }

    /// Audits a relayed request; a failed write fails it (the answer is not passed on).
    fn audit_relayed(
        &self,
        kind: Kind,
        ctx: &FromServer,
        args: Map<String, Value>,
        outcome: CallOutcome,
        started: Instant,
    ) -> Result<(), ErrorData> {
        let verdict = PolicyVerdict {
            decision: Decision::Allow,
            rule: Some(format!("relay.{}", kind.key())),
            reason: format!("relay.{} is on for server `{}`", kind.key(), self.server()),
        };
        let ms = started.elapsed().as_millis() as u64;
        let record = self.record(kind, ctx, args, verdict, outcome, ms);
        self.audit.record(&record).map_err(|e| {
            tracing::error!(server = %self.server(), "audit write failed: {e}");
            ErrorData::internal_error(
                format!(
                    "palisade could not audit the relayed {}: {e}",
                    kind.method()
                ),
                None,
            )
        })
    }

    fn record(
        &self,
        kind: Kind,
        ctx: &FromServer,
        arguments: Map<String, Value>,
        policy_decision: PolicyVerdict,
        result: CallOutcome,
        duration_ms: u64,
    ) -> CallRecord {
        CallRecord {
            duration_ms,
            kind: Some(kind.record_kind()),
            ..CallRecord::new(
                RecordServer::running(self.server(), self.enforcement.clone()),
                kind.method(),
                request_id_string(&ctx.id),
                arguments,
                policy_decision,
                result,
            )
        }
    }
}

fn unexpected(kind: Kind, e: &serde_json::Error) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "the agent answered the relayed {} with an unexpected result ({e})",
            kind.method()
        ),
        None,
    )
}

/// Why a question on a stream of Palisade's got no result, as the session's road says it (the
/// agent's own error is passed on as it sent it, when it reads as one).
fn stream_error(e: AskFailed) -> UpstreamError {
    match e {
        AskFailed::Closed | AskFailed::Unsent => UpstreamError::Closed,
        AskFailed::Timeout(t) => UpstreamError::Timeout(t),
        AskFailed::Cancelled => UpstreamError::Cancelled,
        AskFailed::Refused(error) => match serde_json::from_value::<ErrorData>(error.clone()) {
            Ok(error) => UpstreamError::Client(error),
            Err(_) => {
                UpstreamError::Other(format!("the MCP client answered with an error: {error}"))
            }
        },
    }
}

/// The agent's own JSON-RPC error passes through; the gateway's failures say what happened.
fn upstream_error(kind: Kind, e: UpstreamError) -> ErrorData {
    match e {
        UpstreamError::Client(err) => err,
        other => ErrorData::internal_error(
            format!("palisade relayed {} to the agent: {other}", kind.method()),
            None,
        ),
    }
}

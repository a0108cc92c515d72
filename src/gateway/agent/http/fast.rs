//! The HTTP front's fast path for `tools/call`, the routed requests, the lists and `tasks/*`:
//! a POST carrying one 2025-11-25 `tools/call` on a known, initialized session runs straight
//! into the call pipeline the stdio front uses (`front::answer_call`; a call with a `task`
//! or another field Palisade does not model read as that front reads it), one `tasks/*`
//! into its answer (`front::answer_task`), one `prompts/get`,
//! `resources/read`, `resources/(un)subscribe` or `completion/complete` into the stdio front's
//! reading of them (`service::routed::answer_read`: params forwarded as the agent wrote them),
//! one list request is answered from the catalog as stdio answers it (`Catalog::listed`: the
//! servers' own JSON; rmcp's typed lists dropped every tool's `execution`), and its answer
//! is the server's result bytes with the agent's id, as the one event of an SSE body of
//! known length (as rmcp answers a request, minus the stream: clients that read only SSE, as
//! some do, read it the same way). A request asking for progress is answered with a streamed
//! SSE body instead: the server's progress notifications, as it wrote them with the agent's
//! token put in, then the answer (`agent/request_stream.rs`).
//! The request has already passed every check of the front (Origin, token, principal cap,
//! rate, request cap, body size).
//!
//! Why: through rmcp's session machinery a call hops from the session manager to the session
//! worker, the service, a handler task, a result channel and an SSE encoder, and its result
//! is re-typed by rmcp, which drops the fields it does not model. That cost about 235 µs per
//! call over the stdio front (see docs/benchmarks.md).
//!
//! What it takes (anything else goes to rmcp's path, unchanged): `Content-Type:
//! application/json`; an `Accept` naming both `application/json` and `text/event-stream`
//! (what rmcp asks) without weights; no `MCP-Protocol-Version`, or a known one before
//! 2026-07-28; an `Mcp-Session-Id` that rmcp's session manager holds and whose agent sent
//! `notifications/initialized`; a body that is one JSON-RPC request object with only
//! `jsonrpc`, `id`, `method` and `params`; a list's params with only a string `cursor` and
//! a `_meta`, any request's `_meta`
//! without a 2026-07-28 envelope and with a progress token (if any) that rmcp reads as one;
//! and, except for a list, neither this session's client nor the principal's linked client
//! declaring elicitation or sampling that a server's relay is turned on for, and no `elicit`
//! approver (a call that may need a request to the agent on the session's stream is
//! rmcp's). An unknown session therefore gets rmcp's own 404.
//!
//! A 2026-07-28 request (the same methods, `MCP-Protocol-Version: 2026-07-28`) has no
//! session: it is taken when its headers agree with its body as rmcp reads them
//! (`modern.rs`), its call read whole as the stdio front reads one (a retry's fields, a
//! task), and it runs as stdio runs a 2026-07-28 agent's (rounds for questions, the tasks
//! extension, the envelope's stamps), with a peer of its own.
//!
//! A fast call runs on its own task: the client going away cancels it (its audit record is
//! still written); `notifications/cancelled` naming it cancels it (and, as on rmcp's path,
//! its response carries no answer); shutdown past `shutdownGrace` answers it with the same
//! error as a cut stream. A session is known to the fast path once rmcp has handled its
//! `notifications/initialized`: the front holds that notification's 202 until then (bounded).
//!
//! Never: serve a call rmcp would have refused or answered differently in kind; take a call
//! whose session is not the caller's (the session id is looked up in the principal's own
//! session manager and peer table).
//!
//! A session's call params are read once, into the typed view the pipeline takes
//! (`FastParams`): the read that decides whether the fast path fits is the one handed on.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, ErrorCode, JsonObject, ProtocolVersion, RequestId, RequestMetaObject,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::RoleServer;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::request_stream::RequestStream;
use crate::gateway::agent::service::Upstream;
use crate::gateway::agent::service::READ_RAW;
use crate::gateway::agent::{front, running, tasks_v2, versions};
use crate::gateway::call::as_sent::{self, AsSent};
use crate::gateway::raw_json::RawJson;
use crate::gateway::state::Shared;

use super::modern;
use super::sessions::{SessionPeers, SESSION_HEADER};

const VERSION_HEADER: &str = "mcp-protocol-version";

/// One principal's fast path: its gateway's state, its sessions and its fast calls running.
pub(super) struct FastPath {
    pub(super) shared: Arc<Shared>,
    pub(super) sessions: Arc<SessionPeers>,
    pub(super) manager: Arc<LocalSessionManager>,
    /// `false` when the principal's approval chain can ask its agent (`elicit`): its calls
    /// and routed requests go to rmcp's path then (lists, which ask no one, still come here).
    pub(super) enabled: bool,
    running: Arc<Running>,
}

/// A call the fast path takes.
pub(super) struct Planned {
    /// The session it came on; none for a 2026-07-28 request.
    session: Option<String>,
    raw_id: Box<RawValue>,
    id: RequestId,
    asked: Asked,
    peer: Peer<RoleServer>,
    /// A 2026-07-28 request's own peer service (`modern::request_peer`), kept while it runs.
    own_peer: Option<RunningService<RoleServer, Upstream>>,
    era: Era,
    /// The request asked for progress: its answer is a stream.
    progress: bool,
}

/// Which revision a POST speaks, by its `MCP-Protocol-Version` header.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Era {
    /// None, or a known one before 2026-07-28: the request belongs to a session.
    Sessions,
    /// 2026-07-28: no session; the request carries its envelope (`modern.rs`).
    Modern,
}

/// What a planned POST asks.
enum Asked {
    /// A `tools/call`: the typed view, and what goes to the server besides it (the text
    /// when it may go as written; a 2026-07-28 call's fields the view does not model).
    Call(Box<CallToolRequestParams>, AsSent),
    /// A routed request (`service::READ_RAW`: a prompt, a resource read, a subscription, a
    /// completion), its params as the agent wrote them (`answer_read` reads them).
    Read {
        method: &'static str,
        params: Box<RawValue>,
    },
    /// A list (`LISTS`): answered from the catalog, as the stdio front answers it
    /// (`Catalog::listed`: the servers' own JSON, names rewritten). rmcp's `ServerHandler`
    /// can only answer a list typed, which drops what its models do not know (every
    /// `execution` of a tool, so a task-only tool looked like any other).
    List(&'static str),
    /// A `tasks/*` request (`TASKS`): answered as the stdio front answers it
    /// (`front::answer_task`), from the params as the agent wrote them.
    Task {
        method: &'static str,
        params: Option<Box<RawValue>>,
        meta: Option<RequestMetaObject>,
    },
}

/// The `tasks/*` requests the fast path answers (2025-11-25's, and the tasks extension's
/// `tasks/update`, refused as stdio refuses it).
const TASKS: [&str; 5] = [
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "tasks/update",
];

/// The lists the fast path answers.
const LISTS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// A list request's params as the fast path accepts them: none, or these two fields (what
/// rmcp's `PaginatedRequestParams` reads; a cursor is ignored, as rmcp's path ignores it:
/// every list is given whole).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    /// Read only to leave what is not a string to rmcp's path, which refuses it.
    #[serde(rename = "cursor", default)]
    _cursor: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

/// The envelope of a POST body, read to decide.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// A session's common `tools/call` params, read in one pass: only these three fields, each
/// once, typed as `CallToolRequestParams` types them (what `front::call_params` gives for
/// such params, with nothing left over). The name is borrowed, so a name written with
/// escapes does not fit; such params, and any others, are read by `front::call_params`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastParams<'a> {
    name: &'a str,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

impl FastPath {
    pub(super) fn new(
        shared: Arc<Shared>,
        sessions: Arc<SessionPeers>,
        manager: Arc<LocalSessionManager>,
        enabled: bool,
    ) -> Self {
        FastPath {
            shared,
            sessions,
            manager,
            enabled,
            running: Arc::default(),
        }
    }

    /// Whether this principal's rmcp session manager holds `session` (rmcp's own check: an
    /// unknown or foreign session is left to rmcp, which answers 404).
    async fn knows(&self, session: &str) -> bool {
        self.manager
            .has_session(&session.to_string().into())
            .await
            .unwrap_or(false)
    }

    /// The call this POST carries when the fast path may take it; `None`: rmcp's path.
    pub(super) async fn plan(&self, headers: &HeaderMap, body: &[u8]) -> Option<Planned> {
        let era = headers_fit(headers)?;
        let env: Envelope<'_> = serde_json::from_slice(body).ok()?;
        if env.jsonrpc != "2.0" {
            return None;
        }
        let raw_id = env.id?;
        let id: RequestId = serde_json::from_str(raw_id.get()).ok()?;
        let (asked, meta) = asked(era, env.method, env.params)?;
        let progress = asks_progress(meta.as_ref());
        let is_list = matches!(asked, Asked::List(_));
        let planned = |session, peer, own_peer| Planned {
            session,
            raw_id: raw_id.to_owned(),
            id,
            asked,
            peer,
            own_peer,
            era,
            progress,
        };
        if era == Era::Modern {
            // Its questions for the agent are input-required results, not requests on a
            // stream: nothing here needs a session.
            if !modern::fits(headers, env.method, env.params, meta.as_ref()) {
                return None;
            }
            let upstream = Upstream {
                shared: Arc::clone(&self.shared),
                sessions: None,
            };
            let own = modern::request_peer(upstream);
            return Some(planned(None, own.peer().clone(), Some(own)));
        }
        let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
        // rmcp's own check for the session, then the peer its `initialized` registered.
        if !self.knows(session).await {
            return None;
        }
        let peer = self.sessions.get(session)?;
        // A list asks no one anything; a call or a routed request may need the session's
        // stream.
        if !is_list
            && (!self.enabled
                || asks_the_agent(&self.shared, &peer)
                || self
                    .shared
                    .upstream
                    .get()
                    .is_some_and(|p| asks_the_agent(&self.shared, &p)))
        {
            return None;
        }
        Some(planned(Some(session.to_string()), peer, None))
    }

    /// Runs a planned call on its own task and answers with its JSON-RPC response; `cut`
    /// (shutdown past its grace) ends the wait with `cut_error`'s answer. A call that asked
    /// for progress is answered at once with a stream its notifications and answer go on.
    /// `held` (the request's slot under the principal's cap) is kept until the answer is
    /// written: the call counts as in flight, for the cap and for shutdown's drain, while it
    /// runs behind a stream.
    pub(super) async fn serve(
        &self,
        call: Planned,
        cut: &CancellationToken,
        cut_error: impl FnOnce(&str) -> Vec<u8> + Send + 'static,
        held: impl Send + 'static,
    ) -> Response {
        let method = match &call.asked {
            Asked::Call(..) => "tools/call",
            Asked::Read { method, .. } | Asked::List(method) | Asked::Task { method, .. } => method,
        };
        let session = call.session.as_deref().unwrap_or("none (2026-07-28)");
        tracing::debug!(session, "{method} served on the fast path");
        let id_text = call.raw_id.get().to_string();
        // A request in a session can be named by a `notifications/cancelled` on it; a
        // 2026-07-28 request is cancelled by its client going away.
        let started = call
            .session
            .as_ref()
            .map(|session| self.running.start((session.clone(), id_text.clone())));
        let ct = started
            .as_ref()
            .map_or_else(CancellationToken::new, running::Started::token);
        let era = call.era;
        let streamed = call.progress.then(RequestStream::new);
        let task = tokio::spawn(run(
            Arc::clone(&self.shared),
            call,
            ct.clone(),
            streamed.as_ref().map(|(stream, _)| stream.clone()),
        ));
        let finished = {
            let (cut, ct) = (cut.clone(), ct.clone());
            async move {
                let answered = tokio::select! {
                    done = task => done.unwrap_or_else(|e| {
                        tracing::error!("a fast-path call's task failed: {e}");
                        let err = rmcp::ErrorData::internal_error("the call's task failed", None);
                        (front::error_line(&id_text, &err), None)
                    }),
                    _ = cut.cancelled() => (cut_error(&id_text), None),
                };
                drop(started);
                // A request the agent cancelled gets no answer (JSON-RPC), as on rmcp's
                // path: the stream ends without an event.
                (!ct.is_cancelled() || cut.is_cancelled()).then_some(answered)
            }
        };
        let body = match streamed {
            Some((stream, lines)) => {
                // The answer goes on the stream from a task of its own; the client going
                // away (the body dropped) cancels the call.
                let cancel_on_drop = ct.drop_guard();
                tokio::spawn(async move {
                    match finished.await {
                        Some((line, _)) => stream.finish(line).await,
                        None => drop(stream),
                    }
                });
                let events = lines.map(move |line| {
                    let _kept = (&cancel_on_drop, &held);
                    Ok::<_, std::convert::Infallible>(one_event(&line))
                });
                Body::from_stream(events)
            }
            None => {
                // The client going away (this future dropped) cancels the call.
                let _cancel_on_drop = ct.drop_guard();
                let answered = finished.await;
                drop(held);
                let status = match (era, &answered) {
                    (Era::Modern, Some((_, Some(code)))) => modern::error_status(*code),
                    _ => StatusCode::OK,
                };
                if let (false, Some((line, _))) = (status == StatusCode::OK, &answered) {
                    // As rmcp answers a 2026-07-28 request refused in kind: the error alone,
                    // as JSON, under its status.
                    let line = line.strip_suffix(b"\n").unwrap_or(line).to_vec();
                    return (status, [(header::CONTENT_TYPE, "application/json")], line)
                        .into_response();
                }
                Body::from(answered.map(|(l, _)| one_event(&l)).unwrap_or_default())
            }
        };
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            body,
        )
            .into_response()
    }

    /// A `notifications/cancelled` POST naming a fast call of this session: the call is
    /// cancelled and the POST answered as rmcp answers a notification (202); `None` when it
    /// names none (rmcp's path takes it).
    pub(super) async fn cancel(&self, headers: &HeaderMap, body: &[u8]) -> Option<Response> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Cancelled<'a> {
            #[serde(borrow)]
            request_id: &'a RawValue,
        }
        let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
        let env: Envelope<'_> = serde_json::from_slice(body).ok()?;
        if env.id.is_some() || env.method != "notifications/cancelled" {
            return None;
        }
        let c: Cancelled<'_> = serde_json::from_str(env.params?.get()).ok()?;
        let key = (session.to_string(), c.request_id.get().to_string());
        let ct = self.running.get(&key)?;
        if !self.knows(session).await {
            return None;
        }
        ct.cancel();
        Some(StatusCode::ACCEPTED.into_response())
    }
}

/// What a request asks when the fast path takes its method and params in `era`, with the
/// `_meta` it carries; `None`: rmcp's path.
fn asked(
    era: Era,
    method: &str,
    params: Option<&RawValue>,
) -> Option<(Asked, Option<RequestMetaObject>)> {
    if method == "tools/call" {
        // The common call (a name, arguments, a `_meta`) is read in one pass; any other
        // (a task, a 2026-07-28 retry's `inputResponses` and `requestState`, a field
        // Palisade does not know) as the stdio front reads it, its other fields forwarded.
        let common = match era {
            Era::Sessions => fast_params(params?).map(|(typed, text)| {
                let sent = AsSent {
                    extra: serde_json::Map::new(),
                    text,
                };
                (typed, sent)
            }),
            Era::Modern => None,
        };
        let (typed, sent) = match common {
            Some(read) => read,
            None => {
                let (typed, sent) = front::call_params(params).ok()?;
                if !meta_fits(era, typed.meta.as_ref()) {
                    return None;
                }
                (typed, sent)
            }
        };
        let meta = typed.meta.clone();
        return Some((Asked::Call(Box::new(typed), sent), meta));
    }
    if let Some(method) = LISTS.iter().find(|m| **m == method) {
        let meta = match params {
            None => None,
            Some(p) => serde_json::from_str::<ListParams>(p.get()).ok()?.meta,
        };
        return meta_fits(era, meta.as_ref()).then_some((Asked::List(method), meta));
    }
    #[derive(Deserialize)]
    struct WithMeta {
        #[serde(rename = "_meta", default)]
        meta: Option<RequestMetaObject>,
    }
    let meta_of = |p: &RawValue| serde_json::from_str::<WithMeta>(p.get()).map(|w| w.meta);
    if let Some(method) = TASKS.iter().find(|m| **m == method) {
        let meta = match params {
            None => None,
            Some(p) => meta_of(p).ok()?,
        };
        // The tasks extension's requests reach rmcp's path unless the agent declared it
        // (rmcp refuses them then).
        if era == Era::Modern && !meta.as_ref().is_some_and(tasks_v2::declared) {
            return None;
        }
        let task = Asked::Task {
            method,
            params: params.map(RawValue::to_owned),
            meta: meta.clone(),
        };
        return meta_fits(era, meta.as_ref()).then_some((task, meta));
    }
    let method = READ_RAW.iter().find(|m| **m == method)?;
    let params = params?;
    let meta = meta_of(params).ok()?;
    let read = Asked::Read {
        method,
        params: params.to_owned(),
    };
    meta_fits(era, meta.as_ref()).then_some((read, meta))
}

/// Runs one planned request through the stdio front's stages; its JSON-RPC response line,
/// and its error's code if it is an error.
async fn run(
    shared: Arc<Shared>,
    call: Planned,
    ct: CancellationToken,
    stream: Option<RequestStream>,
) -> (Vec<u8>, Option<ErrorCode>) {
    let mut ctx = RequestContext::new(call.id, call.peer);
    ctx.ct = ct;
    if let Some(stream) = stream {
        ctx.extensions.insert(stream);
    }
    let answer = match call.asked {
        Asked::Call(typed, sent) => front::answer_call(&shared, *typed, sent, ctx).await,
        Asked::Read { method, params } => {
            front::answer_routed(&shared, method, Some(&params), ctx).await
        }
        Asked::List(method) => match shared.catalog().listed(method) {
            Some(mut listed) => {
                if call.era == Era::Modern {
                    versions::stamp_result(method, &mut listed);
                }
                Ok(RawJson::from_value(&listed))
            }
            None => Err(rmcp::ErrorData::internal_error("not a list", None)),
        },
        Asked::Task {
            method,
            params,
            meta,
        } => {
            // Read from its params, as rmcp's session would.
            if let Some(meta) = meta {
                ctx.meta = meta;
            }
            front::answer_task(&shared, method, params.as_deref(), &ctx).await
        }
    };
    if let Some(own) = call.own_peer {
        // Ends its service (a loop that received nothing) before the answer goes.
        own.cancellation_token().cancel();
    }
    match answer {
        Ok(result) => (front::result_line(call.raw_id.get(), &result), None),
        Err(e) => (front::error_line(call.raw_id.get(), &e), Some(e.code)),
    }
}

/// Fast calls running, by (session id, request id as the agent wrote it).
type Running = running::Running<(String, String)>;

/// The session id of a POST carrying `notifications/initialized`, if it is one.
pub(super) fn initialized_session(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
    let env: Envelope<'_> = serde_json::from_slice(body).ok()?;
    (env.id.is_none() && env.method == "notifications/initialized").then(|| session.to_string())
}

/// One JSON-RPC message (a line) as the whole body of an SSE response: what rmcp's answer
/// to a request looks like, so that a client reading only SSE answers reads this one too.
fn one_event(line: &[u8]) -> Vec<u8> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut body = Vec::with_capacity(line.len() + 24);
    body.extend_from_slice(b"event: message\ndata: ");
    body.extend_from_slice(line);
    body.extend_from_slice(b"\n\n");
    body
}

/// Whether the agent's client could be asked something during a call: a server's sampling
/// or elicitation request, relayed, goes on the session's stream. Only a server whose config
/// turns the relay on (`relay`, off by default) has its requests relayed, and only to an
/// agent that declared the capability; the `elicit` approver turns the fast path off as a
/// whole (`FastPath::enabled`).
fn asks_the_agent(shared: &Shared, peer: &Peer<RoleServer>) -> bool {
    let Some(info) = peer.peer_info() else {
        return false;
    };
    let caps = &info.capabilities;
    shared.slots.iter().any(|slot| {
        let relay = slot.relay.policy();
        (relay.sampling && caps.sampling.is_some())
            || (relay.elicitation && caps.elicitation.is_some())
    })
}

/// The headers the fast path serves exactly as rmcp would (else rmcp answers, with its own
/// 406, 415 or 400 where it refuses).
fn headers_fit(headers: &HeaderMap) -> Option<Era> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(e, _)| e);
            essence.trim().eq_ignore_ascii_case("application/json")
        });
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let value = value.to_str().ok()?;
        // Weights and quoting are rmcp's to read.
        if value.contains('"') || value.to_ascii_lowercase().contains("q=") {
            return None;
        }
        for entry in value.split(',') {
            let essence = entry.split(';').next().unwrap_or("").trim();
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    if !(json_body && json && sse) {
        return None;
    }
    let mut versions = headers.get_all(VERSION_HEADER).iter();
    let Some(version) = versions.next() else {
        return Some(Era::Sessions);
    };
    let version = version
        .to_str()
        .ok()
        .filter(|_| versions.next().is_none())?;
    if version == ProtocolVersion::V_2026_07_28.as_str() {
        return Some(Era::Modern);
    }
    let known = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|k| k.as_str() == version);
    (known && version < ProtocolVersion::V_2026_07_28.as_str()).then_some(Era::Sessions)
}

/// Whether a request's `_meta` is the fast path's to serve: a progress token, if any, that
/// reads as one (else rmcp's path says why), and, in a session, no 2026-07-28 envelope
/// (rmcp's checks; a 2026-07-28 request's envelope is read by `modern::fits`).
fn meta_fits(era: Era, meta: Option<&RequestMetaObject>) -> bool {
    meta.is_none_or(|m| {
        let sessionless = m.contains_key("protocolVersion")
            || m.keys().any(|k| k.starts_with("io.modelcontextprotocol/"));
        (era == Era::Modern || !sessionless)
            && (!m.contains_key("progressToken") || m.get_progress_token().is_some())
    })
}

/// Whether a request asks for progress (its answer is then a stream).
fn asks_progress(meta: Option<&RequestMetaObject>) -> bool {
    meta.is_some_and(|m| m.get_progress_token().is_some())
}

/// The typed view of params with only a name, arguments (an object, if any) and a `_meta`
/// that fits (`meta_fits`); `None`: rmcp's path (which says why, if it refuses).
/// The typed view, and the text when it may go to the server as written (`as_sent`).
fn fast_params(params: &RawValue) -> Option<(CallToolRequestParams, Option<Box<RawValue>>)> {
    let p = serde_json::from_str::<FastParams<'_>>(params.get()).ok()?;
    if !meta_fits(Era::Sessions, p.meta.as_ref()) {
        return None;
    }
    // The members the decoder kept: the top level's (serde refuses a field given twice, and
    // any unknown one), and those inside `arguments` and `_meta`.
    let mut top = 0;
    let _ = crate::gateway::json_scan::object_members(params.get().as_bytes(), |_, _| {
        top += 1;
        Some(())
    });
    let inside =
        |m: Option<&serde_json::Map<String, serde_json::Value>>| m.map_or(0, as_sent::members_of);
    let decoded = top + inside(p.arguments.as_ref()) + inside(p.meta.as_ref().map(|m| &m.0 .0));
    let text = as_sent::checked(params, decoded, as_sent::Named::Top);
    let mut typed = CallToolRequestParams::new(p.name.to_owned());
    typed.arguments = p.arguments;
    typed.meta = p.meta;
    Some((typed, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    const BASE: [(&str, &str); 2] = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];

    #[test]
    fn plain_headers_fit_and_anything_rmcp_reads_differently_does_not() {
        assert!(headers_fit(&headers(&BASE)) == Some(Era::Sessions));
        let with = |extra: (&'static str, &'static str)| {
            let mut h = headers(&BASE);
            h.append(extra.0, extra.1.parse().unwrap());
            headers_fit(&h)
        };
        assert!(with(("mcp-protocol-version", "2025-11-25")) == Some(Era::Sessions));
        assert!(with(("mcp-protocol-version", "2026-07-28")) == Some(Era::Modern));
        assert!(with(("mcp-protocol-version", "2031-01-01")).is_none());
        let mut twice = headers(&BASE);
        twice.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        twice.append("mcp-protocol-version", "2025-11-25".parse().unwrap());
        assert!(headers_fit(&twice).is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]))
        .is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "text/plain"),
            ("accept", "application/json, text/event-stream"),
        ]))
        .is_none());
        assert!(headers_fit(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
        ]))
        .is_none());
    }

    #[test]
    fn a_2026_call_is_read_whole_and_a_session_call_without_its_envelope() {
        let raw = |s: &str| RawValue::from_string(s.into()).unwrap();
        let envelope = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        // A retry's fields travel with a 2026-07-28 call.
        let retry = raw(&format!(
            r#"{{"name":"fs__stat","inputResponses":{{"a":{{}}}},"requestState":"s",{envelope}}}"#
        ));
        let (asked_, meta) = asked(Era::Modern, "tools/call", Some(&retry)).unwrap();
        assert!(meta.is_some());
        let Asked::Call(typed, _) = asked_ else {
            panic!("not a call")
        };
        assert_eq!(typed.name, "fs__stat");
        // A session's call with a task (or a field Palisade does not know) is read whole
        // too, the field forwarded; params the typed view refuses are rmcp's to refuse.
        let task = raw(r#"{"name":"fs__stat","task":{"ttl":1},"future":1}"#);
        let Some((Asked::Call(_, sent), _)) = asked(Era::Sessions, "tools/call", Some(&task))
        else {
            panic!("not a call")
        };
        assert_eq!(sent.extra.len(), 2);
        let bad = raw(r#"{"name":"fs__stat","arguments":[1]}"#);
        assert!(asked(Era::Sessions, "tools/call", Some(&bad)).is_none());
        // The envelope in a session's request is rmcp's to judge.
        let in_session = raw(&format!(r#"{{"name":"fs__stat",{envelope}}}"#));
        assert!(asked(Era::Sessions, "tools/call", Some(&in_session)).is_none());
        // Lists, with or without params, in both eras.
        assert!(asked(Era::Sessions, "tools/list", None).is_some());
        let list = raw(&format!(r#"{{"cursor":"c",{envelope}}}"#));
        assert!(asked(Era::Modern, "resources/list", Some(&list)).is_some());
        assert!(asked(Era::Sessions, "tools/list", Some(&raw(r#"{"cursor":1}"#))).is_none());
        assert!(asked(Era::Sessions, "tools/list", Some(&raw(r#"{"more":1}"#))).is_none());
        // What the fast path does not answer.
        assert!(asked(Era::Modern, "server/discover", Some(&list)).is_none());
    }

    #[test]
    fn the_answer_is_one_sse_event() {
        assert_eq!(
            one_event(b"{\"id\":1}\n"),
            b"event: message\ndata: {\"id\":1}\n\n".to_vec()
        );
    }

    #[test]
    fn only_plain_call_params_fit() {
        let fits = |s: &str| fast_params(&RawValue::from_string(s.into()).unwrap()).is_some();
        assert!(fits(r#"{"name":"fs__stat","arguments":{"path":"/x"}}"#));
        assert!(fits(r#"{"name":"fs__stat","_meta":{"trace":"a"}}"#));
        // A progress token is answered on the POST's own stream; one that is not a token
        // is rmcp's to refuse.
        assert!(fits(r#"{"name":"fs__stat","_meta":{"progressToken":1}}"#));
        assert!(!fits(
            r#"{"name":"fs__stat","_meta":{"progressToken":[1]}}"#
        ));
        // A 2026-07-28 call is driven in rounds.
        assert!(!fits(
            r#"{"name":"fs__stat","_meta":{"protocolVersion":"2026-07-28"}}"#
        ));
        // A task-augmented call, or a field Palisade does not know.
        assert!(!fits(r#"{"name":"fs__stat","task":{"ttl":1}}"#));
        assert!(!fits(r#"{"name":"fs__stat","future":1}"#));
        assert!(!fits(r#"{"arguments":{}}"#));
        // What the typed view refuses, or what the borrowed read could not take, is rmcp's.
        assert!(!fits(r#"{"name":"fs__stat","arguments":[1]}"#));
        assert!(!fits(r#"{"name":"fs__stat","_meta":5}"#));
        assert!(!fits(r#"{"name":"fs__stat","name":"fs__read"}"#));
        assert!(!fits(r#"{"name":"fs__st\u0061t"}"#));
        assert!(fits(r#"{"name":"fs__stat","arguments":null,"_meta":null}"#));
    }

    #[test]
    fn the_view_handed_on_is_the_one_the_stdio_front_reads() {
        for s in [
            r#"{"name":"fs__stat","arguments":{"path":"/x","n":1.50,"deep":{"b":1,"a":[2]}}}"#,
            r#"{"_meta":{"trace":"a"},"name":"fs__stat"}"#,
            r#"{"name":"fs__stat","arguments":null,"_meta":null}"#,
        ] {
            let raw = RawValue::from_string(s.into()).unwrap();
            let fast = fast_params(&raw).unwrap();
            let (typed, sent) = front::call_params(Some(&raw)).unwrap();
            assert_eq!(fast.0, typed, "{s}");
            assert!(sent.extra.is_empty(), "{s}");
            assert_eq!(
                fast.1.as_deref().map(RawValue::get),
                sent.text.as_deref().map(RawValue::get),
                "{s}"
            );
            // Byte for byte, key order included.
            assert_eq!(
                serde_json::to_string(&fast.0).unwrap(),
                serde_json::to_string(&typed).unwrap()
            );
        }
    }
}

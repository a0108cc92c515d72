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
//! without a 2026-07-28 envelope and with a progress token (if any) that rmcp reads as one.
//! A server's request relayed during a routed request or a task goes to its session's own
//! stream (`agent/open_calls.rs`), as on rmcp's path. A session's call that may ask its agent
//! something (under an `elicit` approver, or when a
//! server may relay a request to this client) is taken and answered on a stream of its own,
//! which the question goes on (`agent/asking.rs`; a server's request finds the call by
//! `agent/open_calls.rs`; the agent's answer, a response POST on the session, is handed back
//! by `FastPath::reply`). An unknown session therefore gets rmcp's own 404.
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

pub(super) mod answer;
mod reading;

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientCapabilities, ErrorCode, RequestId};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::RoleServer;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::asking::{self, Asker, Questions};
use crate::gateway::agent::open_calls::InSession;
use crate::gateway::agent::request_stream::RequestStream;
use crate::gateway::agent::service::Upstream;
use crate::gateway::agent::{front, running, versions};
use crate::gateway::raw_json::RawJson;
use crate::gateway::state::Shared;

use super::modern;
use super::sessions::{SessionPeers, SESSION_HEADER};

pub(super) use reading::Posted;

use reading::{asked, asks_progress, headers_fit, Asked, Era};

/// One principal's fast path: its gateway's state, its sessions and its fast calls running.
pub(super) struct FastPath {
    pub(super) shared: Arc<Shared>,
    pub(super) sessions: Arc<SessionPeers>,
    pub(super) manager: Arc<LocalSessionManager>,
    /// `false` sends every call and routed request to rmcp's path (lists, which ask no one,
    /// still come here); kept for measuring the difference.
    pub(super) enabled: bool,
    /// The principal's approval chain can ask its agent (`elicit`): a session's call is then
    /// answered on a stream of its own, which its questions go on (`agent/asking.rs`).
    approver_asks: bool,
    /// The questions put to this principal's agents over HTTP (fast calls' own streams, the
    /// standalone one), waiting for the answers: the principal's `UpstreamLink`'s table.
    questions: Arc<Questions>,
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
    /// A session's call whose agent may be asked something during it (by its approval, or
    /// by a server whose relay is on): its answer is a stream, the questions go on it.
    asks: Option<Asks>,
}

/// What a session's client declared: what it may be asked.
struct Asks(Option<ClientCapabilities>);

impl FastPath {
    pub(super) fn new(
        shared: Arc<Shared>,
        sessions: Arc<SessionPeers>,
        manager: Arc<LocalSessionManager>,
        enabled: bool,
        approver_asks: bool,
    ) -> Self {
        FastPath {
            sessions,
            manager,
            enabled,
            approver_asks,
            // The link's table: a server's request asked on the session's standalone stream
            // (`UpstreamLink::standalone_asker`) is answered through `reply` too.
            questions: Arc::clone(shared.upstream.questions()),
            shared,
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
    pub(super) async fn plan(&self, headers: &HeaderMap, posted: &Posted<'_>) -> Option<Planned> {
        let era = headers_fit(headers)?;
        let env = posted.envelope()?;
        if env.jsonrpc != "2.0" {
            return None;
        }
        let raw_id = env.id?;
        let id: RequestId = serde_json::from_str(raw_id.get()).ok()?;
        let (asked, meta) = asked(era, &env.method, env.params)?;
        let progress = asks_progress(meta.as_ref());
        let is_list = matches!(asked, Asked::List(_));
        let is_call = matches!(asked, Asked::Call(..));
        // Its questions for the agent are input-required results, not requests on a
        // stream: a 2026-07-28 request needs no session, only headers that agree with it.
        if era == Era::Modern {
            let named = match &asked {
                Asked::Call(typed, _) => Some(&*typed.name),
                _ => None,
            };
            if !modern::fits(headers, &env.method, env.params, named, meta.as_ref()) {
                return None;
            }
        }
        let planned = |session, peer, own_peer, asks| Planned {
            session,
            raw_id: raw_id.to_owned(),
            id,
            asked,
            peer,
            own_peer,
            era,
            progress,
            asks,
        };
        if era == Era::Modern {
            let upstream = Upstream {
                shared: Arc::clone(&self.shared),
                sessions: None,
            };
            let own = modern::request_peer(upstream);
            return Some(planned(None, own.peer().clone(), Some(own), None));
        }
        let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
        // rmcp's own check for the session, then the peer its `initialized` registered.
        if !self.knows(session).await {
            return None;
        }
        let peer = self.sessions.get(session)?;
        // A list asks no one anything.
        if is_list {
            return Some(planned(Some(session.to_string()), peer, None, None));
        }
        if !self.enabled {
            return None;
        }
        // A call that may ask its agent something (its approval's question, a server's
        // request relayed) is answered on a stream of its own, which the question goes on
        // (`agent/asking.rs`, `agent/open_calls.rs`). A routed request or a task has no such
        // stream: a server's request relayed during it goes to its session, on the session's
        // own stream, as on rmcp's path (`Carrier::Session`).
        let asks = (is_call && (self.approver_asks || asks_the_agent(&self.shared, &peer)))
            .then(|| Asks(peer.peer_info().map(|i| i.capabilities.clone())));
        Some(planned(Some(session.to_string()), peer, None, asks))
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
            .map(|session| self.running.start((session.clone(), running_key(&call.id))));
        let ct = started
            .as_ref()
            .map_or_else(CancellationToken::new, running::Started::token);
        let era = call.era;
        let streamed = (call.progress || call.asks.is_some()).then(RequestStream::new);
        let task = tokio::spawn(run(
            Arc::clone(&self.shared),
            call,
            ct.clone(),
            streamed.as_ref().map(|(stream, _)| stream.clone()),
            Arc::clone(&self.questions),
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
        match streamed {
            Some((stream, lines)) => answer::streamed(era, finished, stream, lines, ct, held).await,
            None => answer::whole(era, finished, ct, held).await,
        }
    }

    /// A `notifications/cancelled` POST naming a fast call of this session: the call is
    /// cancelled and the POST answered as rmcp answers a notification (202); `None` when it
    /// names none (rmcp's path takes it).
    pub(super) async fn cancel(
        &self,
        headers: &HeaderMap,
        posted: &Posted<'_>,
    ) -> Option<Response> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Cancelled {
            request_id: RequestId,
        }
        if headers_fit(headers)? != Era::Sessions {
            return None;
        }
        let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
        if posted.notification()? != "notifications/cancelled" {
            return None;
        }
        let params = posted.envelope()?.params?;
        let c: Cancelled = serde_json::from_str(params.get()).ok()?;
        let key = (session.to_string(), running_key(&c.request_id));
        let ct = self.running.get(&key)?;
        if !self.knows(session).await {
            return None;
        }
        ct.cancel();
        Some(StatusCode::ACCEPTED.into_response())
    }

    /// A POST carrying the agent's answer to a question Palisade put to this session (on a
    /// fast call's own stream, or on its standalone stream: `agent/asking.rs`): handed to the
    /// waiting asker and answered as rmcp answers a response (202); `None` when it answers
    /// none of them (rmcp's path takes it).
    pub(super) async fn reply(&self, headers: &HeaderMap, body: &[u8]) -> Option<Response> {
        // Headers rmcp would refuse go to rmcp, which answers 406, 415 or 400.
        if !super::era::answers_fit(headers) {
            return None;
        }
        let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
        let (id, answered) = reading::reply(body)?;
        if !asking::is_question_id(&id) || !self.knows(session).await {
            return None;
        }
        self.questions
            .answer(session, &id, answered)
            .then(|| StatusCode::ACCEPTED.into_response())
    }
}

/// Runs one planned request through the stdio front's stages; its JSON-RPC response line,
/// and its error's code if it is an error.
async fn run(
    shared: Arc<Shared>,
    call: Planned,
    ct: CancellationToken,
    stream: Option<RequestStream>,
    questions: Arc<Questions>,
) -> (Vec<u8>, Option<ErrorCode>) {
    let Planned {
        session,
        raw_id,
        id,
        asked,
        peer,
        own_peer,
        era,
        asks,
        ..
    } = call;
    let session_of_call = session.clone();
    // A call that may ask its agent asks on its own stream, for no longer than it runs.
    let asker = match (asks, &stream, session) {
        (Some(Asks(caps)), Some(stream), Some(session)) => Some(Arc::new(Asker::new(
            questions,
            session,
            stream.clone(),
            caps,
            ct.clone(),
        ))),
        _ => None,
    };
    let mut ctx = RequestContext::new(id, peer);
    ctx.ct = ct;
    // Which agent made it, for a server's request during it (`open_calls`).
    ctx.extensions.insert(InSession(session_of_call));
    if let Some(stream) = stream {
        ctx.extensions.insert(stream);
    }
    let answering = answer(&shared, asked, era, ctx);
    let answer = match asker {
        Some(asker) => asking::scope(asker, answering).await,
        None => answering.await,
    };
    if let Some(own) = own_peer {
        // Ends its service (a loop that received nothing) before the answer goes.
        own.cancellation_token().cancel();
    }
    match answer {
        Ok(result) => (front::result_line(raw_id.get(), &result), None),
        Err(e) => (front::error_line(raw_id.get(), &e), Some(e.code)),
    }
}

/// The answer to what a planned request asks, through the stdio front's stages.
async fn answer(
    shared: &Arc<Shared>,
    asked: Asked,
    era: Era,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, rmcp::ErrorData> {
    match asked {
        Asked::Call(typed, sent) => front::answer_call(shared, *typed, sent, ctx).await,
        Asked::Read { method, params } => {
            front::answer_routed(shared, method, Some(&params), ctx).await
        }
        Asked::List(method) => match shared.catalog().listed(method) {
            Some(listed) if era == Era::Modern => {
                // The stamps go at the end of the text, as on a server's own result.
                serde_json::value::to_raw_value(&*listed)
                    .map(|text| versions::stamp_raw(method, text).into())
                    .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
            }
            Some(listed) => Ok(RawJson::from_value(&listed)),
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
            front::answer_task(shared, method, params.as_deref(), &ctx).await
        }
    }
}

/// Fast calls running, by (session id, `running_key` of the request id).
type Running = running::Running<(String, String)>;

/// A request id as one text however the agent spelt it (`"a"` and `"\u0061"` are one id),
/// so that a `notifications/cancelled` finds the call it names.
fn running_key(id: &RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => format!("\"{s}\""),
    }
}

/// The session id of a POST carrying `notifications/initialized`, if it is one.
pub(super) fn initialized_session(headers: &HeaderMap, posted: &Posted<'_>) -> Option<String> {
    let session = headers.get(SESSION_HEADER)?.to_str().ok()?;
    (posted.notification()? == "notifications/initialized").then(|| session.to_string())
}

/// Whether the agent's client could be asked something by a server during a request: only
/// a server whose config turns the relay on (`relay`, off by default) has its sampling or
/// elicitation requests relayed, and only to an agent that declared the capability.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_one_key_however_it_is_spelt() {
        let key = |text: &str| running_key(&serde_json::from_str::<RequestId>(text).unwrap());
        assert_eq!(key(r#""a""#), key(r#""\u0061""#));
        assert_ne!(key(r#""1""#), key("1"));
        assert_eq!(key("7"), "7");
    }
}

//! The agent's side of the connection, shared with every downstream handler so that
//! notifications (progress, logging, list changes, resource updates) can flow upstream, and
//! the one helper every request the gateway sends the agent goes through (the `elicit`
//! approver's questions, a server's relayed sampling and elicitation): a timeout on each,
//! cancellation passed on, errors typed.
//!
//! Set once the agent's `initialize` arrives; read on every notification. A std `RwLock`
//! around a cheap clone: never held across an await. Never: send the agent a request
//! without a timeout (rmcp has none by default).
//!
//! Relayed notifications that nobody waits for (logging, resource updates) take a share of a
//! fixed relay budget while they are being written: when the agent does not read and a server
//! keeps sending, they are dropped (and counted in the log) instead of queueing without bound.
//!
//! An agent on a byte stream (stdio) also has its line writer here (`lines`): a server's
//! notification is written to it as the server's own text (`server::note_line`), where rmcp's
//! peer would re-encode it through its typed models. Over HTTP a server's notification goes
//! the same way, as its own text, on the session's standalone stream (the agent's GET,
//! `standalone`) while the agent holds one; with none open, rmcp's session carries it (and
//! keeps it for a GET to come). Requests to an agent on a byte stream go on the same stream
//! as questions of Palisade's (`line_asker`, `agent/asking.rs`), and over HTTP a server's
//! request that no call in flight carries goes on the session's standalone stream the same
//! way (`standalone_asker`); the front hands the answers back as the agent wrote them
//! (`questions`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use rmcp::model::{CancelledNotificationParam, ClientCapabilities, ClientResult, ServerRequest};
use rmcp::service::{Peer, PeerRequestOptions};
use rmcp::{ErrorData, RoleServer, ServiceError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::asking::{Asker, Questions, LINES_SESSION};
use crate::gateway::agent::request_stream::{RequestStream, Standalone};
use crate::gateway::line_out::LineOut;

/// Bytes of relayed notifications in flight to the agent at most (in units of `UNIT`).
const RELAY_BUDGET_UNITS: u32 = 1024;
const UNIT: usize = 16 * 1024;

#[derive(Clone)]
pub struct UpstreamLink {
    peer: Arc<RwLock<Option<Peer<RoleServer>>>>,
    relays: Arc<Semaphore>,
    dropped: Arc<AtomicU64>,
    /// The agent's stream, when it is a byte stream of lines (stdio).
    lines: Arc<OnceLock<LineOut>>,
    /// Palisade's questions waiting for their answers: on that stream (stdio), or, over
    /// HTTP, on a session's streams (the fast path's calls' own, the standalone one), whose
    /// answers the front hands back from the session's POSTs.
    questions: Arc<Questions>,
    /// Fires when the agent's stream of lines has ended (its reader saw the end): no
    /// question asked on it will be answered.
    lines_ended: CancellationToken,
    /// Over HTTP: the id and standalone stream of the session `peer` belongs to, once that
    /// session is initialized.
    standalone: Arc<RwLock<Option<SessionStream>>>,
}

/// An initialized HTTP session's id and its standalone stream, and whether its POSTs fit
/// the fast path's reading (`reply` takes the answer to a question of Palisade's only then).
pub struct SessionStream {
    pub id: String,
    pub stream: Arc<Standalone>,
    pub answers_fit: bool,
}

/// Where a server's notification can go to the agent as the server's own text.
pub enum RawOut {
    /// The agent's stdout (stdio).
    Lines(LineOut),
    /// The open standalone stream of the agent's HTTP session.
    Stream(RequestStream),
}

impl Default for UpstreamLink {
    fn default() -> Self {
        UpstreamLink {
            peer: Arc::default(),
            relays: Arc::new(Semaphore::new(RELAY_BUDGET_UNITS as usize)),
            dropped: Arc::default(),
            lines: Arc::default(),
            questions: Arc::default(),
            lines_ended: CancellationToken::new(),
            standalone: Arc::default(),
        }
    }
}

/// Why a request to the agent produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("no MCP client is connected")]
    NotConnected,
    #[error("the MCP client did not answer within {}s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("the request was cancelled before the MCP client answered")]
    Cancelled,
    #[error("the MCP client's connection closed before it answered")]
    Closed,
    /// The agent answered with a JSON-RPC error.
    #[error("the MCP client answered with an error: {}", .0.message)]
    Client(ErrorData),
    /// A 2026-07-28 call's round could not carry the request, or its answer did not come.
    #[error(transparent)]
    Round(#[from] crate::gateway::agent::mrtr::AskError),
    #[error("{0}")]
    Other(String),
}

impl UpstreamLink {
    pub fn set(&self, peer: Peer<RoleServer>) {
        let mut current = self.peer.write().unwrap_or_else(|e| e.into_inner());
        *current = Some(peer);
        // A new session: not initialized yet, so it has no standalone stream of its own.
        *self.standalone.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// An initialized HTTP session: its peer, its id and its standalone stream (all under the
    /// peer's lock, so that the stream written to is always the current peer's).
    pub fn set_session(&self, peer: Peer<RoleServer>, session: SessionStream) {
        let mut current = self.peer.write().unwrap_or_else(|e| e.into_inner());
        *current = Some(peer);
        *self.standalone.write().unwrap_or_else(|e| e.into_inner()) = Some(session);
    }

    /// Where a notification may be written as a line of its own: the agent's stream, when
    /// it is one and an agent is connected to it. (Progress for a call on rmcp's HTTP path
    /// belongs on that call's stream, which rmcp knows, not on the session's GET.)
    pub fn lines(&self) -> Option<&LineOut> {
        self.get()?;
        self.lines.get()
    }

    /// Where a notification that belongs to no call may go as the server's text: the agent's stream
    /// of lines, or its HTTP session's open standalone stream.
    pub fn raw_out(&self) -> Option<RawOut> {
        let peer = self.peer.read().unwrap_or_else(|e| e.into_inner());
        peer.as_ref().filter(|p| !p.is_transport_closed())?;
        if let Some(out) = self.lines.get() {
            return Some(RawOut::Lines(out.clone()));
        }
        let standalone = self.standalone.read().unwrap_or_else(|e| e.into_inner());
        standalone.as_ref()?.stream.live().map(RawOut::Stream)
    }

    /// A way to ask the agent of the current HTTP session on its open standalone stream (its
    /// GET), Palisade writing the question and taking the answer from the session's POST as
    /// the agent wrote it: for a server's request that no call in flight carries; with the
    /// session's rmcp peer (read under the same lock: the asker's session's), which asks
    /// instead if no GET takes the question. `None` while the session holds no GET, or when
    /// its POSTs are rmcp's to read (weighted `Accept`, say): rmcp's session then asks, and
    /// keeps the request for the next GET.
    pub fn standalone_asker(&self) -> Option<(Arc<Asker>, Peer<RoleServer>)> {
        let peer = self.peer.read().unwrap_or_else(|e| e.into_inner());
        let peer = peer.as_ref().filter(|p| !p.is_transport_closed())?;
        let caps = peer.peer_info()?.capabilities.clone();
        let standalone = self.standalone.read().unwrap_or_else(|e| e.into_inner());
        let session = standalone.as_ref().filter(|s| s.answers_fit)?;
        session.stream.live()?;
        let asker = Asker::standalone(
            Arc::clone(&self.questions),
            session.id.clone(),
            Arc::clone(&session.stream),
            {
                let peer = peer.clone();
                Arc::new(move || peer.is_transport_closed())
            },
            Some(caps),
        );
        Some((Arc::new(asker), peer.clone()))
    }

    /// The agent's line writer (set once, by the stdio front).
    pub fn set_lines(&self, out: LineOut) {
        let _ = self.lines.set(out);
    }

    /// The questions Palisade asked the agent (on its stream of lines, or on an HTTP
    /// session's streams), for the front that reads the answers to hand them back.
    pub fn questions(&self) -> &Arc<Questions> {
        &self.questions
    }

    /// The agent's stream of lines has ended: the questions waiting on it end now, and none
    /// is asked on it any more (rmcp's session may not know yet that its transport closed).
    pub fn lines_ended(&self) {
        self.lines_ended.cancel();
        self.questions.forget_session(LINES_SESSION);
    }

    /// A way to ask the agent on its stream of lines, as it wrote its answer: when the agent
    /// is on one (stdio) and its session has been initialized (a 2026-07-28 agent has none:
    /// it is asked only in a call's rounds).
    pub fn line_asker(&self) -> Option<Arc<Asker>> {
        if self.lines_ended.is_cancelled() {
            return None;
        }
        let peer = self.get()?;
        let caps = peer.peer_info()?.capabilities.clone();
        let out = self.lines.get()?.clone();
        Some(Arc::new(Asker::on_lines(
            Arc::clone(&self.questions),
            out,
            self.lines_ended.clone(),
            Some(caps),
        )))
    }

    /// The agent's peer, when one is connected and its transport is open.
    pub fn get(&self) -> Option<Peer<RoleServer>> {
        let guard = self.peer.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|p| !p.is_transport_closed()).cloned()
    }

    /// What the agent's client declared in its `initialize`; `None` until one has connected.
    /// A 2026-07-28 agent: its connection opened with no `initialize`, so there is no
    /// session to send it requests in.
    pub fn is_sessionless(&self) -> bool {
        self.get().is_some_and(|p| p.peer_info().is_none())
    }

    pub fn client_capabilities(&self) -> Option<ClientCapabilities> {
        self.get()
            .and_then(|p| p.peer_info().map(|i| i.capabilities.clone()))
    }

    /// Sends `request` to the agent with `timeout`; when `cancel` fires first, tells the
    /// agent the request is cancelled and returns `Cancelled`.
    pub async fn request(
        &self,
        request: ServerRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<ClientResult, UpstreamError> {
        let peer = self.get().ok_or(UpstreamError::NotConnected)?;
        request_of(&peer, request, timeout, cancel).await
    }

    /// The agent's peer and a share of the relay budget for a notification of about
    /// `bytes` (see `budget`); `None` when no agent is connected or the budget is spent.
    pub fn for_relay(&self, bytes: usize) -> Option<(Peer<RoleServer>, OwnedSemaphorePermit)> {
        let peer = self.get()?;
        Some((peer, self.budget(bytes)?))
    }

    /// A share of the relay budget for a notification of about `bytes`, held until it is
    /// written; `None` (the notification is dropped, counted and logged) when the budget is
    /// spent, i.e. the agent is not keeping up.
    pub fn budget(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let units = (bytes / UNIT + 1).min(RELAY_BUDGET_UNITS as usize) as u32;
        match self.relays.clone().try_acquire_many_owned(units) {
            Ok(permit) => Some(permit),
            Err(_) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(10_000) {
                    tracing::warn!(
                        "the client is not reading fast enough: {n} notification(s) from servers dropped so far"
                    );
                }
                None
            }
        }
    }
}

fn map_err(e: ServiceError, timeout: Duration) -> UpstreamError {
    match e {
        ServiceError::Timeout { .. } => UpstreamError::Timeout(timeout),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => UpstreamError::Closed,
        ServiceError::McpError(err) => UpstreamError::Client(err),
        ServiceError::Cancelled { .. } => UpstreamError::Cancelled,
        other => UpstreamError::Other(other.to_string()),
    }
}

impl std::fmt::Debug for UpstreamLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamLink")
    }
}

/// Sends `request` to the agent of session `peer` with `timeout`; when `cancel` fires first,
/// tells the agent with `notifications/cancelled` and gives up.
pub async fn request_of(
    peer: &Peer<RoleServer>,
    request: ServerRequest,
    timeout: Duration,
    cancel: Option<&CancellationToken>,
) -> Result<ClientResult, UpstreamError> {
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| map_err(e, timeout))?;
    let id = handle.id.clone();
    let Some(ct) = cancel else {
        return handle
            .await_response()
            .await
            .map_err(|e| map_err(e, timeout));
    };
    tokio::select! {
        r = handle.await_response() => r.map_err(|e| map_err(e, timeout)),
        _ = ct.cancelled() => {
            // Bounded: an agent that does not read must not hold the relay's slot.
            let note = peer.notify_cancelled(CancelledNotificationParam::new(
                Some(id),
                Some("cancelled by the server that asked".into()),
            ));
            let _ = tokio::time::timeout(timeout, note).await;
            Err(UpstreamError::Cancelled)
        }
    }
}

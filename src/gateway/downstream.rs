//! One MCP client per downstream server: its `ClientHandler` (answers `roots/list` from the
//! server's current root set, relays progress, logging and list changes, hands sampling and
//! elicitation requests to `relay/`) and the request helper every
//! forward goes through (timeout on every request, cancellation, progress-token mapping).
//!
//! Never: send a request without a timeout (rmcp has none by default and a silent server would
//! hang the call forever, e.g. when it writes a line over rmcp's 16 MiB limit, which rmcp
//! drops silently); trust `RunningService::is_closed` for liveness (use
//! `peer.is_transport_closed`).
#![allow(deprecated)] // roots and logging are deprecated in rmcp (SEP-2577) but still used.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationCapability,
    FormElicitationCapability, Implementation, ListRootsResult, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestMetaObject,
    ResourceUpdatedNotificationParam, ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServiceError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::progress::ProgressMap;
use super::roots::RootsCell;
use super::upstream_link::UpstreamLink;

/// The protocol revision palisade speaks on both sides (see NOTES: on 2026-07-28 a server
/// cannot ask for roots outside a client request).
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Where a downstream progress notification goes: the agent's peer and its token.
#[derive(Clone)]
pub struct UpTarget {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// A downstream server told us one of its lists changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
}

/// The client side of one downstream connection.
pub struct DownstreamHandler {
    pub server: String,
    /// The server's current roots: `roots/list` always answers the newest version, whole
    /// (any cursor is ignored and no `nextCursor` is given: the set is small and a version
    /// change between pages would tear it).
    pub roots: Arc<RootsCell>,
    pub progress: Arc<ProgressMap<UpTarget>>,
    pub upstream: UpstreamLink,
    pub list_changed: mpsc::UnboundedSender<ListKind>,
    /// Sampling and elicitation: declared and relayed only as the server's `relay` allows.
    pub relay: super::relay::Relayer,
}

impl ClientHandler for DownstreamHandler {
    fn get_info(&self) -> ClientConfig {
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
        ClientConfig::new(
            caps,
            Implementation::new("palisade", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(PROTOCOL)
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let set = self.roots.current();
        self.roots.mark_fetched(set.version);
        tracing::debug!(server = %self.server, "roots/list answered with v{}", set.version);
        Ok(ListRootsResult::new(set.mcp_roots()))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay.sampling(params, &context).await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay.elicitation(params, &context).await
    }

    // No `on_progress`: progress never reaches rmcp; `tap.rs` forwards it in stream order.

    async fn on_logging_message(
        &self,
        mut params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        params.logger = Some(match params.logger.take() {
            Some(l) => format!("{}/{l}", self.server),
            None => self.server.clone(),
        });
        // Bounded: dropped when the agent is not keeping up (see `UpstreamLink::for_relay`).
        let size = serde_json::to_vec(&params.data).map_or(0, |v| v.len());
        if let Some((peer, _permit)) = self.upstream.for_relay(size) {
            let _ = peer.notify_logging_message(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some((peer, _permit)) = self.upstream.for_relay(params.uri.len()) {
            let _ = peer.notify_resource_updated(params).await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(ListKind::Tools);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(ListKind::Prompts);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(ListKind::Resources);
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

/// A live connection's request side. Cheap to clone (a peer and an `Arc`).
#[derive(Clone)]
pub struct Connection {
    pub server: String,
    pub peer: Peer<RoleClient>,
    pub progress: Arc<ProgressMap<UpTarget>>,
    /// The process's faults and end: a call the process left unanswered says why.
    pub faults: Arc<super::fault::ProcessFaults>,
}

/// How long a call cut short by its server's end waits for the supervisor to say why.
const END_REASON_WAIT: Duration = Duration::from_secs(2);

impl Connection {
    /// Sends one request with `timeout`; cancels it downstream when `cancel` fires; routes its
    /// progress to `progress_to` while it runs.
    pub async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
    ) -> Result<ServerResult, ForwardError> {
        self.request_with_meta(request, timeout, cancel, progress_to, None)
            .await
    }

    /// As `request`, adding `meta` to the request's `_meta`.
    pub async fn request_with_meta(
        &self,
        request: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
        progress_to: Option<UpTarget>,
        meta: Option<RequestMetaObject>,
    ) -> Result<ServerResult, ForwardError> {
        if self.peer.is_transport_closed() {
            return Err(self.stopped(self.server.clone()).await);
        }
        let mut options = PeerRequestOptions::with_timeout(timeout);
        if let Some(meta) = meta {
            options = options.with_meta(meta);
        }
        let handle = match self.peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => {
                return Err(match self.map_err(e, timeout) {
                    ForwardError::Closed { server } => self.stopped(server).await,
                    other => other,
                })
            }
        };
        let token = handle.progress_token.clone();
        let id = handle.id.clone();
        if let Some(target) = progress_to {
            for early in self.progress.register(token.clone(), target.clone()) {
                forward_progress(&target, early).await;
            }
        }
        let outcome = match cancel {
            Some(ct) => tokio::select! {
                r = handle.await_response() => r.map_err(|e| self.map_err(e, timeout)),
                _ = ct.cancelled() => {
                    let _ = self
                        .peer
                        .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                            Some(id),
                            Some("cancelled by the client".into()),
                        ))
                        .await;
                    Err(ForwardError::Cancelled)
                }
            },
            None => handle
                .await_response()
                .await
                .map_err(|e| self.map_err(e, timeout)),
        };
        self.progress.unregister(&token);
        match outcome {
            Err(ForwardError::Closed { server }) => Err(self.stopped(server).await),
            other => other,
        }
    }

    /// `Closed`, with the reason the process ended when the supervisor learns it in time.
    async fn stopped(&self, server: String) -> ForwardError {
        match self.faults.ended(END_REASON_WAIT).await {
            Some(reason) => ForwardError::Stopped { server, reason },
            None => ForwardError::Closed { server },
        }
    }

    fn closed(&self) -> ForwardError {
        ForwardError::Closed {
            server: self.server.clone(),
        }
    }

    fn map_err(&self, e: ServiceError, timeout: Duration) -> ForwardError {
        match e {
            ServiceError::Timeout { .. } => ForwardError::Timeout {
                server: self.server.clone(),
                timeout,
            },
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => self.closed(),
            ServiceError::McpError(err) => ForwardError::Server(err),
            ServiceError::Cancelled { .. } => ForwardError::Cancelled,
            other => ForwardError::Other {
                server: self.server.clone(),
                message: other.to_string(),
            },
        }
    }
}

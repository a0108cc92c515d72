//! What one downstream server sends us: the handler that answers `roots/list` from the
//! server's current root set, relays progress, logging, resource updates, list changes and
//! an extension's notifications, and hands sampling and elicitation requests to `relay/`.
//! The request side of the connection (every forward to the server) is `request.rs`.
//!
//! Never: forward a server's progress under its own token (the agent only knows its own), or
//! relay what it sends past the relay budget.
#![allow(deprecated)] // roots and logging are deprecated in rmcp (SEP-2577) but still used.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ElicitationCapability, ErrorCode, FormElicitationCapability,
    Implementation, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, RequestId, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::gateway::agent::link::{RawOut, UpstreamLink};
use crate::gateway::agent::request_stream::RequestStream;
use crate::gateway::server::note_line;
use crate::gateway::server::peer::Inbound;
use crate::gateway::server::progress::ProgressMap;
use crate::gateway::server::roots::RootsCell;

/// The revision palisade offers in `initialize`: to a server that does not speak 2026-07-28
/// (see `era.rs`), and to an agent that starts with the handshake.
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Where a downstream progress notification goes: the agent's peer and its token, and the
/// request's own stream when it has one apart from the peer's (`RequestStream`).
#[derive(Clone)]
pub struct UpTarget {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
    pub stream: Option<RequestStream>,
}

impl UpTarget {
    /// The target of a request that asked for progress under `token`.
    pub fn of(ctx: &RequestContext<RoleServer>, token: ProgressToken) -> UpTarget {
        UpTarget {
            peer: ctx.peer.clone(),
            token,
            stream: ctx.extensions.get::<RequestStream>().cloned(),
        }
    }
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
        self.relay_value("notifications/tasks/status", Some(v), size);
    }

    /// A server's log message. The typed view checks it is one; what is relayed is the
    /// server's text, with the logger made Palisade's.
    fn on_logging_message(&self, params: Option<&RawValue>) {
        // A 2026-07-28 agent gets log messages only for a request that set `logLevel`;
        // Palisade does not tie a server's log lines to a request, so it sends it none.
        let (Some(text), false) = (params, self.upstream.is_sessionless()) else {
            return;
        };
        if let Some(out) = self.upstream.raw_out() {
            let Ok(p) = serde_json::from_str::<LoggingMessageNotificationParam>(text.get()) else {
                return;
            };
            let own = serde_json::to_string(&self.logger(&p))
                .ok()
                .and_then(|l| note_line::with_member(text.get(), "logger", &l));
            if let Some(own) = own {
                return self.relay_line(&out, "notifications/message", &own);
            }
        }
        // Through rmcp's session: the text read once, checked through the value, and only
        // an object relayed (serde would also take the struct's fields as an array).
        let Ok(value) = serde_json::from_str::<Value>(text.get()) else {
            return;
        };
        let Ok(p) = LoggingMessageNotificationParam::deserialize(&value) else {
            return;
        };
        let Value::Object(mut fields) = value else {
            return;
        };
        let logger = self.logger(&p);
        fields.insert("logger".into(), Value::String(logger));
        self.relay_value(
            "notifications/message",
            Some(Value::Object(fields)),
            text.get().len(),
        );
    }

    /// The logger a server's log message goes under: the server's name first.
    fn logger(&self, p: &LoggingMessageNotificationParam) -> String {
        note_line::logger_of(&self.server, p.logger.as_deref())
    }

    /// A resource the agent subscribed to has changed: relayed as the server wrote it, once
    /// its typed view has checked it.
    fn on_resource_updated(&self, params: Option<&RawValue>) {
        const METHOD: &str = "notifications/resources/updated";
        let Some(text) = params else {
            return;
        };
        if let Some(out) = self.upstream.raw_out() {
            if serde_json::from_str::<ResourceUpdatedNotificationParam>(text.get()).is_ok() {
                self.relay_line(&out, METHOD, text.get());
            }
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(text.get()) else {
            return;
        };
        if ResourceUpdatedNotificationParam::deserialize(&value).is_ok() {
            self.relay_value(METHOD, Some(value), text.get().len());
        }
    }

    /// A notification of a method Palisade does not know, for the agent as the server sent
    /// it: as its own line to an agent on stdio or on its HTTP session's GET, else through
    /// rmcp (within the relay budget either way).
    fn on_extension_note(&self, method: &str, params: Option<&RawValue>) {
        if let Some(out) = self.upstream.raw_out() {
            return self.relay_line(&out, method, params.map_or("{}", RawValue::get));
        }
        let value = params.and_then(|p| serde_json::from_str::<Value>(p.get()).ok());
        self.relay_value(method, value, params.map_or(0, |p| p.get().len()));
    }

    /// Sends a notification to the agent through rmcp's session (an agent over HTTP that
    /// holds no GET: the session keeps it for the next one) as `params` are: a value read from the
    /// server's text keeps its members, unknown ones too, in the server's order (rmcp's typed
    /// models would drop the ones they do not know and put the rest in theirs); only a number that
    /// is not spelt as serde_json writes it (`1.50`, `1e3`) is spelt anew.
    ///
    /// Bounded: dropped when the agent is not keeping up (`UpstreamLink::for_relay`, sized
    /// by `size`). Sent on its own task: an agent that does not read must not stall this
    /// server's reader (the call results behind the notification would wait with it).
    fn relay_value(&self, method: &str, params: Option<Value>, size: usize) {
        if let Some((peer, permit)) = self.upstream.for_relay(size) {
            let note = rmcp::model::ServerNotification::CustomNotification(
                rmcp::model::CustomNotification::new(method.to_string(), params),
            );
            tokio::spawn(async move {
                let _ = peer.send_notification(note).await;
                drop(permit);
            });
        }
    }

    /// Writes a notification to the agent as `params` say (`out`, from
    /// `UpstreamLink::raw_out`), within the relay budget (as the typed path is bounded): to
    /// an agent on stdio on its own task; on an HTTP session's standalone stream queued at
    /// once, in the server's order, and dropped past the stream's backlog (an agent that
    /// does not read its GET must not stall this server's reader).
    fn relay_line(&self, out: &RawOut, method: &str, params: &str) {
        let note = note_line::line(method, params);
        let Some(permit) = self.upstream.budget(note.len()) else {
            return;
        };
        match out {
            RawOut::Stream(stream) => stream.offer_held(note, permit),
            RawOut::Lines(out) => {
                let out = out.clone();
                tokio::spawn(async move {
                    let _ = out.send(note).await;
                    drop(permit);
                });
            }
        }
    }
}

fn client_info() -> Value {
    serde_json::to_value(Implementation::new("palisade", env!("CARGO_PKG_VERSION")))
        .unwrap_or_default()
}

fn to_raw<T: serde::Serialize>(v: &T) -> Result<Box<RawValue>, ErrorData> {
    serde_json::value::to_raw_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

impl Inbound for DownstreamHandler {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        id: RequestId,
        cancel: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ErrorData>> + Send + 'a>> {
        Box::pin(async move {
            let ctx = crate::gateway::server::relay::FromServer { id, ct: cancel };
            match method {
                "roots/list" => to_raw(&self.list_roots()),
                "ping" => to_raw(&Map::new()),
                "sampling/createMessage" => self.relay.sampling(params, &ctx).await,
                "elicitation/create" => self.relay.elicitation(params, &ctx).await,
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
                "notifications/message" => self.on_logging_message(params),
                "notifications/resources/updated" => self.on_resource_updated(params),
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
            // To the request's own stream or an agent on stdio, as the server wrote it, the
            // agent's token put in.
            let own = || {
                let token = serde_json::to_string(&target.token).ok()?;
                let params = note_line::with_member(text, "progressToken", &token)?;
                Some(note_line::line("notifications/progress", &params))
            };
            if let Some(stream) = &target.stream {
                match own() {
                    Some(note) => stream.offer(note),
                    None => forward_progress(&target, params).await,
                }
                return;
            }
            match self.upstream.lines().zip(own()) {
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
    match &target.stream {
        Some(stream) => {
            if let Ok(params) = serde_json::to_string(&params) {
                stream.offer(note_line::line("notifications/progress", &params));
            }
        }
        None => {
            let _ = target.peer.notify_progress(params).await;
        }
    }
}

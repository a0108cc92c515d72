//! The MCP server the agent talks to: an rmcp `ServerHandler` over the aggregated catalog.
//! Tool calls go through the pipeline (`call/pipeline.rs`); prompts, resources, completions,
//! subscriptions and log levels are routed by the catalog and forwarded with the same
//! timeout, cancellation and progress mapping. The paths a `prompts/get` argument or a
//! resource URI (of any scheme) names are checked against the roots first, as a tool call's
//! path arguments are. Every routed `prompts/get`,
//! `resources/read`, `resources/(un)subscribe` and `completion/complete` writes one audit
//! record (its `kind` names the method) before the answer goes upstream, and fails closed
//! when the audit log cannot be written, as tool calls do.
//!
//! Never: answer from a cache of a downstream's results (lists come from the live catalog),
//! or block: every handler works on an `Arc` snapshot and awaits only the downstream.
//!
//! Split by job: this module is the handler itself (capabilities, lists, tool calls,
//! listen streams, log levels); `routed` forwards and audits the routed non-tool requests;
//! `checks` judges the paths those requests name against the roots.
#![allow(deprecated)] // logging (set_level) is deprecated in rmcp (SEP-2577) but still used.

mod checks;
mod routed;

pub use routed::READ_RAW;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientRequest,
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, ServerNotification, SetLevelRequest, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gateway::call::pipeline;
use crate::gateway::server::handler::PROTOCOL;
use crate::gateway::state::Shared;

/// The agent-facing handler. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    pub shared: Arc<Shared>,
    /// Over HTTP: each initialized session's agent peer, for the front's fast path.
    pub sessions: Option<Arc<crate::gateway::agent::http::sessions::SessionPeers>>,
}

/// The params of a `tasks/*` request naming `task_id`.
fn task_params(task_id: &str) -> Result<Box<RawValue>, ErrorData> {
    serde_json::value::to_raw_value(&serde_json::json!({ "taskId": task_id }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// A typed view of a forwarded result; an error naming the method when it does not fit.
/// A typed view of a server's result for rmcp to send. A 2025-11-25 server's result has no
/// `resultType`; the view gets `"complete"`, which 2026-07-28 requires and rmcp strips again
/// for older sessions.
fn typed<T: serde::de::DeserializeOwned>(what: &str, raw: &RawValue) -> Result<T, ErrorData> {
    let unexpected = |e: serde_json::Error| {
        ErrorData::internal_error(
            format!("a downstream server answered {what} with an unexpected result ({e})"),
            None,
        )
    };
    let mut v: Value = serde_json::from_str(raw.get()).map_err(unexpected)?;
    // Only the discriminator: rmcp adds the cache hints itself, for 2026-07-28 peers only.
    if let Value::Object(obj) = &mut v {
        crate::gateway::agent::versions::mark_complete(obj);
    }
    serde_json::from_value(v).map_err(unexpected)
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_tools()
            .enable_prompts_list_changed()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tool_list_changed()
            .build();
        // The tasks extension, bridged, when a running server takes task-augmented calls.
        let takes = self.shared.tasks_capability();
        let mut caps = caps;
        if crate::gateway::call::tasks::takes_tool_tasks(takes.as_ref()) {
            caps.extensions
                .get_or_insert_with(rmcp::model::ExtensionCapabilities::new)
                .insert(
                    crate::gateway::agent::tasks_v2::EXTENSION.into(),
                    Default::default(),
                );
        }
        let info = InitializeResult::new(caps).with_protocol_version(PROTOCOL);
        // One server that keeps its own names (`serve -- CMD`): Palisade stands in for it
        // unseen, so the agent meets that server, its name and its instructions (an agent
        // reads them as guidance on the server's tools). Not its instructions under a pins
        // review: the review covers tool definitions, and instructions are server-written
        // text of the same kind that it could then change unreviewed.
        if let [slot] = &self.shared.slots[..] {
            if slot.filters.unprefixed {
                let reviewed = self
                    .shared
                    .pins
                    .as_ref()
                    .is_some_and(|p| p.mode != crate::pins::Mode::Off);
                return match slot.snapshot().live {
                    Some(live) => {
                        let mut info = info.with_server_info(live.conn.info.server_info.clone());
                        info.instructions = match reviewed {
                            false => live.conn.info.instructions.clone(),
                            true => Some(
                                "Palisade gateway: the server keeps its own names; its \
                                 instructions are not relayed under tool pinning."
                                    .into(),
                            ),
                        };
                        info
                    }
                    // Not up yet (past `readyTimeout`): Palisade says who answers.
                    None => info
                        .with_server_info(Implementation::new(
                            "palisade",
                            env!("CARGO_PKG_VERSION"),
                        ))
                        .with_instructions(
                            "Palisade gateway: the server keeps its own names; it runs in its \
                             own sandbox and every call is policed and audited.",
                        ),
                };
            }
        }
        info.with_server_info(Implementation::new("palisade", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Palisade gateway: tools are named SERVER__TOOL, prompts SERVER__PROMPT; \
                 every server runs in its own sandbox and every call is policed and audited.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    /// The tasks extension's requests over the HTTP front (rmcp checks that the agent declared
    /// the extension and that `get_info` offers it), answered from the servers' 2025-11-25
    /// tasks as over stdio.
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let params = task_params(&request.task_id)?;
        let task = crate::gateway::agent::task_bridge::answer(
            &self.shared,
            "tasks/get",
            Some(&params),
            &context,
        )
        .await?;
        serde_json::from_value(task).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let params = task_params(&request.task_id)?;
        crate::gateway::agent::task_bridge::answer(
            &self.shared,
            "tasks/cancel",
            Some(&params),
            &context,
        )
        .await
        .map(|_| ())
    }

    async fn update_task(
        &self,
        _request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(crate::gateway::agent::task_bridge::not_updatable())
    }

    /// A 2026-07-28 agent's `subscriptions/listen` (stdio and HTTP): the three list kinds are
    /// honoured (rmcp acknowledges the ones asked for and tags every frame with the stream's
    /// id); resource updates are not.
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build(),
        )
    }

    /// One listen stream: each catalog change of a kind it accepted, until the agent cancels
    /// it or the gateway shuts down (then the final result ends it).
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        use tokio::sync::broadcast::error::RecvError;
        let mut events = self.shared.list_events.subscribe();
        loop {
            let changed = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                _ = self.shared.shutdown.cancelled() => return Ok(()),
                e = events.recv() => match e {
                    Ok(c) => c,
                    // Fell behind: every kind may have changed (listing again is safe).
                    Err(RecvError::Lagged(_)) => crate::gateway::state::Changed {
                        tools: true,
                        prompts: true,
                        resources: true,
                    },
                    Err(RecvError::Closed) => return Ok(()),
                },
            };
            let notes = [
                (
                    changed.tools,
                    ServerNotification::ToolListChangedNotification(Default::default()),
                ),
                (
                    changed.prompts,
                    ServerNotification::PromptListChangedNotification(Default::default()),
                ),
                (
                    changed.resources,
                    ServerNotification::ResourceListChangedNotification(Default::default()),
                ),
            ];
            for (_, note) in notes.into_iter().filter(|(hit, _)| *hit) {
                match context.sink().send(note).await {
                    Ok(()) => {}
                    // A kind this stream did not ask for.
                    Err(rmcp::service::SubscriptionSendError::NotificationNotAccepted(_)) => {}
                    Err(_) => return Ok(()),
                }
            }
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.shared.upstream.set(context.peer.clone());
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(session) = self.sessions.as_ref().and_then(|s| s.register(&context)) {
            self.shared
                .upstream
                .set_session(context.peer.clone(), session);
        }
        self.shared.upstream_roots.refresh(&context.peer).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.shared.upstream_roots.refresh(&context.peer).await;
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.shared.catalog().tools.clone(),
        ))
    }

    /// `palisade/oversized` stands in for a request the client sent over the message size
    /// limit (see `frame.rs`): its id gets the error. Other unknown methods go to the server
    /// that keeps its own names, when there is one (`routed::pass_through`); else they get
    /// "method not found", as rmcp answers them (there is no server to route them to).
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if request.method == crate::gateway::agent::frame::OVERSIZED_METHOD {
            let params = request.params.unwrap_or_default();
            return Err(ErrorData::invalid_request(
                format!(
                    "the request was {} bytes or more, over the {}-byte limit of one message; \
                     it was dropped unread",
                    params["bytes"], params["limit"]
                ),
                None,
            ));
        }
        // Over HTTP (the stdio front relays these itself): rmcp decoded the params.
        let params = match request.params.as_ref().map(serde_json::value::to_raw_value) {
            Some(Err(e)) => return Err(ErrorData::invalid_params(e.to_string(), None)),
            Some(Ok(p)) => Some(p),
            None => None,
        };
        let raw = self
            .pass_through(&request.method, params.as_deref(), &context)
            .await?;
        serde_json::from_str(raw.get())
            .map(rmcp::model::CustomResult)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    /// A notification Palisade does not know goes to the server that keeps its own names,
    /// as the agent sent it (see `on_custom_request`); with no such server it is dropped.
    async fn on_custom_notification(
        &self,
        notification: rmcp::model::CustomNotification,
        _context: NotificationContext<RoleServer>,
    ) {
        let Some(slot) = self.shared.slots.iter().find(|s| s.filters.unprefixed) else {
            return;
        };
        if let Some(live) = slot.snapshot().live {
            live.conn
                .peer
                .notify(&notification.method, notification.params.as_ref())
                .await;
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Counted while it runs: shutdown waits for it so that its audit record is written.
        let _in_flight = self.shared.calls.token();
        // (The HTTP front's way in; stdio's calls are read by `front/`.) A 2026-07-28 call
        // is driven in rounds, so an approval or a server's question can be asked of its
        // agent as an input-required result, as over stdio.
        let mut as_task = false;
        let mut result = if crate::gateway::agent::versions::is_modern(&context.meta) {
            // A task-only tool for an agent with the tasks extension (see `tasks_v2.rs`).
            let mut extra = Map::new();
            as_task = crate::gateway::agent::tasks_v2::declared(&context.meta)
                && crate::gateway::agent::task_bridge::requires_task(&self.shared, &request.name);
            if as_task {
                extra.insert("task".into(), Value::Object(Map::new()));
            }
            crate::gateway::agent::mrtr::drive::call(
                self.shared.clone(),
                request,
                crate::gateway::call::as_sent::AsSent::fields(extra),
                context,
            )
            .await?
        } else {
            let raw =
                pipeline::call_tool(&self.shared, request, &Default::default(), context).await?;
            crate::gateway::call::answer::value_of(&raw)?
        };
        let unexpected = |e: serde_json::Error| ErrorData::internal_error(e.to_string(), None);
        if as_task {
            if let Some(task) = crate::gateway::agent::tasks_v2::created(&result) {
                return serde_json::from_value(task)
                    .map(CallToolResponse::Task)
                    .map_err(unexpected);
            }
        }
        if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
            return serde_json::from_value(result)
                .map(CallToolResponse::InputRequired)
                .map_err(unexpected);
        }
        if let Value::Object(obj) = &mut result {
            crate::gateway::agent::versions::mark_complete(obj);
        }
        serde_json::from_value(result)
            .map(CallToolResponse::Complete)
            .map_err(unexpected)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(
            self.shared.catalog().prompts.clone(),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let raw = self.get_prompt_raw(request, None, &context).await?;
        typed("prompts/get", &raw).map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            self.shared.catalog().resources.clone(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            self.shared.catalog().templates.clone(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let raw = self.read_resource_raw(request, None, &context).await?;
        typed("resources/read", &raw).map(ReadResourceResponse::Complete)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_raw(request, None, &context)
            .await
            .map(|_| ())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.unsubscribe_raw(request, None, &context)
            .await
            .map(|_| ())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let raw = self.complete_raw(request, None, &context).await?;
        typed("completion/complete", &raw)
    }

    /// Sets the level on every running server that logs; the first error is reported after
    /// all have been tried.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut first_err = None;
        for (idx, slot) in self.shared.slots.iter().enumerate() {
            let Some(live) = slot.snapshot().live else {
                continue;
            };
            let logs = live.conn.info.capabilities.logging.is_some();
            if !logs {
                continue;
            }
            let req = ClientRequest::SetLevelRequest(SetLevelRequest::new(request.clone()));
            if let Err(e) = self
                .forward(idx, routed::Outgoing::typed(req), &context)
                .await
            {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

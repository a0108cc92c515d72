//! The service the agent's connection runs on stdio: rmcp's session around `Upstream`
//! (`service/`), except for the answers Palisade relays rather than makes.
//!
//! Why apart from `Upstream`: rmcp's typed models drop what they do not know (a tool's
//! `execution`) and re-spell numbers, so the lists, prompts, resource reads, completions and
//! tool results that reach rmcp's session go to the agent as the servers' own JSON (names
//! rewritten) through `CustomResult`, and only what Palisade itself answers is typed.
//!
//! Never: re-encode a relayed result through a typed model.

use std::borrow::Cow;

use rmcp::model::{ClientRequest, CustomResult, ProtocolVersion, ServerConfig, ServerResult};
use rmcp::service::{NotificationContext as NoteCtx, RequestContext, Service};
use rmcp::{ErrorData, RoleServer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::gateway::agent::service::Upstream;
use crate::gateway::call::pipeline;

/// The service the agent's connection runs: rmcp's session machinery (handshake, framing,
/// ids, cancellation) around `Upstream`, except for the answers Palisade relays rather than
/// makes: the lists, tool results, prompts, resource reads and completions go to the agent as
/// the servers' own JSON (names rewritten), never re-encoded through rmcp's typed models,
/// which drop what they do not know (a tool's `execution`) and re-spell numbers.
#[derive(Clone)]
pub struct RelayingService(pub Upstream);

fn relayed(raw: &RawValue) -> Result<Value, ErrorData> {
    serde_json::from_str::<Value>(raw.get())
        .map_err(|e| ErrorData::internal_error(format!("unreadable result: {e}"), None))
}

impl RelayingService {
    /// The answer to a request Palisade relays, or `None` when `Upstream` answers it.
    async fn relay(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<Result<Value, ErrorData>, (ClientRequest, RequestContext<RoleServer>)> {
        let up = &self.0;
        Ok(match request {
            ClientRequest::ListToolsRequest(_)
            | ClientRequest::ListPromptsRequest(_)
            | ClientRequest::ListResourcesRequest(_)
            | ClientRequest::ListResourceTemplatesRequest(_) => {
                let method = request.method();
                // rmcp's session takes the answer as a value of its own.
                let listed = up.shared.catalog().listed(method).map(|l| Value::clone(&l));
                listed.ok_or_else(|| {
                    ErrorData::internal_error(format!("`{method}` is not a list"), None)
                })
            }
            ClientRequest::CallToolRequest(r) => {
                // Counted while it runs: shutdown waits for it so its audit record is written.
                let _in_flight = up.shared.calls.token();
                if !super::versions::is_modern(&context.meta) {
                    return Ok(pipeline::call_tool(
                        &up.shared,
                        r.params,
                        &Default::default(),
                        context,
                    )
                    .await
                    .and_then(|raw| crate::gateway::call::answer::value_of(&raw)));
                }
                // A 2026-07-28 call that opens the session comes this way, not by the front.
                super::mrtr::drive::call(up.shared.clone(), r.params, Default::default(), context)
                    .await
            }
            ClientRequest::GetPromptRequest(r) => up
                .get_prompt_raw(r.params, None, &context)
                .await
                .and_then(|raw| relayed(&raw)),
            ClientRequest::ReadResourceRequest(r) => up
                .read_resource_raw(r.params, None, &context)
                .await
                .and_then(|raw| relayed(&raw)),
            ClientRequest::CompleteRequest(r) => up
                .complete_raw(r.params, None, &context)
                .await
                .and_then(|raw| relayed(&raw)),
            other => return Err((other, context)),
        })
    }
}

impl Service<RoleServer> for RelayingService {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let up = &self.0;
        // A 2026-07-28 session starts with no `initialize`: its first request brings the
        // agent's side of the connection.
        if up.shared.upstream.get().is_none() {
            up.shared.upstream.set(context.peer.clone());
        }
        let method = request.method().to_string();
        let modern = crate::gateway::agent::versions::is_modern(&context.meta);
        if modern {
            crate::gateway::agent::versions::check_envelope(&context.meta)?;
        }
        match self.relay(request, context).await {
            Ok(answer) => {
                let mut v = answer?;
                if modern {
                    crate::gateway::agent::versions::stamp_result(&method, &mut v);
                }
                Ok(ServerResult::CustomResult(CustomResult(v)))
            }
            Err((other, context)) => {
                <Upstream as Service<RoleServer>>::handle_request(up, other, context).await
            }
        }
    }

    async fn handle_notification(
        &self,
        notification: rmcp::model::ClientNotification,
        context: NoteCtx<RoleServer>,
    ) -> Result<(), ErrorData> {
        <Upstream as Service<RoleServer>>::handle_notification(&self.0, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        <Upstream as Service<RoleServer>>::get_info(&self.0)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        <Upstream as Service<RoleServer>>::supported_protocol_versions(&self.0)
    }
}

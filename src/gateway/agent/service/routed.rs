//! The routed non-tool requests (`prompts/get`, `resources/read`, `completion/complete`,
//! `resources/(un)subscribe`, `logging/setLevel`): forwarded to the server the catalog names
//! with the call timeout, the agent's cancellation and progress mapping, and audited once
//! before the answer goes upstream. Apart from the handler so the forward-and-audit path
//! reads on its own.
//!
//! Never: send an answer whose audit record could not be written (fail closed).

use std::time::Instant;

use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, GetPromptRequest,
    GetPromptRequestParams, ReadResourceRequest, ReadResourceRequestParams, Reference,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::value::RawValue;

use crate::audit::RecordKind;
use crate::gateway::call::pipeline::forwarded_meta;
use crate::gateway::server::handler::{ForwardError, UpTarget};

use super::Upstream;

impl Upstream {
    /// Forwards a non-tool request to server `idx` with the call timeout, the agent's
    /// cancellation and progress mapping.
    pub(super) async fn forward(
        &self,
        idx: usize,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let slot = &self.shared.slots[idx];
        // Not forwarded while the server's roots are widening (it is being relaunched).
        let _permit = slot.gate.read().await;
        let snap = slot.snapshot();
        let Some(live) = snap.live else {
            return Err(crate::gateway::call::route::not_running(
                &slot.name,
                &snap.status,
            ));
        };
        let progress_to = ctx.meta.get_progress_token().map(|token| UpTarget {
            peer: ctx.peer.clone(),
            token,
        });
        live.conn
            .request_with(
                request,
                self.shared.limits.call_timeout,
                Some(&ctx.ct),
                progress_to,
                forwarded_meta(ctx),
                &serde_json::Map::new(),
            )
            .await
            .map_err(|e| match e {
                ForwardError::Server(e) => e,
                other => ErrorData::internal_error(other.to_string(), None),
            })
    }

    /// Forwards a routed non-tool request and writes its one audit record before the answer
    /// goes upstream; an audit failure replaces the answer with an error (fail closed).
    pub(super) async fn forward_audited(
        &self,
        idx: usize,
        request: ClientRequest,
        audit: Audited,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let started = Instant::now();
        let answer = self.forward(idx, request, ctx).await;
        let slot = &self.shared.slots[idx];
        let snap = slot.snapshot();
        let result = match &answer {
            Ok(_) => crate::gateway::stages::CallOutcome::Success,
            Err(e) => crate::gateway::stages::CallOutcome::Error {
                error: e.message.to_string(),
            },
        };
        let record = crate::gateway::stages::CallRecord {
            kind: Some(audit.kind),
            duration_ms: started.elapsed().as_millis() as u64,
            // Readers that know only tool calls still see which method it was.
            ..crate::gateway::stages::CallRecord::new(
                &slot.name,
                audit.kind.method(),
                crate::gateway::stages::request_id_string(&ctx.id),
                audit.arguments,
                crate::gateway::stages::PolicyVerdict::allow(
                    "not evaluated by the rules (they govern tool calls); the paths it names were checked against the roots",
                ),
                result,
            )
            .enforced(snap.enforcement)
        };
        if let Err(e) = self.shared.stages.audit.record(&record) {
            tracing::error!(server = %slot.name, method = audit.kind.method(), "audit write failed: {e}");
            return Err(audit_failed(&e));
        }
        answer
    }

    /// `prompts/get`, routed, checked and audited; the result as the server sent it.
    pub(in crate::gateway::agent) async fn get_prompt_raw(
        &self,
        mut request: GetPromptRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let route = self
            .shared
            .catalog()
            .prompt(&request.name)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
            .clone();
        request.name = route.name;
        self.check_prompt_arguments(route.server, &request, context)?;
        request.meta = None;
        let audit = Audited::new(
            RecordKind::PromptsGet,
            serde_json::json!({"name": request.name, "arguments": request.arguments}),
        );
        let req = ClientRequest::GetPromptRequest(GetPromptRequest::new(request));
        self.forward_audited(route.server, req, audit, context)
            .await
    }

    /// `resources/read`, routed, checked and audited; the result as the server sent it.
    pub(in crate::gateway::agent) async fn read_resource_raw(
        &self,
        mut request: ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let idx = self.resource_owner(&request.uri)?;
        self.check_resource_uri(idx, RecordKind::ResourcesRead, &request.uri, context)?;
        request.meta = None;
        let audit = Audited::new(
            RecordKind::ResourcesRead,
            serde_json::json!({"uri": request.uri}),
        );
        let req = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request));
        self.forward_audited(idx, req, audit, context).await
    }

    /// `completion/complete`, routed and audited; the result as the server sent it.
    pub(in crate::gateway::agent) async fn complete_raw(
        &self,
        mut request: CompleteRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let idx = match &mut request.r#ref {
            Reference::Prompt(p) => {
                let route = self
                    .shared
                    .catalog()
                    .prompt(&p.name)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
                    .clone();
                p.name = route.name;
                route.server
            }
            Reference::Resource(r) => self.resource_owner(&r.uri)?,
            _ => {
                return Err(ErrorData::invalid_params(
                    "unsupported completion reference",
                    None,
                ))
            }
        };
        request.meta = None;
        let audit = Audited::new(
            RecordKind::Completion,
            serde_json::json!({"ref": request.r#ref, "argument": request.argument}),
        );
        let req = ClientRequest::CompleteRequest(CompleteRequest::new(request));
        self.forward_audited(idx, req, audit, context).await
    }

    pub(super) fn resource_owner(&self, uri: &str) -> Result<usize, ErrorData> {
        self.shared
            .catalog()
            .resource(uri)
            .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))
    }
}

/// What the audit record of a non-tool request says about it.
pub(super) struct Audited {
    kind: RecordKind,
    arguments: serde_json::Map<String, serde_json::Value>,
}

impl Audited {
    pub(super) fn new(kind: RecordKind, arguments: serde_json::Value) -> Audited {
        let arguments = match arguments {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        Audited { kind, arguments }
    }
}

pub(super) fn audit_failed(e: &crate::gateway::stages::AuditError) -> ErrorData {
    ErrorData::internal_error(
        format!("the request was not completed because the audit log could not be written ({e}); palisade fails closed"),
        None,
    )
}

//! The routed non-tool requests (`prompts/get`, `resources/read`, `completion/complete`,
//! `resources/(un)subscribe`, `logging/setLevel`): forwarded to the server the catalog names
//! with the call timeout, the agent's cancellation and progress mapping, and audited once
//! before the answer goes upstream. Apart from the handler so the forward-and-audit path
//! reads on its own.
//!
//! Over stdio, and on the HTTP front's fast path, the same requests are read from the agent's
//! own text (`answer_read`), and their params go to the server as the agent wrote them
//! (`call::as_sent`): unknown fields, number spellings and key order kept, only a prompt's
//! name and the progress token rewritten. What reaches the handler through rmcp's session
//! (HTTP's other requests, a 2026-07-28 agent's) rmcp has decoded already: it goes
//! re-encoded from the typed view. A method Palisade does not know goes to the server that
//! keeps its own names, if there is one (`pass_through`).
//!
//! Never: send an answer whose audit record could not be written (fail closed), or forward
//! text whose meaning differs from what the checks read (`as_sent::checked`).

use std::time::Instant;

use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, GetPromptRequest,
    GetPromptRequestParams, ReadResourceRequest, ReadResourceRequestParams, Reference,
    SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::audit::RecordKind;
use crate::gateway::call::as_sent::{self, Named, Rename};
use crate::gateway::call::pipeline::forwarded_meta;
use crate::gateway::raw_json::RawJson;
use crate::gateway::server::handler::UpTarget;
use crate::gateway::server::request::{ForwardError, OnBehalf};

use super::Upstream;

/// The routed requests the fronts read from the agent's own text (`answer_read`).
pub const READ_RAW: [&str; 5] = [
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
];

/// A routed request on its way: rmcp's typed view, and the agent's own text when it may go
/// as written (`as_sent::checked`), with the target's name for the server.
pub(super) struct Outgoing<'a> {
    request: ClientRequest,
    sent: Option<(&'a RawValue, Rename<'a>)>,
}

impl<'a> Outgoing<'a> {
    /// Re-encoded from the typed view.
    pub(super) fn typed(request: ClientRequest) -> Outgoing<'a> {
        Outgoing {
            request,
            sent: None,
        }
    }

    fn new(request: ClientRequest, text: Option<&'a RawValue>, rename: Rename<'a>) -> Self {
        Outgoing {
            request,
            sent: text.map(|t| (t, rename)),
        }
    }
}

impl Upstream {
    /// Forwards a non-tool request to server `idx` with the call timeout, the agent's
    /// cancellation and progress mapping.
    pub(super) async fn forward(
        &self,
        idx: usize,
        out: Outgoing<'_>,
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
        let progress_to = ctx
            .meta
            .get_progress_token()
            .map(|token| UpTarget::of(ctx, token));
        let timeout = self.shared.limits.call_timeout;
        let answer = match out.sent {
            Some((text, rename)) => {
                live.conn
                    .request_as_sent(
                        out.request.method(),
                        text.get(),
                        rename,
                        timeout,
                        OnBehalf::of(ctx).progress_to(progress_to),
                    )
                    .await
            }
            None => {
                live.conn
                    .request_raw(
                        out.request,
                        timeout,
                        OnBehalf::of(ctx).progress_to(progress_to),
                        forwarded_meta(ctx),
                        &Map::new(),
                    )
                    .await
            }
        };
        answer.map(RawJson::into_raw_value).map_err(|e| match e {
            ForwardError::Server(e) => e,
            other => ErrorData::internal_error(other.to_string(), None),
        })
    }

    /// Forwards a routed non-tool request and writes its one audit record before the answer
    /// goes upstream; an audit failure replaces the answer with an error (fail closed).
    pub(super) async fn forward_audited(
        &self,
        idx: usize,
        out: Outgoing<'_>,
        audit: Audited,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let started = Instant::now();
        let answer = self.forward(idx, out, ctx).await;
        let slot = &self.shared.slots[idx];
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
                slot.record_server(),
                audit.name.as_deref().unwrap_or(audit.kind.method()),
                crate::gateway::stages::request_id_string(&ctx.id),
                audit.arguments,
                crate::gateway::stages::PolicyVerdict::allow(match audit.kind {
                    RecordKind::Extension => "not evaluated by the rules (they govern tool calls): a method Palisade does not know, passed to the server that keeps its own names",
                    _ => "not evaluated by the rules (they govern tool calls); the paths it names were checked against the roots",
                }),
                result,
            )
        };
        if let Err(e) = self.shared.stages.audit.record(&record) {
            tracing::error!(server = %slot.name, method = audit.kind.method(), "audit write failed: {e}");
            return Err(audit_failed(&e));
        }
        answer
    }

    /// `prompts/get`, routed, checked and audited; the result as the server sent it.
    /// `sent`: the agent's text of the params, when it may go as written.
    pub(in crate::gateway::agent) async fn get_prompt_raw(
        &self,
        mut request: GetPromptRequestParams,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let route = self
            .shared
            .catalog()
            .prompt(&request.name)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
            .clone();
        request.name = route.name.clone();
        self.check_prompt_arguments(route.server, &request, context)?;
        request.meta = None;
        let audit = Audited::new(
            RecordKind::PromptsGet,
            serde_json::json!({"name": request.name, "arguments": request.arguments}),
        );
        let req = ClientRequest::GetPromptRequest(GetPromptRequest::new(request));
        let out = Outgoing::new(req, sent, Rename::Top(&route.name));
        self.forward_audited(route.server, out, audit, context)
            .await
    }

    /// `resources/read`, routed, checked and audited; the result as the server sent it.
    pub(in crate::gateway::agent) async fn read_resource_raw(
        &self,
        mut request: ReadResourceRequestParams,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        request.meta = None;
        let uri = request.uri.clone();
        let req = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request));
        self.about_resource(RecordKind::ResourcesRead, &uri, req, sent, context)
            .await
    }

    /// `resources/subscribe`, routed, checked and audited; the server's answer as it sent it.
    pub(super) async fn subscribe_raw(
        &self,
        mut request: SubscribeRequestParams,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        request.meta = None;
        let uri = request.uri.clone();
        let req = ClientRequest::SubscribeRequest(SubscribeRequest::new(request));
        self.about_resource(RecordKind::ResourcesSubscribe, &uri, req, sent, context)
            .await
    }

    /// `resources/unsubscribe`, routed and audited (not checked: it ends access).
    pub(super) async fn unsubscribe_raw(
        &self,
        mut request: UnsubscribeRequestParams,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        request.meta = None;
        let uri = request.uri.clone();
        let req = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(request));
        self.about_resource(RecordKind::ResourcesUnsubscribe, &uri, req, sent, context)
            .await
    }

    /// A request about one resource: routed by its URI, the paths the URI names checked
    /// against the roots (but for unsubscribing, which only ends access), forwarded and
    /// audited once; the server's answer as it sent it.
    async fn about_resource(
        &self,
        kind: RecordKind,
        uri: &str,
        req: ClientRequest,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let idx = self.resource_owner(uri)?;
        if kind != RecordKind::ResourcesUnsubscribe {
            self.check_resource_uri(idx, kind, uri, context)?;
        }
        let audit = Audited::new(kind, serde_json::json!({ "uri": uri }));
        let out = Outgoing::new(req, sent, Rename::Nothing);
        self.forward_audited(idx, out, audit, context).await
    }

    /// `completion/complete`, routed and audited; the result as the server sent it.
    pub(in crate::gateway::agent) async fn complete_raw(
        &self,
        mut request: CompleteRequestParams,
        sent: Option<&RawValue>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let mut prompt = None;
        let idx = match &mut request.r#ref {
            Reference::Prompt(p) => {
                let route = self
                    .shared
                    .catalog()
                    .prompt(&p.name)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
                    .clone();
                p.name = route.name.clone();
                prompt = Some(route.name);
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
        let rename = prompt.as_deref().map_or(Rename::Nothing, Rename::InRef);
        let out = Outgoing::new(req, sent, rename);
        self.forward_audited(idx, out, audit, context).await
    }

    /// One of `READ_RAW`, from the params as the agent wrote them: decoded for the checks
    /// and the audit, forwarded as written when `as_sent::checked` allows.
    pub(in crate::gateway::agent) async fn answer_read(
        &self,
        method: &str,
        params: Option<&RawValue>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let invalid =
            |e: serde_json::Error| ErrorData::invalid_params(format!("{method}: {e}"), None);
        let raw = params.ok_or_else(|| {
            ErrorData::invalid_params(format!("{method}: params are missing"), None)
        })?;
        let all: Map<String, Value> = serde_json::from_str(raw.get()).map_err(invalid)?;
        let members = as_sent::members_of(&all);
        let sent = |named| as_sent::checked(raw, members, named);
        let all = Value::Object(all);
        match method {
            "prompts/get" => {
                let p = serde_json::from_value(all).map_err(invalid)?;
                self.get_prompt_raw(p, sent(Named::Top).as_deref(), ctx)
                    .await
            }
            "resources/read" => {
                let p = serde_json::from_value(all).map_err(invalid)?;
                self.read_resource_raw(p, sent(Named::Nowhere).as_deref(), ctx)
                    .await
            }
            "resources/subscribe" => {
                let p = serde_json::from_value(all).map_err(invalid)?;
                self.subscribe_raw(p, sent(Named::Nowhere).as_deref(), ctx)
                    .await
            }
            "resources/unsubscribe" => {
                let p = serde_json::from_value(all).map_err(invalid)?;
                self.unsubscribe_raw(p, sent(Named::Nowhere).as_deref(), ctx)
                    .await
            }
            "completion/complete" => {
                let p: CompleteRequestParams = serde_json::from_value(all).map_err(invalid)?;
                let named = match p.r#ref {
                    Reference::Prompt(_) => Named::InRef,
                    _ => Named::Nowhere,
                };
                self.complete_raw(p, sent(named).as_deref(), ctx).await
            }
            _ => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                method.to_string(),
                None,
            )),
        }
    }

    /// A request of a method Palisade does not know (an extension's), for the server that
    /// keeps its own names (`prefix: false`, or `serve -- CMD`): the agent sees that server as
    /// itself, so what it does not police goes to it as sent (`params` forwarded as written
    /// when `as_sent::checked` allows; the agent's progress token and envelope are not the
    /// server's), audited once (fail closed) with the method as `toolName`. Its answer goes
    /// back as the server sent it. With no such server, "method not found".
    pub(crate) async fn pass_through(
        &self,
        method: &str,
        params: Option<&RawValue>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Box<RawValue>, ErrorData> {
        let Some(idx) = self.shared.slots.iter().position(|s| s.filters.unprefixed) else {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                method.to_string(),
                None,
            ));
        };
        if is_mcp_method(method) {
            // rmcp reads a request it cannot parse as its method's as an extension's: relayed,
            // a `tools/call` with one mistyped field would skip the policy.
            return Err(ErrorData::invalid_params(
                format!("{method}: the params are not what this method takes"),
                None,
            ));
        }
        let not_object =
            || ErrorData::invalid_params(format!("{method}: params must be an object"), None);
        let decoded: Map<String, Value> = match params {
            None => Map::new(),
            Some(p) => match serde_json::from_str::<Value>(p.get()) {
                Ok(Value::Object(m)) => m,
                _ => return Err(not_object()),
            },
        };
        let text = params.and_then(|p| {
            crate::gateway::call::as_sent::checked(
                p,
                crate::gateway::call::as_sent::members_of(&decoded),
                Named::Nowhere,
            )
        });
        let mut arguments = decoded;
        // Palisade's token goes with a mapped one; the agent's is not the server's.
        if let Some(Value::Object(meta)) = arguments.get_mut("_meta") {
            meta.remove("progressToken");
            crate::gateway::agent::versions::strip_envelope(meta);
        }
        let request = rmcp::model::CustomRequest::new(
            method.to_string(),
            params.map(|_| Value::Object(arguments.clone())),
        );
        let audit = Audited {
            kind: RecordKind::Extension,
            arguments,
            name: Some(method.to_string()),
        };
        let out = Outgoing::new(
            ClientRequest::CustomRequest(request),
            text.as_deref(),
            Rename::Nothing,
        );
        self.forward_audited(idx, out, audit, ctx).await
    }

    pub(super) fn resource_owner(&self, uri: &str) -> Result<usize, ErrorData> {
        self.shared
            .catalog()
            .resource(uri)
            .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))
    }
}

/// The requests MCP itself defines (every one rmcp models, and the 2025-11-25 tasks
/// methods it does not), which Palisade answers, routes or polices itself. Written out
/// because rmcp has no "is this method modelled" check; the test below reads every method
/// rmcp's `ClientRequest` models from its JSON schema, so an rmcp upgrade that adds one fails
/// it until the method is listed here.
const MCP_METHODS: [&str; 23] = [
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "skills/list",
    "skills/get",
];

/// Whether `method` is one of MCP's own requests, never relayed as an extension's: one
/// reaches `pass_through` only when rmcp could not read its params as that method's.
pub(crate) fn is_mcp_method(method: &str) -> bool {
    MCP_METHODS.contains(&method)
}

/// What the audit record of a non-tool request says about it.
pub(super) struct Audited {
    kind: RecordKind,
    arguments: serde_json::Map<String, serde_json::Value>,
    /// The record's `toolName` when it is not the kind's method (an extension's method).
    name: Option<String>,
}

impl Audited {
    pub(super) fn new(kind: RecordKind, arguments: serde_json::Value) -> Audited {
        let arguments = match arguments {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        Audited {
            kind,
            arguments,
            name: None,
        }
    }
}

pub(super) fn audit_failed(e: &crate::gateway::stages::AuditError) -> ErrorData {
    ErrorData::internal_error(
        format!("the request was not completed because the audit log could not be written ({e}); palisade fails closed"),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constant of every `method` property in a JSON schema, wherever it sits, each
    /// given inline or by a `$ref` into the schema's `$defs`.
    fn methods(schema: &serde_json::Value, node: &serde_json::Value, out: &mut Vec<String>) {
        match node {
            serde_json::Value::Object(map) => {
                if let Some(method) = map.get("properties").and_then(|p| p.get("method")) {
                    let method = match method.get("$ref").and_then(|r| r.as_str()) {
                        Some(r) => schema.pointer(r.trim_start_matches('#')).unwrap_or(method),
                        None => method,
                    };
                    if let Some(c) = method.get("const").and_then(|c| c.as_str()) {
                        out.push(c.to_string());
                    }
                }
                map.values().for_each(|v| methods(schema, v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| methods(schema, v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_request_rmcp_models_is_one_of_mcps_own() {
        let schema = rmcp::schemars::schema_for!(ClientRequest);
        let schema = serde_json::to_value(&schema).unwrap_or_default();
        let mut found = Vec::new();
        methods(&schema, &schema, &mut found);
        found.sort();
        found.dedup();
        // The schema really lists rmcp's requests (a schema without them would pass below).
        assert!(found.len() >= 20, "{found:?}");
        assert!(found.iter().any(|m| m == "tools/call"), "{found:?}");
        let unlisted: Vec<_> = found.iter().filter(|m| !is_mcp_method(m)).collect();
        assert!(
            unlisted.is_empty(),
            "rmcp models requests MCP_METHODS does not list: {unlisted:?}"
        );
        assert!(!is_mcp_method("x.example/thing"));
    }
}

//! The paths a routed non-tool request names (a resource URI of any scheme, a prompt's
//! arguments), checked against the agent's and the server's roots before it is forwarded,
//! as a tool call's path arguments are. Apart from the forwarding so the roots check reads
//! on its own.
//!
//! Never: forward a request a check refused, or refuse one without an audit record.

use rmcp::model::GetPromptRequestParams;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::audit::RecordKind;

use super::routed::audit_failed;
use super::Upstream;

impl Upstream {
    /// A resource is read (or subscribed to) only when every path it names lies inside the
    /// server's current roots (and the agent's, when declared): a `file:` URI is its own
    /// path; a URI of another scheme is searched for the paths a server could read through
    /// it (`roots::path_like::paths_in_uri`). A refusal is audited and never forwarded.
    pub(super) fn check_resource_uri(
        &self,
        idx: usize,
        kind: RecordKind,
        uri: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut arguments = serde_json::Map::new();
        arguments.insert("uri".into(), serde_json::Value::String(uri.to_string()));
        let found = crate::roots::path_like::paths_in_uri(uri);
        self.check_found_paths(idx, kind, found, arguments, ctx)
    }

    /// `prompts/get`: every argument value that reads as a path is checked like a resource
    /// path (a prompt that reads a file it is given is a tool call by another name).
    pub(super) fn check_prompt_arguments(
        &self,
        idx: usize,
        request: &GetPromptRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let found: Vec<String> = request
            .arguments
            .iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str())
            .filter(|v| crate::roots::path_like::looks_like_path(v))
            .map(str::to_string)
            .collect();
        if found.is_empty() {
            return Ok(());
        }
        let arguments = serde_json::json!({"name": request.name, "arguments": request.arguments});
        let arguments = match arguments {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        self.check_found_paths(idx, RecordKind::PromptsGet, Ok(found), arguments, ctx)
    }

    /// Checks paths read by a non-tool request against the agent's and the server's roots;
    /// a refusal (or `found` being one) is audited as a deny and answered with the reason.
    fn check_found_paths(
        &self,
        idx: usize,
        kind: RecordKind,
        found: Result<Vec<String>, String>,
        arguments: serde_json::Map<String, serde_json::Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let slot = &self.shared.slots[idx];
        let set = slot.roots.current();
        let cwd = slot.req.as_ref().and_then(|r| r.cwd.as_deref());
        let home = slot.roots.options().home.as_deref();
        // Both checks below judge one resolution of each path (nothing awaits between them).
        let resolved =
            crate::roots::resolved::CallPaths::new(&crate::roots::canon::Base { cwd, home });
        let refusal = match found {
            Err(why) => Some(format!("FORBIDDEN: {why} [server {}]", slot.name)),
            Ok(paths) => {
                let args: Vec<crate::policy::PathArg<'_>> = paths
                    .iter()
                    .map(|p| crate::policy::PathArg {
                        value: p,
                        roles: vec![crate::policy::Role::ReadPath],
                    })
                    .collect();
                self.shared
                    .upstream_roots
                    .refuse(&args, &set, cwd, home, &resolved)
                    .or_else(|| {
                        args.iter().find_map(|a| {
                            set.guard
                                .check_shared(a.value, crate::roots::guard::Need::Read, &resolved)
                                .err()
                                .map(|e| format!("{e} [server {}]", slot.name))
                        })
                    })
            }
        };
        let Some(reason) = refusal else {
            return Ok(());
        };
        let record = crate::gateway::stages::CallRecord {
            kind: Some(kind),
            ..crate::gateway::stages::CallRecord::new(
                slot.record_server(),
                kind.method(),
                crate::gateway::stages::request_id_string(&ctx.id),
                arguments,
                crate::gateway::stages::PolicyVerdict::deny(reason.clone()),
                crate::gateway::stages::CallOutcome::Denied {
                    reason: reason.clone(),
                },
            )
        };
        if let Err(e) = self.shared.stages.audit.record(&record) {
            tracing::error!(server = %slot.name, "audit write failed: {e}");
            return Err(audit_failed(&e));
        }
        Err(ErrorData::invalid_params(reason, None))
    }
}

//! Adapters that plug the policy engine (`crate::policy`) and the audit log (`crate::audit`)
//! into the pipeline's stage traits. Thin by design: decisions are the engine's, records are
//! the log's; this module only translates between the pipeline's view of a call and theirs.
//!
//! Never: decide anything itself, or turn an internal failure into an allow.

use std::path::PathBuf;
use std::sync::RwLock;

use crate::audit::{
    AuditLog, AuditRecord, CallResult, EscalationResult, PolicyDecisionRecord, ResultStatus,
};
use crate::policy::{CallContext, Policy, Scope, Status, ToolInfo};
use crate::sandbox::launch::Enforcement;

use crate::gateway::stages::{
    ApprovalOutcome, AuditError, AuditSink, CallInfo, CallOutcome, CallPolicy, CallRecord,
    Decision, PolicyVerdict,
};

/// The policy stage backed by the real engine.
pub struct EngineStage {
    /// Written only when a server's tool list changes (`tools_listed`); read on every call.
    /// Never held across an await.
    policy: RwLock<Policy>,
    scope: Scope,
    home: Option<PathBuf>,
}

impl EngineStage {
    pub fn new(policy: Policy, scope: Scope, home: Option<PathBuf>) -> Self {
        EngineStage {
            policy: RwLock::new(policy),
            scope,
            home,
        }
    }
}

impl CallPolicy for EngineStage {
    fn decide(&self, call: &CallInfo<'_>) -> PolicyVerdict {
        let Ok(policy) = self.policy.read() else {
            return PolicyVerdict::deny("policy engine unavailable (poisoned lock): denied");
        };
        let ctx = CallContext {
            server: call.server,
            tool: call.tool,
            arguments: call.arguments,
            cwd: call.cwd,
            home: self.home.as_deref(),
            scope: &self.scope,
            roots: call.roots,
        };
        let d = match call.paths {
            Some(paths) => policy.evaluate_sharing(&ctx, paths),
            None => policy.evaluate(&ctx),
        };
        PolicyVerdict {
            decision: match d.status {
                Status::Allow => Decision::Allow,
                Status::Deny => Decision::Deny,
                Status::Escalate => Decision::Escalate,
            },
            rule: Some(d.rule),
            reason: d.reason,
        }
    }

    fn path_arguments<'a>(&self, call: &CallInfo<'a>) -> Option<Vec<crate::policy::PathArg<'a>>> {
        let policy = self.policy.read().ok()?;
        policy.path_arguments(call.server, call.tool, call.arguments)
    }

    fn url_arguments<'a>(
        &self,
        call: &CallInfo<'a>,
    ) -> Option<Vec<(&'a str, crate::policy::Role)>> {
        let policy = self.policy.read().ok()?;
        policy.url_arguments(call.server, call.tool, call.arguments)
    }

    fn unscoped_arguments<'a>(&self, call: &CallInfo<'a>) -> Option<Vec<&'a str>> {
        let policy = self.policy.read().ok()?;
        policy.unscoped_arguments(call.server, call.tool, call.arguments)
    }

    fn tools_listed(&self, server: &str, tools: &[rmcp::model::Tool]) {
        // The engine reads schemas as `Value`s; this runs only when a tool list changes.
        let schemas: Vec<serde_json::Value> = tools
            .iter()
            .map(|t| serde_json::Value::Object(t.input_schema.as_ref().clone()))
            .collect();
        let infos: Vec<ToolInfo<'_>> = tools
            .iter()
            .zip(&schemas)
            .map(|(t, schema)| ToolInfo {
                name: &t.name,
                input_schema: schema,
                read_only_hint: t.annotations.as_ref().and_then(|a| a.read_only_hint),
                destructive_hint: t.annotations.as_ref().and_then(|a| a.destructive_hint),
            })
            .collect();
        match self.policy.write() {
            Ok(mut p) => p.register_tools(server, &infos),
            // Unregistered tools are unknown to the engine, and unknown tools are denied.
            Err(_) => tracing::error!(server, "policy lock poisoned: tools not registered"),
        }
    }
}

/// The audit stage backed by the hash-chained JSONL log.
pub struct AuditLogSink {
    log: AuditLog,
}

impl AuditLogSink {
    pub fn new(log: AuditLog) -> Self {
        AuditLogSink { log }
    }
}

impl AuditSink for AuditLogSink {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        self.log
            .append(&to_audit_record(rec))
            .map_err(|e| AuditError(e.to_string()))
    }
}

/// The pipeline's record in the audit log's (IronCurtain-compatible) shape.
pub fn to_audit_record(rec: &CallRecord) -> AuditRecord {
    let status = match rec.policy_decision.decision {
        Decision::Allow => Status::Allow,
        Decision::Deny => Status::Deny,
        Decision::Escalate => Status::Escalate,
    };
    let (backend, degradation) = match &rec.enforcement {
        Some(Enforcement::Sandboxed { backend }) => (Some(backend_name(*backend)), vec![]),
        Some(Enforcement::Degraded { backend, reasons }) => (
            Some(backend.map_or("none".to_string(), backend_name)),
            reasons.clone(),
        ),
        Some(Enforcement::OptedOut) => (
            Some("none".to_string()),
            vec!["sandbox: false in the server's config".to_string()],
        ),
        Some(Enforcement::InProcess) => (
            Some("none".to_string()),
            vec!["an in-process test server: not sandboxed".to_string()],
        ),
        None => (None, vec![]),
    };
    AuditRecord {
        timestamp: rec.timestamp.clone(),
        request_id: rec.request_id.clone(),
        server_name: rec.server_name.clone(),
        tool_name: rec.tool_name.clone(),
        arguments: serde_json::Value::Object(rec.arguments.clone()),
        policy_decision: PolicyDecisionRecord {
            status,
            rule: rec.policy_decision.rule.clone().unwrap_or_default(),
            reason: rec.policy_decision.reason.clone(),
        },
        escalation_result: rec.escalation_result.as_ref().map(|e| match e {
            ApprovalOutcome::Approved { .. } => EscalationResult::Approved,
            ApprovalOutcome::Denied { .. } => EscalationResult::Denied,
        }),
        escalation_decided_by: rec.escalation_result.as_ref().map(|e| match e {
            ApprovalOutcome::Approved { by } | ApprovalOutcome::Denied { by, .. } => by.clone(),
        }),
        result: match &rec.result {
            CallOutcome::Success => CallResult {
                status: ResultStatus::Success,
                error: None,
            },
            CallOutcome::Error { error } => CallResult {
                status: ResultStatus::Error,
                error: Some(error.clone()),
            },
            CallOutcome::Denied { reason } => CallResult {
                status: ResultStatus::Denied,
                error: Some(reason.clone()),
            },
        },
        duration_ms: rec.duration_ms,
        sandboxed: rec.sandboxed,
        sandbox_backend: backend,
        degradation,
        approved_roots: rec
            .approved_roots
            .iter()
            .map(|(path, access)| crate::audit::ApprovedRoot {
                path: path.display().to_string(),
                access: match access {
                    crate::sandbox::Access::Rw => "rw".into(),
                    crate::sandbox::Access::Ro => "ro".into(),
                },
            })
            .collect(),
        network_refusals: rec
            .network_refusals
            .iter()
            .map(|e| crate::audit::NetworkRefusal {
                host: e.host.clone(),
                port: e.port,
                protocol: serde_json::to_value(e.protocol)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                reason: e.reason.to_string(),
            })
            .collect(),
        remembered_scope: rec.remembered_scope.clone(),
        approved_by_scope: rec.approved_by_scope.clone(),
        kind: rec.kind,
        principal: rec.principal.clone(),
        task_id: rec.task_id.clone(),
        task_status: rec.task_status.clone(),
        protocol: rec.protocol.clone(),
    }
}

fn backend_name(b: crate::config::Backend) -> String {
    b.name().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roots::canon::{self, Base};
    use crate::roots::guard::{GuardError, GuardOptions, Need, RootGuard};
    use crate::roots::resolved::CallPaths;
    use crate::sandbox::Access;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// The built-in policy with the fs-server's tools registered, and a guard over `root`.
    fn stages(root: &std::path::Path) -> (EngineStage, RootGuard) {
        let scope = Scope::new(None, &[], None).unwrap();
        let engine = EngineStage::new(Policy::builtin_default(), scope, None);
        engine.tools_listed("fs", &crate::fsserver::tools::catalogue(1024, 10));
        let guard = RootGuard::new(
            vec![(root.to_path_buf(), Access::Ro)],
            GuardOptions::default(),
        )
        .unwrap();
        (engine, guard)
    }

    fn counting() -> (CallPaths, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&n);
        let base = Base {
            cwd: None,
            home: None,
        };
        let paths = CallPaths::with_resolver(
            &base,
            Box::new(move |p| {
                seen.fetch_add(1, Ordering::SeqCst);
                canon::resolve_checked(p)
            }),
        );
        (paths, n)
    }

    /// Judges `path` as the pipeline does (policy, then roots check) through one `CallPaths`.
    fn judge(
        engine: &EngineStage,
        guard: &RootGuard,
        root: &std::path::Path,
        path: &std::path::Path,
    ) -> (PolicyVerdict, Result<PathBuf, GuardError>, usize) {
        let (paths, walks) = counting();
        let roots = [root.to_path_buf()];
        let arguments = serde_json::json!({"path": path.to_str().unwrap()});
        let call = CallInfo {
            server: "fs",
            tool: crate::fsserver::tools::READ,
            arguments: arguments.as_object().unwrap(),
            roots: &roots,
            cwd: None,
            paths: Some(&paths),
        };
        let verdict = engine.decide(&call);
        assert_eq!(
            walks.load(Ordering::SeqCst),
            1,
            "the policy resolved the path"
        );
        let args = engine.path_arguments(&call).unwrap();
        assert_eq!(args.len(), 1);
        let checked = guard
            .check_shared(args[0].value, Need::Read, &paths)
            .map(|a| a.path);
        (verdict, checked, walks.load(Ordering::SeqCst))
    }

    #[test]
    fn the_policy_and_the_roots_check_resolve_a_call_path_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        let (engine, guard) = stages(&root);
        let (verdict, checked, walks) = judge(&engine, &guard, &root, &root.join("f"));
        assert_eq!(verdict.decision, Decision::Allow, "{verdict:?}");
        assert_eq!(checked.unwrap(), root.join("f"));
        assert_eq!(
            walks, 1,
            "one walk for the policy and the roots check together"
        );
    }

    #[test]
    fn the_roots_check_judges_the_shared_resolution() {
        // A resolver that places every path under `root/moved`: the guard's answer shows
        // whose resolution it judged.
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (_, guard) = stages(&root);
        let moved = root.join("moved");
        let to = moved.clone();
        let paths = CallPaths::with_resolver(
            &Base {
                cwd: None,
                home: None,
            },
            Box::new(move |_| {
                Ok(canon::Resolved {
                    path: to.clone(),
                    links: Vec::new(),
                })
            }),
        );
        let got = guard
            .check_shared("/etc/hosts", Need::Read, &paths)
            .map(|a| a.path);
        assert_eq!(got, Ok(moved));
        assert!(guard.check("/etc/hosts", Need::Read).is_err());
    }

    #[test]
    fn a_symlink_escape_is_still_refused_by_the_policy_and_the_roots_check() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("esc")).unwrap();
        let (engine, guard) = stages(&root);
        let (verdict, checked, walks) = judge(&engine, &guard, &root, &root.join("esc/secret"));
        assert_ne!(verdict.decision, Decision::Allow, "{verdict:?}");
        assert!(
            matches!(&checked, Err(GuardError::Outside { path, .. }) if *path == outside.join("secret")),
            "{checked:?}"
        );
        assert_eq!(walks, 1);
        // Control: each stage alone refuses it the same way.
        let arguments = serde_json::json!({"path": root.join("esc/secret")});
        let alone = CallInfo {
            server: "fs",
            tool: crate::fsserver::tools::READ,
            arguments: arguments.as_object().unwrap(),
            roots: std::slice::from_ref(&root),
            cwd: None,
            paths: None,
        };
        assert_eq!(engine.decide(&alone), verdict);
        assert_eq!(
            guard
                .check(root.join("esc/secret").to_str().unwrap(), Need::Read)
                .map(|a| a.path),
            checked
        );
    }
}

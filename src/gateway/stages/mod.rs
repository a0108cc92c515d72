//! The pluggable stages of the call pipeline: policy, approval and audit, as small traits the
//! gateway receives through its constructor (`GatewayOptions`). The real policy engine
//! (`crate::policy`), approvers (`crate::approval`) and audit log (`crate::audit`) implement
//! these; until they land the defaults below keep the gateway honest about what it does not
//! do (it says so in the log, and escalations are denied).
//!
//! Never: decide anything here by looking at test switches; implementations are injected.

pub mod approval;
pub mod engine;
pub mod pinning;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::approval::RememberScope;
use crate::sandbox::launch::Enforcement;

/// One tool call as the policy sees it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallInfo<'a> {
    /// Server name (the prefix of `server__tool`).
    pub server: &'a str,
    /// The tool's own name on that server.
    pub tool: &'a str,
    /// Arguments as the agent sent them.
    pub arguments: &'a Map<String, Value>,
    /// The server's current roots (session sandbox dir first), canonical: the same set its
    /// sandbox mounts and its `roots/list` answer hold.
    pub roots: &'a [PathBuf],
    /// The server's working directory, for relative path arguments.
    pub cwd: Option<&'a Path>,
    /// The call's path resolutions, shared by the stages that judge it (`None`: each
    /// resolves its own).
    #[serde(skip)]
    pub paths: Option<&'a crate::roots::resolved::CallPaths>,
}

/// allow / deny / escalate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
    Escalate,
}

/// What the policy decided, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVerdict {
    pub decision: Decision,
    /// The rule that decided, if any.
    pub rule: Option<String>,
    pub reason: String,
}

impl PolicyVerdict {
    pub fn allow(reason: impl Into<String>) -> Self {
        PolicyVerdict {
            decision: Decision::Allow,
            rule: None,
            reason: reason.into(),
        }
    }
    pub fn deny(reason: impl Into<String>) -> Self {
        PolicyVerdict {
            decision: Decision::Deny,
            rule: None,
            reason: reason.into(),
        }
    }
}

/// The policy stage. Pure and quick: it runs on the request task for every call.
pub trait CallPolicy: Send + Sync + 'static {
    fn decide(&self, call: &CallInfo<'_>) -> PolicyVerdict;

    /// Called whenever a server's tool list is (re)fetched, before its tools are offered, so
    /// an engine can learn argument roles from the schemas. Default: ignored.
    fn tools_listed(&self, _server: &str, _tools: &[rmcp::model::Tool]) {}

    /// The call's path-role argument values (each with its roles), for the root check before
    /// forwarding and for widening on approval. `None` when the policy does not know the
    /// tool: the gateway then refuses to forward it. Default (no engine): no path arguments
    /// are known, so only the sandbox's mounts confine the call.
    fn path_arguments<'a>(&self, _call: &CallInfo<'a>) -> Option<Vec<crate::policy::PathArg<'a>>> {
        Some(Vec::new())
    }

    /// The call's URL-role argument values, each with the role it is read as, for matching
    /// remembered approvals by domain. `None` when the policy does not know the tool (then no
    /// remembered scope can match). Default (no engine): none known.
    fn url_arguments<'a>(
        &self,
        _call: &CallInfo<'a>,
    ) -> Option<Vec<(&'a str, crate::policy::Role)>> {
        Some(Vec::new())
    }

    /// Names of the call's arguments whose roles are neither paths nor URLs (identifiers,
    /// opaque values a rule may read): a call with any is never remembered or matched by a
    /// remembered scope. `None` when the policy does not know the tool. Default: none.
    fn unscoped_arguments<'a>(&self, _call: &CallInfo<'a>) -> Option<Vec<&'a str>> {
        Some(Vec::new())
    }
}

/// The default until a policy engine is configured: allows everything, and says so once.
#[derive(Debug, Default)]
pub struct AllowAll {
    warned: AtomicBool,
}

impl CallPolicy for AllowAll {
    fn decide(&self, _call: &CallInfo<'_>) -> PolicyVerdict {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("no policy engine: allowing every call");
        }
        PolicyVerdict::allow("no policy engine: allowing")
    }
}

/// What an approver answered for an escalated call. `by` is who decided, the approver kind
/// (`dir`, `tty`, `elicit`, `exec`), `deny` when nobody could be asked or none decided
/// (the fail-closed default), or `cancelled` when the agent cancelled the call first; the
/// audit record keeps it as `escalationDecidedBy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub enum ApprovalOutcome {
    Approved { by: String },
    Denied { reason: String, by: String },
}

/// The approval stage: asked only for calls the policy escalated. May take long (a human);
/// the pipeline holds no lock while it waits. `crate::approval::ApprovalChain` implements it
/// (see `gateway::stages::approval`).
pub trait ApprovalStage: Send + Sync + 'static {
    fn approve<'a>(
        &'a self,
        call: &CallInfo<'_>,
        verdict: &PolicyVerdict,
    ) -> BoxFuture<'a, ApprovalOutcome>;

    /// Asks as `approve` does, offering the person to remember `offer` for the session (shown
    /// in the request) and showing `grants`, what an approval adds to the server's sandbox.
    /// Default: neither is shown and nothing is remembered.
    fn approve_offering<'a>(
        &'a self,
        call: &CallInfo<'_>,
        verdict: &PolicyVerdict,
        _offer: Option<&RememberScope>,
        _grants: &[crate::approval::RememberedDir],
    ) -> BoxFuture<'a, Approval> {
        let asked = self.approve(call, verdict);
        Box::pin(async move {
            Approval {
                outcome: asked.await,
                remember: false,
            }
        })
    }
}

/// What the approval stage answered, and whether the person asked to remember the offered
/// scope (only ever true with an approval).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub outcome: ApprovalOutcome,
    pub remember: bool,
}

/// The default: nobody can be asked, so every escalation is denied.
#[derive(Debug, Default)]
pub struct NoApprover;

impl ApprovalStage for NoApprover {
    fn approve<'a>(
        &'a self,
        _call: &CallInfo<'_>,
        _verdict: &PolicyVerdict,
    ) -> BoxFuture<'a, ApprovalOutcome> {
        Box::pin(std::future::ready(ApprovalOutcome::Denied {
            reason: "no approver is configured".into(),
            by: "deny".into(),
        }))
    }
}

/// How the call ended, for the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub enum CallOutcome {
    /// The server answered with a normal result.
    Success,
    /// The server answered (an `isError` result or a JSON-RPC error) or the forward failed.
    Error { error: String },
    /// Policy or approval refused it; nothing reached the server.
    Denied { reason: String },
}

/// One audit record per tool call, or per routed prompt, resource or completion request
/// (`kind` then names the method): IronCurtain's fields plus the enforcement record.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// RFC 3339, UTC.
    pub timestamp: String,
    /// The upstream JSON-RPC id of the call.
    pub request_id: String,
    pub server_name: String,
    pub tool_name: String,
    pub arguments: Map<String, Value>,
    pub policy_decision: PolicyVerdict,
    pub escalation_result: Option<ApprovalOutcome>,
    pub result: CallOutcome,
    pub duration_ms: u64,
    /// True only when the server runs under `Enforcement::Sandboxed`.
    pub sandboxed: bool,
    /// What was enforced, in full (absent when the server never started).
    pub enforcement: Option<Enforcement>,
    /// Roots this call's approval added to the server: `(path, access)`.
    pub approved_roots: Vec<(PathBuf, crate::sandbox::Access)>,
    /// Connections the egress proxy refused for this server while the call was in flight.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_refusals: Vec<crate::egress::RefusalEvent>,
    /// The scope this call's approval added to the session ("approve and remember").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remembered_scope: Option<RememberScope>,
    /// The remembered scope that approved this escalated call without asking anyone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by_scope: Option<RememberScope>,
    /// `None` for a tool call; otherwise what the record is about (see
    /// `audit::AuditRecord::kind`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::audit::RecordKind>,
    /// Whose call it is, behind the HTTP front (the token's principal); `None` over stdio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The task a task-augmented call created, or whose completion this record is (the id
    /// the agent knows), and its status then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_status: Option<String>,
    /// The versions on each side, when the call reached a server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<crate::audit::ProtocolVersions>,
}

/// The server a record is about and what it runs under, given together: a record of a
/// server's call cannot be built without saying how that server is contained (when each
/// caller stamped it afterwards, two kinds of record said `sandboxed: false` for sandboxed
/// servers).
pub struct RecordServer<'a> {
    pub name: &'a str,
    pub enforcement: Option<Enforcement>,
}

impl<'a> RecordServer<'a> {
    /// A server that runs (or ran) under `enforcement`.
    pub fn running(name: &'a str, enforcement: Option<Enforcement>) -> Self {
        RecordServer { name, enforcement }
    }

    /// A record no server's containment applies to: refused before any server was chosen,
    /// or (pin records) stamped by the caller that knows the server.
    pub fn unstamped(name: &'a str) -> Self {
        RecordServer {
            name,
            enforcement: None,
        }
    }
}

impl CallRecord {
    /// A record with what every kind has, stamped now, with its server's enforcement; the
    /// rest starts empty (no escalation, no roots or refusals), for the caller to fill in.
    pub fn new(
        server: RecordServer<'_>,
        tool_name: &str,
        request_id: String,
        arguments: Map<String, Value>,
        policy_decision: PolicyVerdict,
        result: CallOutcome,
    ) -> CallRecord {
        CallRecord {
            timestamp: crate::audit::now_rfc3339(),
            request_id,
            server_name: server.name.to_string(),
            tool_name: tool_name.to_string(),
            arguments,
            policy_decision,
            escalation_result: None,
            result,
            duration_ms: 0,
            sandboxed: server
                .enforcement
                .as_ref()
                .is_some_and(Enforcement::is_sandboxed),
            enforcement: server.enforcement,
            approved_roots: Vec::new(),
            network_refusals: Vec::new(),
            remembered_scope: None,
            approved_by_scope: None,
            kind: None,
            principal: None,
            task_id: None,
            task_status: None,
            protocol: None,
        }
    }

    /// Records what was enforced, for a record built `unstamped`; `sandboxed` follows from it.
    pub fn enforced(mut self, enforcement: Option<Enforcement>) -> CallRecord {
        self.sandboxed = enforcement.as_ref().is_some_and(Enforcement::is_sandboxed);
        self.enforcement = enforcement;
        self
    }
}

/// A JSON-RPC request id as the audit log writes it: a string id as it is, a number in
/// decimal.
pub fn request_id_string(id: &rmcp::model::RequestId) -> String {
    serde_json::to_value(id)
        .map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Why an audit write failed; the call then fails closed with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuditError(pub String);

/// The audit stage. Runs before the response goes upstream; an error fails the call.
/// Implementations must be quick (one buffered append): the pipeline calls it inline.
pub trait AuditSink: Send + Sync + 'static {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError>;
}

/// The default when no audit log is configured: each record goes to the log (stderr) at
/// info level, so calls are never silently unaudited. The line is the audit file's record
/// (same field names, same redaction), less the hash chain, so one reader reads both.
#[derive(Debug, Default)]
pub struct LogAudit;

impl AuditSink for LogAudit {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        let line = LogAudit::line(rec)?;
        // A field, not the message: the log layer copies a field's text as it is, while it
        // escapes the message character by character (3% of the gateway's CPU at 16
        // callers, docs/benchmarks.md). `line` is already safe for a terminal.
        tracing::info!(target: "palisade::audit", audit = %line);
        Ok(())
    }
}

impl LogAudit {
    /// The JSON this sink logs for one record: redacted and bounded as the audit file's
    /// records are, and with nothing a terminal would act on (`terminal::escape_in_json`).
    pub fn line(rec: &CallRecord) -> Result<String, AuditError> {
        let record = crate::gateway::stages::engine::to_audit_record(rec);
        let line = crate::audit::line::to_line(&record, crate::audit::Redaction::Sensitive)
            .map_err(|e| AuditError(e.to_string()))?;
        Ok(crate::terminal::escape_in_json(line))
    }
}

/// The three injected stages together.
#[derive(Clone)]
pub struct Stages {
    pub policy: Arc<dyn CallPolicy>,
    pub approver: Arc<dyn ApprovalStage>,
    pub audit: Arc<dyn AuditSink>,
}

impl Default for Stages {
    fn default() -> Self {
        Stages {
            policy: Arc::new(AllowAll::default()),
            approver: Arc::new(NoApprover),
            audit: Arc::new(LogAudit),
        }
    }
}

impl std::fmt::Debug for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stages { policy, approver, audit }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression (first contact #11): the stderr line named the decision `decision` while the
    // audit file names it `status`, and skipped the file's redaction.
    #[test]
    fn the_logged_record_has_the_audit_files_shape_and_redaction() {
        let mut args = Map::new();
        args.insert(
            "api_key".into(),
            Value::String("sk-abcdefghijklmnopqrstuv".into()),
        );
        let rec = CallRecord::new(
            RecordServer::unstamped("fs"),
            "read",
            "7".into(),
            args,
            PolicyVerdict::deny("outside the roots"),
            CallOutcome::Denied {
                reason: "outside the roots".into(),
            },
        );
        let v: Value = serde_json::from_str(&LogAudit::line(&rec).unwrap()).unwrap();
        assert_eq!(v["policyDecision"]["status"], "deny");
        assert!(v["policyDecision"].get("decision").is_none());
        assert_eq!(v["serverName"], "fs");
        assert_eq!(v["result"]["status"], "denied");
        assert!(!v.to_string().contains("sk-abcdefghijklmnopqrstuv"), "{v}");
    }

    // The line is logged as a field, which the log layer does not escape: whatever a server
    // or an agent put in a record must reach the terminal as text, and the line stay JSON.
    #[test]
    fn the_logged_line_carries_no_terminal_control_and_parses_back() {
        let hostile = "a\u{1b}[31mred\u{7}\u{8}\u{c}\u{7f}\u{9b}2J\u{85}\u{9f}\u{202e}é\u{a0}z";
        let mut args = Map::new();
        args.insert("path".into(), Value::String(hostile.into()));
        let rec = CallRecord::new(
            RecordServer::unstamped("fs"),
            "read",
            "7".into(),
            args,
            PolicyVerdict::allow("ok"),
            CallOutcome::Error {
                error: hostile.into(),
            },
        );
        let line = LogAudit::line(&rec).unwrap();
        for c in line.chars() {
            assert!(
                !crate::terminal::acts_on(c),
                "{c:?} reaches the terminal as it is: {line}"
            );
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["arguments"]["path"], hostile);
        assert_eq!(v["result"]["error"], hostile);
    }
}

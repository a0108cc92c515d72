//! One audit record: the fields IronCurtain writes (same names, so its tools read ours),
//! plus the sandbox backend and any degradation. The hash-chain fields (`seq`, `prevHash`,
//! `hash`) are added by the writer, not by callers.
//!
//! Plain data, no I/O.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::policy::{Decision, Status};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// RFC 3339, UTC.
    pub timestamp: String,
    pub request_id: String,
    pub server_name: String,
    pub tool_name: String,
    /// The call's arguments; redacted by the writer before they are written.
    pub arguments: Value,
    pub policy_decision: PolicyDecisionRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_result: Option<EscalationResult>,
    /// Who decided the escalation: the approver kind (`dir`, `tty`, `elicit`, `exec`),
    /// `remembered` when a scope remembered earlier in the session approved it, `deny` when no
    /// approver could be asked or none decided, or `cancelled` when the agent cancelled the
    /// call while it waited. Absent when nothing escalated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_decided_by: Option<String>,
    pub result: CallResult,
    pub duration_ms: u64,
    /// True only when the server really runs inside an OS sandbox (not in warn mode, not
    /// degraded to unsandboxed).
    pub sandboxed: bool,
    /// `bwrap`, `srt`, or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_backend: Option<String>,
    /// What the sandbox could not enforce for this server (empty when fully enforced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degradation: Vec<String>,
    /// Roots this call's approval added to the server (for the rest of the session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_roots: Vec<ApprovedRoot>,
    /// Connections the egress proxy refused for this server during the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_refusals: Vec<NetworkRefusal>,
    /// The scope this call's approval remembered for the rest of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remembered_scope: Option<crate::approval::RememberScope>,
    /// The remembered scope that approved this call without asking anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by_scope: Option<crate::approval::RememberScope>,
    /// What the record is about when it is not a tool call: an agent's request other than
    /// `tools/call` (named by its MCP method), or a server's request relayed to (or refused
    /// before) the agent. Absent for tool calls, so their records keep IronCurtain's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<RecordKind>,
    /// Whose call it is, behind the HTTP front (the bearer token's principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The task a task-augmented call created, or whose completion the record is (`kind`
    /// `tasks/result`), as the agent knows its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The task's status then (`working` at creation; its final status at completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_status: Option<String>,
    /// The protocol versions the call crossed: the agent's request and the server's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ProtocolVersions>,
}

/// The protocol version on each side of a relayed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolVersions {
    pub agent: String,
    pub server: String,
}

/// The kinds of record besides tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordKind {
    /// A server's `sampling/createMessage` (the agent's LLM asked on its behalf).
    #[serde(rename = "sampling")]
    Sampling,
    /// A server's `elicitation/create` (the person behind the agent asked).
    #[serde(rename = "elicitation")]
    Elicitation,
    /// The agent's `prompts/get`.
    #[serde(rename = "prompts/get")]
    PromptsGet,
    /// The agent's `resources/read`.
    #[serde(rename = "resources/read")]
    ResourcesRead,
    /// The agent's `resources/subscribe`.
    #[serde(rename = "resources/subscribe")]
    ResourcesSubscribe,
    /// The agent's `resources/unsubscribe`.
    #[serde(rename = "resources/unsubscribe")]
    ResourcesUnsubscribe,
    /// The agent's `completion/complete`.
    #[serde(rename = "completion/complete")]
    Completion,
    /// A server's tool pinned on first use, or held back (or let through under warn) because
    /// its definition changed since it was approved (`pins`).
    #[serde(rename = "tools/pin")]
    ToolPin,
    /// A task's completion: its result fetched by the agent, or its final status seen.
    #[serde(rename = "tasks/result")]
    TaskResult,
    /// A request of a method Palisade does not know (an extension's), passed to the server
    /// that keeps its own names; `toolName` is the method.
    #[serde(rename = "extension")]
    Extension,
}

impl RecordKind {
    /// The MCP method the record is about.
    pub fn method(self) -> &'static str {
        match self {
            RecordKind::Sampling => "sampling/createMessage",
            RecordKind::Elicitation => "elicitation/create",
            RecordKind::PromptsGet => "prompts/get",
            RecordKind::ResourcesRead => "resources/read",
            RecordKind::ResourcesSubscribe => "resources/subscribe",
            RecordKind::ResourcesUnsubscribe => "resources/unsubscribe",
            RecordKind::Completion => "completion/complete",
            RecordKind::ToolPin => "tools/list",
            RecordKind::TaskResult => "tasks/result",
            RecordKind::Extension => "extension",
        }
    }
}

/// A directory an approved escalation made a root of its server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedRoot {
    pub path: String,
    /// `ro` or `rw`.
    pub access: String,
}

/// One refused connection, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRefusal {
    pub host: String,
    pub port: u16,
    /// `http-connect`, `http-forward`, `socks5`, or `connect` (a Landlock server's direct
    /// connect, refused by palisade's connect checks).
    pub protocol: String,
    /// Why it was refused.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecisionRecord {
    pub status: Status,
    pub rule: String,
    pub reason: String,
}

impl From<&Decision> for PolicyDecisionRecord {
    fn from(d: &Decision) -> Self {
        PolicyDecisionRecord {
            status: d.status,
            rule: d.rule.clone(),
            reason: d.reason.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EscalationResult {
    Approved,
    Denied,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    pub status: ResultStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultStatus {
    Success,
    Denied,
    Error,
}

/// The current time as the records write it.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

//! The question asked and the answers approvers give. Field names of `EscalationRequest`
//! follow IronCurtain's request files so its approval tools can read ours.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EscalationRequest {
    pub escalation_id: String,
    pub server_name: String,
    pub tool_name: String,
    /// The call's arguments, already redacted for display.
    pub arguments: serde_json::Value,
    /// The policy rule's reason for escalating.
    pub reason: String,
    /// Extra context: the rule name, the roles involved, what an approval would grant.
    #[serde(default)]
    pub context: serde_json::Value,
    /// What "approve and remember" would add to the session, when it is offered for this call
    /// (absent otherwise; readers that do not know it can ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remember_scope: Option<super::RememberScope>,
    /// What an approval adds to the server's sandbox, exactly (absent when nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<super::RememberedDir>,
}

impl EscalationRequest {
    pub fn new(
        server_name: &str,
        tool_name: &str,
        arguments: serde_json::Value,
        reason: &str,
        context: serde_json::Value,
    ) -> Self {
        EscalationRequest {
            escalation_id: uuid::Uuid::new_v4().to_string(),
            server_name: server_name.into(),
            tool_name: tool_name.into(),
            arguments,
            reason: reason.into(),
            context,
            remember_scope: None,
            grants: Vec::new(),
        }
    }

    /// Shows `grants` (what an approval adds to the server's sandbox) with the question.
    pub fn with_grants(mut self, grants: Vec<super::RememberedDir>) -> Self {
        self.grants = grants;
        self
    }

    /// Offers `scope` to be remembered with an approval of this call.
    pub fn with_remember_scope(mut self, scope: Option<super::RememberScope>) -> Self {
        self.remember_scope = scope;
        self
    }
}

/// Who decided; recorded in the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApproverKind {
    Deny,
    Dir,
    Tty,
    Elicit,
    Exec,
}

impl std::fmt::Display for ApproverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            ApproverKind::Deny => "deny",
            ApproverKind::Dir => "dir",
            ApproverKind::Tty => "tty",
            ApproverKind::Elicit => "elicit",
            ApproverKind::Exec => "exec",
        };
        f.write_str(s)
    }
}

/// One approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approve,
    /// Approve, and remember the scope the request offered for the rest of the session.
    /// Only human approvers answer this, and only when the request carries a scope.
    ApproveAndRemember,
    /// Denied, with why (shown to the agent).
    Deny(String),
    /// This approver does not decide; ask the next one (why is logged).
    Pass(String),
}

/// The chain's final decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub approved: bool,
    /// The approver that decided; `None` when nobody did (then it is a denial).
    pub decided_by: Option<ApproverKind>,
    pub detail: String,
    /// True when the approver asked to remember the offered scope (never for `exec`).
    pub remember: bool,
}

impl Decision {
    /// The text the agent receives for a denied escalation.
    pub fn denial_message(&self, reason: &str) -> String {
        format!("ESCALATION REQUIRED: {reason}. Denied: {}.", self.detail)
    }
}

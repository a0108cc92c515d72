//! `elicit`: ask the person behind the upstream MCP client through `elicitation/create`.
//! The gateway implements `Elicitor` over its upstream peer; this module only turns the
//! request into a question and the outcome into an answer. Decline, cancel, an error or a
//! timeout is a denial. When the request offers a scope to remember, the form gains an
//! optional `remember` boolean and the message says what it would allow.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Answer, Approver, ApproverKind, EscalationRequest};

/// What the upstream client's user answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElicitOutcome {
    /// Accepted the form with `approve: true`.
    Approved,
    /// Accepted with `approve: true` and `remember: true` (only offered when the request
    /// carries a scope).
    ApprovedAndRemember,
    /// Accepted the form but did not tick approve.
    Rejected,
    Declined,
    Cancelled,
}

/// The gateway's side: sends `elicitation/create` upstream.
pub trait Elicitor: Send + Sync {
    /// True when the upstream client declared the elicitation capability.
    fn supports_elicitation(&self) -> bool;
    /// Why the client cannot be asked, if it cannot.
    fn unavailable(&self) -> Option<String> {
        (!self.supports_elicitation()).then(|| "the client did not declare elicitation".into())
    }
    fn elicit<'a>(
        &'a self,
        message: String,
        schema: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ElicitOutcome, ElicitError>>;
}

/// Why the person could not be asked, or their answer could not be read (a denial).
#[derive(Debug, thiserror::Error)]
pub enum ElicitError {
    #[error("the client's answer is not an elicitation result ({0})")]
    NotAResult(serde_json::Error),
    /// Not a failure of the client: a 2026-07-28 call asks in its next round.
    #[error("the question goes to the client as an input-required result")]
    AskedInNextRound,
    #[error("bad form schema: {0}")]
    BadSchema(serde_json::Error),
    /// The form could not be written as JSON for the client (never expected: it is built
    /// from typed parts).
    #[error("the approval form could not be written: {0}")]
    Unwritable(serde_json::Error),
    /// The request to the client failed (not connected, timeout, closed, its error).
    #[error(transparent)]
    Request(Box<dyn std::error::Error + Send + Sync>),
    #[error("unexpected answer to elicitation: {0}")]
    UnexpectedAnswer(String),
}

pub struct ElicitApprover {
    elicitor: Arc<dyn Elicitor>,
}

impl ElicitApprover {
    pub fn new(elicitor: Arc<dyn Elicitor>) -> Self {
        ElicitApprover { elicitor }
    }

    /// The message shown to the user.
    pub fn message(req: &EscalationRequest) -> String {
        let offer = match &req.remember_scope {
            Some(scope) => format!(
                "\nTick \"remember\" as well to approve {}.",
                scope.describe()
            ),
            None => String::new(),
        };
        format!(
            "Palisade: the agent wants to call `{}` on server `{}`.\nWhy this needs you: {}\nArguments: {}\nApprove this one call?{offer}",
            req.tool_name, req.server_name, req.reason, req.arguments
        )
    }

    /// A yes/no form: one required boolean.
    pub fn schema() -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve this call", "default": false}
            },
            "required": ["approve"]
        })
    }

    /// The form for `req`: the yes/no form, plus an optional `remember` boolean when the
    /// request offers a scope.
    pub fn schema_for(req: &EscalationRequest) -> serde_json::Value {
        let mut schema = Self::schema();
        if req.remember_scope.is_some() {
            schema["properties"]["remember"] = serde_json::json!({
                "type": "boolean",
                "title": "Remember for this session (same tool, same directories or domains)",
                "default": false
            });
        }
        schema
    }
}

impl Approver for ElicitApprover {
    fn kind(&self) -> ApproverKind {
        ApproverKind::Elicit
    }

    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            if let Some(why) = self.elicitor.unavailable() {
                return Answer::Pass(why);
            }
            match self
                .elicitor
                .elicit(Self::message(req), Self::schema_for(req), timeout)
                .await
            {
                Ok(ElicitOutcome::Approved) => Answer::Approve,
                Ok(ElicitOutcome::ApprovedAndRemember) => Answer::ApproveAndRemember,
                Ok(ElicitOutcome::Rejected) => Answer::Deny("the user did not approve".into()),
                Ok(ElicitOutcome::Declined) => Answer::Deny("the user declined".into()),
                Ok(ElicitOutcome::Cancelled) => Answer::Deny("the user cancelled".into()),
                Err(e) => Answer::Deny(format!("elicitation failed: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> EscalationRequest {
        EscalationRequest::new(
            "fs",
            "write_file",
            serde_json::json!({"path": "/w/d/f"}),
            "writes need approval",
            serde_json::json!({}),
        )
    }

    #[test]
    fn the_form_offers_remember_only_with_a_scope() {
        assert_eq!(ElicitApprover::schema_for(&req()), ElicitApprover::schema());
        assert!(!ElicitApprover::message(&req()).contains("remember"));
        let offered = req().with_remember_scope(Some(crate::approval::RememberScope {
            server: "fs".into(),
            tool: "write_file".into(),
            dirs: vec![crate::approval::RememberedDir {
                path: "/w/d".into(),
                access: crate::sandbox::Access::Rw,
            }],
            domains: vec![],
        }));
        let schema = ElicitApprover::schema_for(&offered);
        assert_eq!(schema["properties"]["remember"]["type"], "boolean");
        assert_eq!(schema["required"], serde_json::json!(["approve"]));
        let m = ElicitApprover::message(&offered);
        assert!(m.contains("in /w/d (read-write)"), "{m}");
    }
}

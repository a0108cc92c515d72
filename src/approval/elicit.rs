//! `elicit`: ask the person behind the upstream MCP client through `elicitation/create`.
//! The gateway implements `Elicitor` over its upstream peer; this module only turns the
//! request into a question and the outcome into an answer. Decline, cancel, an error or a
//! timeout is a denial.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Answer, Approver, ApproverKind, EscalationRequest};

/// What the upstream client's user answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElicitOutcome {
    /// Accepted the form with `approve: true`.
    Approved,
    /// Accepted the form but did not tick approve.
    Rejected,
    Declined,
    Cancelled,
}

/// The gateway's side: sends `elicitation/create` upstream.
pub trait Elicitor: Send + Sync {
    /// True when the upstream client declared the elicitation capability.
    fn supports_elicitation(&self) -> bool;
    fn elicit<'a>(
        &'a self,
        message: String,
        schema: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ElicitOutcome, String>>;
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
        format!(
            "Palisade: the agent wants to call `{}` on server `{}`.\nWhy this needs you: {}\nArguments: {}\nApprove this one call?",
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
}

impl Approver for ElicitApprover {
    fn kind(&self) -> ApproverKind {
        ApproverKind::Elicit
    }

    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            if !self.elicitor.supports_elicitation() {
                return Answer::Pass("the client did not declare elicitation".into());
            }
            match self
                .elicitor
                .elicit(Self::message(req), Self::schema(), timeout)
                .await
            {
                Ok(ElicitOutcome::Approved) => Answer::Approve,
                Ok(ElicitOutcome::Rejected) => Answer::Deny("the user did not approve".into()),
                Ok(ElicitOutcome::Declined) => Answer::Deny("the user declined".into()),
                Ok(ElicitOutcome::Cancelled) => Answer::Deny("the user cancelled".into()),
                Err(e) => Answer::Deny(format!("elicitation failed: {e}")),
            }
        })
    }
}

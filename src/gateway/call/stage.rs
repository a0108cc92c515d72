//! What every stage of a call shares, below the pipeline that runs them: the call in flight
//! once routed, and how a refusal by one of the gateway's own stages is recorded.
//! A leaf: it uses none of the stages, so they can all use it.

use std::time::Instant;

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::gateway::stages::{Decision, PolicyVerdict};
use crate::gateway::state::{Shared, Slot};

/// The call in flight, once routed: what every later stage needs to know of it.
pub(in crate::gateway) struct InFlight<'a> {
    pub shared: &'a Shared,
    pub slot: &'a Slot,
    /// The slot's index.
    pub server: usize,
    /// The tool's name on its server.
    pub tool: &'a str,
    pub ctx: &'a RequestContext<RoleServer>,
    pub started: Instant,
}

impl InFlight<'_> {
    /// The directory the server was started in, against which relative paths resolve.
    pub fn cwd(&self) -> Option<&std::path::Path> {
        self.slot.req.as_ref().and_then(|r| r.cwd.as_deref())
    }
}

/// `policyDecision.rule` of a call the agent's own declared roots refused.
pub const AGENT_ROOTS_RULE: &str = "agent-roots";
/// `policyDecision.rule` of a call whose path arguments fell outside the server's roots.
pub const ROOTS_CHECK_RULE: &str = "roots-check";
/// A deny recorded as decided by a gateway stage other than the policy.
pub(in crate::gateway) fn stage_refusal(rule: &str, why: &str) -> PolicyVerdict {
    PolicyVerdict {
        decision: Decision::Deny,
        rule: Some(rule.to_string()),
        reason: why.to_string(),
    }
}

/// The error a call gets when its audit record could not be written (fail closed).
pub(in crate::gateway) fn audit_failed(e: &crate::gateway::stages::AuditError) -> ErrorData {
    ErrorData::internal_error(
        format!("the call was not completed because the audit log could not be written ({e}); palisade fails closed"),
        None,
    )
}

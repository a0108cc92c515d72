//! Glue between the pipeline's approval stage and `crate::approval`: the `ApprovalChain`
//! answers escalations, and the agent's MCP client is offered to it as an `Elicitor` (an
//! `elicitation/create` request upstream, with the approver's timeout).
//!
//! Never: treat a failed, declined, malformed or timed-out elicitation as anything but a
//! denial.

use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ServerRequest,
};
use rmcp::service::Peer;
use rmcp::RoleServer;

use crate::approval::{
    ApprovalChain, ApproverKind, ElicitError, ElicitOutcome, Elicitor, EscalationRequest,
    RememberScope,
};
use crate::gateway::agent::link::{request_of, UpstreamError, UpstreamLink};
use crate::gateway::agent::open_calls::{self, Carrier};
use crate::gateway::stages::{Approval, ApprovalOutcome, ApprovalStage, CallInfo, PolicyVerdict};

impl ApprovalStage for ApprovalChain {
    fn approve<'a>(
        &'a self,
        call: &CallInfo<'_>,
        verdict: &PolicyVerdict,
    ) -> BoxFuture<'a, ApprovalOutcome> {
        let asked = self.approve_offering(call, verdict, None, &[]);
        Box::pin(async move { asked.await.outcome })
    }

    fn approve_offering<'a>(
        &'a self,
        call: &CallInfo<'_>,
        verdict: &PolicyVerdict,
        offer: Option<&RememberScope>,
        grants: &[crate::approval::RememberedDir],
    ) -> BoxFuture<'a, Approval> {
        let req = EscalationRequest::new(
            call.server,
            call.tool,
            // Shown to a person and, with file IPC, written to disk: redacted as the audit
            // log redacts them.
            crate::audit::redact::redact_arguments(
                &serde_json::Value::Object(call.arguments.clone()),
                crate::audit::Redaction::Sensitive,
            ),
            &verdict.reason,
            serde_json::json!({ "rule": verdict.rule }),
        )
        .with_remember_scope(offer.cloned())
        .with_grants(grants.to_vec());
        Box::pin(async move {
            let decision = self.decide(&req).await;
            // Nobody decided (no approver, or every one passed): the fail-closed default
            // denied it, recorded as `deny`. An approval always names its approver.
            let by = decision
                .decided_by
                .unwrap_or(ApproverKind::Deny)
                .to_string();
            let outcome = if decision.approved {
                ApprovalOutcome::Approved { by }
            } else {
                ApprovalOutcome::Denied {
                    reason: decision.detail,
                    by,
                }
            };
            Approval {
                remember: decision.approved && decision.remember,
                outcome,
            }
        })
    }
}

/// Asks the person behind the agent's MCP client, through `elicitation/create`.
#[derive(Clone)]
pub struct UpstreamElicitor {
    link: UpstreamLink,
}

impl UpstreamElicitor {
    pub fn new(link: UpstreamLink) -> Self {
        UpstreamElicitor { link }
    }
}

impl UpstreamElicitor {
    /// The session of the call being approved (`open_calls::scope`), when it is a session's
    /// without a stream of its own; else the agent's link (the stdio front's one agent).
    fn session(&self) -> Option<Peer<RoleServer>> {
        match open_calls::current().map(|c| c.carrier) {
            Some(Carrier::Session(peer)) => Some(peer),
            Some(Carrier::Sessionless) => None,
            _ => self.link.get(),
        }
    }
}

impl Elicitor for UpstreamElicitor {
    fn supports_elicitation(&self) -> bool {
        self.session()
            .and_then(|p| p.peer_info())
            .is_some_and(|info| info.capabilities.elicitation.is_some())
    }

    fn unavailable(&self) -> Option<String> {
        if let Some(round) = crate::gateway::agent::mrtr::current() {
            // A 2026-07-28 call: asked through an input-required result.
            return (!round.elicits()).then(|| "the client did not declare elicitation".into());
        }
        if let Some(asker) = crate::gateway::agent::asking::current() {
            // A session's call on the HTTP fast path: asked on its own stream.
            return (!asker.elicits()).then(|| "the client did not declare elicitation".into());
        }
        let sessionless = self.session().is_none_or(|p| p.peer_info().is_none());
        if sessionless && self.link.get().is_some() {
            return Some(
                "the client speaks MCP 2026-07-28, which can be asked only in a tool call's \
                 rounds (input-required results), and this request is not one; use a dir:, \
                 exec: or tty approver for it"
                    .into(),
            );
        }
        (!self.supports_elicitation()).then(|| "the client did not declare elicitation".into())
    }

    fn elicit<'a>(
        &'a self,
        message: String,
        schema: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ElicitOutcome, ElicitError>> {
        Box::pin(async move {
            if let Some(round) = crate::gateway::agent::mrtr::current() {
                return match round.take_answer() {
                    Some(answer) => answered(answer),
                    None => {
                        round.ask(crate::gateway::agent::mrtr::Question { message, schema });
                        Err(ElicitError::AskedInNextRound)
                    }
                };
            }
            let requested_schema =
                serde_json::from_value(schema).map_err(ElicitError::BadSchema)?;
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema,
            };
            if let Some(asker) = crate::gateway::agent::asking::current() {
                // The form as rmcp would write it, on the call's own stream.
                let params = serde_json::to_value(&params).map_err(ElicitError::Unwritable)?;
                let answer = asker
                    .ask("elicitation/create", params, timeout)
                    .await
                    .map_err(|e| ElicitError::Request(Box::new(e)))?;
                return answered(answer);
            }
            // The session of the call being approved, not the principal's most recent.
            let peer = self
                .session()
                .ok_or_else(|| ElicitError::Request(Box::new(UpstreamError::NotConnected)))?;
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let answer = request_of(&peer, request, timeout, None)
                .await
                .map_err(|e| ElicitError::Request(Box::new(e)))?;
            match answer {
                ClientResult::ElicitResult(r) => Ok(outcome(&r)),
                other => Err(ElicitError::UnexpectedAnswer(format!("{other:?}"))),
            }
        })
    }
}

/// The agent's answer as JSON (a round's retry, a response POST on the call's stream): what
/// it means, or why it is not an elicitation result (a denial).
fn answered(answer: serde_json::Value) -> Result<ElicitOutcome, ElicitError> {
    serde_json::from_value::<rmcp::model::ElicitResult>(answer)
        .map(|r| outcome(&r))
        .map_err(ElicitError::NotAResult)
}

/// What the person's answer to the approval form means.
fn outcome(r: &rmcp::model::ElicitResult) -> ElicitOutcome {
    match r.action {
        ElicitationAction::Accept => {
            let ticked = |key: &str| {
                r.content
                    .as_ref()
                    .and_then(|c| c.get(key))
                    .and_then(serde_json::Value::as_bool)
                    == Some(true)
            };
            match (ticked("approve"), ticked("remember")) {
                (true, true) => ElicitOutcome::ApprovedAndRemember,
                (true, false) => ElicitOutcome::Approved,
                _ => ElicitOutcome::Rejected,
            }
        }
        ElicitationAction::Decline => ElicitOutcome::Declined,
        _ => ElicitOutcome::Cancelled,
    }
}

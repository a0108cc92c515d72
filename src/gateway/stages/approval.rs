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

    /// How the agent of the call being approved is reached (`open_calls::scope`): its
    /// 2026-07-28 round, its own stream, its session, or not at all. Outside a call (never
    /// in `serve`, which scopes every approval), the agent's link.
    fn carrier(&self) -> Option<Carrier> {
        open_calls::current()
            .map(|c| c.carrier)
            .or_else(|| self.link.get().map(Carrier::Session))
    }
}

/// An agent reached neither by a round nor in a session (a 2026-07-28 client, or a request
/// whose `_meta` carries its protocol version and its client's capabilities, which rmcp
/// serves outside any session: `versions::served_sessionless`).
const NOT_IN_A_ROUND: &str = "this request reaches its client in no session and in no tool \
     call's rounds (input-required results, how an MCP 2026-07-28 client is asked); use a dir:, \
     exec: or tty approver for it";
const NOT_DECLARED: &str = "the client did not declare elicitation";

impl Elicitor for UpstreamElicitor {
    fn supports_elicitation(&self) -> bool {
        self.unavailable().is_none()
    }

    fn unavailable(&self) -> Option<String> {
        let declared = match self.carrier() {
            Some(Carrier::Round(round)) => round.elicits(),
            Some(Carrier::Stream(asker)) => asker.elicits(),
            Some(Carrier::Session(peer)) => match peer.peer_info() {
                Some(info) => info.capabilities.elicitation.is_some(),
                // A session that never initialized: a 2026-07-28 client's.
                None => return Some(NOT_IN_A_ROUND.into()),
            },
            Some(Carrier::Sessionless) => return Some(NOT_IN_A_ROUND.into()),
            None => return Some("no client is connected to ask".into()),
        };
        (!declared).then(|| NOT_DECLARED.into())
    }

    fn elicit<'a>(
        &'a self,
        message: String,
        schema: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ElicitOutcome, ElicitError>> {
        Box::pin(async move {
            let carrier = self.carrier();
            if let Some(Carrier::Round(round)) = &carrier {
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
            let peer = match carrier {
                Some(Carrier::Stream(asker)) => {
                    // The form as rmcp would write it, on the call's own stream.
                    let params = serde_json::to_value(&params).map_err(ElicitError::Unwritable)?;
                    let answer = asker
                        .ask("elicitation/create", params, timeout)
                        .await
                        .map_err(|e| ElicitError::Request(Box::new(e)))?;
                    let answer =
                        serde_json::from_str(answer.get()).map_err(ElicitError::NotAResult)?;
                    return answered(answer);
                }
                // The session of the call being approved, not the principal's most recent.
                Some(Carrier::Session(peer)) => peer,
                _ => return Err(ElicitError::Request(Box::new(UpstreamError::NotConnected))),
            };
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

//! Stage 3 of a call, for an escalation: a remembered scope that covers the call approves it
//! unasked; a grant Palisade would never make is refused unasked; otherwise the approver is
//! asked, offered the scope the call could remember, and the answer is remembered when the
//! person chose to.
//!
//! Never: look up a remembered scope for a denial, or keep a person answering for a call the
//! agent has cancelled.

use rmcp::service::RequestContext;
use rmcp::RoleServer;

use crate::approval::RememberScope;
use crate::gateway::agent::open_calls::{self, Caller};
use crate::gateway::call::{remembered, widen};
use crate::gateway::stages::{Approval, ApprovalOutcome, CallInfo, PolicyVerdict};
use crate::gateway::state::{Shared, Slot};
use crate::policy::PathArg;

/// Who decided an escalation that a remembered scope approved (`escalationDecidedBy`).
pub const REMEMBERED: &str = "remembered";

/// What the approval stage decided for one call.
#[derive(Default)]
pub(super) struct Approved {
    /// Why the call is refused (`None`: it goes on).
    pub denial: Option<String>,
    /// The approver's outcome, for an escalation.
    pub escalation: Option<ApprovalOutcome>,
    /// The scope the person chose to remember with this approval.
    pub remembered_scope: Option<RememberScope>,
    /// The remembered scope that approved this call without asking.
    pub approved_by_scope: Option<RememberScope>,
    /// What an approval grants the server: the directories the call needed when it was
    /// decided (shown to the person). The widening grants these and nothing else.
    pub grants: Vec<crate::approval::RememberedDir>,
}

impl Approved {
    pub(super) fn refused(why: String) -> Approved {
        Approved {
            denial: Some(why),
            ..Approved::default()
        }
    }
}

/// Stage 3 for an escalation: a remembered scope that covers it approves it without asking
/// (a deny is never looked up); a grant Palisade would never make is refused unasked;
/// otherwise the approver is asked, offered the scope this call could remember.
pub(super) async fn approve(
    shared: &Shared,
    slot: &Slot,
    call: &CallInfo<'_>,
    verdict: &PolicyVerdict,
    path_args: Option<&[PathArg<'_>]>,
    ctx: &RequestContext<RoleServer>,
) -> Approved {
    let cwd = call.cwd;
    let url_args = shared.stages.policy.url_arguments(call);
    let unscoped = shared.stages.policy.unscoped_arguments(call);
    let subject = remembered::subject(
        &slot.name,
        call.tool,
        &remembered::CallArgs {
            paths: path_args,
            urls: url_args.as_deref(),
            unscoped: unscoped.as_deref(),
        },
        cwd,
        slot.roots.options().home.as_deref(),
    );
    let mut out = Approved::default();
    let known = subject.as_ref().and_then(|s| shared.remembered.find(s));
    // Resolved once, now: what the person is shown (or the remembered scope matched) is
    // exactly what the widening may grant, however the paths resolve after the wait. A
    // 2026-07-28 retry answers the question of its first round: what that showed.
    out.grants = match crate::gateway::agent::mrtr::current().and_then(|r| r.shown().cloned()) {
        Some(shown) => shown,
        None => shown_grants(slot, path_args, cwd),
    };
    let outcome = if let Some(scope) = known {
        tracing::info!(server = %slot.name, tool = %call.tool, "approved by a remembered scope");
        out.approved_by_scope = Some(scope);
        ApprovalOutcome::Approved {
            by: REMEMBERED.into(),
        }
    } else if let Some(why) = refused_grant(slot, path_args, cwd) {
        // What an approval would have to grant is never granted: not asked.
        ApprovalOutcome::Denied {
            reason: format!("not asked: {why}"),
            by: "deny".into(),
        }
    } else {
        let offer = subject.as_ref().and_then(RememberScope::offer);
        let grants = &out.grants;
        // The agent may cancel while a person is being asked: rmcp only cancels the
        // request's token, so stop asking (the approver's question is withdrawn as its
        // future is dropped) rather than keep a person answering for nobody.
        // An approver that asks the agent asks the one that made this call.
        let asking = open_calls::scope(
            Caller::of(ctx),
            shared
                .stages
                .approver
                .approve_offering(call, verdict, offer.as_ref(), grants),
        );
        let approval = tokio::select! {
            approval = asking => approval,
            _ = ctx.ct.cancelled() => Approval {
                remember: false,
                outcome: ApprovalOutcome::Denied {
                    reason: "the agent cancelled the call while it waited for approval".into(),
                    by: "cancelled".into(),
                },
            },
        };
        if approval.remember && matches!(approval.outcome, ApprovalOutcome::Approved { .. }) {
            if let Some(scope) = offer {
                shared.remembered.add(scope.clone());
                out.remembered_scope = Some(scope);
            }
        }
        approval.outcome
    };
    if let ApprovalOutcome::Denied { reason, .. } = &outcome {
        out.denial = Some(format!(
            "ESCALATION REQUIRED: {}. Denied: {reason}.",
            verdict.reason
        ));
    }
    out.escalation = Some(outcome);
    out
}

/// Why an approval of this call could not be carried out (it would grant a persistence
/// location, the home directory or above), if it could not.
fn refused_grant(
    slot: &Slot,
    path_args: Option<&[PathArg<'_>]>,
    cwd: Option<&std::path::Path>,
) -> Option<String> {
    let home = slot.roots.options().home.as_deref();
    let wanted = widen::needed(path_args.unwrap_or(&[]), cwd, home);
    widen::refusal(&slot.roots.missing(&wanted), home)
}

/// Exactly what an approval of this call adds to the server's sandbox, for the person.
fn shown_grants(
    slot: &Slot,
    path_args: Option<&[PathArg<'_>]>,
    cwd: Option<&std::path::Path>,
) -> Vec<crate::approval::RememberedDir> {
    let home = slot.roots.options().home.as_deref();
    let wanted = widen::needed(path_args.unwrap_or(&[]), cwd, home);
    slot.roots
        .missing(&wanted)
        .into_iter()
        .map(|n| crate::approval::RememberedDir {
            path: n.path,
            access: n.access,
        })
        .collect()
}

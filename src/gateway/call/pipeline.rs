//! The call pipeline for `tools/call`, one explicit stage per step:
//!
//! route → agent's roots → policy → approval (remembered scopes first) → widen roots/sandbox
//! → roots check → forward → annotate → audit
//!
//! Every call that reaches `route` successfully produces exactly one audit record, written
//! before the answer goes upstream; when the audit sink fails, the call fails closed with an
//! error saying so. Policy and approval refusals are `isError` results (the model reads them);
//! gateway failures (server down, timeout, crash, audit) are JSON-RPC errors.
//! Never: hold a std lock across an await. The one deliberate wait is the server's gate
//! (`Slot::gate`): a call waits for a roots widening of its server in progress, and a
//! widening waits for the calls in flight (each bounded by the call timeout).

use std::borrow::Cow;
use std::time::Instant;

use crate::gateway::raw_json::RawJson;
use serde_json::{Map, Value};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock,
    RequestMetaObject,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::approval::RememberScope;
use crate::gateway::call::tasks::TaskEntry;
use crate::gateway::call::{remembered, widen};
use crate::gateway::registry::Route;
use crate::gateway::server::handler::{Connection, ForwardError, UpTarget};
use crate::gateway::server::roots::RootSet;
use crate::gateway::stages::{
    request_id_string, Approval, ApprovalOutcome, CallInfo, CallRecord, Decision,
};
use crate::gateway::state::{Shared, Slot};
use crate::policy::PathArg;
use crate::roots::canon::Base;
use crate::roots::guard::Need;
use crate::roots::resolved::CallPaths;
use crate::sandbox::launch::Enforcement;

use super::answer::*;
use super::route::*;

/// Who decided an escalation that a remembered scope approved (`escalationDecidedBy`).
pub const REMEMBERED: &str = "remembered";

/// Runs one `tools/call` through every stage; the result is the JSON text the agent is sent
/// (the server's own bytes when no stage changed it).
///
/// `extra` holds the request's params the typed view does not model (`task`, a field of a
/// newer revision); they are forwarded as sent.
pub async fn call_tool(
    shared: &Shared,
    params: CallToolRequestParams,
    extra: &Map<String, Value>,
    ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    let started = Instant::now();

    // Stage 1: route. A call to a server that is (re)starting waits for it, bounded by the
    // start timeout; a name no server offers is refused, and audited like every call.
    let Route { server, name: tool } = match route_waiting(shared, &params.name).await {
        Ok(route) => route,
        Err((e, rule)) => {
            let record = unroutable_record(shared, &params, &ctx, &e, rule, started);
            if let Err(audit) = shared.stages.audit.record(&record) {
                tracing::error!(tool = %params.name, "audit write failed: {audit}");
                return Err(audit_failed(&audit));
            }
            return Err(e);
        }
    };
    let slot = shared.slots[server].clone();
    let arguments = params.arguments.clone().unwrap_or_default();
    let set = slot.roots.current();
    let cwd = slot.req.as_ref().and_then(|r| r.cwd.as_deref());
    let home = slot.roots.options().home.as_deref();
    // Each path argument is resolved on the disk once, for the agent's roots, the policy and
    // (when the call does not wait in between) the roots check.
    shared.upstream_roots.wait_known(&ctx.peer).await;
    let resolved = CallPaths::new(&Base { cwd, home });
    let call = CallInfo {
        server: &slot.name,
        tool: &tool,
        arguments: &arguments,
        roots: &set.paths,
        cwd,
        paths: Some(&resolved),
    };
    let path_args = shared.stages.policy.path_arguments(&call);

    // Stage 1b: the agent's own roots, when its client declared them, narrow what it may ask
    // for (they never widen a server's set).
    let narrowed = path_args.as_deref().and_then(|args| {
        shared
            .upstream_roots
            .refuse(args, &set, cwd, home, &resolved)
    });

    // Stage 2: policy.
    let verdict = shared.stages.policy.decide(&call);

    // Stage 3: approval (escalations only).
    let approval = match (&narrowed, verdict.decision) {
        (Some(why), _) => Approved::refused(why.clone()),
        (None, Decision::Allow) => Approved::default(),
        (None, Decision::Deny) => {
            Approved::refused(format!("DENIED by policy: {}", verdict.reason))
        }
        (None, Decision::Escalate) => {
            approve(shared, &slot, &call, &verdict, path_args.as_deref(), &ctx).await
        }
    };
    // A 2026-07-28 agent is asked through an input-required result: nothing is decided,
    // forwarded or audited in this round; its retry carries the answer.
    if let Some(q) = crate::gateway::agent::mrtr::current().and_then(|r| r.question()) {
        use crate::gateway::agent::mrtr;
        let fp = mrtr::fingerprint(&params.name, &arguments);
        let handle = shared.mrtr.insert(fp, Instant::now());
        tracing::info!(server = %slot.name, tool = %tool, "escalation: asking the client (input required)");
        return Ok(raw_json(&mrtr::input_required(&q, &handle)));
    }

    // The record names the stage that decided: a refusal by the agent's own roots is not
    // the policy's "allow".
    let decided = match &narrowed {
        Some(why) => stage_refusal(AGENT_ROOTS_RULE, why),
        None => verdict.clone(),
    };
    // Stages 4 and 5: widen (approved escalations), check the paths, forward.
    let run = match &approval.denial {
        Some(text) => Forwarded::refused(text.clone(), decided, slot.snapshot().enforcement),
        None => {
            let approved = matches!(approval.escalation, Some(ApprovalOutcome::Approved { .. }));
            widen_and_forward(
                shared,
                &slot,
                &tool,
                (params, extra),
                path_args.as_deref(),
                approved,
                decided,
                &ctx,
                &resolved,
            )
            .await
        }
    };
    let Approved {
        escalation,
        remembered_scope,
        approved_by_scope,
        ..
    } = approval;
    let Forwarded {
        answer,
        received,
        refused,
        decided,
        enforcement,
        approved_roots,
        network_refusals,
        server_protocol,
    } = run;

    // Stage 6: annotate sandbox-caused errors; network refusals first (they are certain).
    let (answer, received) = mark_refusals(&network_refusals, &slot.name, (answer, received));
    // Only an error is annotated; the paths are resolved (file system calls) only for one.
    let call_paths = if answer.is_error() {
        call_paths(
            path_args.as_deref(),
            cwd,
            slot.roots.options().home.as_deref(),
        )
    } else {
        Vec::new()
    };
    let answer = annotate(&slot, enforcement.as_ref(), &call_paths, answer);
    // A task handle: the task is remembered under the id the agent will use.
    let answer = match answer {
        Answer::Task(handle) => {
            let entry = TaskEntry {
                server,
                inner: String::new(),
                tool: tool.clone(),
                arguments: arguments.clone(),
                decided: decided.clone(),
                request_id: request_id_string(&ctx.id),
                created: Instant::now(),
                audited: false,
            };
            remember_task(shared, &slot, handle, entry)
        }
        other => other,
    };

    // Stage 7: audit, before anything goes upstream.
    let record = CallRecord {
        escalation_result: escalation,
        duration_ms: started.elapsed().as_millis() as u64,
        approved_roots,
        network_refusals,
        remembered_scope,
        approved_by_scope,
        protocol: server_protocol.map(|server| crate::audit::ProtocolVersions {
            agent: crate::gateway::agent::versions::agent_version(&ctx)
                .unwrap_or_else(|| "unknown".into()),
            server,
        }),
        task_id: task_field(&answer, "taskId"),
        task_status: task_field(&answer, "status"),
        ..CallRecord::new(
            &slot.name,
            &tool,
            request_id_string(&ctx.id),
            arguments,
            decided,
            outcome_of(&answer, refused),
        )
        .enforced(enforcement)
    };
    if let Err(e) = shared.stages.audit.record(&record) {
        tracing::error!(server = %slot.name, tool = %tool, "audit write failed: {e}");
        return Err(audit_failed(&e));
    }
    match answer {
        Answer::Relayed(raw) => Ok(raw),
        Answer::Result(r) => Ok(raw_json(&result_json(r, received))),
        Answer::Error(e) => Err(e),
        Answer::Task(handle) => Ok(raw_json(&handle)),
    }
}

/// Remembers the task a call created and gives the agent its namespaced id; a handle with
/// no id, or one the table cannot take, becomes the call's error.
fn remember_task(shared: &Shared, slot: &Slot, mut handle: Value, mut entry: TaskEntry) -> Answer {
    let Some(inner) = handle
        .pointer("/task/taskId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Answer::Error(ErrorData::internal_error(
            format!(
                "server `{}` answered a task-augmented call without a task id",
                slot.name
            ),
            None,
        ));
    };
    let outer = crate::gateway::call::tasks::outer_id(&slot.name, slot.filters.unprefixed, &inner);
    entry.inner = inner;
    if let Err(e) = shared.tasks.insert(outer.clone(), entry) {
        return Answer::Error(ErrorData::internal_error(e.to_string(), None));
    }
    crate::gateway::call::tasks::rewrite_ids(&mut handle, &mut |_| Some(outer.clone()));
    Answer::Task(handle)
}

async fn forward(
    shared: &Shared,
    conn: &Connection,
    tool: &str,
    (mut params, extra): (CallToolRequestParams, &Map<String, Value>),
    ctx: &RequestContext<RoleServer>,
) -> (Answer, Option<Received>) {
    // The agent's progress token is mapped, not forwarded (rmcp sets its own downstream);
    // any other _meta the agent sent travels on.
    let mut meta = params.meta.take().unwrap_or_default();
    meta.0 .0.extend(ctx.meta.0 .0.clone());
    let up_token = meta.get_progress_token();
    meta.0 .0.remove("progressToken");
    crate::gateway::agent::versions::strip_envelope(&mut meta.0 .0);
    params.name = Cow::Owned(tool.to_string());
    let progress_to = up_token.map(|token| UpTarget {
        peer: ctx.peer.clone(),
        token,
    });
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let with_meta = (!meta.0 .0.is_empty()).then_some(meta);
    let asks_task = extra.contains_key("task");
    match conn
        .request_raw(
            request,
            shared.limits.call_timeout,
            Some(&ctx.ct),
            progress_to,
            with_meta,
            extra,
        )
        .await
    {
        Ok(raw) => match crate::gateway::call::answer::received(&conn.server, raw, asks_task) {
            Ok(got) => got,
            Err(e) => (
                Answer::Error(ErrorData::internal_error(e.to_string(), None)),
                None,
            ),
        },
        Err(ForwardError::Server(e)) => (Answer::Error(e), None),
        Err(e) => (
            Answer::Error(ErrorData::internal_error(e.to_string(), None)),
            None,
        ),
    }
}

/// What the approval stage decided for one call.
#[derive(Default)]
struct Approved {
    /// Why the call is refused (`None`: it goes on).
    denial: Option<String>,
    /// The approver's outcome, for an escalation.
    escalation: Option<ApprovalOutcome>,
    /// The scope the person chose to remember with this approval.
    remembered_scope: Option<RememberScope>,
    /// The remembered scope that approved this call without asking.
    approved_by_scope: Option<RememberScope>,
}

impl Approved {
    fn refused(why: String) -> Approved {
        Approved {
            denial: Some(why),
            ..Approved::default()
        }
    }
}

/// Stage 3 for an escalation: a remembered scope that covers it approves it without asking
/// (a deny is never looked up); a grant Palisade would never make is refused unasked;
/// otherwise the approver is asked, offered the scope this call could remember.
async fn approve(
    shared: &Shared,
    slot: &Slot,
    call: &CallInfo<'_>,
    verdict: &crate::gateway::stages::PolicyVerdict,
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
        let grants = shown_grants(slot, path_args, cwd);
        // The agent may cancel while a person is being asked: rmcp only cancels the
        // request's token, so stop asking (the approver's question is withdrawn as its
        // future is dropped) rather than keep a person answering for nobody.
        let approval = tokio::select! {
            approval = shared
                .stages
                .approver
                .approve_offering(call, verdict, offer.as_ref(), &grants) => approval,
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

/// What stages 4 and 5 did with one call.
struct Forwarded {
    answer: Answer,
    /// The server's own result, when it answered.
    received: Option<Received>,
    /// Refused by a stage (audited as denied).
    refused: bool,
    /// The verdict the record names (a roots-check refusal replaces the policy's).
    decided: crate::gateway::stages::PolicyVerdict,
    enforcement: Option<Enforcement>,
    approved_roots: Vec<(std::path::PathBuf, crate::sandbox::spec::Access)>,
    network_refusals: Vec<crate::egress::RefusalEvent>,
    /// The server's session version, when the call reached it.
    server_protocol: Option<String>,
}

impl Forwarded {
    fn refused(
        text: String,
        decided: crate::gateway::stages::PolicyVerdict,
        enforcement: Option<Enforcement>,
    ) -> Forwarded {
        Forwarded {
            answer: Answer::Result(CallToolResult::error(vec![ContentBlock::text(text)])),
            received: None,
            refused: true,
            decided,
            enforcement,
            approved_roots: Vec::new(),
            network_refusals: Vec::new(),
            server_protocol: None,
        }
    }
}

/// Stages 4 and 5: widen the roots and sandbox (approved escalations only), then hold the
/// server's gate for reading (a widening waits for this call, and this call waits for one in
/// progress, so the roots check and the forward see the same server); check every path
/// argument against the server's CURRENT roots (canonicalised on the host: symlinks, `..`,
/// `~`, `file://`); forward to the process the gate admitted us to, watching the egress proxy
/// for refusals attributed to this server meanwhile.
#[allow(clippy::too_many_arguments)]
async fn widen_and_forward(
    shared: &Shared,
    slot: &Slot,
    tool: &str,
    params: (CallToolRequestParams, &Map<String, Value>),
    path_args: Option<&[PathArg<'_>]>,
    approved: bool,
    decided: crate::gateway::stages::PolicyVerdict,
    ctx: &RequestContext<RoleServer>,
    resolved: &CallPaths,
) -> Forwarded {
    let cwd = slot.req.as_ref().and_then(|r| r.cwd.as_deref());
    let mut out = Forwarded {
        answer: Answer::Error(ErrorData::internal_error("not forwarded", None)),
        received: None,
        refused: false,
        decided,
        enforcement: slot.snapshot().enforcement,
        approved_roots: Vec::new(),
        network_refusals: Vec::new(),
        server_protocol: None,
    };
    // The resolutions made before the policy are reused only when nothing was awaited since:
    // an approval or a widening in progress gives the disk time to change, so the roots
    // check then resolves every path again, after the wait, as it always did.
    let mut fresh = None;
    let gate = if approved {
        widen::for_approved(slot, path_args.unwrap_or(&[]), cwd)
            .await
            .map(|(permit, added)| {
                out.approved_roots = added;
                permit
            })
    } else if let Ok(permit) = slot.gate.try_read() {
        fresh = Some(resolved);
        Ok(permit)
    } else {
        Ok(slot.gate.read().await)
    };
    let _permit = match gate {
        Ok(permit) => permit,
        Err(e) => {
            out.answer = Answer::Error(ErrorData::internal_error(e.to_string(), None));
            return out;
        }
    };
    let set = slot.roots.current();
    if let Err(refusal) = check_paths(&set, path_args, &slot.name, tool, fresh) {
        let text = refusal.to_string();
        out.refused = true;
        out.decided = stage_refusal(ROOTS_CHECK_RULE, &text);
        out.answer = Answer::Result(CallToolResult::error(vec![ContentBlock::text(text)]));
        return out;
    }
    let snapshot = slot.snapshot();
    out.enforcement = snapshot.enforcement.clone();
    let Some(conn) = snapshot.live.as_ref().map(|l| l.conn.clone()) else {
        out.answer = Answer::Error(not_running(&slot.name, &snapshot.status));
        return out;
    };
    let mut events = shared
        .egress
        .as_ref()
        .filter(|_| slot.egress_allowed())
        .map(|p| p.subscribe());
    out.server_protocol = Some(conn.info.protocol_version.as_str().to_string());
    // A 2026-07-28 call stays findable while it runs: a request its server sends meanwhile
    // goes to the agent in this call's next round.
    let _open =
        crate::gateway::agent::mrtr::current().map(|r| shared.mrtr_open.open(&slot.name, r));
    let (answer, received) = forward(shared, &conn, tool, params, ctx).await;
    if let Some(rx) = events.as_mut() {
        out.network_refusals = crate::gateway::network::drain(rx, &slot.name);
    }
    out.answer = answer;
    out.received = received;
    out
}

/// `policyDecision.rule` of a call the agent's own declared roots refused.
pub const AGENT_ROOTS_RULE: &str = "agent-roots";
/// `policyDecision.rule` of a call whose path arguments fell outside the server's roots.
pub const ROOTS_CHECK_RULE: &str = "roots-check";
/// A deny recorded as decided by a gateway stage other than the policy.
pub(in crate::gateway) fn stage_refusal(
    rule: &str,
    why: &str,
) -> crate::gateway::stages::PolicyVerdict {
    crate::gateway::stages::PolicyVerdict {
        decision: Decision::Deny,
        rule: Some(rule.to_string()),
        reason: why.to_string(),
    }
}

pub(in crate::gateway) fn audit_failed(e: &crate::gateway::stages::AuditError) -> ErrorData {
    ErrorData::internal_error(
        format!("the call was not completed because the audit log could not be written ({e}); palisade fails closed"),
        None,
    )
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

/// Why the roots check refused a call (the text is the agent's error and the audit reason).
#[derive(Debug, thiserror::Error)]
pub enum RootsRefusal {
    #[error(
        "FORBIDDEN: the path arguments of {server}/{tool} are not known to the policy, so they \
         cannot be checked against the server's roots"
    )]
    Unannotated { server: String, tool: String },
    #[error("{source} [server {server}]")]
    Guard {
        server: String,
        source: crate::roots::guard::GuardError,
    },
}

/// Checks every path argument against the server's current roots (see `RootGuard`).
fn check_paths(
    set: &RootSet,
    path_args: Option<&[PathArg<'_>]>,
    server: &str,
    tool: &str,
    resolved: Option<&CallPaths>,
) -> Result<(), RootsRefusal> {
    let Some(args) = path_args else {
        return Err(RootsRefusal::Unannotated {
            server: server.to_string(),
            tool: tool.to_string(),
        });
    };
    for a in args {
        let need = if a.writes() { Need::Write } else { Need::Read };
        let checked = match resolved {
            Some(paths) => set.guard.check_shared(a.value, need, paths),
            None => set.guard.check(a.value, need),
        };
        if let Err(source) = checked {
            return Err(RootsRefusal::Guard {
                server: server.to_string(),
                source,
            });
        }
    }
    Ok(())
}

/// Request `_meta` without the agent's progress token (used by the other forwards).
pub fn forwarded_meta(ctx: &RequestContext<RoleServer>) -> Option<RequestMetaObject> {
    let mut meta = ctx.meta.clone();
    meta.0 .0.remove("progressToken");
    crate::gateway::agent::versions::strip_envelope(&mut meta.0 .0);
    (!meta.0 .0.is_empty()).then_some(meta)
}

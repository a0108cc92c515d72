//! The call pipeline for `tools/call`, one explicit stage per step:
//!
//! route → agent's roots → policy → approval (remembered scopes first; `approve.rs`) → widen
//! roots/sandbox → roots check → forward (`forward.rs`) → annotate → audit
//!
//! `call_tool` reads as those stages; once routed, the call in flight (`InFlight`) carries
//! what the later ones need. Every call that reaches `route` successfully produces exactly
//! one audit record, written before the answer goes upstream; when the audit sink fails, the
//! call fails closed with an error saying so. Policy and approval refusals are `isError`
//! results (the model reads them); gateway failures (server down, timeout, crash, audit) are
//! JSON-RPC errors.
//! Never: hold a std lock across an await. The one deliberate wait is the server's gate
//! (`Slot::gate`): a call waits for a roots widening of its server in progress, and a
//! widening waits for the calls in flight (each bounded by the call timeout).

use std::time::Instant;

use serde_json::{Map, Value};

use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::gateway::agent::open_calls::Caller;
use crate::gateway::call::tasks::TaskEntry;
use crate::gateway::raw_json::RawJson;
use crate::gateway::registry::Route;
use crate::gateway::stages::{
    request_id_string, ApprovalOutcome, CallInfo, CallRecord, Decision, PolicyVerdict, RecordServer,
};
use crate::gateway::state::{Shared, Slot};
use crate::roots::canon::Base;
use crate::roots::resolved::CallPaths;

use super::answer::*;
use super::approve::{approve, Approved};
use super::as_sent::AsSent;
use super::forward::{widen_and_forward, Forwarded};
use super::route::*;
use super::stage::{audit_failed, stage_refusal, InFlight, AGENT_ROOTS_RULE};

pub use super::approve::REMEMBERED;
pub use super::forward::RootsRefusal;

/// Runs one `tools/call` through every stage; the result is the JSON text the agent is sent
/// (the server's own bytes when no stage changed it).
///
/// `sent` holds the request's params the typed view does not model (`task`, a field of a
/// newer revision), and the params' own text when it may go to the server as written.
pub async fn call_tool(
    shared: &Shared,
    params: CallToolRequestParams,
    sent: &AsSent,
    ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    let started = Instant::now();
    // Stage 1: route (a refusal is audited too).
    let Route { server, name: tool } = routed(shared, &params, &ctx, started).await?;
    let slot = shared.slots[server].clone();
    let here = InFlight {
        shared,
        slot: &slot,
        server,
        tool: &tool,
        ctx: &ctx,
        started,
    };
    let arguments = params.arguments.clone().unwrap_or_default();
    let set = slot.roots.current();
    let (cwd, home) = (here.cwd(), slot.roots.options().home.as_deref());
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
    let paths = path_args.as_deref();
    // Stage 1b: the agent's own declared roots narrow what it may ask for (never widen).
    let narrowed = paths.and_then(|args| {
        shared
            .upstream_roots
            .refuse(args, &set, cwd, home, &resolved)
    });
    // Stage 2: policy.
    let verdict = shared.stages.policy.decide(&call);
    // Stage 3: approval (escalations only).
    let approval = here
        .approval(narrowed.as_deref(), &verdict, &call, paths)
        .await;
    if let Some(question) = asked_of_the_client(&here, &params.name, &arguments, &approval) {
        return Ok(question);
    }
    // The record names the stage that decided: a refusal by the agent's own roots is not
    // the policy's "allow".
    let decided = match &narrowed {
        Some(why) => stage_refusal(AGENT_ROOTS_RULE, why),
        None => verdict,
    };
    // Stages 4 and 5: widen (approved escalations), check the paths, forward.
    let mut run = match &approval.denial {
        Some(text) => Forwarded::refused(text.clone(), decided, slot.snapshot().enforcement),
        // Refused before the server starts a task that could not be remembered.
        None if sent.extra.contains_key("task") && !shared.tasks.has_room() => Forwarded::refused(
            crate::gateway::call::tasks::TaskError::Full.to_string(),
            decided,
            slot.snapshot().enforcement,
        ),
        None => {
            let approved = matches!(approval.escalation, Some(ApprovalOutcome::Approved { .. }))
                .then_some(approval.grants.as_slice());
            let params = (params, sent);
            widen_and_forward(&here, params, paths, approved, decided, &resolved).await
        }
    };
    // Stage 6: annotate what the sandbox caused; a task handle is remembered.
    here.annotate(paths, &arguments, &mut run);
    // Stage 7: audit, before anything goes upstream.
    here.audit(arguments, approval, run)
}

/// Stage 1: the server and tool a call names. A call to a server that is (re)starting waits
/// for it, bounded by the start timeout; a name no server offers is refused, and audited
/// like every call.
async fn routed(
    shared: &Shared,
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    started: Instant,
) -> Result<Route, ErrorData> {
    match route_waiting(shared, &params.name).await {
        Ok(route) => Ok(route),
        Err((e, rule)) => {
            let record = unroutable_record(shared, params, ctx, &e, rule, started);
            if let Err(audit) = shared.stages.audit.record(&record) {
                tracing::error!(tool = %params.name, "audit write failed: {audit}");
                return Err(audit_failed(&audit));
            }
            Err(e)
        }
    }
}

/// A 2026-07-28 agent is asked through an input-required result: nothing is decided,
/// forwarded or audited in this round; its retry carries the answer.
fn asked_of_the_client(
    here: &InFlight<'_>,
    name: &str,
    arguments: &Map<String, Value>,
    approval: &Approved,
) -> Option<RawJson> {
    use crate::gateway::agent::mrtr;
    let question = mrtr::current().and_then(|r| r.question())?;
    // The grants the question shows are the ones its answer approves.
    let handle = here.shared.mrtr.insert(
        mrtr::fingerprint(name, arguments),
        Instant::now(),
        approval.grants.clone(),
    );
    tracing::info!(server = %here.slot.name, tool = %here.tool, "escalation: asking the client (input required)");
    Some(raw_json(&mrtr::input_required(&question, &handle)))
}

/// The later stages, as methods of the call in flight.
impl InFlight<'_> {
    /// Stage 3: an allowed call goes on, a denied one is refused with the policy's reason,
    /// one the agent's own roots refused is refused with theirs, and an escalation is
    /// decided by `approve` (remembered scopes first, then the approver).
    async fn approval(
        &self,
        narrowed: Option<&str>,
        verdict: &PolicyVerdict,
        call: &CallInfo<'_>,
        paths: Option<&[crate::policy::PathArg<'_>]>,
    ) -> Approved {
        match (narrowed, verdict.decision) {
            (Some(why), _) => Approved::refused(why.to_string()),
            (None, Decision::Allow) => Approved::default(),
            (None, Decision::Deny) => {
                Approved::refused(format!("DENIED by policy: {}", verdict.reason))
            }
            (None, Decision::Escalate) => {
                approve(self.shared, self.slot, call, verdict, paths, self.ctx).await
            }
        }
    }

    /// Stage 6: network refusals first (they are certain), then sandbox-caused errors are
    /// marked; only an error has its paths resolved (file system calls). A task handle is
    /// remembered under the id the agent will use.
    fn annotate(
        &self,
        path_args: Option<&[crate::policy::PathArg<'_>]>,
        arguments: &Map<String, Value>,
        run: &mut Forwarded,
    ) {
        let slot = self.slot;
        let answer = std::mem::replace(&mut run.answer, Answer::Error(not_annotated()));
        let relayed = (answer, run.received.take());
        let (answer, received) = mark_refusals(&run.network_refusals, &slot.name, relayed);
        let call_paths = if answer.is_error() {
            let home = slot.roots.options().home.as_deref();
            call_paths(path_args, self.cwd(), home)
        } else {
            Vec::new()
        };
        run.answer = match annotate(slot, run.enforcement.as_ref(), &call_paths, answer) {
            Answer::Task(handle) => {
                let entry = TaskEntry {
                    server: self.server,
                    inner: String::new(),
                    tool: self.tool.to_string(),
                    arguments: arguments.clone(),
                    paths: super::answer::call_paths(
                        path_args,
                        self.cwd(),
                        slot.roots.options().home.as_deref(),
                    ),
                    decided: run.decided.clone(),
                    request_id: request_id_string(&self.ctx.id),
                    made_by: crate::gateway::agent::open_calls::agent_of(self.ctx),
                    created: Instant::now(),
                    expires: task_expiry(&handle),
                    audited: false,
                };
                let made_by = Caller::of(self.ctx);
                remember_task(self.shared, slot, handle, entry, &made_by)
            }
            other => other,
        };
        run.received = received;
    }

    /// Stage 7: the call's one audit record, written before anything goes upstream; when it
    /// cannot be written the call fails closed.
    fn audit(
        &self,
        arguments: Map<String, Value>,
        approval: Approved,
        run: Forwarded,
    ) -> Result<RawJson, ErrorData> {
        let ctx = self.ctx;
        let record = CallRecord {
            escalation_result: approval.escalation,
            duration_ms: self.started.elapsed().as_millis() as u64,
            approved_roots: run.approved_roots,
            network_refusals: run.network_refusals,
            remembered_scope: approval.remembered_scope,
            approved_by_scope: approval.approved_by_scope,
            protocol: run
                .server_protocol
                .map(|server| crate::audit::ProtocolVersions {
                    agent: crate::gateway::agent::versions::agent_version(ctx)
                        .unwrap_or_else(|| "unknown".into()),
                    server,
                }),
            task_id: task_field(&run.answer, "taskId"),
            task_status: task_field(&run.answer, "status"),
            ..CallRecord::new(
                RecordServer::running(&self.slot.name, run.enforcement),
                self.tool,
                request_id_string(&ctx.id),
                arguments,
                run.decided,
                outcome_of(&run.answer, run.refused),
            )
        };
        if let Err(e) = self.shared.stages.audit.record(&record) {
            tracing::error!(server = %self.slot.name, tool = %self.tool, "audit write failed: {e}");
            return Err(audit_failed(&e));
        }
        match run.answer {
            Answer::Relayed(raw) => Ok(raw),
            Answer::Result(r) => Ok(raw_json(&result_json(r, run.received))),
            Answer::Error(e) => Err(e),
            Answer::Task(handle) => Ok(raw_json(&handle)),
        }
    }
}

/// The placeholder an answer leaves while stage 6 works on it (never seen by anyone).
fn not_annotated() -> ErrorData {
    ErrorData::internal_error("not annotated", None)
}

/// Remembers the task a call created and gives the agent its namespaced id; a handle with
/// no id, or one the table cannot take, becomes the call's error.
fn remember_task(
    shared: &Shared,
    slot: &Slot,
    mut handle: Value,
    mut entry: TaskEntry,
    made_by: &Caller,
) -> Answer {
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
    entry.inner = inner.clone();
    if let Err(e) = shared.tasks.insert(outer.clone(), entry) {
        // The server runs a task nobody can reach now (a race for the table's last place):
        // asked to cancel it rather than left running unseen. Not for a reused id, which
        // would cancel the task already known under it.
        if e == crate::gateway::call::tasks::TaskError::Full {
            cancel_unreachable_task(slot, inner);
        }
        return Answer::Error(ErrorData::internal_error(e.to_string(), None));
    }
    // The task's own requests (sampling, elicitation naming it) go to the agent that made it.
    shared.open_calls.task_made(&slot.name, &inner, made_by);
    crate::gateway::call::tasks::rewrite_ids(&mut handle, &mut |_| Some(outer.clone()));
    Answer::Task(handle)
}

/// When the server forgets a task, by its handle's `ttl` (milliseconds).
fn task_expiry(handle: &Value) -> Option<Instant> {
    let ttl = handle.pointer("/task/ttl").and_then(Value::as_u64)?;
    Instant::now().checked_add(std::time::Duration::from_millis(ttl))
}

/// Sends `tasks/cancel` for the server's task `inner`, in the background (best effort: the
/// call is answered with the refusal meanwhile).
fn cancel_unreachable_task(slot: &Slot, inner: String) {
    let Some(live) = slot.snapshot().live else {
        return;
    };
    let server = slot.name.clone();
    tokio::spawn(async move {
        let mut params = Map::new();
        params.insert("taskId".into(), Value::String(inner));
        let sent = live
            .conn
            .send(
                "tasks/cancel",
                params,
                std::time::Duration::from_secs(10),
                crate::gateway::server::request::OnBehalf::palisade(),
            )
            .await;
        if let Err(e) = sent {
            tracing::warn!(%server, "could not cancel a task it could not remember: {e}");
        }
    });
}

/// Request `_meta` without the agent's progress token (used by the other forwards).
pub fn forwarded_meta(ctx: &RequestContext<RoleServer>) -> Option<RequestMetaObject> {
    let mut meta = ctx.meta.clone();
    meta.0 .0.remove("progressToken");
    crate::gateway::agent::versions::strip_envelope(&mut meta.0 .0);
    (!meta.0 .0.is_empty()).then_some(meta)
}

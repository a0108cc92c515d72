//! The agent's `tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list`: each routed to
//! the server that owns the task (by the table in `tasks.rs`), with the task id the server
//! knows, and answered with the id the agent knows. The task's completion (its result
//! fetched, or a final status seen) is audited once, with the decision that let the call
//! through and the task's final status.
//!
//! Never: forward a request for a task not created through this gateway by the same agent;
//! let a server's `tasks/list` show the agent tasks it did not create here.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use rmcp::model::ErrorData;
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use crate::gateway::agent::open_calls::agent_of;
use crate::gateway::call::pipeline::forwarded_meta;
use crate::gateway::call::tasks::{self, TaskEntry};
use crate::gateway::server::request::{Connection, ForwardError, OnBehalf};
use crate::gateway::stages::{CallOutcome, CallRecord};
use crate::gateway::state::Shared;

/// At most this many pages of one server's `tasks/list` are read for one request.
const MAX_LIST_PAGES: usize = 100;

/// The `tasks/*` methods this module answers.
pub const METHODS: [&str; 4] = ["tasks/get", "tasks/result", "tasks/cancel", "tasks/list"];

/// Answers one `tasks/*` request; the result is the JSON the agent is sent.
pub async fn handle(
    shared: &Shared,
    method: &str,
    params: Option<&RawValue>,
    ctx: &RequestContext<RoleServer>,
) -> Result<Value, ErrorData> {
    let mut params = match params.map(|p| serde_json::from_str::<Map<String, Value>>(p.get())) {
        None => Map::new(),
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            return Err(ErrorData::invalid_params(
                format!("{method}: params are not an object ({e})"),
                None,
            ))
        }
    };
    if method == "tasks/list" {
        return list(shared, ctx).await;
    }
    let outer = tasks::requested_id(&params)
        .ok_or_else(|| ErrorData::invalid_params(format!("{method}: `taskId` is missing"), None))?
        .to_string();
    // Another agent's task is unknown to this one, as a task never made is: its existence is
    // not told either.
    let agent = agent_of(ctx);
    let entry = shared
        .tasks
        .get(&outer)
        .filter(|e| e.made_by == agent)
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!("{method}: unknown task `{outer}` (only tasks this agent created through this gateway can be reached)"),
                None,
            )
        })?;
    let conn = connection(shared, entry.server)?;
    params.insert("taskId".into(), Value::String(entry.inner.clone()));
    params.remove("_meta");
    if let Some(meta) = forwarded_meta(ctx) {
        if let Ok(m) = serde_json::to_value(meta) {
            params.insert("_meta".into(), m);
        }
    }
    // `tasks/result` waits for the task to finish: as long as a call may take. A request
    // the server sends meanwhile (one naming this task, while `tasks/result` waits for it)
    // finds its way to this request's agent.
    let answer = conn
        .send(
            method,
            params,
            shared.limits.call_timeout,
            OnBehalf::of(ctx).reading_task(&entry.inner),
        )
        .await;
    let server = conn.server.clone();
    let versions = crate::audit::ProtocolVersions {
        agent: crate::gateway::agent::versions::agent_version(ctx)
            .unwrap_or_else(|| "unknown".into()),
        server: conn.info.protocol_version.as_str().to_string(),
    };
    let unprefixed = shared.slots[entry.server].filters.unprefixed;
    let mut rename =
        |inner: &str| (inner == entry.inner).then(|| tasks::outer_id(&server, unprefixed, inner));
    match answer {
        Ok(raw) => {
            let mut v: Value = serde_json::from_str(raw.get()).map_err(|e| {
                ErrorData::internal_error(format!("unreadable answer from `{server}`: {e}"), None)
            })?;
            tasks::rewrite_ids(&mut v, &mut rename);
            match method {
                "tasks/result" => {
                    // Its sandbox refusals are marked as a direct call's are.
                    crate::gateway::call::answer::annotate_task_result(
                        &shared.slots[entry.server],
                        &entry.paths,
                        &mut v,
                    );
                    let outcome = result_outcome(&v);
                    audit_completion(shared, (&outer, &entry, &versions), "completed", outcome)?;
                }
                _ => {
                    if let Some(status) = tasks::status_of(&v).filter(|s| tasks::is_terminal(s)) {
                        if status != "completed" {
                            let status = status.to_string();
                            let outcome = CallOutcome::Error {
                                error: format!("the task ended {status}"),
                            };
                            audit_completion(
                                shared,
                                (&outer, &entry, &versions),
                                &status,
                                outcome,
                            )?;
                        }
                    }
                }
            }
            Ok(v)
        }
        Err(ForwardError::Server(e)) => {
            if method == "tasks/result" {
                let outcome = CallOutcome::Error {
                    error: e.message.to_string(),
                };
                audit_completion(shared, (&outer, &entry, &versions), "failed", outcome)?;
            }
            Err(e)
        }
        Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
    }
}

/// Every server's tasks that were created here, under the ids the agent knows. A server
/// that fails to answer is left out (and logged); the agent still sees the others'.
async fn list(shared: &Shared, ctx: &RequestContext<RoleServer>) -> Result<Value, ErrorData> {
    let agent = agent_of(ctx);
    let mut all = Vec::new();
    for (idx, slot) in shared.slots.iter().enumerate() {
        let Some(live) = slot.snapshot().live else {
            continue;
        };
        let lists = live
            .conn
            .tasks
            .as_ref()
            .is_some_and(|c| c.get("list").is_some());
        if !lists {
            continue;
        }
        // Every page of the server's list (bounded), so no task of this agent's is left out
        // on a later page; the agent gets them all on one.
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let mut params = Map::new();
            if let Some(c) = cursor.take() {
                params.insert("cursor".into(), Value::String(c));
            }
            let answer = live
                .conn
                .send(
                    "tasks/list",
                    params,
                    shared.limits.call_timeout,
                    OnBehalf::of(ctx),
                )
                .await;
            let mut v: Value = match answer.map(|raw| serde_json::from_str(raw.get())) {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    tracing::warn!(server = %slot.name, "unreadable tasks/list answer: {e}");
                    break;
                }
                Err(e) => {
                    tracing::warn!(server = %slot.name, "tasks/list failed: {e}");
                    break;
                }
            };
            if let Some(Value::Array(page)) = v.get_mut("tasks").map(std::mem::take) {
                items.extend(page);
            }
            cursor = v
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        for mut item in items {
            let mut known = false;
            tasks::rewrite_ids(&mut item, &mut |inner| {
                let outer = tasks::outer_id(&slot.name, slot.filters.unprefixed, inner);
                let found = shared
                    .tasks
                    .get(&outer)
                    .is_some_and(|e: TaskEntry| e.server == idx && e.made_by == agent);
                known |= found;
                found.then_some(outer)
            });
            if known {
                all.push(item);
            }
        }
    }
    Ok(serde_json::json!({ "tasks": all }))
}

fn connection(shared: &Shared, idx: usize) -> Result<Connection, ErrorData> {
    let slot = &shared.slots[idx];
    let snap = slot.snapshot();
    match snap.live {
        Some(live) => Ok(live.conn.clone()),
        None => Err(crate::gateway::call::route::not_running(
            &slot.name,
            &snap.status,
        )),
    }
}

/// Writes a completion record for each task of server `idx` not yet audited, and forgets
/// them all: the server's process ended (`why`), so they ended unseen with it.
pub fn end_with_server(shared: &Shared, idx: usize, why: &str) {
    let slot = &shared.slots[idx];
    for (outer, entry) in shared.tasks.take_server(idx) {
        let outcome = CallOutcome::Error {
            error: format!(
                "the task ended with its server's process ({why}) before its result was fetched"
            ),
        };
        let record = completion_record(shared, (&outer, &entry, None), "failed", outcome);
        if let Err(e) = shared.stages.audit.record(&record) {
            tracing::error!(server = %slot.name, "audit write failed for a task its server's end took: {e}");
        }
    }
}

/// How a fetched task result ended, for the audit record.
fn result_outcome(v: &Value) -> CallOutcome {
    if v.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = v
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        CallOutcome::Error {
            error: text.to_string(),
        }
    } else {
        CallOutcome::Success
    }
}

/// A task's completion record: the creating call's tool, arguments, decision and request id
/// (the two records of one task share it), with the task's final status.
fn completion_record(
    shared: &Shared,
    (outer, entry, versions): (&str, &TaskEntry, Option<&crate::audit::ProtocolVersions>),
    status: &str,
    outcome: CallOutcome,
) -> CallRecord {
    CallRecord {
        kind: Some(crate::audit::RecordKind::TaskResult),
        duration_ms: entry.created.elapsed().as_millis() as u64,
        task_id: Some(outer.to_string()),
        task_status: Some(status.to_string()),
        protocol: versions.cloned(),
        ..CallRecord::new(
            shared.slots[entry.server].record_server(),
            &entry.tool,
            entry.request_id.clone(),
            entry.arguments.clone(),
            entry.decided.clone(),
            outcome,
        )
    }
}

/// Writes the task's completion record, once; an audit failure fails the request.
fn audit_completion(
    shared: &Shared,
    (outer, entry, versions): (&str, &TaskEntry, &crate::audit::ProtocolVersions),
    status: &str,
    outcome: CallOutcome,
) -> Result<(), ErrorData> {
    let slot = &shared.slots[entry.server];
    let record = completion_record(shared, (outer, entry, Some(versions)), status, outcome);
    shared.tasks.audit_once(outer, || {
        shared.stages.audit.record(&record).map_err(|e| {
            tracing::error!(server = %slot.name, "audit write failed: {e}");
            ErrorData::internal_error(
                format!("the task's result was not delivered because the audit log could not be written ({e}); palisade fails closed"),
                None,
            )
        })
    })
}

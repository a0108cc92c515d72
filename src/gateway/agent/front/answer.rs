//! A relayed request answered: each on its own task with its own cancellation, from the
//! params as the agent wrote them (`tools/call`, `tasks/*`, the routed requests, an
//! extension's request); the answer written as one line by the task that made it.

use std::sync::Arc;

use rmcp::model::{ErrorData, RequestId};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::lines::{error_line, result_out};
use super::route::{is_task_method, Head};
use crate::gateway::agent::{mrtr, running, task_bridge, tasks_v2, versions};
use crate::gateway::busy_poll::BusyPoll;
use crate::gateway::call::as_sent::{self, AsSent};
use crate::gateway::line_out::LineOut;
use crate::gateway::raw_json::RawJson;
use crate::gateway::state::Shared;

/// Relayed requests still running, by their id (as JSON text).
pub(super) type Running = Arc<running::Running<String>>;

/// The map key of a request id: its JSON text, normalised through `RequestId`.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// Cancels the relayed request a `notifications/cancelled` names; `false` when it names
/// none of ours (rmcp's session then takes the notification).
pub(super) fn cancel_relayed(params: Option<&RawValue>, running: &Running) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Cancelled {
        request_id: RequestId,
    }
    let Some(Ok(c)) = params.map(|p| serde_json::from_str::<Cancelled>(p.get())) else {
        return false;
    };
    match running.get(&id_key(&c.request_id)) {
        Some(ct) => {
            ct.cancel();
            true
        }
        None => false,
    }
}

/// Starts one relayed request on its own task.
pub(super) fn relay(
    head: &Head<'_>,
    shared: &Arc<Shared>,
    out: &LineOut,
    running: &Running,
    busy: Option<&Arc<BusyPoll>>,
) {
    let (Some(raw_id), Some(method)) = (head.id, head.method.as_deref()) else {
        return;
    };
    let raw_id: Box<RawValue> = raw_id.to_owned();
    let out = out.clone();
    let Ok(id) = serde_json::from_str::<RequestId>(raw_id.get()) else {
        let err =
            ErrorData::invalid_request("the request id is neither a string nor a number", None);
        tokio::spawn(async move {
            let _ = out.send(error_line(raw_id.get(), &err)).await;
        });
        return;
    };
    let method = method.to_string();
    let params: Option<Box<RawValue>> = head.params.map(ToOwned::to_owned);
    let shared = shared.clone();
    let started = running.start(id_key(&id));
    // Counted until its answer is made: busy polling spins only while one at most is open.
    // A task request is not: `tasks/result` may stay open for as long as its task runs.
    let in_flight = busy
        .filter(|_| !is_task_method(&method))
        .map(|b| b.request());
    let ct = started.token();
    // Boxed: a call's future is about 11 KB (each stage's state nested in the one before), and
    // tokio moves a spawned future into its task and writes the task's stage over it when it
    // ends; in a box each of those copies a pointer, not the whole future (docs/benchmarks.md,
    // "Calls spawned boxed"). tokio boxes a future itself only above 16 KB.
    tokio::spawn(Box::pin(async move {
        let answer = match shared.upstream.get() {
            None => Err(ErrorData::invalid_request(
                "the session is not initialized: send `initialize` first",
                None,
            )),
            Some(peer) => {
                let mut ctx = RequestContext::new(id, peer);
                ctx.ct = ct;
                answer(&shared, &method, params.as_deref(), ctx).await
            }
        };
        drop(started);
        drop(in_flight);
        let line = match answer {
            Ok(result) => result_out(raw_id.get(), result),
            Err(e) => error_line(raw_id.get(), &e).into(),
        };
        let _ = out.send(line).await;
    }));
}

/// Answers one relayed request.
async fn answer(
    shared: &Arc<Shared>,
    method: &str,
    params: Option<&RawValue>,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    if method == "tools/call" {
        let (typed, sent) = call_params(params)?;
        return answer_call(shared, typed, sent, ctx).await;
    }
    if crate::gateway::agent::service::READ_RAW.contains(&method) {
        return answer_routed(shared, method, params, ctx).await;
    }
    // Every other request's `_meta` is read from its params, as rmcp's session would.
    if let Some(meta) = params.and_then(|p| request_meta(p).ok().flatten()) {
        ctx.meta = meta;
    }
    if !is_task_method(method) {
        // Only an extension's request is relayed otherwise (see `read_lines`).
        let upstream = crate::gateway::agent::service::Upstream {
            shared: shared.clone(),
            sessions: None,
        };
        upstream
            .pass_through(method, params, &ctx)
            .await
            .map(RawJson::from)
    } else {
        answer_task(shared, method, params, &ctx).await
    }
}

/// Answers one `tasks/*` request (its `_meta` already in `ctx`): a 2026-07-28 agent with the
/// tasks extension through the bridge, any other through the servers' own tasks; shared by
/// this front and the HTTP front's fast path.
pub(crate) async fn answer_task(
    shared: &Arc<Shared>,
    method: &str,
    params: Option<&RawValue>,
    ctx: &RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    use crate::gateway::call::answer::raw_json;
    versions::check_envelope(&ctx.meta)?;
    let modern = versions::is_modern(&ctx.meta);
    let mut result = if modern && tasks_v2::declared(&ctx.meta) {
        task_bridge::answer(shared, method, params, ctx).await?
    } else if method == "tasks/update" {
        return Err(task_bridge::not_updatable());
    } else {
        crate::gateway::call::task_relay::handle(shared, method, params, ctx).await?
    };
    if modern {
        versions::stamp_result(method, &mut result);
    }
    Ok(raw_json(&result))
}

/// Answers one routed request (`service::READ_RAW`: a prompt, a resource, a completion) from
/// its params as the agent wrote them; shared by this front and the HTTP front's fast path.
/// Its `_meta` is read here, as rmcp's session would; a 2026-07-28 request's envelope is
/// checked and its result stamped.
pub(crate) async fn answer_routed(
    shared: &Arc<Shared>,
    method: &str,
    params: Option<&RawValue>,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    if let Some(meta) = params.and_then(|p| request_meta(p).ok().flatten()) {
        ctx.meta = meta;
    }
    versions::check_envelope(&ctx.meta)?;
    let upstream = crate::gateway::agent::service::Upstream {
        shared: shared.clone(),
        sessions: None,
    };
    let result = upstream.answer_read(method, params, &ctx).await?;
    if versions::is_modern(&ctx.meta) {
        return Ok(versions::stamp_raw(method, result).into());
    }
    Ok(result.into())
}

/// Answers one `tools/call` from its params already read (`call_params`, or the HTTP
/// front's fast path, which reads them once while deciding to take the call).
pub(crate) async fn answer_call(
    shared: &Arc<Shared>,
    mut typed: rmcp::model::CallToolRequestParams,
    sent: AsSent,
    mut ctx: RequestContext<RoleServer>,
) -> Result<RawJson, ErrorData> {
    use crate::gateway::call::answer::raw_json;
    if let Some(meta) = typed.meta.take() {
        ctx.meta = meta;
    }
    versions::check_envelope(&ctx.meta)?;
    let modern = versions::is_modern(&ctx.meta);
    // Counted while it runs: shutdown waits for it so that its audit record is written.
    let _in_flight = shared.calls.token();
    if modern {
        let mut sent = sent;
        // A tool that must run as a task, for an agent with the tasks extension: the
        // server is asked for a 2025-11-25 task, and its handle is given in 2026-07-28.
        let as_task = tasks_v2::declared(&ctx.meta)
            && !sent.extra.contains_key("task")
            && task_bridge::requires_task(shared, &typed.name);
        if as_task {
            // The agent's text does not ask for the task: the params go on re-encoded.
            sent = AsSent::fields(sent.extra);
            sent.extra.insert("task".into(), Value::Object(Map::new()));
        }
        // Its rounds (questions for the agent) are driven by `mrtr`.
        let mut result = mrtr::drive::call(shared.clone(), typed, sent, ctx).await?;
        if as_task {
            if let Some(task) = tasks_v2::created(&result) {
                result = task;
            }
        }
        versions::stamp_result("tools/call", &mut result);
        Ok(raw_json(&result))
    } else {
        // The common case: the result goes on as the bytes the pipeline gives.
        crate::gateway::call::pipeline::call_tool(shared, typed, &sent, ctx).await
    }
}

/// The `_meta` of a request's params, when it has one; an error when the params are not an
/// object or their `_meta` is not one (this front then reads none; the HTTP front's fast
/// path leaves such a request to rmcp, which refuses it).
pub(crate) fn request_meta(
    params: &RawValue,
) -> Result<Option<rmcp::model::RequestMetaObject>, serde_json::Error> {
    #[derive(Deserialize)]
    struct WithMeta {
        #[serde(rename = "_meta", default)]
        meta: Option<rmcp::model::RequestMetaObject>,
    }
    serde_json::from_str::<WithMeta>(params.get()).map(|w| w.meta)
}

/// The params fields the typed view of a `tools/call` models; the rest travel as sent.
const MODELED: [&str; 5] = [
    "_meta",
    "name",
    "arguments",
    "inputResponses",
    "requestState",
];

/// A `tools/call`'s params: the typed view policy reads, the fields it does not model, and
/// the text itself when it may go to the server as written (`as_sent::checked`).
pub(crate) fn call_params(
    params: Option<&RawValue>,
) -> Result<(rmcp::model::CallToolRequestParams, AsSent), ErrorData> {
    let invalid =
        |e: serde_json::Error| ErrorData::invalid_params(format!("tools/call: {e}"), None);
    let raw =
        params.ok_or_else(|| ErrorData::invalid_params("tools/call: params are missing", None))?;
    let mut all: Map<String, Value> = serde_json::from_str(raw.get()).map_err(invalid)?;
    let text = as_sent::checked(raw, as_sent::members_of(&all), as_sent::Named::Top);
    let extra: Map<String, Value> = all
        .iter()
        .filter(|(k, _)| !MODELED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    all.retain(|k, _| MODELED.contains(&k.as_str()));
    let typed = serde_json::from_value(Value::Object(all)).map_err(invalid)?;
    Ok((typed, AsSent { extra, text }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorCode;

    #[test]
    fn unmodeled_call_fields_are_kept_apart_as_sent() {
        let raw = RawValue::from_string(
            r#"{"name":"s__slow","arguments":{"n":1.50},"task":{"ttl":60000},"_meta":{"progressToken":7},"future":true}"#
                .into(),
        )
        .unwrap();
        let (typed, sent) = call_params(Some(&raw)).unwrap();
        assert_eq!(typed.name, "s__slow");
        assert!(typed.meta.is_some());
        assert_eq!(sent.extra.len(), 2);
        assert_eq!(sent.extra["task"], serde_json::json!({"ttl": 60000}));
        assert_eq!(sent.extra["future"], Value::Bool(true));
        assert_eq!(sent.text.as_deref().map(RawValue::get), Some(raw.get()));
    }

    #[test]
    fn a_call_without_a_name_is_invalid_params() {
        let raw = RawValue::from_string(r#"{"arguments":{}}"#.into()).unwrap();
        let e = call_params(Some(&raw)).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(
            call_params(None).unwrap_err().code,
            ErrorCode::INVALID_PARAMS
        );
    }
}
